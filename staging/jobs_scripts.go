package staging

import "github.com/redis/go-redis/v9"

// The OCR queue's scripts. Every key they touch is in the {ocr} hash slot (see jobs.go),
// so each script runs on one Redis Cluster node. Job hash fields: doc, corr, bucket, key,
// ct, tenant, force ("1"/"0"), attempts (failed attempts), enqueued_ms, token (fencing
// token of the current lease, absent when not leased), started_ms, reason and dead_ms
// (dead-lettered jobs). The errors list holds "unix_ms|attempt|message" entries.

// jobEnqueueScript adds a job unless its document has one already (the dedupe key),
// or unconditionally when forced.
//
//	KEYS[1] pending list
//	KEYS[2] the document's dedupe string (holds the job id)
//	KEYS[3] the new job's hash
//	ARGV[1] job id
//	ARGV[2] "1" to force (bypass the dedupe key), else "0"
//	ARGV[3] dedupe key TTL (ms)
//	ARGV[4..] job hash field/value pairs
//
// Returns {"ok", job id} or {"dup", id of the document's existing job}.
var jobEnqueueScript = redis.NewScript(`
if ARGV[2] ~= '1' then
  local cur = redis.call('GET', KEYS[2])
  if cur then return {'dup', cur} end
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
local f = {}
for i = 4, #ARGV do f[#f+1] = ARGV[i] end
redis.call('HSET', KEYS[3], unpack(f))
redis.call('LPUSH', KEYS[1], ARGV[1])
return {'ok', ARGV[1]}
`)

// jobLeaseScript leases a job that BLMOVE just moved from pending to active: it takes a
// new fencing token and records the lease. A job with no usable record is dead-lettered
// with the reason.
//
//	KEYS[1] active list
//	KEYS[2] lease zset (job id -> lease expiry, unix ms)
//	KEYS[3] job hash
//	KEYS[4] fencing counter
//	KEYS[5] dead zset (job id -> dead-letter time)
//	KEYS[6] job errors list
//	ARGV[1] job id
//	ARGV[2] now (unix ms)
//	ARGV[3] lease (ms)
//
// Returns {"ok", token, {job hash field, value, ...}}, {"gone"} when the job is no longer
// active (the reaper took it back), or {"malformed", reason}.
var jobLeaseScript = redis.NewScript(`
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return {'gone'} end
local doc = redis.call('HGET', KEYS[3], 'doc')
if not doc or doc == '' then
  local reason = 'malformed job: no job record or no document id'
  redis.call('LREM', KEYS[1], 0, ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HSET', KEYS[3], 'reason', reason, 'dead_ms', ARGV[2])
  redis.call('RPUSH', KEYS[6], ARGV[2] .. '|0|' .. reason)
  redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
  return {'malformed', reason}
end
local tok = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[3], 'token', tok, 'started_ms', ARGV[2])
redis.call('ZADD', KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
return {'ok', tok, redis.call('HGETALL', KEYS[3])}
`)

// jobRenewScript extends the lease of the caller's job.
//
//	KEYS[1] lease zset
//	KEYS[2] job hash
//	ARGV[1] job id
//	ARGV[2] fencing token
//	ARGV[3] new lease expiry (unix ms)
//
// Returns 1 when renewed, 0 when the lease is no longer the caller's.
var jobRenewScript = redis.NewScript(`
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[2] then return 0 end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
`)

// jobAckScript removes a job that succeeded. The document's dedupe key stays (with its
// TTL), so an unforced enqueue of the same document is a no-op.
//
//	KEYS[1] active list
//	KEYS[2] lease zset
//	KEYS[3] job hash
//	KEYS[4] job errors list
//	ARGV[1] job id
//	ARGV[2] fencing token
//
// Returns 1 when done, 0 when the lease is no longer the caller's.
var jobAckScript = redis.NewScript(`
if redis.call('HGET', KEYS[3], 'token') ~= ARGV[2] then return 0 end
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4])
return 1
`)

