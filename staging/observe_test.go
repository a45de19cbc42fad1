package staging_test

import (
	"testing"
	"time"

	"github.com/chunkup/chunkup/staging"
)

// TestClaimReportsReclaim: a claim says whether it took over another worker's expired
// lease (the lease-reclaim metric), and only then.
func TestClaimReportsReclaim(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	id := newUpload(t, s, 4, 2)
	for n := uint32(1); n <= 2; n++ {
		if _, err := stage(t, s, id, n, []byte("abcd"), n == 2); err != nil {
			t.Fatal(err)
		}
	}
	ref := staging.ChunkRef{UploadID: id, N: 1}
	c, err := s.Claim(ctx, ref, "first", 10*time.Second)
	if err != nil || c.Outcome != staging.Claimed || c.Reclaimed {
		t.Fatalf("first claim: %+v %v, want Claimed, not reclaimed", c, err)
	}
	clk.Add(11 * time.Second) // "first" died
	c, err = s.Claim(ctx, ref, "heir", 10*time.Second)
	if err != nil || c.Outcome != staging.Claimed || !c.Reclaimed {
		t.Fatalf("claim after an expired lease: %+v %v, want Claimed and reclaimed", c, err)
	}

	// A lease given back is no reclaim.
	ref2 := staging.ChunkRef{UploadID: id, N: 2}
	if c, _ = s.Claim(ctx, ref2, "a", 10*time.Second); c.Outcome != staging.Claimed {
		t.Fatalf("claim chunk 2: %+v", c)
	}
	if err := s.Release(ctx, ref2, "a", clk.Now()); err != nil {
		t.Fatal(err)
	}
	if c, _ = s.Claim(ctx, ref2, "b", 10*time.Second); c.Outcome != staging.Claimed || c.Reclaimed {
		t.Fatalf("claim after a release: %+v, want Claimed, not reclaimed", c)
	}
}

// TestOutboxOldest reads when the longest-waiting outbox got its event.
func TestOutboxOldest(t *testing.T) {
	s, clk := newStore(t)
	ctx := ctxT(t)
	if _, ok, err := s.OutboxOldest(ctx); ok || err != nil {
		t.Fatalf("empty outbox index: ok=%v err=%v", ok, err)
	}
	first := clk.Now()
	var ids []string
	for i := range 2 {
		id := newUpload(t, s, 4, 1)
		ev := staging.OutboxEvent{ID: staging.NewID(), Type: "t", UploadID: id, Created: clk.Now(), Payload: []byte("{}")}
		if _, err := s.End(ctx, staging.EndRequest{ID: id, Status: staging.StatusAborted, Reason: "test", Event: ev}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i == 0 {
			clk.Add(5 * time.Second)
		}
	}
	got, ok, err := s.OutboxOldest(ctx)
	if err != nil || !ok || !got.Equal(first) {
		t.Fatalf("oldest outbox %v ok=%v err=%v, want %v", got, ok, err, first)
	}
	if err := s.AckOutbox(ctx, ids[0]); err != nil { // not empty yet: it stays, re-scored
		t.Fatal(err)
	}
	evs, _, _ := s.OutboxEvents(ctx, ids[0])
	if err := s.AckOutbox(ctx, ids[0], evs[0].ID); err != nil {
		t.Fatal(err)
	}
	evs, _, _ = s.OutboxEvents(ctx, ids[1])
	if err := s.AckOutbox(ctx, ids[1], evs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.OutboxOldest(ctx); ok || err != nil {
		t.Fatalf("after publishing everything: ok=%v err=%v", ok, err)
	}
}
