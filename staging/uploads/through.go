package uploads

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// Write-through (adaptive staging): a process with a free upload slot stores a chunk
// it has just received straight in S3 as its part and acknowledges it once the part is
// recorded, without staging its bytes in Redis. It meets the staged path at the same
// records: BeginThrough leases the chunk as a worker's claim does, and RecordThrough
// records it as received and stored in one step, so the counters, the received and
// parts hashes, resume (Upload.chunks), completion and recovery see a written-through
// chunk exactly as a staged one whose part a worker recorded. Only a chunk new to the
// upload is written through: a repeat, a replacement, or a chunk whose staged bytes
// expired goes through Stage, whose rules decide.

// beginThroughScript leases a chunk that is new to the upload to the caller, who
// writes it straight through to S3.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] parts hash
//	KEYS[4] leases hash
//	KEYS[5] meta hash
//	ARGV[1] N
//	ARGV[2] lease token
//	ARGV[3] now (unix ms)
//	ARGV[4] lease duration (ms)
//	ARGV[5] "1" when the chunk is the last one
//	ARGV[6] keys TTL (ms)
//
// Returns {"ok", total, s3_upload_id, mpu_crc32c, bucket, key, content_type, if_absent};
// {"stage"}
// when the chunk is not new (received, stored, or leased: Stage decides what it is);
// or, as the stage script, {"notfound"}, {"state", status}, {"beyond", total},
// {"last", total}, {"lastbefore", max_received}.
var beginThroughScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'max_received', 's3_upload_id', 'mpu_crc32c', 'bucket', 'key', 'if_absent')
if not st[1] then return {'notfound'} end
if st[1] ~= 'ACTIVE' then return {'state', st[1]} end
local n = tonumber(ARGV[1])
local total = tonumber(st[2])
local maxr = tonumber(st[3])
if total > 0 and n > total then return {'beyond', total} end
if ARGV[5] == '1' then
  if total > 0 and total ~= n then return {'last', total} end
  if maxr > n then return {'lastbefore', maxr} end
end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return {'stage'}
end
local now = tonumber(ARGV[3])
local lease = redis.call('HGET', KEYS[4], ARGV[1])
if lease then
  local exp = tonumber(string.match(lease, '|(%d+)$'))
  if exp and exp > now then return {'stage'} end
end
local ct = redis.call('HGET', KEYS[5], 'content_type') or ''
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2] .. '|' .. (now + tonumber(ARGV[4])))
redis.call('PEXPIRE', KEYS[4], ARGV[6])
return {'ok', st[2], st[4] or '', st[5] or '0', st[6], st[7], ct, st[8] or '0'}
`)

// recordThroughScript records a written-through chunk as received and stored at once,
// if the caller still holds its lease.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] parts hash
//	KEYS[4] chunk:N string (a staged copy of the same bytes, from a repeat on another
//	        stream: deleted, the part is in S3)
//	KEYS[5] leases hash
//	KEYS[6] meta hash (TTL refresh only)
//	ARGV[1] N
//	ARGV[2] lease token
//	ARGV[3] part ETag
//	ARGV[4] crc32c of the bytes
//	ARGV[5] size of the bytes
//	ARGV[6] "1" when the chunk is the last one
//	ARGV[7] now (unix ms)
//	ARGV[8] keys TTL (ms)
//	ARGV[9] progress channel
//	ARGV[10] upload id (progress notices are "ID STATUS")
//
// Returns {"ok", ready}; {"dup", ready} when the part was recorded meanwhile with the
// same checksum; {"lost"} when the lease is no longer the caller's; {"stale"} when other
// bytes were staged for the chunk meanwhile; or {"recorded"} and the error codes of
// beginThroughScript. ready is 1 when the upload now has every part.
var recordThroughScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'max_received', 'uploaded')
if not st[1] then return {'notfound'} end
if st[1] ~= 'ACTIVE' then return {'state', st[1]} end
local n = tonumber(ARGV[1])
local total = tonumber(st[2])
local maxr = tonumber(st[3])
local last = ARGV[6] == '1'
if total > 0 and n > total then return {'beyond', total} end
if last then
  if total > 0 and total ~= n then return {'last', total} end
  if maxr > n then return {'lastbefore', maxr} end
end
local want = ARGV[4] .. ':' .. ARGV[5]
local lease = redis.call('HGET', KEYS[5], ARGV[1])
local mine = lease and string.sub(lease, 1, #ARGV[2]+1) == ARGV[2] .. '|'
local part = redis.call('HGET', KEYS[3], ARGV[1])
if part then
  local pcrc = string.match(part, '^[^|]*|([^|]*)|')
  if mine then redis.call('HDEL', KEYS[5], ARGV[1]) end
  if pcrc ~= ARGV[4] then return {'recorded'} end
  local ready = 0
  if total > 0 and tonumber(st[4]) == total then ready = 1 end
  return {'dup', ready}
end
if not mine then return {'lost'} end
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if prev and prev ~= want then
  redis.call('HDEL', KEYS[5], ARGV[1])
  return {'stale'}
end
-- Every check is done: the writes follow (a refused first write changes nothing).
if not prev then
  redis.call('HINCRBY', KEYS[1], 'received', 1)
  redis.call('HINCRBY', KEYS[1], 'received_bytes', ARGV[5])
  if n > maxr then redis.call('HSET', KEYS[1], 'max_received', n) end
  redis.call('HSET', KEYS[2], ARGV[1], want)
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[5])
redis.call('DEL', KEYS[4])
redis.call('HDEL', KEYS[5], ARGV[1])
local up = redis.call('HINCRBY', KEYS[1], 'uploaded', 1)
redis.call('HINCRBY', KEYS[1], 'uploaded_bytes', ARGV[5])
if last and total == 0 then
  total = n
  redis.call('HSET', KEYS[1], 'total', n)
end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[7])
redis.call('HSETNX', KEYS[1], 'first_ms', ARGV[7])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[8]) end
redis.call('PEXPIRE', KEYS[5], ARGV[8])
redis.call('PEXPIRE', KEYS[6], ARGV[8])
redis.call('PUBLISH', ARGV[9], ARGV[10] .. ' uploaded')
local ready = 0
if total > 0 and up == total then ready = 1 end
return {'ok', ready}
`)

