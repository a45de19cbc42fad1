package uploads

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/chunkup/chunkup/staging/outbox"
)

// Ends is the view of the store for ending uploads other than by completing them
// (abort, failure, expiry), releasing what they hold, and recovering the indexes after
// a crash. It keeps the active and release indexes itself.
type Ends struct{ s *Store }

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
//	ARGV[10] upload id (progress notices are "ID STATUS")
//	ARGV[11] "1": end only while no part is recorded in KEYS[6] (a direct upload's
//	         failed completion); "0" for no such condition
//
// Returns {"ok", s3_upload_id, bucket, key, single, tenant, created_ms}, where single
// is 1 when the object was already written by a single PutObject, {"already", status} when it had ended
// already, {"completing"} when a completer holds it, {"active", updated_ms} when it
// was active after ARGV[9], {"recorded"} when ARGV[11] asked and a part is recorded,
// or {"notfound"}.
var endScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 's3_upload_id', 'bucket', 'key', 'updated_ms', 'tenant', 'created_ms')
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
if ARGV[11] == '1' and redis.call('HLEN', KEYS[6]) > 0 then return {'recorded'} end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'error', ARGV[2], 'updated_ms', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[3], ARGV[5], ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
for i = 4, 7 do redis.call('PEXPIRE', KEYS[i], ARGV[7]) end
redis.call('PUBLISH', ARGV[8], ARGV[10] .. ' ' .. ARGV[1])
local single = 0
if (not st[2] or st[2] == '') and redis.call('HEXISTS', KEYS[6], '1') == 1 then single = 1 end
return {'ok', st[2] or '', st[3], st[4], single, st[6] or '', st[7] or '0'}
`)

// EndRequest asks to end an upload other than by completing it.
type EndRequest struct {
	ID     string
	Status staging.Status // FAILED, ABORTED or EXPIRED
	Reason string
	// Completer, a completer's guard token, allows it while the upload is COMPLETING,
	// but only if that completer still holds the guard (or the guard has expired): a
	// completer giving up must not end an upload another one is completing.
	Completer string
	// Event is recorded in the outbox in the same atomic step.
	Event staging.OutboxEvent
	// IdleSince, when set, ends the upload only if its last activity is not after it
	// (expiry); otherwise End returns a *staging.ActiveError and has the upload looked
	// at again when it may have been idle long enough.
	IdleSince time.Time
	// Unrecorded ends the upload only while none of its parts is recorded: a direct
	// upload's completion that found S3 holding other parts than reported must not
	// fail it once a concurrent completion whose report matched has recorded them.
	// Otherwise End returns ErrPartsRecorded.
	Unrecorded bool
}

// ErrPartsRecorded: End with Unrecorded found parts recorded (another completion of the
// upload recorded them, and completes it).
var ErrPartsRecorded = errors.New("its parts were recorded by another completion, which completes it")

// EndResult carries what the caller needs to release an ended upload's S3 resources.
type EndResult struct {
	MultipartID, Bucket, Key string
	// ObjectWritten: a one-chunk upload's object was already put at Key (its single
	// PutObject happened before the upload ended), so it must be deleted.
	ObjectWritten bool
}

// releaseGrace is how long an ending process has to release an upload's S3 resources
// before cleanup's sweep retries.
const releaseGrace = time.Minute

// End moves an upload to FAILED, ABORTED or EXPIRED and records its event, atomically.
// Before, it marks the upload for release (due after releaseGrace, so that the sweep of
// any replica does not release it a second time while this caller does): a crash or an
// S3 outage before the caller's Released is retried by cleanup's sweep. It returns the
// upload's S3 coordinates so the caller can release them.
func (e *Ends) End(ctx context.Context, r EndRequest) (EndResult, error) {
	s := e.s
	if err := s.releases.Add(ctx, r.ID, r.ID, s.c.Now().Add(releaseGrace)); err != nil {
		return EndResult{}, err
	}
	idle := int64(0)
	if !r.IdleSince.IsZero() {
		idle = r.IdleSince.UnixMilli()
	}
	var res rdb.Reply
	err := s.outbox.Bracket(ctx, r.ID, func() (bool, error) {
		var err error
		res, err = rdb.Decode("end", endScript.Run(ctx, s.c, terminalKeys(r.ID),
			string(r.Status), r.Reason, s.c.NowMs(), r.Completer, r.Event.ID, outbox.Record(r.Event),
			s.c.Cfg.Retention.Milliseconds(), rdb.ProgressChannel, idle, r.ID, flag(r.Unrecorded)))
		return err == nil && res.Code == rdb.CodeOK, err
	})
	if err != nil {
		return EndResult{}, err
	}
	expiring := idle != 0
	switch res.Code {
	case rdb.CodeOK:
		_ = s.active.Done(ctx, r.ID, r.ID) // a hint; a stale entry is dropped when visited
		s.forget(ctx, r.ID, res.Str(4), res.I64(5))
		return EndResult{MultipartID: res.Str(0), Bucket: res.Str(1), Key: res.Str(2),
			ObjectWritten: res.I64(3) == 1}, nil
	case rdb.CodeAlready:
		if expiring {
			_ = s.active.Done(ctx, r.ID, r.ID)
		}
		return EndResult{}, &staging.StateError{Status: staging.Status(res.Str(0))}
	case rdb.CodeCompleting:
		if expiring {
			_ = s.active.Defer(ctx, r.ID, r.ID, s.c.Now().Add(s.c.Cfg.StateTTL))
		}
		return EndResult{}, staging.ErrCompleting
	case rdb.CodeActive:
		last := time.UnixMilli(res.I64(0))
		if err := s.active.Defer(ctx, r.ID, r.ID, last.Add(s.c.Cfg.StateTTL)); err != nil {
			return EndResult{}, err
		}
		return EndResult{}, &staging.ActiveError{LastActivity: last}
	case rdb.CodeNotFound:
		if expiring {
			_ = s.active.Done(ctx, r.ID, r.ID)
		}
		return EndResult{}, staging.ErrNotFound
	case rdb.CodeRecorded:
		return EndResult{}, ErrPartsRecorded
	}
	return EndResult{}, res.Unexpected()
}

// Released says that upload id's S3 resources are released: it leaves the release index.
func (e *Ends) Released(ctx context.Context, id string) error {
	return e.s.releases.Done(ctx, id, id)
}

// RetryRelease has upload id's release tried again at at.
func (e *Ends) RetryRelease(ctx context.Context, id string, at time.Time) error {
	return e.s.releases.Defer(ctx, id, id, at)
}

// DueReleases returns up to limit ended uploads whose release is due.
func (e *Ends) DueReleases(ctx context.Context, limit int64) ([]string, error) {
	return e.s.releases.Due(ctx, limit)
}

// DueActive returns up to limit uploads that may have been idle past StateTTL.
func (e *Ends) DueActive(ctx context.Context, limit int64) ([]string, error) {
	return e.s.active.Due(ctx, limit)
}

// ActiveUploads returns up to count ids of the active index from position start, for
// start-up recovery.
func (e *Ends) ActiveUploads(ctx context.Context, start, count int64) ([]string, error) {
	return e.s.active.Page(ctx, start, count)
}

// DropChunks deletes the staged bytes and leases of an upload that has ended.
func (e *Ends) DropChunks(ctx context.Context, id string) error {
	s := e.s
	nums, err := s.c.Client.HKeys(ctx, rdb.ReceivedKey(id)).Result()
	if err != nil {
		return err
	}
	keys := []string{rdb.LeasesKey(id)}
	for _, k := range nums {
		keys = append(keys, rdb.ChunkKey(id, rdb.U32(k)))
	}
	return s.c.Client.Del(ctx, keys...).Err()
}

// Recover re-indexes what a crash may have left unindexed for upload id: staged chunks
// whose part is not recorded go back into the pending index (due now), and an upload
// that has every part goes into the completion index. It is idempotent.
func (e *Ends) Recover(ctx context.Context, id string) error {
	s := e.s
	var st *redis.SliceCmd
	var rec, parts *redis.StringSliceCmd
	_, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		st = p.HMGet(ctx, rdb.StateKey(id), "status", "total", "uploaded")
		rec = p.HKeys(ctx, rdb.ReceivedKey(id))
		parts = p.HKeys(ctx, rdb.PartsKey(id))
		return nil
	})
	if err != nil {
		return err
	}
	v := st.Val()
	if v[0] == nil {
		return nil
	}
	status := staging.Status(rdb.Str(v[0]))
	if status == staging.StatusCompleting || status == staging.StatusActive && rdb.U32(v[1]) > 0 && rdb.U32(v[1]) == rdb.U32(v[2]) {
		return s.readyToComplete(ctx, id)
	}
	if status != staging.StatusActive {
		return nil
	}
	done := make(map[string]bool, len(parts.Val()))
	for _, n := range parts.Val() {
		done[n] = true
	}
	var refs []string
	for _, n := range rec.Val() {
		if !done[n] {
			refs = append(refs, staging.ChunkRef{UploadID: id, N: rdb.U32(n)}.String())
		}
	}
	return s.pending.AddMany(ctx, id, refs, s.c.Now())
}

// Get reads an upload (see Store.Get).
func (e *Ends) Get(ctx context.Context, id string) (*staging.Upload, error) { return e.s.Get(ctx, id) }

// Now returns the store's clock reading.
func (e *Ends) Now() time.Time { return e.s.c.Now() }

// StateTTL is how long an upload may stay idle before it expires.
func (e *Ends) StateTTL() time.Duration { return e.s.c.Cfg.StateTTL }
