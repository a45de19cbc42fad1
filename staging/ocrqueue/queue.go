// Package ocrqueue is the OCR job queue in Redis, on asynq's model: a pending list, an
// active list, a lease sorted set, a delayed sorted set and a dead-letter sorted set,
// with fencing tokens so that a stale worker's writes are refused. Every key carries
// the hash tag {ocr}, so the queue lives in one Redis Cluster slot and each script
// touches one slot. Job hash fields: doc, corr, bucket, key, ct, tenant, force
// ("1"/"0"), attempts (failed attempts), reclaims (times the job was taken back from a
// worker that died or stalled: not a failure of the job, but bounded, so a job that
// kills every worker ends), enqueued_ms, token (fencing token of the current lease,
// absent when not leased), started_ms, reason and dead_ms (dead-lettered jobs). The
// errors list holds "unix_ms|attempt|message" entries.
package ocrqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// Queue is the OCR job queue.
type Queue struct {
	c *rdb.Conn
}

// New returns the Queue on client.
func New(client redis.UniversalClient, cfg staging.Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Queue{c: rdb.Open(client, cfg)}, nil
}

// Now returns the queue's clock reading.
func (s *Queue) Now() time.Time { return s.c.Now() }

// NewJob describes an OCR job to enqueue.
type NewJob struct {
	DocumentID, CorrelationID string
	Bucket, Key, ContentType  string
	Tenant                    string
	// Force bypasses the document's dedupe key, to reprocess on purpose.
	Force bool
	// DedupeTTL is how long the document's dedupe key lives, so that enqueuing the same
	// document again without Force is a no-op for that long.
	DedupeTTL time.Duration
}

// Job is an OCR job as stored.
type Job struct {
	ID, DocumentID, CorrelationID string
	Bucket, Key, ContentType      string
	Tenant                        string
	Force                         bool
	// Attempts is the number of failed attempts so far.
	Attempts int
	// Reclaims is the number of times the job was taken back from a worker that died or
	// stalled holding it.
	Reclaims int
	// Token is the fencing token of the current lease (0 when not leased).
	Token    int64
	Enqueued time.Time
	// Dead-lettered jobs: why and when.
	DeadReason string
	Died       time.Time
	// Errors is the job's error history, oldest first.
	Errors []JobError
}

// JobError is one entry of a job's error history.
type JobError struct {
	Time    time.Time
	Attempt int
	Error   string
}

// ErrJobNotFound means no dead-lettered (or no) job has the id.
var ErrJobNotFound = errors.New("job not found")

// MalformedJobError means a job's record is unusable; the job was dead-lettered.
type MalformedJobError struct{ JobID, Reason string }

