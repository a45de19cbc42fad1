package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/upload"
)

// SignParts implements UploadService.SignParts.
func (s *UploadService) SignParts(ctx context.Context, req *chunkupv1.SignPartsRequest) (*chunkupv1.SignPartsResponse, error) {
	parts := make([]upload.PartToSign, len(req.Parts))
	for i, p := range req.Parts {
		parts[i] = upload.PartToSign{N: p.PartNumber, Size: p.Size, CRC32C: p.Crc32C}
	}
	signed, err := s.core.SignParts(ctx, req.UploadId, parts)
	if err != nil {
		return nil, toStatus("", err)
	}
	resp := &chunkupv1.SignPartsResponse{Parts: make([]*chunkupv1.SignedPart, len(signed))}
	for i, sp := range signed {
		h := make(map[string]string, len(sp.Headers))
		for k := range sp.Headers {
			h[k] = sp.Headers.Get(k)
		}
		resp.Parts[i] = &chunkupv1.SignedPart{PartNumber: sp.N, Url: sp.URL, Method: sp.Method, Headers: h,
			ExpireTime: timestamppb.New(sp.Expires.Truncate(time.Second))}
	}
	return resp, nil
}

// ListDirectParts implements UploadService.ListDirectParts.
func (s *UploadService) ListDirectParts(ctx context.Context, req *chunkupv1.ListDirectPartsRequest) (*chunkupv1.ListDirectPartsResponse, error) {
	held, err := s.core.DirectParts(ctx, req.UploadId)
	if err != nil {
		return nil, toStatus("", err)
	}
	resp := &chunkupv1.ListDirectPartsResponse{Parts: make([]*chunkupv1.DirectPart, len(held))}
	for i, p := range held {
		dp := &chunkupv1.DirectPart{PartNumber: p.N, Etag: p.ETag, Size: p.Size}
		if sum, err := upload.ParseCRCHeader(p.CRC32C); p.CRC32C != "" && err == nil {
			dp.Crc32C, dp.HasCrc32C = sum, true
		}
		resp.Parts[i] = dp
	}
	return resp, nil
}

// CompleteDirect implements UploadService.CompleteDirect.
func (s *UploadService) CompleteDirect(ctx context.Context, req *chunkupv1.CompleteDirectRequest) (*chunkupv1.CompleteDirectResponse, error) {
	reported := make([]upload.ReportedPart, len(req.Parts))
	for i, p := range req.Parts {
		reported[i] = upload.ReportedPart{N: p.PartNumber, ETag: p.Etag, Size: p.Size}
		if p.HasCrc32C {
			sum := p.Crc32C
			reported[i].CRC32C = &sum
		}
	}
	up, err := s.core.CompleteDirect(ctx, req.UploadId, reported)
	if err != nil {
		return nil, toStatus("", err)
	}
	return &chunkupv1.CompleteDirectResponse{Upload: toProto(up)}, nil
}
