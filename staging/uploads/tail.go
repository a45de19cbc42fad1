package uploads

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// An upload's tail: the first bytes of its next chunk, received by an HTTP append that
// ended before the chunk was full (tus and the IETF draft let a request carry any
// number of bytes). The door keeps them durably, under the upload's append lock, and
// the next append begins its chunk with them; a chunk is still staged whole, and gRPC
// never sees a tail. One tail per upload: saving one replaces the one before.

// parseTail reads the state hash's tail field ("" or "N|size|crc32c").
func parseTail(v string) staging.Tail {
	parts := strings.Split(v, "|")
	if len(parts) != 3 {
		return staging.Tail{}
	}
	n, err1 := strconv.ParseUint(parts[0], 10, 32)
	size, err2 := strconv.ParseInt(parts[1], 10, 64)
	c, err3 := strconv.ParseUint(parts[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return staging.Tail{}
	}
	return staging.Tail{N: uint32(n), Size: size, CRC32C: uint32(c)}
}

// saveTailScript records an upload's tail, or drops it.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] tail bytes
//	KEYS[4] append lock
//	ARGV[1] the lock's token (the caller's)
//	ARGV[2] the chunk the tail begins
//	ARGV[3] the tail field ("N|size|crc32c"); "" drops the tail
//	ARGV[4] the tail's bytes
//	ARGV[5] now (unix ms)
//	ARGV[6] the keys' TTL (ms)
//
// Returns tailSaved, tailFenced (the lock is not the caller's), tailNotActive (no such
// upload, or it takes no more data), or tailReceived (the chunk it begins was received
// since).
var saveTailScript = rdb.NewScript(`
if redis.call('GET', KEYS[4]) ~= ARGV[1] then return 1 end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[3])
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HDEL', KEYS[1], 'tail') end
  return 0
end
local st = redis.call('HGET', KEYS[1], 'status')
if st ~= 'ACTIVE' then return 2 end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return 3 end
redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[6])
redis.call('HSET', KEYS[1], 'tail', ARGV[3], 'updated_ms', ARGV[5])
return 0
`)

// saveTailScript's replies.
const (
	tailSaved     = 0
	tailFenced    = 1
	tailNotActive = 2
	tailReceived  = 3
)

// SaveTail records data as upload id's tail, the first bytes of chunk n, durably before
// it returns; empty data drops the tail. ctx must carry the upload's append lock
// (WithAppendLock): a caller that lost it gets staging.ErrLockLost and nothing changes. An
// upload that takes no more data is a *staging.StateError (or staging.ErrNotFound);
// a chunk n received since (over gRPC, say) is a *PartRecordedError-like conflict:
// staging.ErrChunkBusy.
func (s *Store) SaveTail(ctx context.Context, id string, n uint32, data []byte) error {
	token := fenceToken(ctx, id)
	if token == "" {
		return fmt.Errorf("uploads: SaveTail of %s without its append lock", id)
	}
	field := ""
	if len(data) > 0 {
		field = staging.Tail{N: n, Size: int64(len(data)), CRC32C: crc.Checksum(data)}.String()
	}
	var eval *redis.Cmd
	wait, err := s.pipelineReplicated(ctx, id, func(p redis.Pipeliner) {
		eval = saveTailScript.Eval(ctx, s.c, p, []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.TailKey(id), rdb.AppendLockKey(id)},
			token, n, field, data, s.c.NowMs(), s.c.KeysTTL())
	})
	if eval == nil {
		return rdb.Classify(err)
	}
	code, err := eval.Int()
	if err != nil {
		return rdb.Classify(err)
	}
	if code == tailSaved {
		if err := s.replicated(wait, ""); err != nil {
			return err
		}
	}
	switch code {
	case tailSaved:
		return nil
	case tailFenced:
		return staging.ErrLockLost
	case tailReceived:
		return fmt.Errorf("%w: chunk %d of upload %s was received since this request began", staging.ErrChunkBusy, n, id)
	}
	u, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return &staging.StateError{Status: u.Status}
}

// ReadTail returns upload id's tail bytes if they are the tail t describes (else
// staging.ErrChunkMissing: replaced or dropped since t was read).
func (s *Store) ReadTail(ctx context.Context, id string, t staging.Tail) ([]byte, error) {
	data, err := s.c.Client.Get(ctx, rdb.TailKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, staging.ErrChunkMissing
	}
	if err != nil {
		return nil, rdb.Classify(err)
	}
	if int64(len(data)) != t.Size || crc.Checksum(data) != t.CRC32C {
		return nil, staging.ErrChunkMissing
	}
	return data, nil
}