func (e *MalformedJobError) Error() string { return "job " + e.JobID + ": " + e.Reason }

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
var jobEnqueueScript = rdb.NewScript(`
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

// Enqueue adds a job for j.DocumentID unless the document has one already (and j is
// not forced). It returns the id of the document's job and whether it is new.
func (s *Queue) Enqueue(ctx context.Context, j NewJob) (string, bool, error) {
	if j.DocumentID == "" {
		return "", false, errors.New("ocrqueue: a job needs a document id")
	}
	id := ids.New()
	force := "0"
	if j.Force {
		force = "1"
	}
	ttl := j.DedupeTTL
	if ttl <= 0 {
		ttl = 30 * 24 * time.Hour
	}
	res, err := rdb.Decode("job-enqueue", jobEnqueueScript.Run(ctx, s.c, []string{rdb.OCRPending, rdb.OCRDedupeKey(j.DocumentID), rdb.OCRJobKey(id)},
		id, force, ttl.Milliseconds(),
		"doc", j.DocumentID, "corr", j.CorrelationID, "bucket", j.Bucket, "key", j.Key, "ct", j.ContentType,
		"tenant", j.Tenant, "force", force, "attempts", 0, "enqueued_ms", s.c.NowMs()))
	if err != nil {
		return "", false, err
	}
	return res.Str(0), res.Code == rdb.CodeOK, nil
}

// Fetch waits up to block for a pending job, moves it to the active list and leases
// it for lease with a new fencing token. It returns nil, nil when none came. A job whose
// record is unusable is dead-lettered and reported as a *MalformedJobError.
func (s *Queue) Fetch(ctx context.Context, block, lease time.Duration) (*Job, error) {
	id, err := s.c.Client.BLMove(ctx, rdb.OCRPending, rdb.OCRActive, "RIGHT", "LEFT", block).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.lease(ctx, id, lease)
}

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
// Returns {"ok", token, {job hash field, value, ...}}, {"notfound"} when the job is no longer
// active (the reaper took it back), or {"malformed", reason}.
var jobLeaseScript = rdb.NewScript(`
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return {'notfound'} end
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

func (s *Queue) lease(ctx context.Context, id string, lease time.Duration) (*Job, error) {
	res, err := rdb.Decode("job-lease", jobLeaseScript.Run(ctx, s.c,
		[]string{rdb.OCRActive, rdb.OCRLease, rdb.OCRJobKey(id), rdb.OCRFence, rdb.OCRDead, rdb.OCRJobErrorsKey(id)},
		id, s.c.NowMs(), lease.Milliseconds()))
	if err != nil {
		// The job stays in the active list without a lease; the reaper gives it one
		// and reclaims it when that expires.
		return nil, err
	}
	switch res.Code {
	case rdb.CodeNotFound:
		return nil, nil
	case rdb.CodeMalformed:
		return nil, &MalformedJobError{JobID: id, Reason: res.Str(0)}
	case rdb.CodeOK:
	default:
		return nil, res.Unexpected()
	}
	fields := res.List(1)
	h := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		h[rdb.Str(fields[i])] = rdb.Str(fields[i+1])
	}
	j, err := parseJob(id, h)
	if err != nil {
		// Unusable after all: dead-letter it with the reason.
		if _, derr := s.Fail(ctx, id, res.I64(0), err.Error(), FailDead, time.Time{}, 1); derr != nil {
			return nil, derr
		}
		return nil, &MalformedJobError{JobID: id, Reason: err.Error()}
	}
	j.Token = res.I64(0)
	return j, nil
}

func parseJob(id string, h map[string]string) (*Job, error) {
	j := &Job{
		ID: id, DocumentID: h["doc"], CorrelationID: h["corr"], Bucket: h["bucket"], Key: h["key"],
		ContentType: h["ct"], Tenant: h["tenant"], Force: h["force"] == "1", Token: rdb.I64(h["token"]),
		Enqueued: rdb.MsTime(h["enqueued_ms"]), DeadReason: h["reason"], Died: rdb.MsTime(h["dead_ms"]),
		Reclaims: int(rdb.I64(h["reclaims"])),
	}
	a, err := strconv.Atoi(h["attempts"])
	if err != nil || a < 0 {
		return j, fmt.Errorf("malformed job: attempts %q", h["attempts"])
	}
	j.Attempts = a
	if j.DocumentID == "" || j.Bucket == "" || j.Key == "" {
		return j, errors.New("malformed job: no document, bucket or key")
	}
	return j, nil
}

// jobRenewScript extends the lease of the caller's job.
//
//	KEYS[1] lease zset
//	KEYS[2] job hash
//	ARGV[1] job id
//	ARGV[2] fencing token
//	ARGV[3] new lease expiry (unix ms)
//
// Returns 1 when renewed, 0 when the lease is no longer the caller's.
var jobRenewScript = rdb.NewScript(`
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[2] then return 0 end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
`)

// Renew extends the caller's lease on job id; false means the lease was lost (the
// reaper reclaimed the job, or a forced requeue replaced it).
func (s *Queue) Renew(ctx context.Context, id string, token int64, lease time.Duration) (bool, error) {
	n, err := jobRenewScript.Run(ctx, s.c, []string{rdb.OCRLease, rdb.OCRJobKey(id)}, id, token, s.c.NowMs()+lease.Milliseconds()).Int()
	return n == 1, err
}

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
var jobAckScript = rdb.NewScript(`
if redis.call('HGET', KEYS[3], 'token') ~= ARGV[2] then return 0 end
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4])
return 1
`)

// Ack removes a job that succeeded; false means the lease was no longer the caller's.
func (s *Queue) Ack(ctx context.Context, id string, token int64) (bool, error) {
	n, err := jobAckScript.Run(ctx, s.c, []string{rdb.OCRActive, rdb.OCRLease, rdb.OCRJobKey(id), rdb.OCRJobErrorsKey(id)}, id, token).Int()
	return n == 1, err
}

// FailMode says how a job that did not succeed goes on.
type FailMode string

