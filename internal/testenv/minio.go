package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/chunkup/chunkup/internal/s3client"
)

// The fixed credentials of every MinIO that StartMinIO starts.
const (
	MinIOAccessKey = "chunkup-test"
	MinIOSecretKey = "chunkup-test-secret"
)

// MinIO is a MinIO server started by StartMinIO.
type MinIO struct {
	// Endpoint is the S3 API's base URL, e.g. http://127.0.0.1:41235. It stays the same
	// across Stop and Start.
	Endpoint string
	// Addr is the S3 API's host:port (to put a Proxy in front of it, say).
	Addr string
	// AccessKey and SecretKey are the root credentials (MinIOAccessKey, MinIOSecretKey).
	AccessKey, SecretKey string
	// Region is us-east-1.
	Region string
	// Dir holds the server's data; LogFile its output (all its runs, appended).
	Dir, LogFile string

	bin      string
	certsDir string
	console  string // console host:port

	daemon
}

// StartMinIO starts a single-drive MinIO server on free 127.0.0.1 ports with its own data
// directory and the fixed test credentials, and waits until /minio/health/live answers
// 200. MinIO is built first if it is not in the cache (see MinIOBinary). The server is
// stopped when the test ends.
func StartMinIO(t TB) *MinIO {
	t.Helper()
	bin, err := MinIOBinary()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	base := t.TempDir()
	m := &MinIO{
		AccessKey: MinIOAccessKey,
		SecretKey: MinIOSecretKey,
		Region:    "us-east-1",
		Dir:       filepath.Join(base, "data"),
		LogFile:   filepath.Join(base, "minio.log"),
		bin:       bin,
		certsDir:  filepath.Join(base, "certs"),
	}
	for _, d := range []string{m.Dir, m.certsDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: minio %s log (last lines):\n%s", m.Endpoint, tailFile(m.LogFile, 40))
		}
		m.Stop()
	})
	for attempt := 1; ; attempt++ {
		m.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
		m.console = net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
		m.Endpoint = "http://" + m.Addr
		err := m.start()
		if err == nil {
			return m
		}
		if attempt == 3 || !strings.Contains(tailFile(m.LogFile, 20), "in use") {
			t.Fatalf("testenv: minio on %s: %v\nlog:\n%s", m.Addr, err, tailFile(m.LogFile, 40))
		}
	}
}

func (m *MinIO) start() error {
	return m.launch(m.run)
}

func (m *MinIO) run() (*proc, error) {
	log, err := os.OpenFile(m.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	args := []string{"server",
		"--address", m.Addr,
		"--console-address", m.console,
		"--certs-dir", m.certsDir,
		m.Dir,
	}
	p, err := startProc(m.bin, args, minioEnv(), log, log)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	live := m.Endpoint + "/minio/health/live"
	err = waitFor(startTimeout, p.done, func() error {
		resp, err := client.Get(live)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", live, resp.Status)
		}
		return nil
	})
	client.CloseIdleConnections()
	if err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// minioEnv is the test binary's environment without MINIO_* settings, plus the test
// credentials and no web console or update checks.
func minioEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MINIO_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"MINIO_ROOT_USER="+MinIOAccessKey,
		"MINIO_ROOT_PASSWORD="+MinIOSecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
}

// S3Config is the S3 configuration for this server (s3store.Config is this type).
func (m *MinIO) S3Config() s3client.Config {
	return s3client.Config{Endpoint: m.Endpoint, Region: m.Region, AccessKey: m.AccessKey, SecretKey: m.SecretKey}
}

// Client returns an S3 client for this server, built by s3client.New like chunkup's own.
func (m *MinIO) Client(t TB) *s3.Client { return clientOf(t, m.S3Config()) }

// CreateBucket creates a bucket; one that already exists is fine.
func (m *MinIO) CreateBucket(t TB, name string) { createBucket(t, m.Client(t), name) }

// clientOf is an S3 client for cfg, built by s3client.New like chunkup's own.
func clientOf(t TB, cfg s3client.Config) *s3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := s3client.New(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: s3 client: %v", err)
	}
	return c
}

// createBucket creates bucket name with c; one that already exists is fine.
func createBucket(t TB, c *s3.Client, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	if err != nil && !errors.As(err, &owned) && !errors.As(err, &exists) {
		t.Fatalf("testenv: create bucket %q: %v", name, err)
	}
}

// Start starts a stopped or killed server again on the same ports and data directory,
// and waits until it is live. It does nothing if the server is running. t reports a
// failure to start; the server still lives as long as the test that started it first.
func (m *MinIO) Start(t TB) {
	t.Helper()
	if err := m.start(); err != nil {
		t.Fatalf("testenv: restart minio on %s: %v\nlog:\n%s", m.Addr, err, tailFile(m.LogFile, 40))
	}
}

// Restart stops the server (if running) and starts it again on the same ports and data.
func (m *MinIO) Restart(t TB) {
	t.Helper()
	m.Stop()
	m.Start(t)
}

// Object reads object bucket/key back, failing the test if it cannot.
func (m *MinIO) Object(t TB, bucket, key string) []byte { return objectOf(t, m.Client(t), bucket, key) }

// objectOf reads object bucket/key with c, failing the test if it cannot.
func objectOf(t TB, c *s3.Client, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("testenv: get object %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("testenv: read object %s: %v", key, err)
	}
	return b
}

// OpenMultipart lists the ids of the multipart uploads the server holds for exactly
// key in bucket (a listing by prefix also returns longer keys).
func (m *MinIO) OpenMultipart(t TB, bucket, key string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := m.Client(t).ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(key)})
	if err != nil {
		t.Fatalf("testenv: list multipart uploads of %s: %v", key, err)
	}
	var ids []string
	for _, u := range out.Uploads {
		if aws.ToString(u.Key) == key {
			ids = append(ids, aws.ToString(u.UploadId))
		}
	}
	return ids
}
