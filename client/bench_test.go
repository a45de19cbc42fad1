package client_test

import (
	"context"
	"io"
	"math/rand/v2"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/client"
)

// heapPeak samples the live heap until stop is called and returns its peak in MiB.
func heapPeak() (stop func() float64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() float64 {
		close(done)
		wg.Wait()
		return float64(peak) / (1 << 20)
	}
}

// BenchmarkUpload streams 64 MiB and 1 GiB from a reader that never holds the input in
// memory, through the whole stack in this process (SDK, server, worker, completer) to
// Redis and MinIO, and reports throughput (MB/s) and the peak live heap of the process:
// it should not grow with the input.
func BenchmarkUpload(b *testing.B) {
	c, err := client.Dial(exampleServer, client.WithWindow(4))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name string
		size int64
	}{{"64MiB", 64 << 20}, {"1GiB", 1 << 30}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(tc.size)
			peak := 0.0
			for i := 0; b.Loop(); i++ {
				r := io.LimitReader(rand.NewChaCha8([32]byte{byte(i)}), tc.size)
				stop := heapPeak()
				up, err := c.Upload(context.Background(), r, client.WithSize(tc.size))
				peak = max(peak, stop())
				if err != nil {
					b.Fatal(err)
				}
				if up.Size != tc.size {
					b.Fatalf("size %d, want %d", up.Size, tc.size)
				}
			}
			b.ReportMetric(peak, "peak-heap-MiB")
		})
	}
}
