package staging

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// Each script is headed by what its KEYS and ARGV are. Scripts touch only the keys they
// are given, all of one upload (one hash slot). Results are tables whose first element
// is a short code the Go side turns into a result or a typed error.
//
// State hash fields: status, bucket, key, chunk_size, expected_size (-1 unknown),
// total (0 until known), max_received, received, received_bytes, uploaded,
// uploaded_bytes, s3_upload_id, node_id, created_ms, updated_ms, completed_ms, etag,
// size, crc32c, error.
// received hash: N -> "crc:size"; parts hash: N -> "etag|crc|size";
// leases hash: N -> "token|expiry_ms"; completer string: "token|expiry_ms".

// createScript creates an upload unless it exists.
//
//	KEYS[1] state hash
//	KEYS[2] meta hash
//	ARGV[1] state TTL (ms)
//	ARGV[2] number of state field/value pairs that follow, then the pairs,
//	        then meta field/value pairs to the end
//
// Returns {"ok"} or {"exists"}.
var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local n = tonumber(ARGV[2])
local st = {}
for i = 3, 2 + 2*n do st[#st+1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(st))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if #ARGV > 2 + 2*n then
  local meta = {}
  for i = 3 + 2*n, #ARGV do meta[#meta+1] = ARGV[i] end
  redis.call('HSET', KEYS[2], unpack(meta))
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return {'ok'}
`)

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
//	ARGV[9] progress channel (in this upload's slot: SPUBLISH on a cluster)
//
// Returns {"ok", ready} for a newly staged or replaced chunk, {"dup", ready} for a
// repeat, or an error code: {"notfound"}, {"state", status}, {"beyond", total},
// {"last", total}, {"lastbefore", max_received}, {"recorded"}, {"busy"}, or
// {"nobytes"} when KEYS[5] does not exist (its SET was refused) and nothing was written.
// ready is 1 when the upload now has every part and can be completed.
var stageScript = newPubScript(`
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
local part = redis.call('HGET', KEYS[3], ARGV[1])
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if part then
  local pcrc = string.match(part, '^[^|]*|([^|]*)|')
  redis.call('DEL', KEYS[5])
  if pcrc ~= ARGV[2] then return {'recorded'} end
  code = 'dup'
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
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
redis.call('PEXPIRE', KEYS[6], ARGV[6])
redis.call('PEXPIRE', KEYS[7], ARGV[6])
if code == 'ok' then
  if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
  redis.call('PUBLISH', ARGV[9], 'received')
end
local ready = 0
if total > 0 and tonumber(st[4]) == total then ready = 1 end
return {code, ready}
`)

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
// reclaimed} (reclaimed is "1" when the claim replaced another worker's expired lease),
// {"done", ready} when the part is already recorded, {"busy", lease expiry},
// {"missing"} when no bytes are staged, {"expired"} when bytes were received but have
// expired from Redis, or {"gone", status} when the upload is not active.
var claimScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'uploaded', 's3_upload_id', 'bucket', 'key')
if not st[1] then return {'gone', ''} end
if st[1] ~= 'ACTIVE' then return {'gone', st[1]} end
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
return {'ok', rec, st[2], st[4] or '', st[5], st[6], ct, reclaimed}
`)