// Fail modes.
const (
	// FailRetry: the job failed; it is retried at the given time until max attempts.
	FailRetry FailMode = "retry"
	// FailDead: the job failed for good (e.g. an invalid file); dead-letter it now.
	FailDead FailMode = "dead"
	// FailRelease: not the job's fault (Redis or S3 down); retry later, not counted.
	FailRelease FailMode = "release"
)

// FailOutcome says what happened to a job that did not succeed.
type FailOutcome struct {
	// Retried, Dead, Released: where the job went; none when the lease was lost.
	Retried, Dead, Released bool
	Attempts                int
}

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
var jobFailScript = rdb.NewScript(`
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

// Fail ends the caller's lease on a job that did not succeed (see FailMode).
func (s *Queue) Fail(ctx context.Context, id string, token int64, msg string, mode FailMode, due time.Time, maxAttempts int) (FailOutcome, error) {
	res, err := rdb.Decode("job-fail", jobFailScript.Run(ctx, s.c,
		[]string{rdb.OCRActive, rdb.OCRLease, rdb.OCRJobKey(id), rdb.OCRJobErrorsKey(id), rdb.OCRDelayed, rdb.OCRDead},
		id, token, s.c.NowMs(), rdb.OneLine(msg), string(mode), due.UnixMilli(), maxAttempts))
	if err != nil {
		return FailOutcome{}, err
	}
	var o FailOutcome
	switch res.Code {
	case rdb.CodeRetry:
		o.Retried = true
	case rdb.CodeDead:
		o.Dead = true
	case rdb.CodeReleased:
		o.Released = true
	}
	o.Attempts = int(res.I64(0))
	return o, nil
}

// jobReapScript is the reaper's sweep in one round trip: it moves delayed jobs whose
// time has come to the pending list, gives every active job without a lease one,
// starting now (a job has none when its worker died between BLMOVE and taking the
// lease; once that lease expires it is reclaimed like any other), and lists the jobs
// whose lease has expired, for jobReclaimScript to take back one by one. An idle
// server runs it every ReapInterval: one round trip instead of three is most of what
// the OCR pipeline costs it (docs/performance.md, run N).
//
//	KEYS[1] delayed zset
//	KEYS[2] pending list
//	KEYS[3] active list
//	KEYS[4] lease zset
//	ARGV[1] now (unix ms)
//	ARGV[2] most delayed jobs to move (0: none)
//	ARGV[3] lease (ms)
//	ARGV[4] most active entries to look at (0: none)
//	ARGV[5] most expired leases to list (0: none)
//
// Returns {"ok", number of jobs moved, expired job id…}.
var jobReapScript = rdb.NewScript(`
local now = tonumber(ARGV[1])
local moved = 0
if tonumber(ARGV[2]) > 0 then
  local ids = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
  for _, id in ipairs(ids) do
    redis.call('ZREM', KEYS[1], id)
    redis.call('LPUSH', KEYS[2], id)
  end
  moved = #ids
end
if tonumber(ARGV[4]) > 0 then
  for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, tonumber(ARGV[4]) - 1)) do
    if not redis.call('ZSCORE', KEYS[4], id) then
      redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), id)
    end
  end
