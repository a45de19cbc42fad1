package chunkworker

import (
	"context"
	"testing"
	"time"
)

// A sweep asleep past an idle index comes back within one interval once its worker
// takes work: a chunk it fails is due again soon, and only a sweep finds it.
func TestSleepIsCutShortByWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	busy := make(chan struct{}, 1)
	done := make(chan bool)
	go func() { done <- sleep(ctx, time.Hour, 10*time.Millisecond, busy) }()
	nudge(busy)
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("sleep reported its context ended")
		}
	case <-ctx.Done():
		t.Fatal("an hour's sleep was not cut short by work")
	}

	// A sleep ends with its context.
	short, stop := context.WithCancel(ctx)
	stop()
	if sleep(short, time.Hour, time.Hour, busy) {
		t.Fatal("sleep outlived its context")
	}
}
