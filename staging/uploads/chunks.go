package uploads

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// Chunks is the workers' view of the store: finding staged chunks, leasing them,
// reading their bytes and recording their parts. It keeps the pending index itself: a
// chunk stays in it until its part is recorded (and, if that made the upload complete,
// its completion is indexed) or its upload is gone.
type Chunks struct{ s *Store }

// ClaimOutcome says what a claim found.
type ClaimOutcome int

// Claim outcomes.
const (
	// Claimed: the caller holds the chunk's lease and must upload it.
	Claimed ClaimOutcome = iota + 1
	// AlreadyDone: the part is recorded (the chunk has left the pending index, and the
	// upload's completion is indexed if it was the last part).
	AlreadyDone
	// Busy: another worker holds an unexpired lease until Until; the chunk is offered
	// again then.
	Busy
	// Missing: no bytes are staged for the chunk yet (its stage may be in flight); it is
	// offered again later.
	Missing
	// Gone: the upload no longer accepts work (Status says why).
	Gone
	// Expired: the chunk was received but its bytes expired from Redis before any worker
	// uploaded them; the upload cannot complete. The caller ends the upload, then Drops
	// the chunk.
	Expired
)

// Claim is the result of trying to lease a chunk.
type Claim struct {
	Outcome ClaimOutcome
	Ref     staging.ChunkRef
	Token   string
	// For Claimed: what was received and where it goes.
	CRC32C      uint32
	Size        int64
	Total       uint32
	MultipartID string
	// MultipartChecksummed: the multipart upload was created as CRC32C FULL_OBJECT, so
	// its parts must carry their CRC32C.
	MultipartChecksummed bool
	Bucket, Key          string
	ContentType          string
	// IfAbsent: the object must not replace one at its key.
	IfAbsent bool
	// Reclaimed: the claim replaced another worker's expired lease (that worker died
	// or stalled).
	Reclaimed bool
	// For Busy.
	Until time.Time
	// For Gone.
	Status staging.Status
}

// missingRecheck is how long a pending chunk whose bytes are not staged waits before it
// is offered again: its stage may be in flight (the entry is written before the
// bytes), so dropping the entry could strand a chunk that commits a moment later.
const missingRecheck = 30 * time.Second

// claimScript leases a staged chunk to one worker.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] parts hash
//	KEYS[4] chunk:N string
//	KEYS[5] leases hash
//	KEYS[6] meta hash
//	ARGV[1] N
//	ARGV[2] lease token
//	ARGV[3] now (unix ms)
//	ARGV[4] lease duration (ms)
//
// Returns {"ok", received "crc:size", total, s3_upload_id, bucket, key, content_type,
// reclaimed, mpu_crc32c, if_absent} (reclaimed is "1" when the claim replaced another
// worker's expired lease; mpu_crc32c "1" when the multipart upload is checksummed;
// if_absent "1" when the object must not replace one),
// {"done", ready} when the part is already recorded, {"busy", lease expiry},
// {"missing"} when no bytes are staged, {"expired"} when bytes were received but have
// expired from Redis, {"notfound"} when the upload does not exist, or {"state",
// status} when it is not active.
var claimScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'uploaded', 's3_upload_id', 'bucket', 'key', 'mpu_crc32c', 'if_absent')
if not st[1] then return {'notfound'} end
if st[1] ~= 'ACTIVE' then return {'state', st[1]} end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  local ready = 0
  if tonumber(st[2]) > 0 and tonumber(st[3]) == tonumber(st[2]) then ready = 1 end
  return {'done', ready}
end
if redis.call('EXISTS', KEYS[4]) == 0 then
  if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {'expired'} end
  return {'missing'}
