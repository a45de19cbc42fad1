package staging

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClaimOutcome says what a claim found.
type ClaimOutcome int

// Claim outcomes.
const (
	// Claimed: the caller holds the chunk's lease and must upload it.
	Claimed ClaimOutcome = iota + 1
	// AlreadyDone: the part is recorded; Ready says whether the upload can complete.
	AlreadyDone
	// Busy: another worker holds an unexpired lease until Until.
	Busy
	// Missing: no bytes are staged for the chunk (never committed, or expired).
	Missing
	// Gone: the upload no longer accepts work (Status says why).
	Gone
	// Expired: the chunk was received but its bytes expired from Redis before any worker
	// uploaded them; the upload cannot complete.
	Expired
)

// Claim is the result of trying to lease a chunk.
type Claim struct {
	Outcome ClaimOutcome
	Ref     ChunkRef
	Token   string
	// For Claimed: what was received and where it goes.
	CRC32C      uint32
	Size        int64
	Total       uint32
	MultipartID string
	Bucket, Key string
	ContentType string
	// Reclaimed: the claim replaced another worker's expired lease (that worker died
	// or stalled).
	Reclaimed bool
	// For AlreadyDone.
	Ready bool
	// For Busy.
	Until time.Time
	// For Gone.
	Status Status
}

func (s *Store) chunkKeys(ref ChunkRef) []string {
	id := ref.UploadID
	return []string{stateKey(id), receivedKey(id), partsKey(id), chunkKey(id, ref.N), leasesKey(id)}
}

// Claim tries to lease ref to the caller (identified by token) for lease.
func (s *Store) Claim(ctx context.Context, ref ChunkRef, token string, lease time.Duration) (Claim, error) {
	keys := append(s.chunkKeys(ref), metaKey(ref.UploadID))
	res, err := claimScript.Run(ctx, s.rdb, keys, ref.N, token, s.nowMs(), lease.Milliseconds()).Slice()
	if err != nil {
		return Claim{}, err
	}
	c := Claim{Ref: ref, Token: token}
	switch res[0].(string) {
	case "ok":
		crc, size, ok := parseCRCSize(toStr(res[1]))
		if !ok {
			return Claim{}, fmt.Errorf("staging: chunk %s has no received record", ref)
		}
		c.Outcome, c.CRC32C, c.Size = Claimed, crc, size
		c.Total, c.MultipartID, c.Bucket, c.Key = toU32(res[2]), toStr(res[3]), toStr(res[4]), toStr(res[5])
		c.ContentType = toStr(res[6])
		c.Reclaimed = len(res) > 7 && toStr(res[7]) == "1"
	case "done":
		c.Outcome, c.Ready = AlreadyDone, toI64(res[1]) == 1
	case "busy":
		c.Outcome, c.Until = Busy, time.UnixMilli(toI64(res[1]))
	case "missing":
		c.Outcome = Missing
	case "expired":
		c.Outcome = Expired
	case "gone":
		c.Outcome, c.Status = Gone, Status(toStr(res[1]))
	default:
		return Claim{}, fmt.Errorf("staging: unexpected claim result %q", res[0])
	}
	return c, nil
}

// ErrChunkMissing means a claimed chunk's bytes are no longer in Redis.
var ErrChunkMissing = errors.New("staged chunk is missing")

// ChunkData reads a chunk's staged bytes and, in the same round trip, pushes the
// chunk's sweep time past the lease so sweepers leave it alone while it is worked on.
func (s *Store) ChunkData(ctx context.Context, ref ChunkRef, lease time.Duration) ([]byte, error) {
	var get *redis.StringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, chunkKey(ref.UploadID, ref.N))
		p.ZAddXX(ctx, s.ix(pendingKey, ref.UploadID), redis.Z{Score: float64(s.nowMs() + lease.Milliseconds()), Member: ref.String()})
		return nil
	})
	if errors.Is(get.Err(), redis.Nil) {
		return nil, ErrChunkMissing
	}
	if err != nil {
		return nil, err
	}
	return get.Bytes()
}

// Renew extends the caller's lease on ref; false means the lease was lost.
func (s *Store) Renew(ctx context.Context, ref ChunkRef, token string, lease time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{leasesKey(ref.UploadID)}, ref.N, token, s.nowMs()+lease.Milliseconds()).Int()
	return n == 1, err
}

