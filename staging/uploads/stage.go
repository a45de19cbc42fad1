package uploads

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// stageScript commits a chunk whose bytes were just written to an incoming key.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] parts hash
//	KEYS[4] chunk:N string (the staged bytes)
//	KEYS[5] incoming:N:token string (the bytes as sent, renamed onto KEYS[4] or deleted)
//	KEYS[6] leases hash
//	KEYS[7] meta hash (TTL refresh only)
//	ARGV[1] N
//	ARGV[2] crc32c of the bytes
//	ARGV[3] size of the bytes
//	ARGV[4] "1" when the chunk is the last one
//	ARGV[5] now (unix ms)
//	ARGV[6] state TTL (ms)
//	ARGV[7] wake-up channel; "" on a cluster, where the caller publishes the wake-up on
//	        a sharded channel of another slot itself
//	ARGV[8] wake-up message ("ID/N")
//	ARGV[9] progress channel
//	ARGV[10] upload id (progress notices are "ID STATUS")
//	KEYS[8], ARGV[11] (optional) the upload's append lock and the token the caller
//	        holds it with (see WithAppendLock); "" or absent: no fence
//
// Returns {"ok", ready} for a newly staged or replaced chunk, {"dup", ready, stored} for
// a repeat (stored is 1 when its part is in S3 already, 0 when it is staged), or an
// error code: {"notfound"}, {"state", status}, {"beyond", total},
// {"last", total}, {"lastbefore", max_received}, {"recorded"}, {"busy"},
// {"fenced"} when the append lock is no longer the caller's, or {"nobytes"} when
// KEYS[5] does not exist (its SET was refused) and nothing was written. ready is 1 when
// the upload now has every part and can be completed.
var stageScript = rdb.NewScript(`
if ARGV[11] and ARGV[11] ~= '' and redis.call('GET', KEYS[8]) ~= ARGV[11] then redis.call('DEL', KEYS[5]) return {'fenced'} end
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'max_received', 'uploaded')
if not st[1] then redis.call('DEL', KEYS[5]) return {'notfound'} end
if st[1] ~= 'ACTIVE' then redis.call('DEL', KEYS[5]) return {'state', st[1]} end
local n = tonumber(ARGV[1])
local total = tonumber(st[2])
local maxr = tonumber(st[3])
local last = ARGV[4] == '1'
if total > 0 and n > total then redis.call('DEL', KEYS[5]) return {'beyond', total} end
if last then
  if total > 0 and total ~= n then redis.call('DEL', KEYS[5]) return {'last', total} end
  if maxr > n then redis.call('DEL', KEYS[5]) return {'lastbefore', maxr} end
end
local want = ARGV[2] .. ':' .. ARGV[3]
local code = 'ok'
local stored = 0
local part = redis.call('HGET', KEYS[3], ARGV[1])
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if part then
  local pcrc = string.match(part, '^[^|]*|([^|]*)|')
  redis.call('DEL', KEYS[5])
  if pcrc ~= ARGV[2] then return {'recorded'} end
  code = 'dup'
  stored = 1
elseif prev == want and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('DEL', KEYS[5])
  code = 'dup'
else
  -- New bytes (or the same bytes again after the staged copy expired unuploaded):
  -- every check comes before the first write, so that a refused write (Redis out of
  -- memory refuses a script's first write) leaves the upload as it was.
  if redis.call('EXISTS', KEYS[5]) == 0 then return {'nobytes'} end
  local psize = nil
  if prev and prev ~= want then
    local lease = redis.call('HGET', KEYS[6], ARGV[1])
    if lease then
      local exp = tonumber(string.match(lease, '|(%d+)$'))
      if exp and exp > tonumber(ARGV[5]) then redis.call('DEL', KEYS[5]) return {'busy'} end
    end
    psize = tonumber(string.match(prev, ':(%d+)$')) or 0
  end
  if not prev then
    redis.call('HINCRBY', KEYS[1], 'received', 1)
    redis.call('HINCRBY', KEYS[1], 'received_bytes', ARGV[3])
    if n > maxr then redis.call('HSET', KEYS[1], 'max_received', n) end
  elseif psize then
    redis.call('HINCRBY', KEYS[1], 'received_bytes', tonumber(ARGV[3]) - psize)
  end
  redis.call('RENAME', KEYS[5], KEYS[4])
  redis.call('HSET', KEYS[2], ARGV[1], want)
end
if last and total == 0 then
  total = n
  redis.call('HSET', KEYS[1], 'total', n)
end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[5])
redis.call('HSETNX', KEYS[1], 'first_ms', ARGV[5])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
redis.call('PEXPIRE', KEYS[6], ARGV[6])
redis.call('PEXPIRE', KEYS[7], ARGV[6])
if code == 'ok' then
  if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
  redis.call('PUBLISH', ARGV[9], ARGV[10] .. ' received')
end
local ready = 0
if total > 0 and tonumber(st[4]) == total then ready = 1 end
return {code, ready, stored}
`)

// wakeGrace is how long after staging a chunk the sweeper leaves it to the pub/sub
// wake-up before offering it itself.
const wakeGrace = 2 * time.Second

