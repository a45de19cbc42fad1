package uploads_test

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// TestOutOfMemoryChangesNothing fills Redis to its maxmemory and stages chunks: each
// is refused with ErrFull and leaves the upload exactly as it was (counters equal what
// the received hash holds); once memory is freed, the same chunks stage normally.
func TestOutOfMemoryChangesNothing(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	s := openStore(t, rdb, staging.Config{})
	ctx := ctxT(t)
	const size = 1 << 20
	id := newUpload(t, s, size, 4)
	first := bytes.Repeat([]byte{1}, size)
	if _, err := stage(t, s, id, 1, first, false); err != nil {
		t.Fatal(err)
	}
	used := usedMemory(t, rdb)
	// A little headroom: small commands pass, a chunk's SET (its query buffer alone is
	// over the limit) does not, and the EVAL after it finds no bytes to commit.
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+256<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	for n := uint32(2); n <= 4; n++ {
		_, err := stage(t, s, id, n, bytes.Repeat([]byte{byte(n)}, size), false)
		if !errors.Is(err, staging.ErrFull) {
			t.Fatalf("stage chunk %d at maxmemory: %v, want ErrFull", n, err)
		}
	}
	// Over the limit for every write: the script's first write is refused.
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := stage(t, s, id, 2, bytes.Repeat([]byte{2}, size), false); !errors.Is(err, staging.ErrFull) {
		t.Fatalf("stage at maxmemory 1: %v, want ErrFull", err)
	}
	if _, err := stage(t, s, id, 1, bytes.Repeat([]byte{9}, size), false); !errors.Is(err, staging.ErrFull) {
		t.Fatalf("replace chunk 1 at maxmemory 1: %v, want ErrFull", err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	checkCounters(t, s, rdb, id, []uint32{1}, size)
	for n := uint32(2); n <= 4; n++ {
		if _, err := stage(t, s, id, n, bytes.Repeat([]byte{byte(n)}, size), false); err != nil {
			t.Fatalf("stage chunk %d after memory was freed: %v", n, err)
		}
	}
	checkCounters(t, s, rdb, id, []uint32{1, 2, 3, 4}, 4*size)
}

// checkCounters checks that the upload's counters equal what its hashes hold.
func checkCounters(t *testing.T, s *uploads.Store, rdb redis.UniversalClient, id string, want []uint32, bytes int64) {
	t.Helper()
	up, err := s.Get(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(up.ReceivedChunks) != len(want) || up.ReceivedBytes != bytes {
		t.Fatalf("received %v (%d bytes), want %v (%d bytes)", up.ReceivedChunks, up.ReceivedBytes, want, bytes)
	}
	var sum int64
	for _, c := range up.Chunks {
		sum += c.Size
	}
	if sum != up.ReceivedBytes {
		t.Fatalf("received_bytes %d, but the received hash holds %d bytes", up.ReceivedBytes, sum)
	}
	received, err := rdb.HGet(ctxT(t), "chunkup:up:{"+id+"}:state", "received").Int()
	if err != nil || received != len(up.Chunks) {
		t.Fatalf("state says %d received (%v); the received hash holds %d", received, err, len(up.Chunks))
	}
}

func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.InfoMap(ctxT(t), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRefusalsAreUnavailable checks that Redis refusing a request for a reason that
// passes (unreachable, a replica that does not take writes) is ErrUnavailable.
func TestRefusalsAreUnavailable(t *testing.T) {
	r := testenv.StartRedis(t)
	replica := testenv.StartRedis(t, testenv.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(r.Port)))
	ro := openStore(t, replica.Client(t), staging.Config{})
	_, err := ro.Create(ctxT(t), staging.NewUpload{ID: ids.New(), ChunkSize: 5 << 20, ExpectedSize: -1})
	if !errors.Is(err, staging.ErrUnavailable) {
		t.Fatalf("create on a replica: %v, want ErrUnavailable (READONLY)", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	gone := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { gone.Close() })
	down := openStore(t, gone, staging.Config{})
	if _, err := down.Get(ctxT(t), ids.New()); !errors.Is(err, staging.ErrUnavailable) {
		t.Fatalf("get with Redis unreachable: %v, want ErrUnavailable", err)
	}
	if _, err := down.Stage(ctxT(t), ids.New(), 1, []byte("x"), 0, true); !errors.Is(err, staging.ErrUnavailable) {
		t.Fatalf("stage with Redis unreachable: %v, want ErrUnavailable", err)
	}
}
