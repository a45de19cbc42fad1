package uploads

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/chunkup/chunkup/staging/outbox"
)

// Completions is the completers' view of the store: the completion guard, the parts,
// and the completion index, which it keeps itself: an upload stays in it from the
// moment its last part is recorded until it is completed and handed off (or it ended
// otherwise).
type Completions struct{ s *Store }

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
// Returns {"ok", total, s3_upload_id, bucket, key, multipart_attempts, mpu_crc32c,
// if_absent},
// {"done", handoff} when already completed (handoff is "pending" while the hand-off has
// not happened), {"notready"}, {"busy", expiry}, {"notfound"}, or {"state", status}.
var beginCompleteScript = rdb.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'total', 'uploaded', 's3_upload_id', 'bucket', 'key', 'mpu_attempts', 'mpu_crc32c', 'if_absent')
if not st[1] then return {'notfound'} end
if st[1] == 'COMPLETED' then return {'done', redis.call('HGET', KEYS[1], 'handoff') or ''} end
if st[1] ~= 'ACTIVE' and st[1] ~= 'COMPLETING' then return {'state', st[1]} end
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
return {'ok', st[2], st[4] or '', st[5], st[6], st[7] or '0', st[8] or '0', st[9] or '0'}
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
//	ARGV[6] event id ("" for none: a partial upload's completion announces nothing)
//	ARGV[7] event record (see outboxRecord)
//	ARGV[8] "1" when the upload must be handed off (to OCR) after completion
//	ARGV[9] retention (ms)
//	ARGV[10] progress channel
//	ARGV[11] upload id (progress notices are "ID STATUS")
//	ARGV[12] content type detected in the object's first bytes ("" for none)
//
// Returns {"ok", tenant, created_ms}, {"done"} when already completed, or {"lost"}
// when the guard is another completer's (or the upload left COMPLETING).
var finishCompleteScript = rdb.NewScript(`
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'COMPLETED' then return {'done'} end
local g = redis.call('GET', KEYS[2])
if status ~= 'COMPLETING' or not g or string.sub(g, 1, #ARGV[1]+1) ~= ARGV[1] .. '|' then return {'lost'} end
redis.call('HSET', KEYS[1], 'status', 'COMPLETED', 'etag', ARGV[2], 'size', ARGV[3],
  'crc32c', ARGV[4], 'completed_ms', ARGV[5], 'updated_ms', ARGV[5])
if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'handoff', 'pending') end
if ARGV[12] ~= '' then redis.call('HSET', KEYS[1], 'detected_ct', ARGV[12]) end
redis.call('DEL', KEYS[2])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[3], ARGV[6], ARGV[7]) end
redis.call('PEXPIRE', KEYS[1], ARGV[9])
for i = 4, 7 do redis.call('PEXPIRE', KEYS[i], ARGV[9]) end
redis.call('PUBLISH', ARGV[10], ARGV[11] .. ' COMPLETED')
return {'ok', redis.call('HGET', KEYS[1], 'tenant') or '', redis.call('HGET', KEYS[1], 'created_ms') or '0'}
`)

// handedOffScript records that a completed upload was handed off.
//
//	KEYS[1] state hash
//
// Returns 1 when it moved from pending to done, 0 otherwise.
var handedOffScript = rdb.NewScript(`
if redis.call('HGET', KEYS[1], 'handoff') ~= 'pending' then return 0 end
redis.call('HSET', KEYS[1], 'handoff', 'done')
return 1
`)

// Begin takes the completion guard for id (identified by token) for lease.
func (c *Completions) Begin(ctx context.Context, id, token string, lease time.Duration) (staging.Begin, error) {
	s := c.s
	r, err := rdb.Decode("begin-complete", beginCompleteScript.Run(ctx, s.c, []string{rdb.StateKey(id), rdb.GuardKey(id)},
		token, s.c.NowMs(), lease.Milliseconds(), s.c.Cfg.StateTTL.Milliseconds()))
	if err != nil {
		return staging.Begin{}, err
	}
	return c.begun(ctx, id, r)
}

// BeginSnapshot is Begin and, when it begins, Snapshot, in one round trip: the reads
// follow the script on the connection to the upload's slot, so they see the upload as
// the guard's holder (COMPLETING). u and parts are nil unless b.Outcome is Begun.
func (c *Completions) BeginSnapshot(ctx context.Context, id, token string, lease time.Duration) (b staging.Begin, u *staging.Upload, parts []staging.Part, err error) {
	s := c.s
	var begin *redis.Cmd
	var read func() (*staging.Upload, map[string]string, error)
	_, err = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		begin = beginCompleteScript.Eval(ctx, s.c, p, []string{rdb.StateKey(id), rdb.GuardKey(id)},
			token, s.c.NowMs(), lease.Milliseconds(), s.c.Cfg.StateTTL.Milliseconds())
		read = s.getIn(ctx, p, id, true)
		return nil
	})
	r, berr := rdb.Decode("begin-complete", begin)
	if berr != nil {
		return staging.Begin{}, nil, nil, rdb.Classify(berr)
	}
	if b, err = c.begun(ctx, id, r); err != nil || b.Outcome != staging.Begun {
		return b, nil, nil, err
	}
	u, h, err := read()
	if err != nil {
		return staging.Begin{}, nil, nil, rdb.Classify(err)
	}
	parts, err = parseParts(id, h, b.Total)
	return b, u, parts, err
}