// Release gives up the caller's lease on ref and asks sweepers to offer the chunk again
// at retryAt.
func (s *Store) Release(ctx context.Context, ref ChunkRef, token string, retryAt time.Time) error {
	if err := releaseScript.Run(ctx, s.rdb, []string{leasesKey(ref.UploadID)}, ref.N, token).Err(); err != nil {
		return err
	}
	return s.Defer(ctx, ref, retryAt)
}

// NoteMultipartAttempt counts an attempt to create upload id's S3 multipart upload; a
// worker calls it before CreateMultipartUpload (see Begin.MultipartAttempts).
func (s *Store) NoteMultipartAttempt(ctx context.Context, id string) error {
	return noteMultipartScript.Run(ctx, s.rdb, []string{stateKey(id)}).Err()
}

// SetMultipart records the upload's S3 multipart id unless one is recorded already, and
// returns the recorded one.
func (s *Store) SetMultipart(ctx context.Context, id, multipartID string) (string, error) {
	res, err := setMultipartScript.Run(ctx, s.rdb, []string{stateKey(id)}, multipartID).Slice()
	if err != nil {
		return "", err
	}
	if res[0].(string) == "gone" {
		return "", &StateError{Status: Status(toStr(res[1]))}
	}
	return toStr(res[1]), nil
}

// RecordOutcome says what recording a part did.
type RecordOutcome int

// Record outcomes.
const (
	Recorded RecordOutcome = iota + 1
	// RecordedBefore: the part was already recorded (a repeat).
	RecordedBefore
	// LeaseLost: another worker holds the chunk now; nothing was recorded.
	LeaseLost
	// Stale: the chunk was replaced by other bytes since the claim; nothing was recorded.
	Stale
	// Ended: the upload is no longer active.
	Ended
)

// Record stores a part's ETag for ref and only then deletes the staged bytes. Ready
// reports whether the upload can now be completed.
func (s *Store) Record(ctx context.Context, ref ChunkRef, token, etag string, crc uint32, size int64) (outcome RecordOutcome, ready bool, err error) {
	res, err := s.script(recordScript).Run(ctx, s.rdb, s.chunkKeys(ref), ref.N, token, etag, crc, size, s.nowMs(),
		ProgressChannel(ref.UploadID)).Slice()
	if err != nil {
		return 0, false, err
	}
	switch res[0].(string) {
	case "ok":
		return Recorded, toI64(res[1]) == 1, nil
	case "dup":
		return RecordedBefore, toI64(res[1]) == 1, nil
	case "lost":
		return LeaseLost, false, nil
	case "stale":
		return Stale, false, nil
	case "gone":
		return Ended, false, nil
	}
	return 0, false, fmt.Errorf("staging: unexpected record result %q", res[0])
}

// SubscribeChunks subscribes to chunk wake-ups ("ID/N" messages, see ParseChunkRef).
// On a cluster it subscribes to every sharded wake-up channel, each on a connection to
// the node that serves it (go-redis follows a channel's slot when a node fails over).
func (s *Store) SubscribeChunks(ctx context.Context) *Subscription {
	if !s.cluster {
		return subscription(s.rdb.Subscribe(ctx, ChunksChannel))
	}
	var pss []*redis.PubSub
	for _, ch := range chunksShards() {
		pss = append(pss, s.rdb.SSubscribe(ctx, ch))
	}
	return subscription(pss...)
}

// Subscription delivers the payloads of one or more pub/sub subscriptions on one
// channel, C, until Close.
type Subscription struct {
	C    <-chan string
	pss  []*redis.PubSub
	wg   sync.WaitGroup
	done chan struct{}
	once sync.Once
}

func subscription(pss ...*redis.PubSub) *Subscription {
	c := make(chan string, 64)
	sub := &Subscription{C: c, pss: pss, done: make(chan struct{})}
	for _, ps := range pss {
		sub.wg.Go(func() {
			for msg := range ps.Channel() {
				select {
				case c <- msg.Payload:
				case <-sub.done:
					return
				}
			}
		})
	}
	go func() { sub.wg.Wait(); close(c) }()
	return sub
}

