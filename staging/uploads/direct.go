package uploads

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/redis/go-redis/v9"
)

// Direct uploads: the client puts the parts into S3 itself, with URLs chunkup signs, so
// chunkup sees no bytes while it works. What is here is the activity that keeps such an
// upload alive meanwhile, and the record of its parts, as S3 holds them, once the client
// reports them: in the same hashes and counters as written-through chunks', so that
// resume, completion and recovery see them as they see any upload's.

// touchScript records activity on an active direct upload of the caller's tenant (a
// part signed), so that an upload whose client is busy putting parts is not expired as
// idle, and returns what signing its parts needs, in the same round trip.
//
//	KEYS[1] state hash
//	KEYS[2] meta hash
//	KEYS[3] received hash
//	KEYS[4] parts hash
//	ARGV[1] now (unix ms)
//	ARGV[2] keys TTL (ms)
//	ARGV[3] the caller's tenant
//	ARGV[4] the largest part number to sign
//	ARGV[5] "1" when a part to sign has no CRC32C
//
// Returns {"ok", direct, bucket, key, s3_upload_id, mpu_crc32c, total, chunk_size,
// expected_size} (when direct is not "1" nothing was touched); {"notfound"} for no such
// upload of the tenant; {"state", status} when it is not ACTIVE; {"beyond", total} for
// a part beyond the upload's; {"missing"} for a part without the CRC32C its multipart
// upload requires. Nothing is touched unless it returns "ok".
var touchScript = rdb.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'direct', 'bucket', 'key', 's3_upload_id', 'mpu_crc32c',
  'total', 'chunk_size', 'expected_size')
