package e2e

import (
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestLoadWithinBudget sends 200 uploads at once to one process whose staged-bytes
// budget is 128 MiB, with few workers so that Redis fills faster than it drains: every
// object is exact, no call is refused, and Redis' memory peak stays within the budget
// plus one chunk per stream (the slack the backpressure design allows), far below the
// gigabyte sent.
//
// Two Redis mechanics enter the slack as used_memory sees it: jemalloc rounds a large
// buffer up to its size class (5 MiB + 2 bytes takes 6 MiB: at most 25% more), and after
// a large argument Redis pre-allocates a query buffer as large for the connection's next
// one, so each pooled connection may hold one more chunk-sized buffer.
func TestLoadWithinBudget(t *testing.T) {
	const (
		budget    = 128 << 20
		chunkSize = 5 << 20
		uploads   = 200
	)
	e := newEnv(t)
	cfg := e.config()
	cfg.Upload.ChunkSize, cfg.Upload.StagedBytesBudget = chunkSize, budget
	// 200 streams of one tenant at once: past the per-tenant stream limit (on by
	// default, 64) streams would be refused, and this test is about the budget.
	cfg.Upload.MaxStreamsPerTenant = -1
	cfg.Worker.Concurrency = 2
	a := e.start(t, cfg)
	c := e.client(t, a, client.WithWindow(2))
	rdb := e.rdb(t)
	if err := rdb.ConfigResetStat(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}

	// 40 uploads of five chunks, 160 of up to 512 KiB.
	sizes := make([]int, uploads)
	var total, slack int64
	for i := range sizes {
		if i%5 == 0 {
			sizes[i] = 5*chunkSize - i
		} else {
			sizes[i] = 1000 + (i*7919)%(512<<10)
		}
		total += int64(sizes[i])
		slack += int64(min(sizes[i], chunkSize))
	}
	var wg sync.WaitGroup
	results := make([]*chunkupv1.Upload, uploads)
	sums := make([][32]byte, uploads)
	for i, size := range sizes {
		wg.Go(func() {
			// The bytes are made as they are sent and hashed on the way: the test holds
			// none of its gigabyte (which the race detector would multiply).
			h := sha256.New()
			src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), 2}), int64(size)), h)
			up, err := c.Upload(ctx(t), src, client.WithSize(int64(size)))
			h.Sum(sums[i][:0])
			if err != nil {
				if status.Code(err) == codes.ResourceExhausted || strings.Contains(err.Error(), "ResourceExhausted") {
					t.Errorf("upload %d refused: %v", i, err)
				} else {
					t.Errorf("upload %d: %v", i, err)
				}
				return
			}
			results[i] = up
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, up := range results {
		if got := sha256.Sum256(e.object(t, up.Key)); got != sums[i] {
			t.Fatalf("upload %d (%d bytes): object differs", i, sizes[i])
		}
	}
	info, err := rdb.Info(ctx(t), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	peak := infoField(t, info, "used_memory_peak")
	conns := int64(10 * runtime.GOMAXPROCS(0)) // go-redis' default pool size
	bound := budget + 5*(slack+conns*chunkSize)/4
	t.Logf("sent %d MiB in %d uploads; Redis used_memory peak %d MiB; bound %d MiB (budget %d MiB, one chunk per stream %d MiB, %d pooled connections, allocator rounding)",
		total>>20, uploads, peak>>20, bound>>20, budget>>20, slack>>20, conns)
	if peak > bound {
		t.Fatalf("Redis peaked at %d bytes, over the bound %d", peak, bound)
	}
}

func infoField(t *testing.T, info, name string) int64 {
	t.Helper()
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO", name)
	return 0
}