end
local now = tonumber(ARGV[3])
local lease = redis.call('HGET', KEYS[5], ARGV[1])
local reclaimed = '0'
if lease then
  local exp = tonumber(string.match(lease, '|(%d+)$'))
  local mine = string.sub(lease, 1, #ARGV[2]+1) == ARGV[2] .. '|'
  if exp and exp > now and not mine then return {'busy', exp} end
  if not mine then reclaimed = '1' end
end
redis.call('HSET', KEYS[5], ARGV[1], ARGV[2] .. '|' .. (now + tonumber(ARGV[4])))
local rec = redis.call('HGET', KEYS[2], ARGV[1])
local ct = redis.call('HGET', KEYS[6], 'content_type') or ''
return {'ok', rec, st[2], st[4] or '', st[5], st[6], ct, reclaimed, st[7] or '0', st[8] or '0'}
`)

// renewScript extends a lease held by the caller.
//
//	KEYS[1] leases hash
//	ARGV[1] N
//	ARGV[2] lease token
//	ARGV[3] new expiry (unix ms)
//
// Returns 1 when renewed, 0 when the lease is no longer the caller's.
var renewScript = rdb.NewScript(`
local lease = redis.call('HGET', KEYS[1], ARGV[1])
if not lease or string.sub(lease, 1, #ARGV[2]+1) ~= ARGV[2] .. '|' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. ARGV[3])
return 1
`)

// releaseScript gives up a lease held by the caller.
//
//	KEYS[1] leases hash
//	ARGV[1] N
//	ARGV[2] lease token
//
// Returns 1 when released, 0 when it was not the caller's.
var releaseScript = rdb.NewScript(`
local lease = redis.call('HGET', KEYS[1], ARGV[1])
if not lease or string.sub(lease, 1, #ARGV[2]+1) ~= ARGV[2] .. '|' then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
`)

// setMultipartScript records the S3 multipart upload id, first writer wins, with
// whether it is checksummed (created as CRC32C FULL_OBJECT: its parts and completion
// must carry checksums, whatever the settings of the process that sends them).
//
//	KEYS[1] state hash
//	ARGV[1] S3 multipart upload id
//	ARGV[2] "1" when it is checksummed, else "0"
//
// Returns {"ok", id, checksummed} with the id now recorded (the caller's or an earlier
// one), {"notfound"}, or {"state", status} when the upload is not active.
var setMultipartScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 's3_upload_id', 'mpu_crc32c')
if not st[1] then return {'notfound'} end
if st[1] ~= 'ACTIVE' then return {'state', st[1]} end
if st[2] and st[2] ~= '' then return {'ok', st[2], st[3] or '0'} end
redis.call('HSET', KEYS[1], 's3_upload_id', ARGV[1], 'mpu_crc32c', ARGV[2])
return {'ok', ARGV[1], ARGV[2]}
`)

// recordScript records a part's ETag and only then drops the staged bytes.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] parts hash
//	KEYS[4] chunk:N string
//	KEYS[5] leases hash
//	ARGV[1] N
//	ARGV[2] lease token
//	ARGV[3] part ETag
//	ARGV[4] crc32c of the uploaded bytes
//	ARGV[5] size of the uploaded bytes
//	ARGV[6] now (unix ms)
//	ARGV[7] progress channel
//	ARGV[8] upload id (progress notices are "ID STATUS")
//
// Returns {"ok", ready}, {"dup", ready} when already recorded, {"lost"} when the lease
// is another worker's, {"stale"} when the chunk was replaced since the claim,
// {"notfound"}, or {"state", status} when the upload is not active.
var recordScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'uploaded')
if not st[1] then return {'notfound'} end
if st[1] ~= 'ACTIVE' then return {'state', st[1]} end
local total = tonumber(st[2])
local lease = redis.call('HGET', KEYS[5], ARGV[1])
local mine = lease and string.sub(lease, 1, #ARGV[2]+1) == ARGV[2] .. '|'
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  if mine then redis.call('HDEL', KEYS[5], ARGV[1]) end
  local ready = 0
  if total > 0 and tonumber(st[3]) == total then ready = 1 end
  return {'dup', ready}
end
if not mine then return {'lost'} end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[4] .. ':' .. ARGV[5] then
  redis.call('HDEL', KEYS[5], ARGV[1])
  return {'stale'}
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[5])
redis.call('DEL', KEYS[4])
redis.call('HDEL', KEYS[5], ARGV[1])
local up = redis.call('HINCRBY', KEYS[1], 'uploaded', 1)
redis.call('HINCRBY', KEYS[1], 'uploaded_bytes', ARGV[5])
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[6])
redis.call('HSETNX', KEYS[1], 'first_ms', ARGV[6])
redis.call('PUBLISH', ARGV[7], ARGV[8] .. ' uploaded')
local ready = 0
if total > 0 and up == total then ready = 1 end
return {'ok', ready}
`)

// noteMultipartScript counts an attempt to create the upload's S3 multipart upload,
// made before the attempt: with more attempts than recorded ids, one may have left a
// multipart upload behind (its worker died before it could record or abort it), and
// the completer looks for it.
//
//	KEYS[1] state hash
//
// Returns the count, or 0 when the upload is gone.
var noteMultipartScript = rdb.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[1], 'mpu_attempts', 1)
`)

func (c *Chunks) keys(ref staging.ChunkRef) []string {
	id := ref.UploadID
	return []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.ChunkKey(id, ref.N), rdb.LeasesKey(id)}
}