if not f[1] or (f[2] or '') ~= ARGV[3] then return {'notfound'} end
if f[3] ~= '1' then return {'ok', '0'} end
if f[1] ~= 'ACTIVE' then return {'state', f[1]} end
local total = tonumber(f[8] or '0')
if total > 0 and tonumber(ARGV[4]) > total then return {'beyond', total} end
if f[7] == '1' and ARGV[5] == '1' then return {'missing'} end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[1])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return {'ok', '1', f[4], f[5], f[6] or '', f[7] or '0', f[8] or '0', f[9], f[10]}
`)

// DirectTarget is what signing a direct upload's parts needs to know of it.
type DirectTarget struct {
	// Direct: it is a direct upload (nothing else is set, and it was not touched, when
	// it is not).
	Direct              bool
	Bucket, Key         string
	MultipartID         string
	Checksummed         bool
	Total               uint32
	ChunkSize, Expected int64
}

// TouchDirect records activity on active direct upload id of tenant now (its idle
// expiry starts again) and returns what signing its parts needs, when parts up to
// maxN (some without their CRC32C: noCRC) may be signed for it: a part beyond the
// upload's is a *staging.BeyondError, a part without the CRC32C its multipart upload
// requires ErrCRCRequired, and neither touches it.
func (s *Store) TouchDirect(ctx context.Context, id, tenant string, maxN uint32, noCRC bool) (DirectTarget, error) {
	keys := []string{rdb.StateKey(id), rdb.MetaKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id)}
	res, err := rdb.Decode("touch", touchScript.Run(ctx, s.c, keys, s.c.NowMs(), s.c.KeysTTL(), tenant, maxN, flag(noCRC)))
	if err != nil {
		return DirectTarget{}, err
	}
	switch res.Code {
	case rdb.CodeOK:
		if !res.Flag(0) {
			return DirectTarget{}, nil
		}
		return DirectTarget{Direct: true, Bucket: res.Str(1), Key: res.Str(2), MultipartID: res.Str(3), Checksummed: res.Flag(4),
			Total: res.U32(5), ChunkSize: res.I64(6), Expected: res.I64(7)}, nil
	case rdb.CodeNotFound:
		return DirectTarget{}, staging.ErrNotFound
	case rdb.CodeState:
		return DirectTarget{}, &staging.StateError{Status: staging.Status(res.Str(0))}
	case rdb.CodeBeyond:
		return DirectTarget{}, &BeyondError{Total: res.U32(0)}
	case rdb.CodeMissing:
		return DirectTarget{}, ErrCRCRequired
	}
	return DirectTarget{}, res.Unexpected()
}

// BeyondError: a part to sign is beyond the upload's Total parts.
type BeyondError struct{ Total uint32 }

func (e *BeyondError) Error() string {
	return fmt.Sprintf("the upload has %d parts", e.Total)
}

// ErrCRCRequired: a part to sign has no CRC32C, which its multipart upload requires.
var ErrCRCRequired = errors.New("the upload's multipart upload takes parts only with their CRC32C")

// recordDirectScript records a batch of a direct upload's parts, as S3 holds them, as
// received and stored, in one step: the parts the client put, checked against S3's
// listing by the caller. A part recorded before with the same ETag, CRC32C and size is
// left as it is (a completion repeated, or one cut off between batches); nothing is
// leased, as no bytes pass through chunkup and the record is one script.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] parts hash
//	KEYS[4] meta hash (TTL refresh only)
//	ARGV[1] now (unix ms)
//	ARGV[2] keys TTL (ms)
//	ARGV[3] progress channel
//	ARGV[4] upload id (progress notices are "ID STATUS")
//	ARGV[5] "1" when the batch ends with the upload's last part
//	ARGV[6+4i..9+4i] part i of the batch: N, ETag, CRC32C ("-" when not known), size
//
// Returns {"ok", ready, recorded}: ready is 1 when the upload now has every part,
// recorded how many parts were new; {"recorded", N} when part N was recorded before
// as another part (another ETag, CRC32C or size: replaced in S3 since); or, as beginThroughScript, {"notfound"}, {"state", status},
// {"beyond", total}, {"last", total}, {"lastbefore", max_received}. Nothing is written
// unless it returns "ok".
var recordDirectScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'max_received', 'uploaded')
if not st[1] then return {'notfound'} end
if st[1] ~= 'ACTIVE' then return {'state', st[1]} end
local total = tonumber(st[2])
local maxr = tonumber(st[3])
local count = (#ARGV - 5) / 4
local ns = {}
for i = 0, count - 1 do ns[i+1] = ARGV[6+4*i] end
local lastN = tonumber(ns[count])
if ARGV[5] == '1' then
  if total > 0 and total ~= lastN then return {'last', total} end
  if maxr > lastN then return {'lastbefore', maxr} end
end
local held = redis.call('HMGET', KEYS[3], unpack(ns))
for i = 0, count - 1 do
  local n = tonumber(ns[i+1])
  if total > 0 and n > total then return {'beyond', total} end
  local part = held[i+1]
  if part and part ~= ARGV[7+4*i] .. '|' .. ARGV[8+4*i] .. '|' .. ARGV[9+4*i] then return {'recorded', n} end
end
-- Every check is done: the writes follow.
local recv, parts = {}, {}
local added, bytes, newmax = 0, 0, maxr
for i = 0, count - 1 do
  if not held[i+1] then
    local n, crc, size = ns[i+1], ARGV[8+4*i], ARGV[9+4*i]
    recv[#recv+1] = n
    recv[#recv+1] = crc .. ':' .. size
    parts[#parts+1] = n
    parts[#parts+1] = ARGV[7+4*i] .. '|' .. crc .. '|' .. size
    added = added + 1
    bytes = bytes + tonumber(size)
    if tonumber(n) > newmax then newmax = tonumber(n) end
  end
end
local up = tonumber(st[4] or '0')
if added > 0 then
  redis.call('HSET', KEYS[2], unpack(recv))
  redis.call('HSET', KEYS[3], unpack(parts))
  redis.call('HINCRBY', KEYS[1], 'received', added)
  redis.call('HINCRBY', KEYS[1], 'received_bytes', bytes)
  up = redis.call('HINCRBY', KEYS[1], 'uploaded', added)
  redis.call('HINCRBY', KEYS[1], 'uploaded_bytes', bytes)
  if newmax > maxr then redis.call('HSET', KEYS[1], 'max_received', newmax) end
end
if ARGV[5] == '1' and total == 0 then
  total = lastN
  redis.call('HSET', KEYS[1], 'total', lastN)
end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[1])
redis.call('HSETNX', KEYS[1], 'first_ms', ARGV[1])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
if added > 0 then redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' uploaded') end
local ready = 0
if total > 0 and up == total then ready = 1 end
return {'ok', ready, added}
`)

// DirectPart is a part of a direct upload as S3 holds it: its number, ETag and size,
// and its CRC32C when known (nil: the client gave none, and the completer reads the
// object for its CRC32C).
type DirectPart struct {
	N      uint32
	ETag   string
	CRC32C *uint32
	Size   int64
}

// directBatch is how many parts one record script takes: a direct upload of up to
// 8 GiB in 8 MiB parts is recorded in one, and none keeps Redis busy for long.
const directBatch = 1000

