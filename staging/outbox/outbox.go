// Package outbox stores the events that wait to be published to Kafka, one hash per
// upload (document events go to their upload's too), and the pub/sub channels on which
// an upload's progress is announced to watchers. Events are written by the scripts
// that change an upload's or a document's state, in the same atomic step (see Record
// and Bracket), and leave the outbox only once the broker took them.
package outbox

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/notify"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// Outbox reads and acknowledges outbox events, and indexes the outboxes that hold some.
type Outbox struct {
	c        *rdb.Conn
	index    *rdb.Index
	hub      *notify.Hub
	progress *progressHub
}

// New returns the Outbox on client. hub (may be nil) hears of every event recorded.
func New(client redis.UniversalClient, cfg staging.Config, hub *notify.Hub) (*Outbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := rdb.Open(client, cfg)
	return &Outbox{c: c, index: rdb.NewIndex(c, rdb.OutboxIndex), hub: hub, progress: &progressHub{c: c}}, nil
}

// Record encodes ev as the value of its outbox hash field, for a script that records it:
// "type\ncorrelation\nunix-ns\npayload". Nanoseconds, so that one upload's events
// recorded in the same millisecond keep their order when published.
func Record(ev staging.OutboxEvent) string {
	return ev.Type + "\n" + ev.CorrelationID + "\n" + strconv.FormatInt(ev.Created.UnixNano(), 10) + "\n" + string(ev.Payload)
}

func parseRecord(id, uploadID, rec string) (staging.OutboxEvent, bool) {
	f := strings.SplitN(rec, "\n", 4)
	if len(f) != 4 {
		return staging.OutboxEvent{}, false
	}
	return staging.OutboxEvent{ID: id, Type: f[0], CorrelationID: f[1], UploadID: uploadID,
		Created: time.Unix(0, rdb.I64(f[2])), Payload: []byte(f[3])}, true
}

// Bracket runs record, which records events in upload id's outbox (a script's atomic
// step) and reports whether it did, between two index writes: before, so a crash
// between the two leaves an entry that leads nowhere rather than an event nobody
// finds; and after, so a publisher that found the outbox empty in between and dropped
// the entry cannot leave the new event unindexed. Then the publisher is woken.
func (o *Outbox) Bracket(ctx context.Context, id string, record func() (bool, error)) error {
	if err := o.index.Add(ctx, id, id, o.c.Now()); err != nil {
		return err
	}
	recorded, err := record()
	if err != nil || !recorded {
		return err
	}
	if err := o.index.Add(ctx, id, id, o.c.Now()); err != nil {
		return err
	}
	o.hub.EventRecorded()
	return nil
}

// IndexIn queues, in pipeline p, the index write that Bracket makes before and after
// recording, for a caller that pipelines its record with them: on one Redis, commands
// of a pipeline run in order, so the write queued before the record is done before it
// (and a record refused for memory finds the write before it refused too). The caller
// calls Recorded once the write after the record is done.
func (o *Outbox) IndexIn(ctx context.Context, p redis.Pipeliner, id string) *redis.IntCmd {
	return o.index.AddIn(ctx, p, id, id, o.c.Now())
}

// Recorded wakes the publisher after an event was recorded with IndexIn's writes.
func (o *Outbox) Recorded() { o.hub.EventRecorded() }

// Due returns up to limit uploads whose outbox a publisher should drain now.
func (o *Outbox) Due(ctx context.Context, limit int64) ([]string, error) {
	return o.index.Due(ctx, limit)
}

// Events returns the events waiting in upload id's outbox. Malformed records are
// reported separately so the caller can log and drop them.
func (o *Outbox) Events(ctx context.Context, id string) (events []staging.OutboxEvent, malformed []string, err error) {
	evs, bad, err := o.EventsOf(ctx, []string{id})
	return evs[id], bad[id], err
}