// begun is what the begin-complete script's result res says; an upload that is not
// to be completed now leaves the completion index (or is deferred while guarded).
func (c *Completions) begun(ctx context.Context, id string, r rdb.Reply) (staging.Begin, error) {
	s := c.s
	var b staging.Begin
	switch r.Code {
	case rdb.CodeOK:
		return staging.Begin{Outcome: staging.Begun, Total: r.U32(0), MultipartID: r.Str(1), Bucket: r.Str(2), Key: r.Str(3),
			MultipartAttempts: int(r.I64(4)), MultipartChecksummed: r.Flag(5), IfAbsent: r.Flag(6)}, nil
	case rdb.CodeDone:
		b = staging.Begin{Outcome: staging.Finished, HandoffPending: r.Str(0) == "pending"}
		if b.HandoffPending {
			return b, nil
		}
	case rdb.CodeNotReady:
		b = staging.Begin{Outcome: staging.NotReady}
	case rdb.CodeBusy:
		b = staging.Begin{Outcome: staging.Guarded, Until: time.UnixMilli(r.I64(0))}
		return b, s.completions.Defer(ctx, id, id, b.Until)
	case rdb.CodeNotFound, rdb.CodeState:
		b = staging.Begin{Outcome: staging.NotActive, Status: staging.Status(r.Str(0))}
	default:
		return staging.Begin{}, r.Unexpected()
	}
	return b, s.completions.Done(ctx, id, id)
}

// Parts returns the upload's recorded parts 1..total in order, or an error if one is
// missing.
func (c *Completions) Parts(ctx context.Context, id string, total uint32) ([]staging.Part, error) {
	h, err := c.s.c.Client.HGetAll(ctx, rdb.PartsKey(id)).Result()
	if err != nil {
		return nil, err
	}
	return parseParts(id, h, total)
}

// ErrPartMissing: a part the upload should have recorded is not (or not readably).
var ErrPartMissing = errors.New("a part is not recorded")

func parseParts(id string, h map[string]string, total uint32) ([]staging.Part, error) {
	parts := make([]staging.Part, total)
	for i := range parts {
		n := uint32(i + 1)
		v, ok := h[strconv.FormatUint(uint64(n), 10)]
		if !ok {
			return nil, fmt.Errorf("staging: upload %s has no part %d: %w", id, n, ErrPartMissing)
		}
		f := strings.Split(v, "|")
		if len(f) != 3 {
			return nil, fmt.Errorf("staging: upload %s part %d is malformed: %w", id, n, ErrPartMissing)
		}
		parts[i] = staging.Part{N: n, ETag: f[0], CRC32C: rdb.U32(f[1]), Size: rdb.I64(f[2]), NoCRC: f[1] == rdb.NoCRC}
	}
	return parts, nil
}

// terminalKeys are the keys a terminal transition touches: state, guard, outbox, and
// the keys whose TTL becomes the retention.
func terminalKeys(id string) []string {
	return []string{rdb.StateKey(id), rdb.GuardKey(id), rdb.OutboxKey(id), rdb.MetaKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id), rdb.LeasesKey(id)}
}