// RecordDirectParts records every part of direct upload id, numbered 1 to len(parts)
// and in that order, as its client put them into S3 (checked against S3's listing),
// and returns whether the upload is now ready to complete: it is on success, and its
// completion is indexed, due at once, or after a grace when the caller completes it
// itself (completes: a sweeper completes it should the caller die). Parts recorded
// before as the same part are left as they are; one recorded as another (ETag, CRC32C
// or size) is a *staging.PartRecordedError. Up to 1000 parts are recorded in one
// script, so a caller cut off between batches leaves some parts recorded and the
// upload not ready, and a repeat records the rest.
func (s *Store) RecordDirectParts(ctx context.Context, id string, parts []DirectPart, completes bool) (ready bool, err error) {
	keys := []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.MetaKey(id)}
	due := s.c.Now()
	if completes {
		due = due.Add(wakeGrace)
	}
	// The completion's index entry, when this call made it, is dropped should the
	// records be refused (they then lead to nothing); kept on any other error, as the
	// records may have been made.
	var ours, refused bool
	defer func() {
		if refused && ours {
			_ = s.completions.Done(context.WithoutCancel(ctx), id, id)
		}
	}()
	cluster := s.c.Cluster
	if cluster {
		// The index is on another node: before the first record, so that a record is
		// never left without it.
		var index *redis.IntCmd
		if _, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			index = s.completions.AddIn(ctx, p, id, id, due)
			return nil
		}); err != nil {
			return false, rdb.Classify(err)
		}
		ours = index.Val() == 1
	}
	for start := 0; start < len(parts); start += directBatch {
		batch := parts[start:min(start+directBatch, len(parts))]
		last := start+len(batch) == len(parts)
		args := make([]any, 0, 5+4*len(batch))
		args = append(args, s.c.NowMs(), s.c.KeysTTL(), rdb.ProgressChannel, id, flag(last))
		for _, p := range batch {
			sum := rdb.NoCRC
			if p.CRC32C != nil {
				sum = strconv.FormatUint(uint64(*p.CRC32C), 10)
			}
			args = append(args, p.N, p.ETag, sum, p.Size)
		}
		var eval *redis.Cmd
		var index *redis.IntCmd
		wait, err := s.pipelineReplicated(ctx, id, func(p redis.Pipeliner) {
			if (start == 0 || last) && !cluster {
				// On one Redis, in the first record's round trip, before it, and again
				// (it adds only what is missing) in the last's: a sweeper that came
				// between, found the upload not ready and dropped the entry, would
				// otherwise leave the ready upload without one.
				index = s.completions.AddIn(ctx, p, id, id, due)
			}
			eval = recordDirectScript.Eval(ctx, s.c, p, keys, args...)
		})
		if index != nil && index.Err() == nil && index.Val() == 1 {
			ours = true
		}
		if eval == nil {
			return false, rdb.Classify(err)
		}
		res, err := rdb.Decode("record-direct", eval)
		if err != nil {
			return false, rdb.Classify(err)
		}
		if res.Code != rdb.CodeOK {
			if res.Code == rdb.CodeRecorded {
				refused = true
				return false, &staging.PartRecordedError{N: res.U32(0)}
			}
			err := refusal(res, batch[len(batch)-1].N)
			// An upload completing or completed got there through records of its parts
			// (another completion of it, at the same time): the completion it is under
			// may still need the index entry, whoever added it.
			var se *staging.StateError
			refused = !errors.As(err, &se) || se.Status != staging.StatusCompleting && se.Status != staging.StatusCompleted
			return false, err
		}
		if err := s.replicated(wait, ""); err != nil {
			return false, err
		}
		ready = last && res.Flag(0)
	}
	if ready && cluster && len(parts) > directBatch {
		// As the last batch does on one Redis (the index is on another node here).
		if err := s.completions.Add(ctx, id, id, due); err != nil {
			return false, rdb.Classify(err)
		}
	}
	return ready, nil
}

// RecordedParts returns the parts upload id recorded, 1 to total in order (a completing
// or completed direct upload's, which its record keeps for the retention), or an error
// naming one that is missing.
func (s *Store) RecordedParts(ctx context.Context, id string, total uint32) ([]staging.Part, error) {
	h, err := s.c.Client.HGetAll(ctx, rdb.PartsKey(id)).Result()
	if err != nil {
		return nil, err
	}
	return parseParts(id, h, total)
}
