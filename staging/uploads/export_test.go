package uploads

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// RecordThroughAndDie does the first round trip of RecordThrough (the pending entry
// and the record script) and nothing after it, as a process killed right then would.
func RecordThroughAndDie(t *testing.T, s *Store, ref staging.ChunkRef, token, etag string, crc uint32, size int64, last bool) {
	t.Helper()
	ctx := t.Context()
	id := ref.UploadID
	keys := []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.ChunkKey(id, ref.N), rdb.LeasesKey(id), rdb.MetaKey(id)}
	var eval *redis.Cmd
	_, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		s.pending.AddIn(ctx, p, id, ref.String(), s.c.Now().Add(wakeGrace))
		eval = recordThroughScript.Eval(ctx, s.c, p, keys, ref.N, token, etag, crc, size, flag(last), s.c.NowMs(), s.c.KeysTTL(), rdb.ProgressChannel, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := eval.Slice(); err != nil || res[0] != "ok" {
		t.Fatalf("record script: %v %v", res, err)
	}
}
