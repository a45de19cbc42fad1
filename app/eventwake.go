package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/chunkup/chunkup/internal/retry"
)

// eventNotices is what an eventWaker listens to (*outbox.Outbox).
type eventNotices interface {
	EventNotices(ctx context.Context) (<-chan struct{}, func(), error)
}

// eventWaker wakes a publisher that runs apart from the roles that record events (the
// API, workers, completer and cleanup) when another process records one: it forwards
// the progress notices that may come with an event (an upload or its document changed
// status) and the process's own wake-ups to the publisher's one wake channel. Without
// it such a publisher finds events by its poll alone (PublisherConfig.Interval, 500 ms
// by default). A wake-up is a hint: a lost one (the subscription down) costs latency.
type eventWaker struct {
	notices eventNotices
	local   <-chan struct{} // this process's own wake-ups (notify.Hub.Events)
	wake    chan struct{}   // the publisher's
	log     *slog.Logger
}

// Run forwards until ctx ends. A subscription that cannot be made is tried again with
// backoff; meanwhile the publisher polls.
func (w *eventWaker) Run(ctx context.Context) {
	for attempt := 1; ; attempt++ {
		notices, stop, err := w.notices.EventNotices(ctx)
		if err == nil {
			w.forwardUntil(ctx, nil, notices)
			stop()
			return
		}
		wait := retry.Backoff(time.Second, 30*time.Second, attempt)
		w.log.Warn("cannot subscribe to progress notices; the publisher finds events by its poll meanwhile", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		w.forwardUntil(ctx, t.C, nil)
		t.Stop()
		if ctx.Err() != nil {
			return
		}
	}
}

// forwardUntil forwards notices and the process's own wake-ups until ctx ends or
// until fires.
func (w *eventWaker) forwardUntil(ctx context.Context, until <-chan time.Time, notices <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-until:
			return
		case v := <-notices:
			w.signal(v)
		case v := <-w.local:
			w.signal(v)
		}
	}
}

// signal passes one wake-up on; one pending is enough.
func (w *eventWaker) signal(struct{}) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