// Claim tries to lease ref to the caller (identified by token) for lease, and keeps the
// pending index in step with what it found.
func (c *Chunks) Claim(ctx context.Context, ref staging.ChunkRef, token string, lease time.Duration) (Claim, error) {
	s := c.s
	keys := append(c.keys(ref), rdb.MetaKey(ref.UploadID))
	r, err := rdb.Decode("claim", claimScript.Run(ctx, s.c, keys, ref.N, token, s.c.NowMs(), lease.Milliseconds()))
	if err != nil {
		return Claim{}, err
	}
	cl := Claim{Ref: ref, Token: token}
	switch r.Code {
	case rdb.CodeOK:
		crc, size, ok := rdb.ParseCRCSize(r.Str(0))
		if !ok {
			return Claim{}, fmt.Errorf("staging: chunk %s has no received record", ref)
		}
		cl.Outcome, cl.CRC32C, cl.Size = Claimed, crc, size
		cl.Total, cl.MultipartID, cl.Bucket, cl.Key = r.U32(1), r.Str(2), r.Str(3), r.Str(4)
		cl.ContentType = r.Str(5)
		cl.Reclaimed, cl.MultipartChecksummed, cl.IfAbsent = r.Flag(6), r.Flag(7), r.Flag(8)
		return cl, nil
	case rdb.CodeDone:
		cl.Outcome = AlreadyDone
		return cl, c.finish(ctx, ref, r.I64(0) == 1)
	case rdb.CodeBusy:
		cl.Outcome, cl.Until = Busy, time.UnixMilli(r.I64(0))
		return cl, s.pending.Defer(ctx, ref.UploadID, ref.String(), cl.Until)
	case rdb.CodeMissing:
		cl.Outcome = Missing
		return cl, s.pending.Defer(ctx, ref.UploadID, ref.String(), s.c.Now().Add(missingRecheck))
	case rdb.CodeExpired:
		cl.Outcome = Expired
		return cl, nil
	case rdb.CodeNotFound, rdb.CodeState:
		cl.Outcome, cl.Status = Gone, staging.Status(r.Str(0))
		return cl, s.pending.Done(ctx, ref.UploadID, ref.String())
	}
	return Claim{}, r.Unexpected()
}

// finish indexes a completed upload's completion, then drops the chunk from the
// pending index. In that order: a crash in between leaves the chunk pending, and the
// next claim finds it done and comes here again.
func (c *Chunks) finish(ctx context.Context, ref staging.ChunkRef, ready bool) error {
	if ready {
		if err := c.s.readyToComplete(ctx, ref.UploadID); err != nil {
			return fmt.Errorf("index completion: %w", err)
		}
	}
	return c.s.pending.Done(ctx, ref.UploadID, ref.String())
}

// Data reads a claimed chunk's staged bytes and, in the same round trip, pushes the
// chunk's sweep time past the lease so sweepers leave it alone while it is worked on.
func (c *Chunks) Data(ctx context.Context, ref staging.ChunkRef, lease time.Duration) ([]byte, error) {
	s := c.s
	var get *redis.StringCmd
	_, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, rdb.ChunkKey(ref.UploadID, ref.N))
		s.pending.DeferIn(ctx, p, ref.UploadID, ref.String(), s.c.Now().Add(lease))
		return nil
	})
	if errors.Is(get.Err(), redis.Nil) {
		return nil, staging.ErrChunkMissing
	}
	if err != nil {
		return nil, err
	}
	return get.Bytes()
}

// Hold pushes a claimed chunk's sweep time past the lease, as Data does, for a worker
// that has the bytes in memory already.
func (c *Chunks) Hold(ctx context.Context, ref staging.ChunkRef, lease time.Duration) error {
	return c.s.pending.Defer(ctx, ref.UploadID, ref.String(), c.s.c.Now().Add(lease))
}

// Renew extends the caller's lease on ref; false means the lease was lost.
func (c *Chunks) Renew(ctx context.Context, ref staging.ChunkRef, token string, lease time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, c.s.c, []string{rdb.LeasesKey(ref.UploadID)}, ref.N, token, c.s.c.NowMs()+lease.Milliseconds()).Int()
	return n == 1, err
}

// Release gives up the caller's lease on ref and has the chunk offered again at retryAt.
func (c *Chunks) Release(ctx context.Context, ref staging.ChunkRef, token string, retryAt time.Time) error {
	if err := releaseScript.Run(ctx, c.s.c, []string{rdb.LeasesKey(ref.UploadID)}, ref.N, token).Err(); err != nil {
		return err
	}
	return c.s.pending.Defer(ctx, ref.UploadID, ref.String(), retryAt)
}

// Drop removes ref from the pending index: its upload has ended (the caller ended it,
// e.g. after Expired or a permanent failure) and nothing is left to do for it.
func (c *Chunks) Drop(ctx context.Context, ref staging.ChunkRef) error {
	return c.s.pending.Done(ctx, ref.UploadID, ref.String())
}

