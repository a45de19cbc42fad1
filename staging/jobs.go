package staging

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The OCR job queue (asynq's model: a pending list, an active list, a lease sorted set,
// a delayed sorted set, plus a dead-letter sorted set). Every key carries the hash tag
// {ocr}, so the queue lives in one Redis Cluster slot and each script touches one slot.
const (
	ocrPrefix = prefix + "{ocr}:"
	// ocrPendingKey is a list of job ids ready to run: pushed on the left, fetched from
	// the right with BLMOVE into ocrActiveKey (a reclaimed job is pushed on the right,
	// to run next).
	ocrPendingKey = ocrPrefix + "pending"
	// ocrActiveKey is a list of job ids being worked on.
	ocrActiveKey = ocrPrefix + "active"
	// ocrLeaseKey is a sorted set of active job ids scored by lease expiry (unix ms).
	ocrLeaseKey = ocrPrefix + "lease"
	// ocrDelayedKey is a sorted set of job ids waiting for a retry, scored by due time.
	ocrDelayedKey = ocrPrefix + "delayed"
	// ocrDeadKey is a sorted set of dead-lettered job ids scored by when they died. It is
	// never trimmed: jobs leave it only when requeued (or deleted by hand).
	ocrDeadKey = ocrPrefix + "dead"
	// ocrFenceKey is the counter fencing tokens are taken from: every lease gets a
	// larger token than any before, so a stale worker's writes can be refused.
	ocrFenceKey = ocrPrefix + "fence"
	// ocrProcessingKey is a sorted set of document ids whose status may be processing,
	// scored by when they entered it, for start-up recovery. A hint: added before the
	// transition, removed after the document leaves processing.
	ocrProcessingKey = ocrPrefix + "processing"
)

func ocrJobKey(id string) string       { return ocrPrefix + "job:" + id }
func ocrJobErrorsKey(id string) string { return ocrPrefix + "job:" + id + ":errors" }

// ocrDedupeKey holds the id of a document's job: one job per document unless forced.
func ocrDedupeKey(docID string) string { return ocrPrefix + "doc:" + docID }

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

// EnqueueJob adds a job for j.DocumentID unless the document has one already (and j is
// not forced). It returns the id of the document's job and whether it is new.
func (s *Store) EnqueueJob(ctx context.Context, j NewJob) (string, bool, error) {
	if j.DocumentID == "" {
		return "", false, errors.New("staging: a job needs a document id")
	}
	id := NewID()
	force := "0"
	if j.Force {
		force = "1"
	}
	ttl := j.DedupeTTL
	if ttl <= 0 {
		ttl = 30 * 24 * time.Hour
	}
	res, err := jobEnqueueScript.Run(ctx, s.rdb, []string{ocrPendingKey, ocrDedupeKey(j.DocumentID), ocrJobKey(id)},
		id, force, ttl.Milliseconds(),
		"doc", j.DocumentID, "corr", j.CorrelationID, "bucket", j.Bucket, "key", j.Key, "ct", j.ContentType,
		"tenant", j.Tenant, "force", force, "attempts", 0, "enqueued_ms", s.nowMs()).StringSlice()
	if err != nil {
		return "", false, err
	}
	return res[1], res[0] == "ok", nil
}

// FetchJob waits up to block for a pending job, moves it to the active list and leases
// it for lease with a new fencing token. It returns nil, nil when none came. A job whose
// record is unusable is dead-lettered and reported as a *MalformedJobError.
func (s *Store) FetchJob(ctx context.Context, block, lease time.Duration) (*Job, error) {
	id, err := s.rdb.BLMove(ctx, ocrPendingKey, ocrActiveKey, "RIGHT", "LEFT", block).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.leaseJob(ctx, id, lease)
}

func (s *Store) leaseJob(ctx context.Context, id string, lease time.Duration) (*Job, error) {
	res, err := jobLeaseScript.Run(ctx, s.rdb,
		[]string{ocrActiveKey, ocrLeaseKey, ocrJobKey(id), ocrFenceKey, ocrDeadKey, ocrJobErrorsKey(id)},
		id, s.nowMs(), lease.Milliseconds()).Slice()
	if err != nil {
		// The job stays in the active list without a lease; the reaper gives it one
		// and reclaims it when that expires.
		return nil, err
	}
	switch toStr(res[0]) {
	case "gone":
		return nil, nil
	case "malformed":
		return nil, &MalformedJobError{JobID: id, Reason: toStr(res[1])}
	}
	fields, _ := res[2].([]any)
	h := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		h[toStr(fields[i])] = toStr(fields[i+1])
	}
	j, err := parseJob(id, h)
	if err != nil {
		// Unusable after all: dead-letter it with the reason.
		if _, derr := s.FailJob(ctx, id, toI64(res[1]), err.Error(), FailDead, time.Time{}, 1); derr != nil {
			return nil, derr
		}
		return nil, &MalformedJobError{JobID: id, Reason: err.Error()}
	}
	j.Token = toI64(res[1])
	return j, nil
}

