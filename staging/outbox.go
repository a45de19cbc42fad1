package staging

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// OutboxEvent is an event waiting in an upload's outbox to be published. Its ID stays
// the same however often it is published, so consumers can deduplicate.
type OutboxEvent struct {
	ID            string
	Type          string // e.g. chunkup.v1.UploadCompleted
	CorrelationID string
	UploadID      string
	Payload       []byte
	// Created is when the event was recorded (from the record, for outbox age).
	Created time.Time
}

// record encodes the event for the outbox hash: "type\ncorrelation\nunix-ns\npayload".
// Nanoseconds, so that one upload's events recorded in the same millisecond keep their
// order when published.
func (e OutboxEvent) record() string {
	return e.Type + "\n" + e.CorrelationID + "\n" + strconv.FormatInt(e.Created.UnixNano(), 10) + "\n" + string(e.Payload)
}

func parseRecord(id, uploadID, rec string) (OutboxEvent, bool) {
	f := strings.SplitN(rec, "\n", 4)
	if len(f) != 4 {
		return OutboxEvent{}, false
	}
	return OutboxEvent{ID: id, Type: f[0], CorrelationID: f[1], UploadID: uploadID,
		Created: time.Unix(0, toI64(f[2])), Payload: []byte(f[3])}, true
}

// indexOutbox makes sure upload id's outbox is in the outbox index. Writers call it
// before recording an event (so a crash in between leaves an entry that leads nowhere)
// and again after (so a publisher that found the outbox empty in between, and dropped
// the entry, cannot leave the new event unindexed).
func (s *Store) indexOutbox(ctx context.Context, id string) error {
	return s.rdb.ZAddNX(ctx, s.ix(outboxIndexKey, id), redis.Z{Score: float64(s.nowMs()), Member: id}).Err()
}

// DueOutbox returns up to limit uploads whose outbox a publisher should drain now.
func (s *Store) DueOutbox(ctx context.Context, limit int64) ([]string, error) {
	es, err := s.due(ctx, outboxIndexKey, s.nowMs(), limit)
	return members(es), err
}

// OutboxEvents returns the events waiting in upload id's outbox. Malformed records are
// reported separately so the caller can log and drop them.
func (s *Store) OutboxEvents(ctx context.Context, id string) (events []OutboxEvent, malformed []string, err error) {
	h, err := s.rdb.HGetAll(ctx, outboxKey(id)).Result()
	if err != nil {
		return nil, nil, err
	}
	for eid, rec := range h {
		if ev, ok := parseRecord(eid, id, rec); ok {
			events = append(events, ev)
		} else {
			malformed = append(malformed, eid)
		}
	}
	return events, malformed, nil
}

// AckOutbox removes published events from upload id's outbox and, when it is empty,
// the upload from the outbox index. The index entry is removed before the emptiness is
// checked, and put back if an event arrived meanwhile, so none is ever left unindexed.
func (s *Store) AckOutbox(ctx context.Context, id string, eventIDs ...string) error {
	if len(eventIDs) > 0 {
		if err := s.rdb.HDel(ctx, outboxKey(id), eventIDs...).Err(); err != nil {
			return err
		}
	}
	if err := s.rdb.ZRem(ctx, s.ix(outboxIndexKey, id), id).Err(); err != nil {
		return err
	}
	n, err := s.rdb.HLen(ctx, outboxKey(id)).Result()
	if err != nil || n == 0 {
		return err
	}
	return s.rdb.ZAdd(ctx, s.ix(outboxIndexKey, id), redis.Z{Score: float64(s.nowMs()), Member: id}).Err()
}

