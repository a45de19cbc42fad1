package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/upload"
)

// Objects is the part of the S3 store that reading objects back needs.
type Objects interface {
	Head(ctx context.Context, bucket, key string) (s3store.ObjectInfo, error)
	OpenRange(ctx context.Context, bucket, key string, offset, length int64) (io.ReadCloser, error)
}

var _ Objects = (*s3store.Store)(nil)

// readPiece is the most bytes one ReadObject message carries: small enough for any
// client's default receive limit (4 MiB in most gRPC libraries).
const readPiece = 1 << 20

// NoObjectError means an upload has no object to read: it is not COMPLETED.
type NoObjectError struct{ Status staging.Status }

func (e *NoObjectError) Error() string {
	if e.Status.Terminal() {
		return fmt.Sprintf("is %s and has no object", e.Status)
	}
	return fmt.Sprintf("is %s: its object exists once it is COMPLETED (WatchUpload follows it)", e.Status)
}

// ReadObject implements UploadService.ReadObject.
func (s *UploadService) ReadObject(req *chunkupv1.ReadObjectRequest, stream chunkupv1.UploadService_ReadObjectServer) error {
	ctx := stream.Context()
	if s.objects == nil {
		return toStatus("", errors.New("this server cannot read objects: it runs without S3"))
	}
	release, err := s.reads.Acquire(upload.TenantFrom(ctx))
	if err != nil {
		return toStatus("", err)
	}
	defer release()
	first, bucket, key, err := s.locate(ctx, req)
	if err != nil {
		return toStatus(req.UploadId, err)
	}
	if req.Offset < 0 || req.Limit < 0 {
		return toStatus(req.UploadId, invalidf("offset and limit must not be negative"))
	}
	if req.Offset > first.ObjectSize {
		return toStatus(req.UploadId, &upload.RangeError{Msg: fmt.Sprintf("offset %d is past the object's %d bytes", req.Offset, first.ObjectSize)})
	}
	length := first.ObjectSize - req.Offset
	if req.Limit > 0 {
		length = min(length, req.Limit)
	}
	first.Offset = req.Offset
	if length == 0 {
		return stream.Send(first)
	}
	body, err := s.objects.OpenRange(ctx, bucket, key, req.Offset, length)
	if err != nil {
		return toStatus(req.UploadId, err)
	}
	defer body.Close()
	msg, offset := first, req.Offset
	for sent := int64(0); sent < length; {
		// A buffer per message: gRPC allows stats handlers to look at a message after
		// SendMsg returned, so a sent message's bytes are not reused.
		buf := make([]byte, min(readPiece, length-sent))
		n, err := io.ReadFull(body, buf)
		if err != nil {
			return toStatus(req.UploadId, fmt.Errorf("%w: reading the object from S3: %w", staging.ErrUnavailable, err))
		}
		msg.Data, msg.Offset, msg.Crc32C = buf[:n], offset, crc.Checksum(buf[:n])
		if err := stream.Send(msg); err != nil {
			return err
		}
		msg = &chunkupv1.ReadObjectResponse{}
		sent += int64(n)
		offset += int64(n)
	}
	return nil
}

// locate finds the object req names, for the caller's tenant, and returns the first
// message's description of it.
func (s *UploadService) locate(ctx context.Context, req *chunkupv1.ReadObjectRequest) (*chunkupv1.ReadObjectResponse, string, string, error) {
	if (req.UploadId == "") == (req.Key == "") {
		return nil, "", "", invalidf("name the object by exactly one of upload_id and key")
	}
	if req.UploadId != "" {
		up, err := s.core.Get(ctx, req.UploadId)
		if err != nil {
			return nil, "", "", err
		}
		if up.Status != staging.StatusCompleted {
			return nil, "", "", &NoObjectError{Status: up.Status}
		}
		return &chunkupv1.ReadObjectResponse{ObjectSize: up.Size, ObjectCrc32C: up.CRC32C, HasObjectCrc32C: true, Upload: summary(up)},
			up.Bucket, up.Key, nil
	}
	// The core's stat: the same tenant scoping and errors as StatObject and ListObjects.
	o, err := s.core.StatObject(ctx, req.Key)
	if err != nil {
		return nil, "", "", err
	}
	return &chunkupv1.ReadObjectResponse{ObjectSize: o.Size, ObjectCrc32C: o.CRC32C, HasObjectCrc32C: o.HasCRC32C},
		s.bucket, req.Key, nil
}