func parseJob(id string, h map[string]string) (*Job, error) {
	j := &Job{
		ID: id, DocumentID: h["doc"], CorrelationID: h["corr"], Bucket: h["bucket"], Key: h["key"],
		ContentType: h["ct"], Tenant: h["tenant"], Force: h["force"] == "1", Token: toI64(h["token"]),
		Enqueued: msTime(h["enqueued_ms"]), DeadReason: h["reason"], Died: msTime(h["dead_ms"]),
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

// RenewJob extends the caller's lease on job id; false means the lease was lost (the
// reaper reclaimed the job, or a forced requeue replaced it).
func (s *Store) RenewJob(ctx context.Context, id string, token int64, lease time.Duration) (bool, error) {
	n, err := jobRenewScript.Run(ctx, s.rdb, []string{ocrLeaseKey, ocrJobKey(id)}, id, token, s.nowMs()+lease.Milliseconds()).Int()
	return n == 1, err
}

// AckJob removes a job that succeeded; false means the lease was no longer the caller's.
func (s *Store) AckJob(ctx context.Context, id string, token int64) (bool, error) {
	n, err := jobAckScript.Run(ctx, s.rdb, []string{ocrActiveKey, ocrLeaseKey, ocrJobKey(id), ocrJobErrorsKey(id)}, id, token).Int()
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

// FailJob ends the caller's lease on a job that did not succeed (see FailMode).
func (s *Store) FailJob(ctx context.Context, id string, token int64, msg string, mode FailMode, due time.Time, maxAttempts int) (FailOutcome, error) {
	res, err := jobFailScript.Run(ctx, s.rdb,
		[]string{ocrActiveKey, ocrLeaseKey, ocrJobKey(id), ocrJobErrorsKey(id), ocrDelayedKey, ocrDeadKey},
		id, token, s.nowMs(), oneLine(msg), string(mode), due.UnixMilli(), maxAttempts).Slice()
	if err != nil {
		return FailOutcome{}, err
	}
	var o FailOutcome
	switch toStr(res[0]) {
	case "retry":
		o.Retried = true
	case "dead":
		o.Dead = true
	case "released":
		o.Released = true
	}
	if len(res) > 1 {
		o.Attempts = int(toI64(res[1]))
	}
	return o, nil
}

// oneLine keeps error history entries on one line each.
func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ") }

// PromoteJobs moves up to limit delayed jobs that are due to the pending list.
func (s *Store) PromoteJobs(ctx context.Context, limit int) (int, error) {
	n, err := jobPromoteScript.Run(ctx, s.rdb, []string{ocrDelayedKey, ocrPendingKey}, s.nowMs(), limit).Int()
	return n, err
}

// Reclaimed is a job the reaper took back from a worker whose lease expired.
type Reclaimed struct {
	JobID, DocumentID string
	Attempts          int
	// Dead is true when that was its last attempt and it was dead-lettered.
	Dead bool
}

// ReclaimJobs takes back up to limit jobs whose lease expired: back to pending, or to
// the dead-letter store after maxAttempts. Active jobs without a lease (their worker
// died right after fetching them) first get one of lease, so they are reclaimed when it
// expires.
func (s *Store) ReclaimJobs(ctx context.Context, lease time.Duration, maxAttempts, limit int) ([]Reclaimed, error) {
	now := s.nowMs()
	if err := jobOrphansScript.Run(ctx, s.rdb, []string{ocrActiveKey, ocrLeaseKey}, now, lease.Milliseconds(), 1000).Err(); err != nil {
		return nil, err
	}
	ids, err := s.rdb.ZRangeByScore(ctx, ocrLeaseKey, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: int64(limit)}).Result()
	if err != nil {
		return nil, err
	}
	var out []Reclaimed
	for _, id := range ids {
		res, err := jobReclaimScript.Run(ctx, s.rdb,
			[]string{ocrActiveKey, ocrLeaseKey, ocrJobKey(id), ocrJobErrorsKey(id), ocrPendingKey, ocrDeadKey},
			id, now, maxAttempts, "lease expired: the worker died or stalled").Slice()
		if err != nil {
			return out, err
		}
		switch toStr(res[0]) {
		case "requeued", "dead":
			out = append(out, Reclaimed{JobID: id, DocumentID: toStr(res[2]), Attempts: int(toI64(res[1])), Dead: toStr(res[0]) == "dead"})
		}
	}
	return out, nil
}

// Job reads a job with its error history; ErrJobNotFound when it has no record.
func (s *Store) Job(ctx context.Context, id string) (*Job, error) {
	jobs, err := s.jobs(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, ErrJobNotFound
	}
	return jobs[0], nil
}

func (s *Store) jobs(ctx context.Context, ids []string) ([]*Job, error) {
	hs := make([]*redis.MapStringStringCmd, len(ids))
	es := make([]*redis.StringSliceCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			hs[i] = p.HGetAll(ctx, ocrJobKey(id))
			es[i] = p.LRange(ctx, ocrJobErrorsKey(id), 0, -1)
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
				j.Errors = append(j.Errors, JobError{Time: msTime(f[0]), Attempt: int(toI64(f[1])), Error: f[2]})
			}
		}
		out = append(out, j)
	}
	return out, nil
}