// EventsOf is Events for each of ids, in one round trip (one per node on a cluster).
func (o *Outbox) EventsOf(ctx context.Context, ids []string) (events map[string][]staging.OutboxEvent, malformed map[string][]string, err error) {
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	if _, err := o.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, rdb.OutboxKey(id))
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	events = make(map[string][]staging.OutboxEvent, len(ids))
	malformed = map[string][]string{}
	for i, id := range ids {
		for eid, rec := range cmds[i].Val() {
			if ev, ok := parseRecord(eid, id, rec); ok {
				events[id] = append(events[id], ev)
			} else {
				malformed[id] = append(malformed[id], eid)
			}
		}
	}
	return events, malformed, nil
}

// Ack removes published events from upload id's outbox and, when it is empty, the
// upload from the outbox index (see AckAll).
func (o *Outbox) Ack(ctx context.Context, id string, eventIDs ...string) error {
	return o.AckAll(ctx, map[string][]string{id: eventIDs})
}

// AckAll removes published events from their outboxes (upload id → event ids) and
// each outbox that is then empty from the outbox index. An entry goes only when its
// outbox is empty, and comes back if an event arrived meanwhile, so none is left
// unindexed; the only write that can be refused after a removal (Redis out of memory)
// is that rare re-add.
//
// The removals and the counts go in one round trip (each count follows its removal on
// the same key, in order on any Redis); so do the index removals and the second counts
// on a single Redis, where a pipeline runs in order on one connection (on a cluster the
// index is on other nodes, and the counts must follow the removals).
func (o *Outbox) AckAll(ctx context.Context, acked map[string][]string) error {
	counts := make(map[string]*redis.IntCmd, len(acked))
	if _, err := o.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id, eids := range acked {
			if len(eids) > 0 {
				p.HDel(ctx, rdb.OutboxKey(id), eids...)
			}
			counts[id] = p.HLen(ctx, rdb.OutboxKey(id))
		}
		return nil
	}); err != nil {
		return err
	}
	var empty []string
	for id, c := range counts {
		if c.Val() == 0 {
			empty = append(empty, id)
		}
	}
	if len(empty) == 0 {
		return nil
	}
	drop := func(p redis.Pipeliner) error {
		for _, id := range empty {
			o.index.DoneIn(ctx, p, id, id)
		}
		return nil
	}
	recount := func(p redis.Pipeliner) error {
		for _, id := range empty {
			counts[id] = p.HLen(ctx, rdb.OutboxKey(id))
		}
		return nil
	}
	if o.c.Cluster {
		if _, err := o.c.Client.Pipelined(ctx, drop); err != nil {
			return err
		}
		if _, err := o.c.Client.Pipelined(ctx, recount); err != nil {
			return err
		}
	} else if _, err := o.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		_ = drop(p)
		return recount(p)
	}); err != nil {
		return err
	}
	for _, id := range empty {
		if counts[id].Val() > 0 {
			if err := o.index.Set(ctx, id, id, o.c.Now()); err != nil {
				return err
			}
		}
	}
	return nil
}

// Defer moves upload id's next publish attempt to at.
func (o *Outbox) Defer(ctx context.Context, id string, at time.Time) error {
	return o.index.Defer(ctx, id, id, at)
}

// Len is how many uploads have events waiting to be published.
func (o *Outbox) Len(ctx context.Context) (int64, error) { return o.index.Len(ctx) }

// Oldest returns when the upload (or document) that has waited longest got events to
// publish; ok is false when no outbox waits. The score is set when the first event is
// recorded, so it is a lower bound on the oldest event's wait. For scrape-time gauges.
func (o *Outbox) Oldest(ctx context.Context) (time.Time, bool, error) { return o.index.Oldest(ctx) }

// Now is the store's clock reading.
func (o *Outbox) Now() time.Time { return o.c.Now() }

// Close releases the progress subscription the outbox shares among watchers.
func (o *Outbox) Close() error { return o.progress.close() }
