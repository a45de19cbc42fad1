package outbox

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// progressHub shares one Redis subscription to the progress channel among every
// watcher of this process, whatever upload each follows: 1,000 watchers cost one Redis
// connection, not 1,000. Notices are routed by upload id; a watcher that falls behind
// loses notices rather than slowing the others (each re-reads the state anyway, and
// periodically, so a lost notice costs latency only).
type progressHub struct {
	c *rdb.Conn

	mu       sync.Mutex
	ps       *redis.PubSub // nil until the first watcher, or after the subscription failed
	watchers map[string]map[chan string]struct{}
	// recorders get the notices of every upload that recorded an event (EventNotices).
	recorders map[chan string]struct{}
}

// watcherBuffer is how many notices a watcher may have pending before newer ones are
// dropped for it.
const watcherBuffer = 16

// Progress subscribes to upload id's progress notices and returns once the process's
// subscription is confirmed by Redis, so that a change made after it returns is
// noticed. A notice only says "something changed" (its payload is the new status when
// the upload ended, else "received" or "uploaded"): subscribers re-read the state, so a
// lost notice costs nothing but latency.
func (o *Outbox) Progress(ctx context.Context, id string) (*staging.Subscription, error) {
	return o.progress.subscribe(ctx, id)
}

// EventNotices subscribes to the notices of every upload whose change recorded an event
// in its outbox (it ended, or its document changed), from any process, and returns once
// Redis has confirmed the subscription. A publisher running apart from the roles that
// record events wakes on them rather than on its interval. The payload is the upload's
// id; as with Progress, a lost notice costs latency only.
func (o *Outbox) EventNotices(ctx context.Context) (*staging.Subscription, error) {
	return o.progress.subscribe(ctx, "")
}

// subscribe adds a watcher of upload id's notices, or with id "" of every notice that
// recorded an event.
func (h *progressHub) subscribe(ctx context.Context, id string) (*staging.Subscription, error) {
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	ch := make(chan string, watcherBuffer)
	h.mu.Lock()
	if id == "" {
		h.recorders[ch] = struct{}{}
	} else {
		if h.watchers[id] == nil {
			h.watchers[id] = map[chan string]struct{}{}
		}
		h.watchers[id][ch] = struct{}{}
	}
	h.mu.Unlock()
	var once sync.Once
	return staging.NewSubscription(ch, func() error {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.recorders, ch)
			if w := h.watchers[id]; w != nil {
				delete(w, ch)
				if len(w) == 0 {
					delete(h.watchers, id)
				}
			}
			close(ch)
		})
		return nil
	}), nil
}

// start opens the shared subscription unless it is open, and waits until Redis has
// confirmed it.
func (h *progressHub) start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ps != nil {
		return nil
	}
	// Classic pub/sub even on a cluster: the progress channel is one for all uploads,
	// published from any slot and delivered to subscribers on any node.
	ps := h.c.Client.Subscribe(context.WithoutCancel(ctx), rdb.ProgressChannel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return rdb.Classify(err)
	}
	h.ps = ps
	if h.watchers == nil {
		h.watchers = map[string]map[chan string]struct{}{}
		h.recorders = map[chan string]struct{}{}
	}
	go h.route(ps.Channel())
	return nil
}

// route delivers the notices of the shared subscription to the watchers of their
// upload. It runs until the subscription is closed.
func (h *progressHub) route(msgs <-chan *redis.Message) {
	for msg := range msgs {
		id, status, ok := strings.Cut(msg.Payload, " ")
		if !ok {
			continue
		}
		h.mu.Lock()
		for ch := range h.watchers[id] {
			select {
			case ch <- status:
			default: // behind: it re-reads the state on its own schedule
			}
		}
		if recorded(status) {
			for ch := range h.recorders {
				select {
				case ch <- id:
				default: // behind: one wake-up pending is as good as many
				}
			}
		}
		h.mu.Unlock()
	}
}

// recorded reports whether a notice's status comes from a change that recorded an
// event: every notice but a chunk's ("received", "uploaded") does (the scripts that
// write an outbox publish the upload's new status, or "doc:" and the document's).
func recorded(status string) bool { return status != "received" && status != "uploaded" }

// close ends the shared subscription; watchers' channels stay open until they close.
func (h *progressHub) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ps == nil {
		return nil
	}
	err := h.ps.Close()
	h.ps = nil
	if errors.Is(err, redis.ErrClosed) {
		err = nil
	}
	return err
}