// DeferOutbox moves upload id's next publish attempt to at.
func (s *Store) DeferOutbox(ctx context.Context, id string, at time.Time) error {
	return s.rdb.ZAddXX(ctx, s.ix(outboxIndexKey, id), redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err()
}

// OutboxUploads is how many uploads have events waiting to be published.
func (s *Store) OutboxUploads(ctx context.Context) (int64, error) {
	return s.card(ctx, outboxIndexKey)
}

// DueActive returns up to limit uploads that may have been idle past StateTTL.
func (s *Store) DueActive(ctx context.Context, limit int64) ([]string, error) {
	es, err := s.due(ctx, activeKey, s.nowMs(), limit)
	return members(es), err
}

// DeferActive sets when upload id may next have been idle too long.
func (s *Store) DeferActive(ctx context.Context, id string, at time.Time) error {
	return s.rdb.ZAddXX(ctx, s.ix(activeKey, id), redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err()
}

// DoneActive removes upload id from the active index.
func (s *Store) DoneActive(ctx context.Context, id string) error {
	return s.rdb.ZRem(ctx, s.ix(activeKey, id), id).Err()
}

// ActiveUploads returns up to count ids of the active index from position start, for
// start-up recovery.
func (s *Store) ActiveUploads(ctx context.Context, start, count int64) ([]string, error) {
	return s.page(ctx, activeKey, start, count)
}

// Recover re-indexes what a crash may have left unindexed for upload id: staged chunks
// whose part is not recorded go back into the pending index (due now), and an upload
// that has every part goes into the completion index. It is idempotent.
func (s *Store) Recover(ctx context.Context, id string) error {
	var st *redis.SliceCmd
	var rec, parts *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		st = p.HMGet(ctx, stateKey(id), "status", "total", "uploaded")
		rec = p.HKeys(ctx, receivedKey(id))
		parts = p.HKeys(ctx, partsKey(id))
		return nil
	})
	if err != nil {
		return err
	}
	v := st.Val()
	if v[0] == nil {
		return nil
	}
	status := Status(toStr(v[0]))
	if status == StatusCompleting || status == StatusActive && toU32(v[1]) > 0 && toU32(v[1]) == toU32(v[2]) {
		return s.EnqueueCompletion(ctx, id)
	}
	if status != StatusActive {
		return nil
	}
	done := make(map[string]bool, len(parts.Val()))
	for _, n := range parts.Val() {
		done[n] = true
	}
	var zs []redis.Z
	for _, n := range rec.Val() {
		if !done[n] {
			zs = append(zs, redis.Z{Score: float64(s.nowMs()), Member: ChunkRef{UploadID: id, N: toU32(n)}.String()})
		}
	}
	if len(zs) == 0 {
		return nil
	}
	return s.rdb.ZAddNX(ctx, s.ix(pendingKey, id), zs...).Err()
}

// SubscribeProgress subscribes to upload id's progress notices. A notice only says
// "something changed": subscribers re-read the state, so a lost notice costs nothing
// but latency.
//
// It returns once Redis has confirmed the subscription, so a change made after it
// returns is noticed. A notice's payload is the new status when the upload ended, else
// "received" or "uploaded".
func (s *Store) SubscribeProgress(ctx context.Context, id string) (*Subscription, error) {
	var ps *redis.PubSub
	if s.cluster {
		ps = s.rdb.SSubscribe(ctx, ProgressChannel(id))
	} else {
		ps = s.rdb.Subscribe(ctx, ProgressChannel(id))
	}
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, classify(err)
	}
	return subscription(ps), nil
}

// StagedBytes returns Redis' used_memory: an upper bound of the bytes staged there
// (staged chunks are most of it, and nothing else chunkup keeps is large). It is what
// the staged-bytes budget limits, so the budget also protects Redis itself.
func (s *Store) StagedBytes(ctx context.Context) (int64, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return usedMemory(ctx, s.rdb)
	}
	// On a cluster, the fullest master: it is the one that runs out of memory first.
	var mu sync.Mutex
	var most int64
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := usedMemory(ctx, node)
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		return err
	})
	return most, err
}

func usedMemory(ctx context.Context, rdb redis.Cmdable) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("staging: INFO memory has no used_memory")
}

// IndexRelease records that upload id may hold S3 resources to release (a multipart
// upload to abort, or a one-chunk object to delete) once it has ended. It is written
// before the upload ends and removed only when the release succeeded, so a crash or an
// S3 outage in between is retried by cleanup's sweep.
func (s *Store) IndexRelease(ctx context.Context, id string) error {
	// Due only after releaseGrace: the process that ends the upload releases it itself,
	// and the sweep (of any replica) must not do it a second time meanwhile.
	due := s.nowMs() + releaseGrace.Milliseconds()
	return s.rdb.ZAddNX(ctx, s.ix(releaseKey, id), redis.Z{Score: float64(due), Member: id}).Err()
}

// releaseGrace is how long an ending process has to release an upload's S3 resources
// before cleanup's sweep retries.
const releaseGrace = time.Minute

// DueReleases returns up to limit uploads whose release is due.
func (s *Store) DueReleases(ctx context.Context, limit int64) ([]string, error) {
	es, err := s.due(ctx, releaseKey, s.nowMs(), limit)
	return members(es), err
}

// DeferRelease moves upload id's next release attempt to at.
func (s *Store) DeferRelease(ctx context.Context, id string, at time.Time) error {
	return s.rdb.ZAddXX(ctx, s.ix(releaseKey, id), redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err()
}

// DoneRelease removes upload id from the release index.
func (s *Store) DoneRelease(ctx context.Context, id string) error {
	return s.rdb.ZRem(ctx, s.ix(releaseKey, id), id).Err()
}