// renewScript extends a lease held by the caller.
//
//	KEYS[1] leases hash
//	ARGV[1] N
//	ARGV[2] lease token
//	ARGV[3] new expiry (unix ms)
//
// Returns 1 when renewed, 0 when the lease is no longer the caller's.
var renewScript = redis.NewScript(`
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
var releaseScript = redis.NewScript(`
local lease = redis.call('HGET', KEYS[1], ARGV[1])
if not lease or string.sub(lease, 1, #ARGV[2]+1) ~= ARGV[2] .. '|' then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
`)

// setMultipartScript records the S3 multipart upload id, first writer wins.
//
//	KEYS[1] state hash
//	ARGV[1] S3 multipart upload id
//
// Returns {"ok", id} with the id now recorded (the caller's or an earlier one), or
// {"gone", status} when the upload is not active.
var setMultipartScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 's3_upload_id')
if not st[1] then return {'gone', ''} end
if st[1] ~= 'ACTIVE' then return {'gone', st[1]} end
if st[2] and st[2] ~= '' then return {'ok', st[2]} end
redis.call('HSET', KEYS[1], 's3_upload_id', ARGV[1])
return {'ok', ARGV[1]}
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
//
// Returns {"ok", ready}, {"dup", ready} when already recorded, {"lost"} when the lease
// is another worker's, {"stale"} when the chunk was replaced since the claim, or
// {"gone", status} when the upload is not active.
var recordScript = newPubScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'uploaded')
if not st[1] then return {'gone', ''} end
if st[1] ~= 'ACTIVE' then return {'gone', st[1]} end
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
redis.call('PUBLISH', ARGV[7], 'uploaded')
local ready = 0
if total > 0 and up == total then ready = 1 end
return {'ok', ready}
`)

// beginCompleteScript takes the completion guard. The guard key does not exist until a
// completer takes it, so exactly one completer holds it at a time; it carries an expiry
// so that a completer that died is replaced.
//
//	KEYS[1] state hash
//	KEYS[2] completer guard string
//	ARGV[1] completer token
//	ARGV[2] now (unix ms)
//	ARGV[3] guard lease (ms)
//	ARGV[4] state TTL (ms), so the guard never outlives the upload
//
// Returns {"ok", total, s3_upload_id, bucket, key, multipart_attempts}, {"done", handoff} when already
// completed (handoff is "pending" while the hand-off has not happened),
// {"notready"}, {"busy", expiry}, or {"gone", status}.
var beginCompleteScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'uploaded', 's3_upload_id', 'bucket', 'key', 'mpu_attempts')
if not st[1] then return {'gone', ''} end
if st[1] == 'COMPLETED' then return {'done', redis.call('HGET', KEYS[1], 'handoff') or ''} end
if st[1] ~= 'ACTIVE' and st[1] ~= 'COMPLETING' then return {'gone', st[1]} end
local total = tonumber(st[2])
if total == 0 or tonumber(st[3]) ~= total then return {'notready'} end
local now = tonumber(ARGV[2])
local g = redis.call('GET', KEYS[2])
if g then
  local exp = tonumber(string.match(g, '|(%d+)$'))
  if exp and exp > now and string.sub(g, 1, #ARGV[1]+1) ~= ARGV[1] .. '|' then return {'busy', exp} end
end
redis.call('SET', KEYS[2], ARGV[1] .. '|' .. (now + tonumber(ARGV[3])), 'PX', ARGV[4])
redis.call('HSET', KEYS[1], 'status', 'COMPLETING', 'updated_ms', ARGV[2])
return {'ok', st[2], st[4] or '', st[5], st[6], st[7] or '0'}
`)

// noteMultipartScript counts an attempt to create the upload's S3 multipart upload,
// made before the attempt: with more attempts than recorded ids, one may have left a
// multipart upload behind (its worker died before it could record or abort it), and
// the completer looks for it.
//
//	KEYS[1] state hash
//
// Returns the count, or 0 when the upload is gone.
var noteMultipartScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[1], 'mpu_attempts', 1)
`)

// finishCompleteScript marks an upload completed, if the caller still holds the guard,
// and in the same step records its UploadCompleted event in the upload's outbox.
//
//	KEYS[1] state hash
//	KEYS[2] completer guard string
//	KEYS[3] outbox hash
//	KEYS[4] meta hash, KEYS[5] received hash, KEYS[6] parts hash, KEYS[7] leases hash
//	        (their TTL becomes the retention)
//	ARGV[1] completer token
//	ARGV[2] final ETag
//	ARGV[3] final size
//	ARGV[4] crc32c of the whole object
//	ARGV[5] now (unix ms)
//	ARGV[6] event id
//	ARGV[7] event record (see outboxRecord)
//	ARGV[8] "1" when the upload must be handed off (to OCR) after completion
//	ARGV[9] retention (ms)
//	ARGV[10] progress channel
//
// Returns {"ok"}, {"done"} when already completed, or {"lost"} when the guard is
// another completer's (or the upload left COMPLETING).
var finishCompleteScript = newPubScript(`
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'COMPLETED' then return {'done'} end
local g = redis.call('GET', KEYS[2])
if status ~= 'COMPLETING' or not g or string.sub(g, 1, #ARGV[1]+1) ~= ARGV[1] .. '|' then return {'lost'} end
redis.call('HSET', KEYS[1], 'status', 'COMPLETED', 'etag', ARGV[2], 'size', ARGV[3],
  'crc32c', ARGV[4], 'completed_ms', ARGV[5], 'updated_ms', ARGV[5])
if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'handoff', 'pending') end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[9])
for i = 4, 7 do redis.call('PEXPIRE', KEYS[i], ARGV[9]) end
redis.call('PUBLISH', ARGV[10], 'COMPLETED')
return {'ok'}
`)