// Close ends the subscriptions; C is closed once their last messages are delivered
// or dropped.
func (sub *Subscription) Close() error {
	sub.once.Do(func() { close(sub.done) })
	var errs []error
	for _, ps := range sub.pss {
		errs = append(errs, ps.Close())
	}
	return errors.Join(errs...)
}

// DuePending returns up to limit chunks whose sweep time has come.
func (s *Store) DuePending(ctx context.Context, limit int64) ([]ChunkRef, error) {
	es, err := s.due(ctx, pendingKey, s.nowMs(), limit)
	if err != nil {
		return nil, err
	}
	refs := make([]ChunkRef, 0, len(es))
	for _, e := range es {
		if ref, ok := ParseChunkRef(e.member); ok {
			refs = append(refs, ref)
		} else {
			s.rdb.ZRem(ctx, e.key, e.member) // not ours; never offer it again
		}
	}
	return refs, nil
}

// Defer moves a pending chunk's sweep time to at (only if it is still pending).
func (s *Store) Defer(ctx context.Context, ref ChunkRef, at time.Time) error {
	return s.rdb.ZAddXX(ctx, s.ix(pendingKey, ref.UploadID), redis.Z{Score: float64(at.UnixMilli()), Member: ref.String()}).Err()
}

// DonePending removes a chunk from the pending index.
func (s *Store) DonePending(ctx context.Context, ref ChunkRef) error {
	return s.rdb.ZRem(ctx, s.ix(pendingKey, ref.UploadID), ref.String()).Err()
}

// PendingCount is the number of chunks staged and not yet recorded as parts.
func (s *Store) PendingCount(ctx context.Context) (int64, error) {
	return s.card(ctx, pendingKey)
}

// EnqueueCompletion records that upload id is ready to be finalized. It is idempotent.
func (s *Store) EnqueueCompletion(ctx context.Context, id string) error {
	return s.rdb.ZAddNX(ctx, s.ix(completionsKey, id), redis.Z{Score: float64(s.nowMs()), Member: id}).Err()
}

// DueCompletions returns up to limit uploads whose completion is due.
func (s *Store) DueCompletions(ctx context.Context, limit int64) ([]string, error) {
	es, err := s.due(ctx, completionsKey, s.nowMs(), limit)
	return members(es), err
}

