package e2e

import (
	"testing"

	"github.com/chunkup/chunkup/client"
)

// BenchmarkUpload256MiB measures the whole path for one 256 MiB upload: client →
// gRPC → server → Redis → worker → MinIO → completion. MB/s is reported by SetBytes.
func BenchmarkUpload256MiB(b *testing.B) {
	e := newEnv(b)
	a := e.start(b, e.config())
	c := e.client(b, a, client.WithWindow(4))
	data := randomBytes(256*MiB, 1)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Upload(ctx(b), reader(data), client.WithSize(int64(len(data)))); err != nil {
			b.Fatal(err)
		}
	}
}