// jobFailScript ends the caller's lease on a job that did not succeed.
//
//	KEYS[1] active list
//	KEYS[2] lease zset
//	KEYS[3] job hash
//	KEYS[4] job errors list
//	KEYS[5] delayed zset (job id -> due time, unix ms)
//	KEYS[6] dead zset
//	ARGV[1] job id
//	ARGV[2] fencing token
//	ARGV[3] now (unix ms)
//	ARGV[4] error message
//	ARGV[5] mode: "retry" (a failure of the job: counted, retried at ARGV[6] until
//	        ARGV[7] attempts), "dead" (a permanent failure: dead-lettered at once) or
//	        "release" (an outage, not the job's fault: retried at ARGV[6], not counted)
//	ARGV[6] due time for a retry (unix ms)
//	ARGV[7] maximum attempts
//
// Returns {"retry", attempts}, {"dead", attempts}, {"released", attempts} or {"lost"}
// when the lease is no longer the caller's.
var jobFailScript = redis.NewScript(`
if redis.call('HGET', KEYS[3], 'token') ~= ARGV[2] then return {'lost'} end
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], 'token')
if ARGV[5] == 'release' then
  redis.call('ZADD', KEYS[5], ARGV[6], ARGV[1])
  return {'released', tonumber(redis.call('HGET', KEYS[3], 'attempts') or '0') or 0}
end
-- A malformed record's attempts are reset, so its failure can still be counted.
if not tonumber(redis.call('HGET', KEYS[3], 'attempts') or '0') then redis.call('HSET', KEYS[3], 'attempts', 0) end
local n = redis.call('HINCRBY', KEYS[3], 'attempts', 1)
redis.call('RPUSH', KEYS[4], ARGV[3] .. '|' .. n .. '|' .. ARGV[4])
if ARGV[5] == 'dead' or n >= tonumber(ARGV[7]) then
  redis.call('HSET', KEYS[3], 'reason', ARGV[4], 'dead_ms', ARGV[3])
  redis.call('ZADD', KEYS[6], ARGV[3], ARGV[1])
  return {'dead', n}
end
redis.call('ZADD', KEYS[5], ARGV[6], ARGV[1])
return {'retry', n}
`)

// jobPromoteScript moves delayed jobs whose time has come to the pending list.
//
//	KEYS[1] delayed zset
//	KEYS[2] pending list
//	ARGV[1] now (unix ms)
//	ARGV[2] most jobs to move
//
// Returns the number moved.
var jobPromoteScript = redis.NewScript(`
local ids = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('LPUSH', KEYS[2], id)
end
return #ids
`)

// jobOrphansScript gives every active job without a lease one, starting now. A job has
// none when its worker died between BLMOVE and taking the lease; once that lease
// expires the reaper reclaims it like any other.
//
//	KEYS[1] active list
//	KEYS[2] lease zset
//	ARGV[1] now (unix ms)
//	ARGV[2] lease (ms)
//	ARGV[3] most active entries to look at
//
// Returns the number of leases added.
var jobOrphansScript = redis.NewScript(`
local ids = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
local n = 0
for _, id in ipairs(ids) do
  if not redis.call('ZSCORE', KEYS[2], id) then
    redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(ARGV[2]), id)
    n = n + 1
  end
end
return n
`)

// jobReclaimScript takes back a job whose lease expired (its worker died or stalled):
// it counts as a failed attempt, so a job that kills its workers ends dead-lettered.
//
//	KEYS[1] active list
//	KEYS[2] lease zset
//	KEYS[3] job hash
//	KEYS[4] job errors list
//	KEYS[5] pending list
//	KEYS[6] dead zset
//	ARGV[1] job id
//	ARGV[2] now (unix ms)
//	ARGV[3] maximum attempts
//	ARGV[4] error message to record
//
// Returns {"alive"} when the lease was renewed meanwhile, {"gone"} when the job has no
// record any more, {"requeued", attempts, doc} or {"dead", attempts, doc}.
var jobReclaimScript = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if s and tonumber(s) > tonumber(ARGV[2]) then return {'alive'} end
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 0 then return {'gone'} end
redis.call('HDEL', KEYS[3], 'token')
local doc = redis.call('HGET', KEYS[3], 'doc') or ''
if not tonumber(redis.call('HGET', KEYS[3], 'attempts') or '0') then redis.call('HSET', KEYS[3], 'attempts', 0) end
local n = redis.call('HINCRBY', KEYS[3], 'attempts', 1)
redis.call('RPUSH', KEYS[4], ARGV[2] .. '|' .. n .. '|' .. ARGV[4])
if n >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[3], 'reason', ARGV[4], 'dead_ms', ARGV[2])
  redis.call('ZADD', KEYS[6], ARGV[2], ARGV[1])
  return {'dead', n, doc}
end
redis.call('RPUSH', KEYS[5], ARGV[1])
return {'requeued', n, doc}
`)

// jobRequeueScript moves a dead-lettered job back to the pending list with its attempts
// reset; its error history stays.
//
//	KEYS[1] dead zset
//	KEYS[2] pending list
//	KEYS[3] job hash
//	KEYS[4] job errors list
//	ARGV[1] job id
//	ARGV[2] now (unix ms)
//
// Returns {"ok", doc} or {"notfound"} when the job is not dead-lettered.
var jobRequeueScript = redis.NewScript(`
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return {'notfound'} end
local doc = redis.call('HGET', KEYS[3], 'doc')
if not doc or doc == '' then return {'malformed'} end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], 'attempts', 0, 'enqueued_ms', ARGV[2])
redis.call('HDEL', KEYS[3], 'reason', 'dead_ms', 'token')
redis.call('RPUSH', KEYS[4], ARGV[2] .. '|0|requeued from the dead-letter store')
redis.call('LPUSH', KEYS[2], ARGV[1])
return {'ok', doc}
`)
