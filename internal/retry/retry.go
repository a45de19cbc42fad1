// Package retry holds what every chunkup retry loop shares, the SDK's included: how long
// to wait before the next attempt (Backoff, Pacer), and the marks that say an error is
// or is not worth retrying (PermanentError, TransientError). It imports no AWS package,
// so the SDK (package client) links none; which S3 errors are worth retrying is
// s3store.Permanent's decision.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// PermanentError marks an error as not worth retrying (see s3store.Permanent).
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// TransientError marks an error as worth retrying although S3 answered with a 4xx
// status: a chunk whose checksum S3 refused was checked before it was sent, so the
// bytes were corrupted on the way and the next attempt carries them intact.
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// Backoff returns the wait before attempt n (from 1): a random duration up to
// base·2^(n-1), capped at max ("full jitter", so retries of many clients spread out).
func Backoff(base, max time.Duration, n int) time.Duration {
	d := max
	if n >= 1 && n < 32 {
		if e := base << (n - 1); e > 0 && e < max {
			d = e
		}
	}
	return rand.N(d) + 1
}

// Pacer paces a background loop: its interval while things work, a growing jittered
// backoff while they fail (Redis down, say), so a broken dependency costs neither CPU
// nor a log line per interval. It logs once when failures start and once when they end.
type Pacer struct {
	What     string // e.g. "sweep pending chunks"
	Interval time.Duration
	Max      time.Duration // zero means 30 s
	// Idle, when longer than Interval, is the longest a sweep waits after a round that
	// found nothing due: it sleeps until the next entry it knows of falls due, within
	// [Interval, Idle], instead of polling an idle index every Interval (see Swept).
	Idle   time.Duration
	Logger interface {
		Warn(string, ...any)
		Info(string, ...any)
	}
	failures  int
	firstFail time.Time
}

// Next returns how long to wait after a round that ended with err.
func (p *Pacer) Next(err error) time.Duration {
	if err == nil {
		if p.failures > 0 && p.Logger != nil {
			p.Logger.Info(p.What+" works again", "failed_rounds", p.failures, "for", time.Since(p.firstFail).Round(time.Millisecond))
		}
		p.failures = 0
		return p.Interval
	}
	if p.failures == 0 {
		p.firstFail = time.Now()
		if p.Logger != nil {
			p.Logger.Warn(p.What+" failing; backing off until it works again", "err", err)
		}
	}
	p.failures++
	max := p.Max
	if max == 0 {
		max = 30 * time.Second
	}
	return Backoff(p.Interval, max, p.failures)
}

// Swept returns how long to wait after a sweep that ended with err and found n items
// due, when the next item it knows of falls due in next (negative: it knows of none).
// A sweep that found work, or failed, is paced as by Next. One that found nothing waits
// until next, at least Interval and at most Idle: an entry added meanwhile whose
// notice was lost waits up to Idle for its sweep, so the loop should cut a long wait
// short when its process takes work (the work it fails is due again soon).
func (p *Pacer) Swept(err error, n int, next time.Duration) time.Duration {
	d := p.Next(err)
	if err != nil || n > 0 || p.Idle <= p.Interval {
		return d
	}
	if next < 0 {
		return p.Idle
	}
	return min(max(next, p.Interval), p.Idle)
}

// Nudge tells a sweep asleep past an idle index that its process took work.
type Nudge chan struct{}

// NewNudge returns a Nudge.
func NewNudge() Nudge { return make(Nudge, 1) }

// Work says the process took work: call it after writing any due time the work sets
// (a retry's), so that the sweep it wakes reads it. It never blocks.
func (n Nudge) Work() {
	select {
	case n <- struct{}{}:
	default:
	}
}

// Sweep runs sweep until ctx ends, waiting after each round as Swept says. Work on n
// meanwhile cuts a wait past an idle index (not a failure's backoff) to one Interval:
// work this process takes may set due times, which only a sweep finds.
func (p *Pacer) Sweep(ctx context.Context, n Nudge, sweep func(context.Context) (found int, next time.Duration, err error)) {
	for {
		select { // work taken before this round is in what it reads
		case <-n:
		default:
		}
		found, next, err := sweep(ctx)
		if ctx.Err() != nil {
			return
		}
		d := p.Swept(err, found, next)
		wake := n
		if err != nil || d <= p.Interval {
			wake = nil
		}
		if !sleep(ctx, d, p.Interval, wake) {
			return
		}
	}
}

// sleep waits d, or returns false when ctx ends first. A receive on wake while more
// than interval is left cuts the rest to interval.
func sleep(ctx context.Context, d, interval time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	end := time.Now().Add(d)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-wake:
			if time.Until(end) > interval {
				t.Reset(interval)
			}
			wake = nil
		}
	}
}