end
local out = {'ok', moved}
if tonumber(ARGV[5]) > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[5]))) do
    out[#out+1] = id
  end
end
return out
`)

// reap runs jobReapScript at now and returns the jobs moved and the expired leases.
func (s *Queue) reap(ctx context.Context, now int64, promote int, lease time.Duration, reclaim int) (int, []string, error) {
	orphans := 0
	if reclaim > 0 {
		orphans = 1000
	}
	res, err := rdb.Decode("job-reap", jobReapScript.Run(ctx, s.c, []string{rdb.OCRDelayed, rdb.OCRPending, rdb.OCRActive, rdb.OCRLease},
		now, promote, lease.Milliseconds(), orphans, reclaim))
	if err != nil {
		return 0, nil, err
	}
	ids := make([]string, 0, res.Len()-1)
	for i := 1; i < res.Len(); i++ {
		ids = append(ids, res.Str(i))
	}
	return int(res.I64(0)), ids, nil
}

// Promote moves up to limit (at least 1) delayed jobs that are due to the pending list.
func (s *Queue) Promote(ctx context.Context, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("ocrqueue: promote at least 1 job, not %d", limit)
	}
	n, _, err := s.reap(ctx, s.c.NowMs(), limit, 0, 0)
	return n, err
}

// Reclaimed is a job the reaper took back from a worker whose lease expired.
type Reclaimed struct {
	JobID, DocumentID string
	// Reclaims counts the times the job was taken back so far (this one included).
	Reclaims int
	// Dead is true when that reached the bound and the job was dead-lettered.
	Dead bool
}

// jobReclaimScript takes back a job whose lease expired (its worker died or stalled).
// That is not a failure of the job: its attempts stay as they are, and a separate
// counter, reclaims, goes up; at its bound the job is dead-lettered, so a job that
// kills every worker that runs it ends.
//
//	KEYS[1] active list
//	KEYS[2] lease zset
//	KEYS[3] job hash
//	KEYS[4] job errors list
//	KEYS[5] pending list
//	KEYS[6] dead zset
//	ARGV[1] job id
//	ARGV[2] now (unix ms)
//	ARGV[3] maximum reclaims
//	ARGV[4] error message to record
//
// Returns {"alive"} when the lease was renewed meanwhile, {"notfound"} when the job has no
// record any more, {"requeued", reclaims, doc} or {"dead", reclaims, doc}.
var jobReclaimScript = rdb.NewScript(`
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if s and tonumber(s) > tonumber(ARGV[2]) then return {'alive'} end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('LREM', KEYS[1], 0, ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {'notfound'}
end
local doc = redis.call('HGET', KEYS[3], 'doc') or ''
local n = (tonumber(redis.call('HGET', KEYS[3], 'reclaims') or '0') or 0) + 1
local a = redis.call('HGET', KEYS[3], 'attempts') or '0'
local dead = n >= tonumber(ARGV[3])
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], 'token')
redis.call('HSET', KEYS[3], 'reclaims', n)
redis.call('RPUSH', KEYS[4], ARGV[2] .. '|' .. a .. '|' .. ARGV[4])
if dead then
  redis.call('HSET', KEYS[3], 'reason', ARGV[4] .. ' (' .. n .. ' times: it kills or stalls every worker)', 'dead_ms', ARGV[2])
  redis.call('ZADD', KEYS[6], ARGV[2], ARGV[1])
  return {'dead', n, doc}
end
redis.call('RPUSH', KEYS[5], ARGV[1])
return {'requeued', n, doc}
`)

// Reclaim takes back up to limit (at least 1) jobs whose lease expired: back to pending (to run
// next) without counting a failed attempt, or to the dead-letter store once a job was
// taken back maxReclaims times. Active jobs without a lease (their worker died right
// after fetching them) first get one of lease, so they are reclaimed when it expires.
func (s *Queue) Reclaim(ctx context.Context, lease time.Duration, maxReclaims, limit int) ([]Reclaimed, error) {
	if limit < 1 {
		return nil, fmt.Errorf("ocrqueue: reclaim at least 1 job, not %d", limit)
	}
	_, got, err := s.Reap(ctx, 0, lease, maxReclaims, limit)
	return got, err
}

// Reap is Promote and Reclaim in one round trip while nothing is due: it moves up to
// promote delayed jobs that are due to the pending list and takes back up to reclaim
// jobs whose lease expired (as Reclaim does); 0 (or less) leaves that half out. It
// returns the number of jobs moved and the jobs taken back.
func (s *Queue) Reap(ctx context.Context, promote int, lease time.Duration, maxReclaims, reclaim int) (int, []Reclaimed, error) {
	now := s.c.NowMs()
	moved, ids, err := s.reap(ctx, now, promote, lease, reclaim)
	if err != nil {
		return 0, nil, err
	}
	var out []Reclaimed
	for _, id := range ids {
		res, err := rdb.Decode("job-reclaim", jobReclaimScript.Run(ctx, s.c,
			[]string{rdb.OCRActive, rdb.OCRLease, rdb.OCRJobKey(id), rdb.OCRJobErrorsKey(id), rdb.OCRPending, rdb.OCRDead},
			id, now, maxReclaims, "lease expired: the worker died or stalled"))
		if err != nil {
			return moved, out, err
		}
		switch res.Code {
		case rdb.CodeRequeued, rdb.CodeDead:
			out = append(out, Reclaimed{JobID: id, DocumentID: res.Str(1), Reclaims: int(res.I64(0)), Dead: res.Code == rdb.CodeDead})
		}
	}
	return moved, out, nil
}

// RecoverOutcome says what Recover found of a job.
type RecoverOutcome string

// Recover outcomes.
const (
	// RecoverLive: the job is queued, waiting for a retry, or held by a worker whose
	// lease is still running (or that just fetched it): it is left alone.
	RecoverLive RecoverOutcome = "live"
	// RecoverGone: the job has no record.
	RecoverGone RecoverOutcome = rdb.CodeNotFound
	// RecoverDead: the job is dead-lettered (now, or it was already).
	RecoverDead RecoverOutcome = "dead"
	// RecoverStuck: the job was held by a worker whose lease ran out, or is in no queue
	// at all; it has been taken out of every queue with its attempts reset, and waits
	// for Requeue.
	RecoverStuck RecoverOutcome = "stuck"
)

// jobRecoverScript takes a job that is stuck out of every queue, for start-up recovery:
// one whose worker's lease ran out (that counts as a reclaim, bounded as in
// jobReclaimScript) or that is in no queue at all. Its failed attempts are reset; it is
// put back by jobRequeueStuckScript once its document is reset, so that no worker can
// take it in between.
//
//	KEYS[1] active list
//	KEYS[2] lease zset
//	KEYS[3] pending list
//	KEYS[4] delayed zset
//	KEYS[5] dead zset
//	KEYS[6] job hash
//	KEYS[7] job errors list
//	ARGV[1] job id
//	ARGV[2] now (unix ms)
//	ARGV[3] maximum reclaims
//
// Returns {"notfound"}, {"live"}, {"dead", reclaims} or {"stuck", reclaims}.
var jobRecoverScript = rdb.NewScript(`
if redis.call('EXISTS', KEYS[6]) == 0 then return {'notfound'} end
local rc = tonumber(redis.call('HGET', KEYS[6], 'reclaims') or '0') or 0
if redis.call('ZSCORE', KEYS[5], ARGV[1]) then return {'dead', rc} end
local ls = redis.call('ZSCORE', KEYS[2], ARGV[1])
local active = redis.call('LPOS', KEYS[1], ARGV[1])
if ls and tonumber(ls) > tonumber(ARGV[2]) then return {'live'} end
if active and not ls then return {'live'} end
if redis.call('LPOS', KEYS[3], ARGV[1]) or redis.call('ZSCORE', KEYS[4], ARGV[1]) then return {'live'} end
local why = 'start-up recovery: in no queue'
if ls then
  rc = rc + 1
  why = 'start-up recovery: lease expired, the worker died or stalled'