// Through is what BeginThrough found.
type Through struct {
	// Begun: the caller holds the chunk's lease and writes it through; the fields below
	// say where. Otherwise the chunk goes through Stage.
	Begun bool
	// Claim is the lease as a worker's claim would hold it (CRC32C and Size are the
	// caller's), for the upload that follows.
	Claim Claim
}

// BeginThrough leases chunk ref, with crc and size, to the caller (token) for lease,
// if the chunk is new to its upload: not received, not stored, not leased. A chunk
// that is not new goes through Stage (Begun false). A chunk its upload refuses gets
// the error Stage would return.
func (c *Chunks) BeginThrough(ctx context.Context, ref staging.ChunkRef, token string, crc uint32, size int64, last bool, lease time.Duration) (Through, error) {
	s := c.s
	id := ref.UploadID
	keys := []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.LeasesKey(id), rdb.MetaKey(id)}
	res, err := rdb.Decode("begin-through", beginThroughScript.Run(ctx, s.c, keys, ref.N, token, s.c.NowMs(), lease.Milliseconds(), flag(last), s.c.KeysTTL()))
	if err != nil {
		return Through{}, err
	}
	switch res.Code {
	case rdb.CodeOK:
		cl := Claim{Outcome: Claimed, Ref: ref, Token: token, CRC32C: crc, Size: size,
			Total: res.U32(0), MultipartID: res.Str(1), MultipartChecksummed: res.Flag(2),
			Bucket: res.Str(3), Key: res.Str(4), ContentType: res.Str(5), IfAbsent: res.Flag(6)}
		if last && cl.Total == 0 {
			cl.Total = ref.N // the total this chunk will record
		}
		return Through{Begun: true, Claim: cl}, nil
	case rdb.CodeStage:
		return Through{}, nil
	default:
		return Through{}, refusal(res, ref.N)
	}
}

// refusal is the error for a script's refusal of chunk n, as Stage reports it.
func refusal(res rdb.Reply, n uint32) error {
	switch res.Code {
	case rdb.CodeNotFound:
		return staging.ErrNotFound
	case rdb.CodeState:
		return &staging.StateError{Status: staging.Status(res.Str(0))}
	case rdb.CodeBeyond:
		return &staging.OutOfRangeError{N: n, Total: res.U32(0)}
	case rdb.CodeLast:
		return &staging.LastChunkError{N: n, Last: res.U32(0)}
	case rdb.CodeLastBefore:
		return &staging.LastChunkError{N: n, Max: res.U32(0)}
	case rdb.CodeRecorded:
		return &staging.PartRecordedError{N: n}
	}
	return res.Unexpected()
}

// ThroughOutcome says what recording a written-through chunk did.
type ThroughOutcome int

// RecordThrough outcomes.
const (
	// ThroughRecorded: the chunk is recorded as received and stored.
	ThroughRecorded ThroughOutcome = iota + 1
	// ThroughDuplicate: the same bytes were recorded meanwhile (a repeat on another
	// stream, uploaded by a worker); nothing was recorded twice.
	ThroughDuplicate
	// ThroughLost: the lease is no longer the caller's (it expired and a worker took a
	// staged copy over); nothing was recorded.
	ThroughLost
	// ThroughStale: other bytes were staged for the chunk meanwhile; nothing was
	// recorded, and the caller's lease is gone.
	ThroughStale
)