// DeferCompletion moves a completion's due time to at.
func (s *Store) DeferCompletion(ctx context.Context, id string, at time.Time) error {
	return s.rdb.ZAddXX(ctx, s.ix(completionsKey, id), redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err()
}

// DoneCompletion removes an upload from the completion index.
func (s *Store) DoneCompletion(ctx context.Context, id string) error {
	return s.rdb.ZRem(ctx, s.ix(completionsKey, id), id).Err()
}

// BeginOutcome says what taking the completion guard found.
type BeginOutcome int

// Begin outcomes.
const (
	// Begun: the caller holds the guard and must finalize the object.
	Begun BeginOutcome = iota + 1
	// Finished: the upload is COMPLETED already.
	Finished
	// NotReady: some part is missing, or the last chunk is unknown.
	NotReady
	// Guarded: another completer holds the guard until Until.
	Guarded
	// NotActive: the upload ended otherwise (Status).
	NotActive
)

// Begin is the result of BeginComplete.
type Begin struct {
	Outcome     BeginOutcome
	Total       uint32
	MultipartID string
	// MultipartAttempts counts the attempts to create a multipart upload for it. More
	// than the recorded ids (one, or none for a one-chunk upload) means one may have
	// been left behind by a worker that died.
	MultipartAttempts int
	Bucket, Key       string
	Until             time.Time
	Status            Status
	// For Finished: the upload still has to be handed off.
	HandoffPending bool
}

// BeginComplete takes the completion guard for id (identified by token) for lease.
func (s *Store) BeginComplete(ctx context.Context, id, token string, lease time.Duration) (Begin, error) {
	res, err := beginCompleteScript.Run(ctx, s.rdb, []string{stateKey(id), guardKey(id)},
		token, s.nowMs(), lease.Milliseconds(), s.stateTTL.Milliseconds()).Slice()
	if err != nil {
		return Begin{}, err
	}
	switch res[0].(string) {
	case "ok":
		attempts, _ := strconv.Atoi(toStr(res[5]))
		return Begin{Outcome: Begun, Total: toU32(res[1]), MultipartID: toStr(res[2]), Bucket: toStr(res[3]), Key: toStr(res[4]),
			MultipartAttempts: attempts}, nil
	case "done":
		return Begin{Outcome: Finished, HandoffPending: toStr(res[1]) == "pending"}, nil
	case "notready":
		return Begin{Outcome: NotReady}, nil
	case "busy":
		return Begin{Outcome: Guarded, Until: time.UnixMilli(toI64(res[1]))}, nil
	case "gone":
		return Begin{Outcome: NotActive, Status: Status(toStr(res[1]))}, nil
	}
	return Begin{}, fmt.Errorf("staging: unexpected begin-complete result %q", res[0])
}

// Part is one recorded part.
type Part struct {
	N      uint32
	ETag   string
	CRC32C uint32
	Size   int64
}

// Parts returns the upload's recorded parts 1..total in order, or an error if one is
// missing.
func (s *Store) Parts(ctx context.Context, id string, total uint32) ([]Part, error) {
	h, err := s.rdb.HGetAll(ctx, partsKey(id)).Result()
	if err != nil {
		return nil, err
	}
	parts := make([]Part, total)
	for i := range parts {
		n := uint32(i + 1)
		v, ok := h[strconv.FormatUint(uint64(n), 10)]
		if !ok {
			return nil, fmt.Errorf("staging: upload %s has no part %d", id, n)
		}
		f := strings.Split(v, "|")
		if len(f) != 3 {
			return nil, fmt.Errorf("staging: upload %s part %d is malformed", id, n)
		}
		parts[i] = Part{N: n, ETag: f[0], CRC32C: toU32(f[1]), Size: toI64(f[2])}
	}
	return parts, nil
}

// ErrGuardLost means another completer took over; the caller must stop.
var ErrGuardLost = errors.New("completion guard lost")

// FinishComplete marks the upload COMPLETED with the final object's ETag, size and
// CRC32C, and records ev in its outbox, atomically, if the caller still holds the guard.
// handoff marks the upload as still to be handed off (see MarkHandedOff).
func (s *Store) FinishComplete(ctx context.Context, id, token, etag string, size int64, crc uint32, ev OutboxEvent, handoff bool) error {
	if err := s.rdb.ZAddNX(ctx, s.ix(outboxIndexKey, id), redis.Z{Score: float64(s.nowMs()), Member: id}).Err(); err != nil {
		return err
	}
	h := "0"
	if handoff {
		h = "1"
	}
	keys := s.terminalKeys(id)
	res, err := s.script(finishCompleteScript).Run(ctx, s.rdb, keys, token, etag, size, crc, s.nowMs(),
		ev.ID, ev.record(), h, s.retention.Milliseconds(), ProgressChannel(id)).Slice()
	if err != nil {
		return err
	}
	switch res[0].(string) {
	case "ok":
		s.rdb.ZRem(ctx, s.ix(activeKey, id), id)
		return s.indexOutbox(ctx, id)
	case "done":
		return ErrAlreadyCompleted
	}
	return ErrGuardLost
}

// ErrAlreadyCompleted means another completer recorded the completion first (its event
// is the one in the outbox); the caller has nothing left to do.
var ErrAlreadyCompleted = errors.New("upload already completed")

// MarkHandedOff records that a completed upload was handed off; it reports false if it
// was not pending (already handed off, or never to be).
func (s *Store) MarkHandedOff(ctx context.Context, id string) (bool, error) {
	n, err := handedOffScript.Run(ctx, s.rdb, []string{stateKey(id)}).Int()
	return n == 1, err
}

// Leases returns the chunks of upload id that a worker holds, with their lease expiry.
func (s *Store) Leases(ctx context.Context, id string) (map[uint32]time.Time, error) {
	h, err := s.rdb.HGetAll(ctx, leasesKey(id)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]time.Time, len(h))
	for k, v := range h {
		_, exp, _ := strings.Cut(v, "|")
		out[toU32(k)] = time.UnixMilli(toI64(exp))
	}
	return out, nil
}
