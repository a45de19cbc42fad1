package devenv_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/internal/devenv"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
)

// TestEmbeddedRedis runs chunkup on the in-process Redis and S3 store that `chunkup
// dev` falls back to when redis-server is not installed: the scripts and pub/sub all
// work there too, and a multipart upload lands on disk exactly.
func TestEmbeddedRedis(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	env, err := devenv.Start(ctx, devenv.Config{DataDir: t.TempDir(), Redis: devenv.RedisEmbedded})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if env.RedisKind != "embedded" {
		t.Fatalf("redis kind %q", env.RedisKind)
	}
	a, err := app.New(ctx, app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: env.RedisURL, Bucket: "dev",
		S3: s3store.Config{Endpoint: env.S3Endpoint, AccessKey: "k", SecretKey: "s"}, KafkaBrokers: []string{env.KafkaAddr}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { stop(); <-done }()

	c, err := client.Dial(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 17<<20+3)
	_, _ = rand.NewChaCha8([32]byte{4}).Read(data)
	up, err := c.Upload(ctx, bytes.NewReader(data), client.WithName("x.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(env.S3Dir, "buckets", "dev", up.Key))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("object on disk: %d bytes, %v; want %d exact bytes", len(got), err, len(data))
	}
}