// Stage stores a chunk's bytes and records it as received, atomically, in one round
// trip. The chunk is first indexed as pending (so a sweeper finds it even if every
// wake-up is lost), its bytes are written under a fresh key, and a script then commits
// them or, for a repeat or a rejected chunk, deletes them. Under an append lock (ctx
// from WithAppendLock) the script first checks that the lock is still the caller's,
// and refuses with staging.ErrLockLost if not.
func (s *Store) Stage(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (staging.StageResult, error) {
	ref := staging.ChunkRef{UploadID: id, N: n}
	now := s.c.Now()
	incoming := rdb.IncomingKey(id, n, ids.NewToken())
	lastArg := "0"
	if last {
		lastArg = "1"
	}
	keys := []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.ChunkKey(id, n), incoming, rdb.LeasesKey(id), rdb.MetaKey(id), rdb.AppendLockKey(id)}
	wake := rdb.ChunksChannel
	if s.c.Cluster {
		wake = "" // published below, on the sharded channel
	}
	args := []any{n, crc, len(data), lastArg, now.UnixMilli(), s.c.KeysTTL(), wake, ref.String(), rdb.ProgressChannel, id, fenceToken(ctx, id)}
	var set *redis.StatusCmd
	var index *redis.IntCmd
	var eval *redis.Cmd
	var wait *redis.Cmd
	stage := func(p redis.Pipeliner) error {
		set = p.Set(ctx, incoming, data, s.c.Cfg.ChunkTTL)
		eval = stageScript.Eval(ctx, s.c, p, keys, args...)
		// The script writes even for a repeat, so WAIT also covers a first attempt
		// whose WAIT timed out.
		wait = s.waitIn(ctx, p)
		return nil
	}
	due := now.Add(wakeGrace)
	var err error
	if cc, ok := s.c.Client.(*redis.ClusterClient); ok && s.c.Cfg.MinReplicas > 0 {
		// WAIT counts the replicas that have this connection's writes: the chunk's
		// writes and the WAIT go to the upload's master on one connection (the
		// pending entry, in another slot, first).
		if err = s.pending.Add(ctx, id, ref.String(), due); err == nil {
			var node *redis.Client
			if node, err = cc.MasterForKey(ctx, rdb.StateKey(id)); err == nil {
				_, err = node.Pipelined(ctx, stage)
			}
		}
		err = rdb.Classify(err) // a node's client has no hook of its own
	} else {
		_, err = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			index = s.pending.AddIn(ctx, p, id, ref.String(), due)
			return stage(p)
		})
	}
	if eval == nil || eval.Err() != nil && set.Err() == nil {
		// The pipeline did not run, or the script failed on its own.
		return staging.StageResult{}, orErr(rdb.Classify(evalErr(eval)), err)
	}
	if err := set.Err(); err != nil {
		// The bytes were refused (Redis out of memory, say): the script found no
		// incoming key and changed nothing.
		return staging.StageResult{}, rdb.Classify(err)
	}
	res, err := rdb.Decode("stage", eval)
	if err != nil {
		return staging.StageResult{}, rdb.Classify(err)
	}
	code := res.Code
	if index != nil && index.Err() != nil && (code == rdb.CodeOK || code == rdb.CodeDup) {
		// Staged, but not indexed as pending: refuse the acknowledgement, so that the
		// client sends the chunk again and its repeat adds the entry.
		return staging.StageResult{}, rdb.Classify(index.Err())
	}
	if code == rdb.CodeOK || code == rdb.CodeDup {
		if err := s.replicated(wait, ""); err != nil {
			return staging.StageResult{}, err
		}
	}
	if code == rdb.CodeOK && s.c.Cluster {
		// A wake-up lost here is found by the sweep: the chunk is pending already.
		_ = s.c.Client.SPublish(ctx, rdb.ChunksShard(id), ref.String()).Err()
	}
	switch code {
	case rdb.CodeOK, rdb.CodeDup:
		r := staging.StageResult{Duplicate: code == rdb.CodeDup, Ready: res.I64(0) == 1, Stored: res.I64(1) == 1}
		if r.Ready {
			// No worker will see a new part, so the completion starts here.
			if err := s.readyToComplete(ctx, id); err != nil {
				return staging.StageResult{}, err
			}
		}
		return r, nil
	case rdb.CodeNotFound:
		return staging.StageResult{}, staging.ErrNotFound
	case rdb.CodeState:
		return staging.StageResult{}, &staging.StateError{Status: staging.Status(res.Str(0))}
	case rdb.CodeBeyond:
		return staging.StageResult{}, &staging.OutOfRangeError{N: n, Total: res.U32(0)}
	case rdb.CodeLast:
		return staging.StageResult{}, &staging.LastChunkError{N: n, Last: res.U32(0)}
	case rdb.CodeLastBefore:
		return staging.StageResult{}, &staging.LastChunkError{N: n, Max: res.U32(0)}
	case rdb.CodeRecorded:
		return staging.StageResult{}, &staging.PartRecordedError{N: n}
	case rdb.CodeBusy:
		return staging.StageResult{}, staging.ErrChunkBusy
	case rdb.CodeNoBytes:
		return staging.StageResult{}, fmt.Errorf("%w: chunk %d's bytes did not reach Redis", staging.ErrUnavailable, n)
	case rdb.CodeFenced:
		return staging.StageResult{}, staging.ErrLockLost
	}
	return staging.StageResult{}, res.Unexpected()
}

func evalErr(c *redis.Cmd) error {
	if c == nil {
		return nil
	}
	return c.Err()
}

// orErr returns the first error that is not nil.
func orErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