end
local dead = rc >= tonumber(ARGV[3])
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[6], 'token')
redis.call('HSET', KEYS[6], 'reclaims', rc)
redis.call('RPUSH', KEYS[7], ARGV[2] .. '|0|' .. why)
if dead then
  redis.call('HSET', KEYS[6], 'reason', why .. ' (' .. rc .. ' times: it kills or stalls every worker)', 'dead_ms', ARGV[2])
  redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
  return {'dead', rc}
end
redis.call('HSET', KEYS[6], 'attempts', 0)
return {'stuck', rc}
`)

// Recover looks at job id for start-up recovery (see RecoverOutcome) and returns what it
// found and the job's reclaims.
func (s *Queue) Recover(ctx context.Context, id string, maxReclaims int) (RecoverOutcome, int, error) {
	res, err := rdb.Decode("job-recover", jobRecoverScript.Run(ctx, s.c,
		[]string{rdb.OCRActive, rdb.OCRLease, rdb.OCRPending, rdb.OCRDelayed, rdb.OCRDead, rdb.OCRJobKey(id), rdb.OCRJobErrorsKey(id)},
		id, s.c.NowMs(), maxReclaims))
	if err != nil {
		return "", 0, err
	}
	return RecoverOutcome(res.Code), int(res.I64(0)), nil
}

// jobRequeueStuckScript puts a job that Recover found stuck back on the pending list,
// unless it is in a queue already (a second recovery got there first).
//
//	KEYS[1] active list
//	KEYS[2] lease zset
//	KEYS[3] pending list
//	KEYS[4] delayed zset
//	KEYS[5] dead zset
//	KEYS[6] job hash
//	ARGV[1] job id
//	ARGV[2] now (unix ms)
//
// Returns 1 when requeued, 0 otherwise.
var jobRequeueStuckScript = rdb.NewScript(`
if redis.call('EXISTS', KEYS[6]) == 0 then return 0 end
if redis.call('LPOS', KEYS[1], ARGV[1]) or redis.call('ZSCORE', KEYS[2], ARGV[1]) or redis.call('LPOS', KEYS[3], ARGV[1])
  or redis.call('ZSCORE', KEYS[4], ARGV[1]) or redis.call('ZSCORE', KEYS[5], ARGV[1]) then return 0 end