// DeadJobs lists up to count dead-lettered jobs from position start, oldest first, with
// their error histories, and the total number of dead jobs.
func (s *Store) DeadJobs(ctx context.Context, start, count int64) ([]*Job, int64, error) {
	ids, err := s.rdb.ZRange(ctx, ocrDeadKey, start, start+count-1).Result()
	if err != nil {
		return nil, 0, err
	}
	total, err := s.rdb.ZCard(ctx, ocrDeadKey).Result()
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

// RequeueJob moves dead-lettered job id back to pending with its attempts reset, and
// returns its document id.
func (s *Store) RequeueJob(ctx context.Context, id string) (string, error) {
	res, err := jobRequeueScript.Run(ctx, s.rdb, []string{ocrDeadKey, ocrPendingKey, ocrJobKey(id), ocrJobErrorsKey(id)}, id, s.nowMs()).StringSlice()
	if err != nil {
		return "", err
	}
	switch res[0] {
	case "ok":
		return res[1], nil
	case "malformed":
		return "", &MalformedJobError{JobID: id, Reason: "malformed job: no document id; it stays dead-lettered"}
	}
	return "", ErrJobNotFound
}

// DocumentJob returns the id of the document's current job ("" if none) and whether
// that job is still queued, running or waiting for a retry (its record exists and it is
// not dead-lettered).
func (s *Store) DocumentJob(ctx context.Context, docID string) (jobID string, live bool, err error) {
	jobID, err = s.rdb.Get(ctx, ocrDedupeKey(docID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	var ex *redis.IntCmd
	var dead *redis.FloatCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ex = p.Exists(ctx, ocrJobKey(jobID))
		dead = p.ZScore(ctx, ocrDeadKey, jobID)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", false, err
	}
	return jobID, ex.Val() == 1 && errors.Is(dead.Err(), redis.Nil), nil
}

// QueueStats are the OCR queue's counters, each read in O(1).
type QueueStats struct {
	Pending, InFlight, Delayed, Dead int64
	// OldestPending is when the oldest pending job was enqueued (zero if none).
	OldestPending time.Time
}

// QueueStats reads the queue's counters in two round trips of O(1) commands.
func (s *Store) QueueStats(ctx context.Context) (QueueStats, error) {
	var pend, act, del, dead *redis.IntCmd
	var oldest *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		pend = p.LLen(ctx, ocrPendingKey)
		act = p.LLen(ctx, ocrActiveKey)
		del = p.ZCard(ctx, ocrDelayedKey)
		dead = p.ZCard(ctx, ocrDeadKey)
		oldest = p.LIndex(ctx, ocrPendingKey, -1) // fetched from the right: the oldest
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return QueueStats{}, err
	}
	st := QueueStats{Pending: pend.Val(), InFlight: act.Val(), Delayed: del.Val(), Dead: dead.Val()}
	if id := oldest.Val(); id != "" {
		ms, err := s.rdb.HGet(ctx, ocrJobKey(id), "enqueued_ms").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return QueueStats{}, err
		}
		st.OldestPending = msTime(ms)
	}
	return st, nil
}

// MarkProcessing indexes document id as possibly processing, for start-up recovery.
func (s *Store) MarkProcessing(ctx context.Context, docID string) error {
	return s.rdb.ZAdd(ctx, ocrProcessingKey, redis.Z{Score: float64(s.nowMs()), Member: docID}).Err()
}

// UnmarkProcessing drops document id from the processing index.
func (s *Store) UnmarkProcessing(ctx context.Context, docID string) error {
	return s.rdb.ZRem(ctx, ocrProcessingKey, docID).Err()
}

// ProcessingDocuments returns up to count ids of the processing index from start.
func (s *Store) ProcessingDocuments(ctx context.Context, start, count int64) ([]string, error) {
	return s.rdb.ZRange(ctx, ocrProcessingKey, start, start+count-1).Result()
}