// Finish marks the upload COMPLETED with the final object's ETag, size, CRC32C and
// detected type, and records ev in its outbox, atomically, if the caller still holds
// the guard. With
// handoff, the upload stays in the completion index until HandedOff; otherwise it
// leaves it. It returns staging.ErrAlreadyCompleted when another completer recorded the
// completion first (the upload has left the index) and staging.ErrGuardLost when the
// guard is another's.
func (c *Completions) Finish(ctx context.Context, id, token string, f staging.Final, ev staging.OutboxEvent, handoff bool) error {
	s := c.s
	h := "0"
	if handoff {
		h = "1"
	}
	at := s.c.NowMs()
	if !f.Completed.IsZero() {
		at = f.Completed.UnixMilli()
	}
	finish := func(p redis.Scripter) *redis.Cmd {
		args := []any{token, f.ETag, f.Size, f.CRC32C, at, ev.ID, outbox.Record(ev), h,
			s.c.Cfg.Retention.Milliseconds(), rdb.ProgressChannel, id, f.DetectedContentType}
		if pl, ok := p.(redis.Pipeliner); ok {
			return finishCompleteScript.Eval(ctx, s.c, pl, terminalKeys(id), args...)
		}
		return finishCompleteScript.Run(ctx, s.c, terminalKeys(id), args...)
	}
	var r rdb.Reply
	if ev.ID == "" {
		// No event (a partial upload's completion): nothing for the outbox index.
		var err error
		if r, err = rdb.Decode("finish-complete", finish(s.c.Client)); err != nil {
			return rdb.Classify(err)
		}
		if r.Code == rdb.CodeOK {
			return c.finished(ctx, id, r, handoff, nil)
		}
	} else if s.c.Cluster {
		// The outbox index is on another node: its write before the record must be done
		// before the record is sent (Bracket).
		err := s.outbox.Bracket(ctx, id, func() (bool, error) {
			var err error
			if r, err = rdb.Decode("finish-complete", finish(s.c.Client)); err != nil {
				return false, err
			}
			return r.Code == rdb.CodeOK, nil
		})
		if err != nil {
			return err
		}
		if r.Code == rdb.CodeOK {
			return c.finished(ctx, id, r, handoff, nil)
		}
	} else {
		// On one Redis the index write and the record go in one round trip, in order.
		var index *redis.IntCmd
		var rec *redis.Cmd
		_, _ = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			index = s.outbox.IndexIn(ctx, p, id)
			rec = finish(p)
			return nil
		})
		var err error
		if r, err = rdb.Decode("finish-complete", rec); err != nil {
			return rdb.Classify(err)
		}
		if r.Code == rdb.CodeOK {
			if index.Err() != nil {
				// Refused while the record was not (memory freed in between): write it
				// again before anything else, the event is unindexed until then.
				if err := s.outbox.Bracket(ctx, id, func() (bool, error) { return true, nil }); err != nil {
					return err
				}
			}
			// The write after the record goes with the hints.
			return c.finished(ctx, id, r, handoff, s.outbox.IndexIn)
		}
	}
	if r.Code == rdb.CodeDone {
		if err := s.completions.Done(ctx, id, id); err != nil {
			return err
		}
		return staging.ErrAlreadyCompleted
	}
	return staging.ErrGuardLost
}

// finished drops the hints of an upload Finish recorded COMPLETED (finish's result res):
// the active index, the tenant's list, and the completion index unless the upload waits
// for its hand-off, in one round trip; a stale one is dropped when visited. indexOutbox,
// when not nil, is the outbox index write due after the record, sent with them; the
// publisher is woken once it is done.
func (c *Completions) finished(ctx context.Context, id string, r rdb.Reply, handoff bool, indexOutbox func(context.Context, redis.Pipeliner, string) *redis.IntCmd) error {
	s := c.s
	var index, done *redis.IntCmd
	_, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		if indexOutbox != nil {
			index = indexOutbox(ctx, p, id)
		}
		s.active.DoneIn(ctx, p, id, id)
		p.ZRem(ctx, rdb.TenantUploadsKey(r.Str(0)), rdb.TenantUploadsMember(r.I64(1), id))
		if !handoff {
			done = s.completions.DoneIn(ctx, p, id, id)
		}
		return nil
	})
	if index != nil {
		if index.Err() != nil {
			return rdb.Classify(index.Err())
		}
		s.outbox.Recorded()
	}
	if handoff || (done != nil && done.Err() == nil) {
		return nil
	}
	return err
}

// HandedOff records that completed upload id was handed off, and drops it from the
// completion index. It reports false if it was not pending (already handed off, or
// never to be).
func (c *Completions) HandedOff(ctx context.Context, id string) (bool, error) {
	n, err := handedOffScript.Run(ctx, c.s.c, []string{rdb.StateKey(id)}).Int()
	if err != nil {
		return false, err
	}
	return n == 1, c.s.completions.Done(ctx, id, id)
}

// Retry has upload id's completion tried again at at.
func (c *Completions) Retry(ctx context.Context, id string, at time.Time) error {
	return c.s.completions.Defer(ctx, id, id, at)
}

// Drop removes upload id from the completion index: it ended otherwise (the completer
// failed it).
func (c *Completions) Drop(ctx context.Context, id string) error {
	return c.s.completions.Done(ctx, id, id)
}

// Due returns up to limit uploads whose completion is due.
func (c *Completions) Due(ctx context.Context, limit int64) ([]string, error) {
	return c.s.completions.Due(ctx, limit)
}

// DueNext is Due, and how long until the next upload's completion falls due (see
// rdb.Index.DueNext: zero when more are due now, negative when none is indexed).
func (c *Completions) DueNext(ctx context.Context, limit int64) ([]string, time.Duration, error) {
	return c.s.completions.DueNext(ctx, limit)
}

// Get reads an upload (see Store.Get).
func (c *Completions) Get(ctx context.Context, id string) (*staging.Upload, error) {
	return c.s.Get(ctx, id)
}

// Now returns the store's clock reading.
func (c *Completions) Now() time.Time { return c.s.c.Now() }