redis.call('HSET', KEYS[6], 'enqueued_ms', ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
return 1
`)

// RequeueStuck puts job id, which Recover found stuck, back on the queue to run next.
func (s *Queue) RequeueStuck(ctx context.Context, id string) (bool, error) {
	n, err := jobRequeueStuckScript.Run(ctx, s.c,
		[]string{rdb.OCRActive, rdb.OCRLease, rdb.OCRPending, rdb.OCRDelayed, rdb.OCRDead, rdb.OCRJobKey(id)},
		id, s.c.NowMs()).Int()
	return n == 1, err
}

// PurgeSet names a part of the queue Purge empties.
type PurgeSet string

// The sets Purge empties. Jobs in flight are never purged: their workers hold them.
const (
	PurgePending PurgeSet = "pending"
	PurgeDelayed PurgeSet = "delayed"
	PurgeDead    PurgeSet = "dead"
)

// jobPurgeScript removes one job from a set and forgets it: its record, its error
// history, and its document's dedupe key when that names this job (so the document
// can be enqueued again).
//
//	KEYS[1] the set (pending list, delayed or dead zset)
//	KEYS[2] job hash
//	KEYS[3] job errors list
//	KEYS[4] the document's dedupe string (any key of the slot when the job has no document)
//	ARGV[1] job id
//	ARGV[2] "list" or "zset"
//
// Returns {"ok", doc} or {"notfound"} when the job was no longer in the set.
var jobPurgeScript = rdb.NewScript(`
local there
if ARGV[2] == 'list' then there = redis.call('LPOS', KEYS[1], ARGV[1]) else there = redis.call('ZSCORE', KEYS[1], ARGV[1]) end
if not there then return {'notfound'} end
local doc = redis.call('HGET', KEYS[2], 'doc') or ''
local dedupe = doc ~= '' and redis.call('GET', KEYS[4]) == ARGV[1]
if ARGV[2] == 'list' then redis.call('LREM', KEYS[1], 0, ARGV[1]) else redis.call('ZREM', KEYS[1], ARGV[1]) end
redis.call('DEL', KEYS[2], KEYS[3])
if dedupe then redis.call('DEL', KEYS[4]) end
return {'ok', doc}
`)

// Purge removes up to limit jobs from set, oldest first, and returns the documents of
// those it removed (a job without a document is removed too, with "" for it). A job a
// worker fetched meanwhile is skipped.
func (s *Queue) Purge(ctx context.Context, set PurgeSet, limit int64) (removed []string, err error) {
	var key, kind string
	var ids []string
	switch set {
	case PurgePending:
		key, kind = rdb.OCRPending, "list"
		ids, err = s.c.Client.LRange(ctx, key, -limit, -1).Result() // fetched from the right: the oldest
	case PurgeDelayed, PurgeDead:
		key, kind = rdb.OCRDelayed, "zset"
		if set == PurgeDead {
			key = rdb.OCRDead
		}
		ids, err = s.c.Client.ZRange(ctx, key, 0, limit-1).Result()
	default:
		return nil, fmt.Errorf("ocrqueue: cannot purge %q (pending, delayed or dead)", set)
	}
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		doc, err := s.c.Client.HGet(ctx, rdb.OCRJobKey(id), "doc").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return removed, err
		}
		dedupe := rdb.OCRDedupeKey(doc)
		res, err := rdb.Decode("job-purge", jobPurgeScript.Run(ctx, s.c, []string{key, rdb.OCRJobKey(id), rdb.OCRJobErrorsKey(id), dedupe}, id, kind))
		if err != nil {
			return removed, err
		}
		if res.Code == rdb.CodeOK {
			removed = append(removed, res.Str(0))
		}
	}
	return removed, nil
}

// Job reads a job with its error history; ErrJobNotFound when it has no record.
func (s *Queue) Job(ctx context.Context, id string) (*Job, error) {
	jobs, err := s.jobs(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, ErrJobNotFound
	}
	return jobs[0], nil
}

func (s *Queue) jobs(ctx context.Context, ids []string) ([]*Job, error) {
	hs := make([]*redis.MapStringStringCmd, len(ids))
	es := make([]*redis.StringSliceCmd, len(ids))
	_, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			hs[i] = p.HGetAll(ctx, rdb.OCRJobKey(id))
			es[i] = p.LRange(ctx, rdb.OCRJobErrorsKey(id), 0, -1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []*Job
	for i, id := range ids {
		h := hs[i].Val()
		if len(h) == 0 && len(es[i].Val()) == 0 {
			continue
		}
		j, _ := parseJob(id, h) // list what is there, even if malformed
		for _, e := range es[i].Val() {
			f := strings.SplitN(e, "|", 3)
			if len(f) == 3 {
				j.Errors = append(j.Errors, JobError{Time: rdb.MsTime(f[0]), Attempt: int(rdb.I64(f[1])), Error: f[2]})
			}
		}
		out = append(out, j)
	}
	return out, nil
}

// Dead lists up to count dead-lettered jobs from position start, oldest first, with
// their error histories, and the total number of dead jobs.
func (s *Queue) Dead(ctx context.Context, start, count int64) ([]*Job, int64, error) {
	ids, err := s.c.Client.ZRange(ctx, rdb.OCRDead, start, start+count-1).Result()
	if err != nil {
		return nil, 0, err
	}
	total, err := s.c.Client.ZCard(ctx, rdb.OCRDead).Result()
	if err != nil {
		return nil, 0, err
	}
	jobs, err := s.jobs(ctx, ids)
	if err != nil {
		return nil, 0, err
	}
	// A dead entry without a record is still listed, so nothing disappears unseen.
	if len(jobs) < len(ids) {
		have := map[string]bool{}
		for _, j := range jobs {
			have[j.ID] = true
		}
		for _, id := range ids {
			if !have[id] {
				jobs = append(jobs, &Job{ID: id, DeadReason: "no job record"})
			}
		}
	}
	return jobs, total, nil
}

// jobRequeueScript moves a dead-lettered job back to the pending list with its attempts
// and reclaims reset; its error history stays.
//
//	KEYS[1] dead zset
//	KEYS[2] pending list
//	KEYS[3] job hash
//	KEYS[4] job errors list
//	ARGV[1] job id
//	ARGV[2] now (unix ms)
//
// Returns {"ok", doc} or {"notfound"} when the job is not dead-lettered.
var jobRequeueScript = rdb.NewScript(`
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return {'notfound'} end
local doc = redis.call('HGET', KEYS[3], 'doc')
if not doc or doc == '' then return {'malformed'} end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], 'attempts', 0, 'reclaims', 0, 'enqueued_ms', ARGV[2])
redis.call('HDEL', KEYS[3], 'reason', 'dead_ms', 'token')
redis.call('RPUSH', KEYS[4], ARGV[2] .. '|0|requeued from the dead-letter store')
redis.call('LPUSH', KEYS[2], ARGV[1])
return {'ok', doc}
`)

// Requeue moves dead-lettered job id back to pending with its attempts reset, and
// returns its document id.
func (s *Queue) Requeue(ctx context.Context, id string) (string, error) {
	res, err := rdb.Decode("job-requeue", jobRequeueScript.Run(ctx, s.c, []string{rdb.OCRDead, rdb.OCRPending, rdb.OCRJobKey(id), rdb.OCRJobErrorsKey(id)}, id, s.c.NowMs()))
	if err != nil {
		return "", err
	}
	switch res.Code {
	case rdb.CodeOK:
		return res.Str(0), nil
	case rdb.CodeMalformed:
		return "", &MalformedJobError{JobID: id, Reason: "malformed job: no document id; it stays dead-lettered"}
	}
	return "", ErrJobNotFound
}

// DocumentJob returns the id of the document's current job ("" if none) and whether
// that job is still queued, running or waiting for a retry (its record exists and it is
// not dead-lettered).
func (s *Queue) DocumentJob(ctx context.Context, docID string) (jobID string, live bool, err error) {
	jobID, err = s.c.Client.Get(ctx, rdb.OCRDedupeKey(docID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	var ex *redis.IntCmd
	var dead *redis.FloatCmd
	_, err = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		ex = p.Exists(ctx, rdb.OCRJobKey(jobID))
		dead = p.ZScore(ctx, rdb.OCRDead, jobID)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", false, err
	}
	return jobID, ex.Val() == 1 && errors.Is(dead.Err(), redis.Nil), nil
}

// Stats are the OCR queue's counters, each read in O(1).
type Stats struct {
	Pending, InFlight, Delayed, Dead int64
	// OldestPending is when the oldest pending job was enqueued (zero if none).
	OldestPending time.Time
}

// Stats reads the queue's counters in two round trips of O(1) commands.
func (s *Queue) Stats(ctx context.Context) (Stats, error) {
	var pend, act, del, dead *redis.IntCmd
	var oldest *redis.StringCmd
	_, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		pend = p.LLen(ctx, rdb.OCRPending)
		act = p.LLen(ctx, rdb.OCRActive)
		del = p.ZCard(ctx, rdb.OCRDelayed)
		dead = p.ZCard(ctx, rdb.OCRDead)
		oldest = p.LIndex(ctx, rdb.OCRPending, -1) // fetched from the right: the oldest
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, err
	}
	st := Stats{Pending: pend.Val(), InFlight: act.Val(), Delayed: del.Val(), Dead: dead.Val()}
	if id := oldest.Val(); id != "" {
		ms, err := s.c.Client.HGet(ctx, rdb.OCRJobKey(id), "enqueued_ms").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Stats{}, err
		}
		st.OldestPending = rdb.MsTime(ms)
	}
	return st, nil
}

// MarkProcessing indexes document id as possibly processing, for start-up recovery.
func (s *Queue) MarkProcessing(ctx context.Context, docID string) error {
	return s.c.Client.ZAdd(ctx, rdb.OCRProcessing, redis.Z{Score: float64(s.c.NowMs()), Member: docID}).Err()
}

// UnmarkProcessing drops document id from the processing index.
func (s *Queue) UnmarkProcessing(ctx context.Context, docID string) error {
	return s.c.Client.ZRem(ctx, rdb.OCRProcessing, docID).Err()
}

// ProcessingDocuments returns up to count ids of the processing index from start.
func (s *Queue) ProcessingDocuments(ctx context.Context, start, count int64) ([]string, error) {
	return s.c.Client.ZRange(ctx, rdb.OCRProcessing, start, start+count-1).Result()
}

// WorkerReport is what a process running OCR workers reports about them.
type WorkerReport struct {
	InstanceID string `json:"instance_id"`
	// Engine is the configured engine; ActiveEngine the one jobs run on now.
	Engine       string `json:"engine"`
	ActiveEngine string `json:"active_engine"`
	// EngineHealthy and EngineError are the configured engine's last health check.
	EngineHealthy bool   `json:"engine_healthy"`
	EngineError   string `json:"engine_error,omitempty"`
	// Fallback says whether jobs fall back to Tesseract when the engine is unavailable.
	Fallback    bool  `json:"fallback"`
	Concurrency int   `json:"concurrency"`
	Processing  int   `json:"processing"`
	Processed   int64 `json:"processed"`
	// Started and Reported are unix ms.
	Started  int64 `json:"started_ms"`
	Reported int64 `json:"reported_ms"`
}

// Report records r as its process's latest report.
func (s *Queue) Report(ctx context.Context, r WorkerReport) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.c.Client.HSet(ctx, rdb.OCRWorkers, r.InstanceID, b).Err()
}

// Unreport drops the report of process instanceID (it stops).
func (s *Queue) Unreport(ctx context.Context, instanceID string) error {
	return s.c.Client.HDel(ctx, rdb.OCRWorkers, instanceID).Err()
}

// dropStaleReportScript drops a report that is still the stale one its reader saw (a
// fresh report written meanwhile stays).
//
//	KEYS[1] workers hash
//	ARGV[1] instance id
//	ARGV[2] the stale report
//
// Returns 1 when dropped.
var dropStaleReportScript = rdb.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
return redis.call('HDEL', KEYS[1], ARGV[1])
`)

// Reports returns the reports made within maxAge, by instance id; older ones (their
// process died without a clean stop) are dropped.
func (s *Queue) Reports(ctx context.Context, maxAge time.Duration) ([]WorkerReport, error) {
	h, err := s.c.Client.HGetAll(ctx, rdb.OCRWorkers).Result()
	if err != nil {
		return nil, err
	}
	oldest := s.c.NowMs() - maxAge.Milliseconds()
	out := make([]WorkerReport, 0, len(h))
	for id, v := range h {
		var r WorkerReport
		if json.Unmarshal([]byte(v), &r) != nil || r.Reported < oldest {
			if err := dropStaleReportScript.Run(ctx, s.c, []string{rdb.OCRWorkers}, id, v).Err(); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b WorkerReport) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	return out, nil
}