// handedOffScript records that a completed upload was handed off.
//
//	KEYS[1] state hash
//
// Returns 1 when it moved from pending to done, 0 otherwise.
var handedOffScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'handoff') ~= 'pending' then return 0 end
redis.call('HSET', KEYS[1], 'handoff', 'done')
return 1
`)

// endScript moves an upload to a terminal state other than COMPLETED and, in the same
// step, records the event that says so in the upload's outbox.
//
//	KEYS[1] state hash
//	KEYS[2] completer guard string
//	KEYS[3] outbox hash
//	KEYS[4] meta hash, KEYS[5] received hash, KEYS[6] parts hash, KEYS[7] leases hash
//	        (their TTL becomes the retention)
//	ARGV[1] new status (FAILED, ABORTED or EXPIRED)
//	ARGV[2] reason
//	ARGV[3] now (unix ms)
//	ARGV[4] a completer's guard token, to allow it from COMPLETING while that completer
//	        holds the guard or the guard has expired; "" otherwise
//	ARGV[5] event id
//	ARGV[6] event record (see outboxRecord)
//	ARGV[7] retention (ms)
//	ARGV[8] progress channel
//	ARGV[9] for expiry: end only if the last activity is at or before this (unix ms);
//	        "0" for no such condition
//
// Returns {"ok", s3_upload_id, bucket, key, single}, where single is 1 when the
// object was already written by a single PutObject, {"already", status} when it had ended
// already, {"completing"} when a completer holds it, {"active", updated_ms} when it
// was active after ARGV[9], or {"notfound"}.
var endScript = newPubScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 's3_upload_id', 'bucket', 'key', 'updated_ms')
if not st[1] then return {'notfound'} end
if st[1] == 'COMPLETING' then
  if ARGV[4] == '' then return {'completing'} end
  local g = redis.call('GET', KEYS[2])
  if g and string.sub(g, 1, #ARGV[4]+1) ~= ARGV[4] .. '|' then
    local exp = tonumber(string.match(g, '|(%d+)$'))
    if exp and exp > tonumber(ARGV[3]) then return {'completing'} end
  end
end
if st[1] ~= 'ACTIVE' and st[1] ~= 'COMPLETING' then return {'already', st[1]} end
if ARGV[9] ~= '0' and tonumber(st[5]) > tonumber(ARGV[9]) then return {'active', st[5]} end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'error', ARGV[2], 'updated_ms', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[3], ARGV[5], ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
for i = 4, 7 do redis.call('PEXPIRE', KEYS[i], ARGV[7]) end
redis.call('PUBLISH', ARGV[8], ARGV[1])
local single = 0
if (not st[2] or st[2] == '') and redis.call('HEXISTS', KEYS[6], '1') == 1 then single = 1 end
return {'ok', st[2] or '', st[3], st[4], single}
`)

// pubScript is a script that announces progress on its upload's pub/sub channel: with
// PUBLISH on a single Redis, with SPUBLISH (sharded pub/sub, delivered only within the
// channel's shard) on a cluster, where the channel shares the upload's slot.
type pubScript struct{ plain, sharded *redis.Script }

func newPubScript(src string) pubScript {
	return pubScript{
		plain: redis.NewScript(src),
		// (The stage script's wake-up PUBLISH is skipped on a cluster: see stageScript.)
		sharded: redis.NewScript(strings.ReplaceAll(src, "redis.call('PUBLISH',", "redis.call('SPUBLISH',")),
	}
}
