package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/outbox"
)

// Writer is the part of kafka-go's Writer the publisher uses.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

var _ Writer = (*kafka.Writer)(nil)

// Outbox is the part of the outbox store the publisher uses.
type Outbox interface {
	Due(ctx context.Context, limit int64) ([]string, error)
	EventsOf(ctx context.Context, ids []string) (map[string][]staging.OutboxEvent, map[string][]string, error)
	AckAll(ctx context.Context, acked map[string][]string) error
}

var _ Outbox = (*outbox.Outbox)(nil)

// Notices is where a publisher learns that another process recorded an event: one
// running apart from the roles that record them would otherwise find them only at its
// interval.
type Notices interface {
	EventNotices(ctx context.Context) (*staging.Subscription, error)
}

var _ Notices = (*outbox.Outbox)(nil)

// NewKafkaWriter returns a kafka-go writer for events: keyed by upload id (so one
// upload's events keep their order in one partition), acknowledged by all in-sync
// replicas, sent without waiting to fill batches.
func NewKafkaWriter(brokers []string, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr:                   kafka.TCP(brokers...),
		Topic:                  topic,
		Balancer:               &kafka.Hash{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           5 * time.Millisecond,
		MaxAttempts:            2,
		AllowAutoTopicCreation: true,
	}
}

// PublisherConfig tunes a Publisher. Zero values mean the documented defaults.
type PublisherConfig struct {
	// Interval is how often outboxes are checked without a wake-up. Zero means 500 ms.
	Interval time.Duration
	// Timeout bounds one write to Kafka. Zero means 10 s.
	Timeout time.Duration
	// RetryBase and RetryMax bound the backoff while Kafka fails. Zero means 500 ms and 30 s.
	RetryBase, RetryMax time.Duration
	// Batch is how many uploads' outboxes one pass drains. Zero means 100.
	Batch  int64
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c PublisherConfig) Validate() error {
	if c.Interval < 0 || c.Timeout < 0 || c.RetryBase < 0 || c.RetryMax < 0 || c.Batch < 0 {
		return errors.New("events: publisher settings must not be negative")
	}
	return nil
}

// Publisher drains outboxes to Kafka. An event leaves its outbox only after the broker
// acknowledged it, so delivery is at least once; while Kafka is down events wait in
// Redis and uploads go on completing.
type Publisher struct {
	cfg     PublisherConfig
	store   Outbox
	w       Writer
	wake    <-chan struct{}
	notices Notices
}

// NewPublisher returns a Publisher writing with w. A receive on wake (the process's
// notify.Hub Events; nil for none) asks for a pass at once, and so does a notice from
// notices (nil for none: every process that records events runs beside this one).
func NewPublisher(store Outbox, w Writer, wake <-chan struct{}, notices Notices, cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 500 * time.Millisecond
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = 30 * time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Publisher{cfg: cfg, store: store, w: w, wake: wake, notices: notices}, nil
}

// subscribeTimeout bounds one attempt to subscribe to notices, so that a Redis that
// does not answer delays a pass no more than that (the next pass tries again).
const subscribeTimeout = 2 * time.Second

// Run publishes until ctx ends. After a failed pass it waits with exponential backoff
// (and jitter) instead of its interval, and logs when Kafka is reachable again.
func (p *Publisher) Run(ctx context.Context) error {
	var sub *staging.Subscription
	var notices <-chan string // nil (never ready) until subscribed
	defer func() {
		if sub != nil {
			_ = sub.Close()
		}
	}()
	failures := 0
	for {
		// Subscribed before the pass, so that an event recorded after the pass read the
		// outboxes is noticed.
		if p.notices != nil && sub == nil {
			sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
			if s, err := p.notices.EventNotices(sctx); err == nil {
				sub, notices = s, s.C
			} else if ctx.Err() == nil {
				p.cfg.Logger.Debug("no notices of recorded events yet; checking outboxes every interval", "err", err, "interval", p.cfg.Interval)
			}
			cancel()
		}
		err := p.Drain(ctx)
		wait := p.cfg.Interval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			wait = retry.Backoff(p.cfg.RetryBase, p.cfg.RetryMax, failures)
			p.cfg.Logger.Warn("publishing events failed; they wait in the outbox", "err", err, "retry_in", wait, "attempt", failures)
		case failures > 0:
			p.cfg.Logger.Info("publishing events again", "after_failures", failures)
			failures = 0
		}
		t := time.NewTimer(wait)
		woken := false
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-p.wake:
			woken = true
		case _, ok := <-notices:
			woken = ok
			if !ok { // the subscription ended: subscribe again before the next pass
				sub, notices = nil, nil
			}
		case <-t.C:
		}
		if woken {
			t.Stop()
			if failures > 0 {
				// Kafka was failing: a notice is no reason to hammer it; keep the backoff.
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}
	}
}

// Drain publishes every due outbox once, in one write, and acknowledges what the broker
// accepted. The outboxes are read in one round trip and acknowledged in two, however
// many there are.
func (p *Publisher) Drain(ctx context.Context) error {
	ids, err := p.store.Due(ctx, p.cfg.Batch)
	if err != nil || len(ids) == 0 {
		return err
	}
	byUpload, malformed, err := p.store.EventsOf(ctx, ids)
	if err != nil {
		return err
	}
	// What leaves the outboxes: malformed records (logged and dropped), an empty outbox's
	// index entry, and below, the events the broker took.
	acked := map[string][]string{}
	var msgs []kafka.Message
	var events []staging.OutboxEvent
	for _, id := range ids {
		if bad := malformed[id]; len(bad) > 0 {
			p.cfg.Logger.Error("dropping malformed outbox records", "upload_id", id, "event_ids", bad)
		}
		evs := byUpload[id]
		if len(evs) == 0 || len(malformed[id]) > 0 {
			acked[id] = malformed[id]
		}
		// One upload's events go out in the order they were recorded (they share a
		// partition, keyed by upload id, so consumers see that order).
		slices.SortFunc(evs, func(a, b staging.OutboxEvent) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
		})
		for _, ev := range evs {
			events = append(events, ev)
			msgs = append(msgs, kafka.Message{
				Key: []byte(ev.UploadID), Value: ev.Payload, Time: ev.Created,
				Headers: EventHeaders{Type: ev.Type, ID: ev.ID, ContentType: ContentTypeJSON,
					CorrelationID: ev.CorrelationID}.Kafka(),
			})
		}
	}
	var werr error
	var perMsg kafka.WriteErrors
	if len(msgs) > 0 {
		wctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		werr = p.w.WriteMessages(wctx, msgs...)
		cancel()
		if werr != nil && !errors.As(werr, &perMsg) {
			werr = fmt.Errorf("write %d events: %w", len(msgs), werr)
			events = nil // none taken
		}
	}
	published := 0
	for i, ev := range events {
		if perMsg == nil || perMsg[i] == nil {
			acked[ev.UploadID] = append(acked[ev.UploadID], ev.ID)
			published++
		}
	}
	if len(acked) > 0 {
		// The acknowledgement uses a context of its own: an event the broker took must
		// leave the outbox even if shutdown began meanwhile, or it is published twice.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := p.store.AckAll(actx, acked); err != nil {
			return err
		}
	}
	if perMsg != nil {
		return fmt.Errorf("write events: %d of %d failed: %w", len(msgs)-published, len(msgs), werr)
	}
	return werr
}
