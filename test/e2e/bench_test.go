package e2e

import (
	"fmt"
	"testing"

	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/internal/testenv"
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

// BenchmarkClusterWorkers uploads 256 MiB through one API process on a Redis Cluster
// (three masters, three replicas) with one, then two, worker processes: what a second
// worker replica adds. MB/s is reported by SetBytes. On a machine with few cores every
// process shares them, so the second worker shows the cost of coordination more than
// extra capacity.
func BenchmarkClusterWorkers(b *testing.B) {
	cluster := testenv.StartRedisCluster(b)
	e := &env{t: b, cluster: cluster, minio: testenv.StartMinIO(b)}
	e.s3 = e.minio.Client(b)
	data := randomBytes(256*MiB, 3)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			api := e.serveProcess(b, nil, "api", "api").GRPCAddr
			for i := range workers {
				e.serveProcess(b, nil, fmt.Sprintf("worker-%d", i+1), "worker,completer")
			}
			c := dial(b, api)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				up, err := c.Upload(ctx(b), reader(data), client.WithSize(int64(len(data))))
				if err != nil {
					b.Fatal(err)
				}
				if up.Size != int64(len(data)) {
					b.Fatalf("size %d", up.Size)
				}
			}
		})
	}
}