// RecordThrough records chunk ref, written through to S3 as a part (or object) with
// etag, as received and stored in one step, if the caller (token) still holds its
// lease. When that makes the upload ready, its completion is indexed (without waking
// the in-process completer when the caller completes the upload itself: wake false).
// With MinReplicas, the record is acknowledged only once replicas have it, as Stage's
// are.
//
// A crash between the record and the completion index must not strand the upload, so
// the chunk is in the pending index meanwhile, as a staged chunk is until its part is
// recorded: a sweeper that finds it recorded indexes the completion. (A one-chunk
// upload's completion is indexed before the record instead, see completes.)
func (c *Chunks) RecordThrough(ctx context.Context, ref staging.ChunkRef, token, etag string, crc uint32, size int64, last, wake bool) (outcome ThroughOutcome, ready bool, err error) {
	s := c.s
	id := ref.UploadID
	keys := []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.ChunkKey(id, ref.N), rdb.LeasesKey(id), rdb.MetaKey(id)}
	args := []any{ref.N, token, etag, crc, size, flag(last), s.c.NowMs(), s.c.KeysTTL(), rdb.ProgressChannel, id}
	var eval, wait *redis.Cmd
	var index *redis.IntCmd
	record := func(p redis.Pipeliner) error {
		eval = recordThroughScript.Eval(ctx, s.c, p, keys, args...)
		wait = s.waitIn(ctx, p)
		return nil
	}
	due := s.c.Now().Add(wakeGrace)
	// A one-chunk upload that its caller completes itself (not wake) is ready once its
	// chunk is recorded: on one Redis, its completion is indexed in the record's round
	// trip, before the record (a pipeline runs in order), instead of the pending entry
	// and the index write after it. Due after the grace, as the pending entry would be:
	// a sweeper that came first would find it not ready yet and drop it.
	completes := last && ref.N == 1 && !wake && !s.c.Cluster
	if cc, ok := s.c.Client.(*redis.ClusterClient); ok && s.c.Cfg.MinReplicas > 0 {
		// As in Stage: the record and its WAIT on one connection to the upload's master.
		if err = s.pending.Add(ctx, id, ref.String(), due); err == nil {
			var node *redis.Client
			if node, err = cc.MasterForKey(ctx, rdb.StateKey(id)); err == nil {
				_, err = node.Pipelined(ctx, record)
			}
		}
		err = rdb.Classify(err)
	} else {
		_, err = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			if completes {
				index = s.completions.AddIn(ctx, p, id, id, due)
			} else {
				index = s.pending.AddIn(ctx, p, id, ref.String(), due)
			}
			return record(p)
		})
	}
	if eval == nil {
		return 0, false, err
	}
	res, evalErr := rdb.Decode("record-through", eval)
	if evalErr != nil {
		return 0, false, rdb.Classify(evalErr)
	}
	code := res.Code
	if code == rdb.CodeOK || code == rdb.CodeDup {
		if err := s.replicated(wait, ""); err != nil {
			return 0, false, err
		}
	}
	switch code {
	case rdb.CodeOK, rdb.CodeDup:
		ready = res.I64(0) == 1
		outcome = ThroughRecorded
		if code == rdb.CodeDup {
			outcome = ThroughDuplicate
		}
		if completes && index.Err() == nil {
			if !ready { // a duplicate of a record that is not complete yet: cannot be, but be sure
				_ = s.completions.Done(ctx, id, id)
			}
			return outcome, ready, nil
		}
		if ready {
			// Retried a little: should the pending entry be missing too (its write failed),
			// nothing else would index this completion, and a client that resumes finds
			// every chunk held and sends none again.
			var err error
			for attempt := 1; attempt <= 5; attempt++ {
				if err = s.completions.Add(ctx, id, id, s.c.Now()); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
			}
			if err != nil {
				return 0, false, fmt.Errorf("index completion: %w", err)
			}
			if wake {
				s.hub.UploadReady(id)
			}
		}
		if !completes {
			// The entry is a hint: one left behind leads a sweeper to a recorded part.
			_ = s.pending.Done(ctx, id, ref.String())
		}
		return outcome, ready, nil
	case rdb.CodeLost, rdb.CodeStale:
		// A staged copy holds the pending entry (and needs it); no entry of ours to drop.
		if completes && index.Val() == 1 {
			_ = s.completions.Done(ctx, id, id) // ours, and not ready
		}
		if code == rdb.CodeLost {
			return ThroughLost, false, nil
		}
		return ThroughStale, false, nil
	}
	if index != nil && index.Val() == 1 {
		// Ours, and it leads to nothing.
		if completes {
			_ = s.completions.Done(ctx, id, id)
		} else {
			_ = s.pending.Done(ctx, id, ref.String())
		}
	}
	return 0, false, refusal(res, ref.N)
}

// ReleaseThrough gives up the caller's lease on a chunk it began to write through
// and did not record (its upload failed, or S3 was too slow and the chunk is staged
// instead).
func (c *Chunks) ReleaseThrough(ctx context.Context, ref staging.ChunkRef, token string) error {
	return releaseScript.Run(ctx, c.s.c, []string{rdb.LeasesKey(ref.UploadID)}, ref.N, token).Err()
}
