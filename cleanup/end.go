// Package cleanup ends uploads and releases what they hold: the staged bytes in Redis
// and the S3 multipart upload. It is where abandoned uploads are expired and where every
// other way of ending an upload (abort, permanent failure) releases its resources.
package cleanup

import (
	"context"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/staging"
)

// S3API is the part of the S3 client that ending an upload needs.
type S3API interface {
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

var _ S3API = (*s3.Client)(nil)

// Store is the part of the staging store that ending an upload needs.
type Store interface {
	End(ctx context.Context, id string, status staging.Status, reason string, fromCompleting bool) (staging.EndResult, error)
	DropChunks(ctx context.Context, id string) error
}

var _ Store = (*staging.Store)(nil)

// Ender ends uploads.
type Ender struct {
	Store  Store
	S3     S3API
	Logger *slog.Logger
}

// End moves upload id to status (FAILED, ABORTED or EXPIRED) with reason, then aborts
// its S3 multipart upload and drops its staged chunks. The state change comes first so
// no worker starts a new part afterwards. Releasing resources is best effort: what fails
// here is retried when the upload's keys are cleaned up after retention.
func (e *Ender) End(ctx context.Context, id string, status staging.Status, reason string, fromCompleting bool) error {
	res, err := e.Store.End(ctx, id, status, reason, fromCompleting)
	if err != nil {
		return err
	}
	log := e.logger().With("upload_id", id, "status", status)
	if res.MultipartID != "" {
		_, err := e.S3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(res.Bucket), Key: aws.String(res.Key), UploadId: aws.String(res.MultipartID),
		})
		if err != nil {
			log.Warn("abort multipart upload", "err", err)
		}
	}
	if err := e.Store.DropChunks(ctx, id); err != nil {
		log.Warn("drop staged chunks", "err", err)
	}
	log.Info("upload ended", "reason", reason)
	return nil
}

func (e *Ender) logger() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.Default()
}
