//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/test/harness"
)

// TestBudgetHoldsWhileS3Pauses is issue 12's fault scenario: Redis with maxmemory
// 256mb, a staged-bytes budget of 128 MiB, six 96 MiB uploads by `chunkup upload
// --jobs 6 --parallel 2` (the CLI's defaults otherwise, 8 MiB chunks), and MinIO
// paused (SIGSTOP: connections hang, nothing is answered) for 20 s mid-run.
// Acknowledgements go on from Redis staging while S3 is paused, until the budget is
// reached; then streams are held back, not failed. All six uploads complete exact with
// the CLI's own retries, Redis' used_memory_peak stays within the bound
// docs/limits.md gives (the budget, one chunk's Redis cost a single reservation may
// take beyond it, and 16 MiB for Redis' own and chunkup's small keys), and every
// upload's counters equal what its hashes hold.
func TestBudgetHoldsWhileS3Pauses(t *testing.T) { bothModes(t, testBudgetHoldsWhileS3Pauses) }

func testBudgetHoldsWhileS3Pauses(t *testing.T) {
	const (
		budget = 128 << 20
		files  = 6
		size   = 96 << 20
		chunk  = 8 << 20
		pause  = 20 * time.Second
	)
	c := newCluster(t, testenv.WithArgs("--maxmemory", "256mb", "--maxmemory-policy", "noeviction"))
	srv := c.startNode(t, "server", allRoles, flags("--staged-bytes-budget", "128MiB", "--chunk-size", "8MiB"))
	ctx := ctxFor(t, patience)
	if err := c.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	inputs := map[string][]byte{}
	args := []string{"upload", "--server", srv.GRPCAddr, "--jobs", strconv.Itoa(files), "--parallel", "2", "--progress", "none"}
	for i := range files {
		name := fmt.Sprintf("f%d.bin", i+1)
		inputs[name] = randomBytes(size+i*1111, uint64(60+i))
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, inputs[name], 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, path)
	}
	cli := testenv.StartProcess(t, harness.Binary(t), args, []string{"CHUNKUP_STATE_DIR=" + t.TempDir()})

	received := func() (n int) {
		ids, err := c.stores.Uploads.Ends().ActiveUploads(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if up, err := c.stores.Uploads.Get(ctx, id); err == nil {
				n += len(up.ReceivedChunks)
			}
		}
		return n
	}
	poll(t, "chunks of every upload acknowledged", time.Minute, func() error {
		if n := received(); n < files {
			return fmt.Errorf("%d chunks received", n)
		}
		return nil
	})
	if err := c.minio.Pause(); err != nil {
		t.Fatal(err)
	}
	before := received()
	t.Logf("INJECT: MinIO paused (SIGSTOP) for %v with %d chunks received", pause, before)
	time.Sleep(pause) // the fault's duration
	during := received()
	used := usedMemory(t, ctx, c.rdb)
	if err := c.minio.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("INJECT: MinIO resumed; %d chunks received during the pause (Redis used_memory %d MiB)", during-before, used>>20)
	if during <= before {
		t.Errorf("no chunk was acknowledged while S3 was paused (%d before, %d after); staging in Redis should have taken them up to the budget", before, during)
	}

	select {
	case <-cli.Done():
	case <-time.After(patience):
		t.Fatalf("chunkup upload did not finish within %v; stderr:\n%s", patience, cli.Stderr())
	}
	if code := cli.ExitCode(); code != 0 {
		t.Fatalf("chunkup upload exited %d; stderr:\n%s", code, cli.Stderr())
	}
	completed := 0
	for line := range strings.Lines(cli.Stdout()) {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "COMPLETED" {
			continue
		}
		name := filepath.Base(f[2])
		if _, ok := inputs[name]; !ok {
			t.Fatalf("a line for an unknown file: %q", line)
		}
		c.track(f[0], inputs[name])
		c.checkCounters(t, ctx, f[0])
		completed++
	}
	if completed != files {
		t.Fatalf("%d uploads COMPLETED, want %d; stdout:\n%s", completed, files, cli.Stdout())
	}
	peak := infoInt(t, ctx, c.rdb, "used_memory_peak")
	bound := int64(budget + 2*(10<<20) + 16<<20) // budget + redisCost(8 MiB) + 16 MiB
	t.Logf("CHECK: all %d uploads COMPLETED with the CLI's defaults; Redis used_memory_peak %d MiB, bound %d MiB (budget %d MiB)",
		files, peak>>20, bound>>20, budget>>20)
	if peak > bound {
		t.Errorf("Redis used_memory_peak %d MiB, over the bound %d MiB", peak>>20, bound>>20)
	}
	c.checkInvariants(t)
}

// checkCounters checks that upload id's counters equal what its hashes hold: chunks
// received and their bytes against the received hash, parts and their bytes against
// the parts hash, and the object's size against both.
func (c *cluster) checkCounters(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	up, err := c.stores.Uploads.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var received, stored int64
	for _, ch := range up.Chunks {
		received += ch.Size
		if ch.Stored {
			stored += ch.Size
		}
	}
	st, err := c.rdb.HMGet(ctx, "chunkup:up:{"+id+"}:state", "received", "uploaded").Result()
	if err != nil {
		t.Fatal(err)
	}
	nrec, _ := strconv.Atoi(fmt.Sprint(st[0]))
	nup, _ := strconv.Atoi(fmt.Sprint(st[1]))
	parts, err := c.rdb.HLen(ctx, "chunkup:up:{"+id+"}:parts").Result()
	if err != nil {
		t.Fatal(err)
	}
	if nrec != len(up.Chunks) || up.ReceivedBytes != received || nup != int(parts) || up.UploadedBytes != stored ||
		up.Size != received || up.Status != staging.StatusCompleted {
		t.Errorf("upload %s: state says %d received (%d bytes), %d uploaded (%d bytes), size %d, %s; hashes hold %d chunks (%d bytes), %d parts (%d bytes)",
			id, nrec, up.ReceivedBytes, nup, up.UploadedBytes, up.Size, up.Status, len(up.Chunks), received, parts, stored)
	} else {
		t.Logf("CHECK: upload %s: counters equal its hashes (%d chunks, %d bytes, all stored)", id, nrec, received)
	}
}

func usedMemory(t *testing.T, ctx context.Context, rdb redis.UniversalClient) int64 {
	return infoInt(t, ctx, rdb, "used_memory")
}

func infoInt(t *testing.T, ctx context.Context, rdb redis.UniversalClient, field string) int64 {
	t.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no %s", field)
	return 0
}