// NoteMultipartAttempt counts an attempt to create upload id's S3 multipart upload; a
// worker calls it before CreateMultipartUpload (see Begin.MultipartAttempts).
func (c *Chunks) NoteMultipartAttempt(ctx context.Context, id string) error {
	return noteMultipartScript.Run(ctx, c.s.c, []string{rdb.StateKey(id)}).Err()
}

// SetMultipart records the upload's S3 multipart id, and whether it is checksummed,
// unless one is recorded already, and returns the recorded one.
func (c *Chunks) SetMultipart(ctx context.Context, id, multipartID string, checksummed bool) (string, bool, error) {
	r, err := rdb.Decode("set-multipart", setMultipartScript.Run(ctx, c.s.c, []string{rdb.StateKey(id)}, multipartID, flag(checksummed)))
	switch {
	case err != nil:
		return "", false, err
	case r.Code == rdb.CodeNotFound:
		return "", false, staging.ErrNotFound
	case r.Code == rdb.CodeState:
		return "", false, &staging.StateError{Status: staging.Status(r.Str(0))}
	case r.Code != rdb.CodeOK:
		return "", false, r.Unexpected()
	}
	return r.Str(0), r.Flag(1), nil
}

// flag is a boolean as scripts take it.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// RecordOutcome says what recording a part did.
type RecordOutcome int

// Record outcomes.
const (
	// Recorded: the part is recorded and the chunk has left the pending index.
	Recorded RecordOutcome = iota + 1
	// RecordedBefore: the part was already recorded (a repeat).
	RecordedBefore
	// LeaseLost: another worker holds the chunk now; nothing was recorded.
	LeaseLost
	// Stale: the chunk was replaced by other bytes since the claim; nothing was
	// recorded, and the chunk is offered again now.
	Stale
	// Ended: the upload is no longer active.
	Ended
)

// Record stores a part's ETag for ref and only then deletes the staged bytes; if that
// was the upload's last part, its completion is indexed. Ready reports whether the
// upload can now be completed.
func (c *Chunks) Record(ctx context.Context, ref staging.ChunkRef, token, etag string, crc uint32, size int64) (outcome RecordOutcome, ready bool, err error) {
	s := c.s
	r, err := rdb.Decode("record", recordScript.Run(ctx, s.c, c.keys(ref), ref.N, token, etag, crc, size, s.c.NowMs(),
		rdb.ProgressChannel, ref.UploadID))
	if err != nil {
		return 0, false, err
	}
	switch r.Code {
	case rdb.CodeOK, rdb.CodeDup:
		outcome, ready = Recorded, r.I64(0) == 1
		if r.Code == rdb.CodeDup {
			outcome = RecordedBefore
		}
		return outcome, ready, c.finish(ctx, ref, ready)
	case rdb.CodeLost:
		return LeaseLost, false, nil
	case rdb.CodeStale:
		return Stale, false, s.pending.Defer(ctx, ref.UploadID, ref.String(), s.c.Now()) // new bytes: upload them
	case rdb.CodeNotFound, rdb.CodeState:
		return Ended, false, s.pending.Done(ctx, ref.UploadID, ref.String())
	}
	return 0, false, r.Unexpected()
}

// Due returns up to limit chunks whose sweep time has come: chunks whose wake-up was
// lost, whose worker died, or whose retry is due.
func (c *Chunks) Due(ctx context.Context, limit int64) ([]staging.ChunkRef, error) {
	refs, _, err := c.DueNext(ctx, limit)
	return refs, err
}

// DueNext is Due, and how long until the next chunk falls due (see rdb.Index.DueNext:
// zero when more are due now, negative when none is pending).
func (c *Chunks) DueNext(ctx context.Context, limit int64) ([]staging.ChunkRef, time.Duration, error) {
	ms, next, err := c.s.pending.DueNext(ctx, limit)
	if err != nil {
		return nil, 0, err
	}
	refs := make([]staging.ChunkRef, 0, len(ms))
	for _, m := range ms {
		if ref, ok := staging.ParseChunkRef(m); ok {
			refs = append(refs, ref)
		} else {
			c.s.pending.DropStray(ctx, m) // not ours; never offer it again
		}
	}
	return refs, next, nil
}

// Pending is the number of chunks staged and not yet recorded as parts.
func (c *Chunks) Pending(ctx context.Context) (int64, error) { return c.s.pending.Len(ctx) }

// Listen subscribes to chunk wake-ups ("ID/N" notices, see staging.ParseChunkRef). On
// a cluster it listens on every sharded wake-up channel.
func (c *Chunks) Listen(ctx context.Context) *staging.Subscription {
	if !c.s.c.Cluster {
		return c.s.c.Listen(ctx, rdb.ChunksChannel)
	}
	return c.s.c.Listen(ctx, rdb.ChunksShards()...)
}

// Now returns the store's clock reading.
func (c *Chunks) Now() time.Time { return c.s.c.Now() }
