package testenv

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/chunkup/chunkup/internal/s3client"
)

// StartFakeS3 serves gofakes3 (the S3 of `chunkup dev`, in memory) on loopback until the
// test ends, creates bucket in it, and returns a client of it: for the behaviours
// where dev's S3 answers otherwise than a real store does.
func StartFakeS3(t testing.TB, bucket string) *s3.Client {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true), gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(srv.Close)
	c, err := s3client.New(context.Background(), s3client.Config{Endpoint: srv.URL, AccessKey: "k", SecretKey: "s", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	return c
}

// S3Store is a kind of S3 server, for tests that run against each.
type S3Store struct {
	Name string
	// Start serves one until the test ends, with bucket in it, and returns a client.
	Start func(t testing.TB, bucket string) *s3.Client
}

// S3Stores are MinIO, SeaweedFS and gofakes3: two real stores, and `chunkup dev`'s,
// where they answer differently.
var S3Stores = []S3Store{
	{Name: "minio", Start: func(t testing.TB, bucket string) *s3.Client {
		m := StartMinIO(t)
		m.CreateBucket(t, bucket)
		return m.Client(t)
	}},
	{Name: "seaweedfs", Start: func(t testing.TB, bucket string) *s3.Client {
		s := StartSeaweedFS(t)
		s.CreateBucket(t, bucket)
		return s.Client(t)
	}},
	{Name: "gofakes3", Start: StartFakeS3},
}
