package devenv_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/s3store"
)

// TestS3BrowserCORS: the embedded S3 serves a page of another origin as a browser
// asks: the preflight of a presigned part PUT allows it, and the PUT's answer lets the
// page read the part's ETag, which ListParts then reports.
func TestS3BrowserCORS(t *testing.T) {
	env := startEnv(t, t.TempDir(), "embedded")
	s3c, err := s3store.NewClient(ctxT(t), s3store.Config{Endpoint: env.S3Endpoint, AccessKey: "k", SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.CreateBucket(ctxT(t), &s3.CreateBucketInput{Bucket: aws.String("pages")}); err != nil {
		t.Fatal(err)
	}
	mpu, err := s3c.CreateMultipartUpload(ctxT(t), &s3.CreateMultipartUploadInput{Bucket: aws.String("pages"), Key: aws.String("k/one.bin")})
	if err != nil {
		t.Fatal(err)
	}
	signed, err := s3store.NewPresigner(s3c, "", nil).SignPart(ctxT(t), "pages", "k/one.bin", *mpu.UploadId, 1, time.Minute, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	const origin = "http://127.0.0.1:7071"
	pre, _ := http.NewRequestWithContext(ctxT(t), http.MethodOptions, signed.URL, nil)
	pre.Header.Set("Origin", origin)
	pre.Header.Set("Access-Control-Request-Method", "PUT")
	pre.Header.Set("Access-Control-Request-Headers", "content-type")
	res, err := http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 || res.Header.Get("Access-Control-Allow-Origin") != origin ||
		!strings.Contains(res.Header.Get("Access-Control-Allow-Methods"), "PUT") || res.Header.Get("Access-Control-Allow-Headers") != "content-type" {
		t.Fatalf("preflight: %d %v", res.StatusCode, res.Header)
	}
	put, _ := http.NewRequestWithContext(ctxT(t), http.MethodPut, signed.URL, bytes.NewReader([]byte("a part from a page")))
	put.Header.Set("Origin", origin)
	put.Header.Set("Content-Type", "application/octet-stream")
	res, err = http.DefaultClient.Do(put)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	etag := res.Header.Get("ETag")
	if res.StatusCode != http.StatusOK || etag == "" || !strings.Contains(res.Header.Get("Access-Control-Expose-Headers"), "ETag") ||
		(res.Header.Get("Access-Control-Allow-Origin") != origin && res.Header.Get("Access-Control-Allow-Origin") != "*") {
		t.Fatalf("PUT: %d %v", res.StatusCode, res.Header)
	}
	parts, err := s3c.ListParts(ctxT(t), &s3.ListPartsInput{Bucket: aws.String("pages"), Key: aws.String("k/one.bin"), UploadId: mpu.UploadId})
	if err != nil || len(parts.Parts) != 1 || aws.ToString(parts.Parts[0].ETag) != etag {
		t.Fatalf("ListParts: %v %v, want the ETag %s", parts, err, etag)
	}
}
