package staging

import (
	"context"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testenv"
)

// TestStageScriptWritesNothingWithoutBytes runs the stage script as it runs when the
// SET of a chunk's bytes was refused (Redis out of memory) but the script was not: it
// must find no incoming bytes before its first write and leave the upload as it was,
// for a new chunk and for a replacement alike.
func TestStageScriptWritesNothingWithoutBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := testenv.StartRedis(t).Client(t)
	s, err := New(rdb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := NewID()
	if _, err := s.Create(ctx, NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 4, ExpectedSize: 8, Total: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stage(ctx, id, 1, []byte("aaaa"), 1, false); err != nil {
		t.Fatal(err)
	}
	before, err := rdb.HGetAll(ctx, stateKey(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		n    uint32
		crc  uint32
	}{{"new chunk", 2, 7}, {"replacement", 1, 9}} {
		t.Run(tc.name, func(t *testing.T) {
			keys := []string{stateKey(id), receivedKey(id), partsKey(id), chunkKey(id, tc.n), incomingKey(id, tc.n, "gone"), leasesKey(id), metaKey(id)}
			res, err := s.script(stageScript).Run(ctx, rdb, keys, tc.n, tc.crc, 4, "0", s.nowMs(), s.keysTTL(), "", "x", ProgressChannel(id)).Slice()
			if err != nil || res[0] != "nobytes" {
				t.Fatalf("stage script without bytes: %v %v, want nobytes", res, err)
			}
			after, err := rdb.HGetAll(ctx, stateKey(id)).Result()
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range before {
				if after[k] != v {
					t.Errorf("state field %s changed from %q to %q", k, v, after[k])
				}
			}
			if n, _ := rdb.HLen(ctx, receivedKey(id)).Result(); n != 1 {
				t.Errorf("received hash has %d entries, want 1", n)
			}
		})
	}
}
