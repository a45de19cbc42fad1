package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	base, max := 100*time.Millisecond, 2*time.Second
	for n := 1; n <= 40; n++ {
		limit := min(base<<(n-1), max)
		if n >= 32 {
			limit = max
		}
		for range 50 {
			if d := Backoff(base, max, n); d <= 0 || d > limit {
				t.Fatalf("Backoff(n=%d) = %v, want in (0, %v]", n, d, limit)
			}
		}
	}
}

func TestSweptSleepsPastAnIdleIndex(t *testing.T) {
	const interval, idle = time.Second, 10 * time.Second
	for _, tc := range []struct {
		name string
		err  error
		n    int
		next time.Duration
		want time.Duration // -1: a backoff in (0, 2 s]
	}{
		{"found work", nil, 3, 8 * time.Second, interval},
		{"more due now", nil, 0, 0, interval},
		{"next due soon", nil, 0, 300 * time.Millisecond, interval},
		{"next due in 4 s", nil, 0, 4 * time.Second, 4 * time.Second},
		{"next due in a minute", nil, 0, time.Minute, idle},
		{"empty index", nil, 0, -1, idle},
		{"failed", errors.New("redis down"), 0, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Pacer{Interval: interval, Idle: idle}
			got := p.Swept(tc.err, tc.n, tc.next)
			if tc.want < 0 {
				if got <= 0 || got > 2*interval {
					t.Fatalf("Swept = %v, want a first backoff in (0, %v]", got, 2*interval)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("Swept = %v, want %v", got, tc.want)
			}
		})
	}
	// Without Idle, a sweep is paced by Interval alone.
	p := Pacer{Interval: interval}
	if got := p.Swept(nil, 0, -1); got != interval {
		t.Fatalf("Swept without Idle = %v, want %v", got, interval)
	}
}

// A sweep asleep past an idle index sweeps again within one interval once its process
// takes work (a chunk it fails is due again soon, and only a sweep finds it), and the
// loop ends with its context.
func TestSweepWakesOnWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	p := Pacer{Interval: 10 * time.Millisecond, Idle: time.Hour}
	n := NewNudge()
	rounds := make(chan int, 10)
	done := make(chan struct{})
	round := 0
	go func() {
		defer close(done)
		p.Sweep(ctx, n, func(context.Context) (int, time.Duration, error) {
			round++
			rounds <- round
			return 0, -1, nil // an empty index: the next wait is Idle, an hour
		})
	}()
	if r := <-rounds; r != 1 {
		t.Fatalf("first round %d", r)
	}
	n.Work()
	select {
	case <-rounds:
	case <-ctx.Done():
		t.Fatal("an hour's wait past an empty index was not cut short by work")
	}
	cancel()
	<-done
}
