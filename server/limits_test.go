package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMemoryGate: reservations fit under the limit; one that does not waits for a
// release, or fails with a MemoryError (RESOURCE_EXHAUSTED) after maxWait; one larger
// than the limit is granted only when nothing is held.
func TestMemoryGate(t *testing.T) {
	ctx := context.Background()
	g := newMemoryGate(100, 0, 50*time.Millisecond)
	if err := g.reserve(ctx, "a", 60); err != nil {
		t.Fatal(err)
	}
	var me *MemoryError
	if err := g.reserve(ctx, "a", 60); !errors.As(err, &me) {
		t.Fatalf("over the limit: %v; want a MemoryError after the wait", err)
	}
	waited := make(chan error, 1)
	slow := newMemoryGate(100, 0, time.Minute)
	_ = slow.reserve(ctx, "a", 60)
	go func() { waited <- slow.reserve(ctx, "a", 60) }()
	slow.release("a", 30)
	if err := <-waited; err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if h := slow.Held(); h != 90 {
		t.Errorf("held %d, want 90", h)
	}
	big := newMemoryGate(100, 0, time.Minute)
	if err := big.reserve(ctx, "a", 150); err != nil || big.Held() != 150 {
		t.Fatalf("a reservation over the limit with nothing held: %v (held %d)", err, big.Held())
	}
	if status := toStatus("", me); status == nil || !strings.Contains(status.Error(), "ResourceExhausted") || !strings.Contains(status.Error(), "limit of 100 bytes") || strings.Contains(status.Error(), "--") {
		t.Errorf("MemoryError becomes %v", status)
	}
}

// TestDecodeGate: acquisitions fit under the limit; one that does not waits for a
// release; one larger than the limit is granted when nothing is held.
func TestDecodeGate(t *testing.T) {
	g := newDecodeGate(100)
	g.acquire(60)
	got := make(chan struct{})
	go func() { g.acquire(60); close(got) }()
	select {
	case <-got:
		t.Fatal("acquired over the limit")
	case <-time.After(50 * time.Millisecond):
	}
	g.release(60)
	<-got
	g.release(60)
	g.acquire(150) // alone: granted
	g.release(150)
	if !g.sem.TryAcquire(g.limit) {
		t.Fatal("bytes held after every release")
	}
}

// TestMemoryGateTenantShare: one tenant's streams, however many wait, hold at most its
// share; another tenant still finds room at once; the tenant over its share is told so.
func TestMemoryGateTenantShare(t *testing.T) {
	ctx := context.Background()
	// Room for 4 messages of 25; a tenant may hold 3 (the default: all but one).
	g := newMemoryGate(100, 75, 50*time.Millisecond)
	for i := range 3 {
		if err := g.reserve(ctx, "hog", 25); err != nil {
			t.Fatalf("hog's reservation %d: %v", i+1, err)
		}
	}
	var me *MemoryError
	if err := g.reserve(ctx, "hog", 25); !errors.As(err, &me) || !me.Tenant {
		t.Fatalf("hog over its share: %v; want a tenant MemoryError", err)
	}
	if msg := toStatus("", me).Error(); !strings.Contains(msg, "this tenant's streams hold its share of 75 bytes") || strings.Contains(msg, "--") {
		t.Errorf("the tenant's refusal says %q", msg)
	}
	granted := make(chan error, 1)
	go func() { granted <- g.reserve(ctx, "other", 25) }()
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("another tenant: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("another tenant waited behind the first one's reservations")
	}
	g.release("hog", 25)
	if err := g.reserve(ctx, "hog", 25); err != nil {
		t.Fatalf("hog after a release: %v", err)
	}
	if h := g.Held(); h != 100 {
		t.Errorf("held %d, want 100", h)
	}
}
