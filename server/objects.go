package server

import (
	"context"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/upload"
)

// ListObjects implements UploadService.ListObjects.
func (s *UploadService) ListObjects(ctx context.Context, req *chunkupv1.ListObjectsRequest) (*chunkupv1.ListObjectsResponse, error) {
	objs, next, err := s.core.ListObjects(ctx, req.Prefix, req.PageToken, int(req.PageSize))
	if err != nil {
		return nil, toStatus("", err)
	}
	resp := &chunkupv1.ListObjectsResponse{Objects: make([]*chunkupv1.Object, len(objs)), NextPageToken: next}
	for i, o := range objs {
		resp.Objects[i] = object(o)
	}
	return resp, nil
}

// StatObject implements UploadService.StatObject.
func (s *UploadService) StatObject(ctx context.Context, req *chunkupv1.StatObjectRequest) (*chunkupv1.StatObjectResponse, error) {
	o, err := s.core.StatObject(ctx, req.Key)
	if err != nil {
		return nil, toStatus("", err)
	}
	return &chunkupv1.StatObjectResponse{Object: object(o)}, nil
}

// DeleteObject implements UploadService.DeleteObject.
func (s *UploadService) DeleteObject(ctx context.Context, req *chunkupv1.DeleteObjectRequest) (*chunkupv1.DeleteObjectResponse, error) {
	if err := s.core.DeleteObject(ctx, req.Key, req.IfMatch); err != nil {
		return nil, toStatus("", err)
	}
	return &chunkupv1.DeleteObjectResponse{}, nil
}

func object(o upload.Object) *chunkupv1.Object {
	return &chunkupv1.Object{Key: o.Key, Size: o.Size, Etag: o.ETag, LastModified: ts(o.LastModified), ContentType: o.ContentType,
		Crc32C: o.CRC32C, HasCrc32C: o.HasCRC32C, UploadId: o.UploadID}
}
