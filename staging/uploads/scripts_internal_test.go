package uploads

import (
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/redis/go-redis/v9"
)

// TestStageScriptWritesNothingWithoutBytes runs the stage script as it runs when the
// SET of a chunk's bytes was refused (Redis out of memory) but the script was not: it
// must find no incoming bytes before its first write and leave the upload as it was,
// for a new chunk and for a replacement alike.
func TestStageScriptWritesNothingWithoutBytes(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	s, client := newStore(t)
	id := ids.New()
	if _, err := s.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 4, ExpectedSize: 8, Total: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stage(ctx, id, 1, []byte("aaaa"), 1, false); err != nil {
		t.Fatal(err)
	}
	before, err := client.HGetAll(ctx, rdb.StateKey(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		n    uint32
		crc  uint32
	}{{"new chunk", 2, 7}, {"replacement", 1, 9}} {
		t.Run(tc.name, func(t *testing.T) {
			keys := []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.ChunkKey(id, tc.n), rdb.IncomingKey(id, tc.n, "gone"), rdb.LeasesKey(id), rdb.MetaKey(id)}
			res, err := stageScript.Run(ctx, s.c, keys, tc.n, tc.crc, 4, "0", s.c.NowMs(), s.c.KeysTTL(), "", "x", rdb.ProgressChannel, id).Slice()
			if err != nil || res[0] != "nobytes" {
				t.Fatalf("stage script without bytes: %v %v, want nobytes", res, err)
			}
			after, err := client.HGetAll(ctx, rdb.StateKey(id)).Result()
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range before {
				if after[k] != v {
					t.Errorf("state field %s changed from %q to %q", k, v, after[k])
				}
			}
			if n, _ := client.HLen(ctx, rdb.ReceivedKey(id)).Result(); n != 1 {
				t.Errorf("received hash has %d entries, want 1", n)
			}
		})
	}
}

// newStore opens a Store on a Redis of its own, with its client.
func newStore(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	client := testenv.StartRedis(t).Client(t)
	ob, err := outbox.New(client, staging.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(client, staging.Config{}, ob, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}
