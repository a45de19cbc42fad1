package uploads

import (
	"errors"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/chunkup/chunkup/staging/outbox"
)

// TestClaimPartial: a completed partial upload is claimed by one final upload at a
// time, and only the claimant the caller names as ended can be replaced.
func TestClaimPartial(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	s, client := newStore(t)
	upload := func(partial bool, status staging.Status) string {
		t.Helper()
		id := ids.New()
		if _, err := s.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 4, ExpectedSize: 4, Total: 1, Tenant: "t", Partial: partial}); err != nil {
			t.Fatal(err)
		}
		if err := client.HSet(ctx, rdb.StateKey(id), "status", string(status)).Err(); err != nil {
			t.Fatal(err)
		}
		return id
	}
	claimed := func(id string) string {
		t.Helper()
		up, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return up.ClaimedBy
	}
	p := upload(true, staging.StatusCompleted)
	for _, tc := range []struct {
		name                    string
		id, tenant, final, from string
		want                    func(error) bool
		after                   string // the claimant afterwards
	}{
		{"no such upload", ids.New(), "t", "F1", "", func(err error) bool { return errors.Is(err, staging.ErrNotFound) }, ""},
		{"another tenant's", p, "u", "F1", "", func(err error) bool { return errors.Is(err, staging.ErrNotFound) }, ""},
		{"not partial", upload(false, staging.StatusCompleted), "t", "F1", "", isState(staging.StatusCompleted), ""},
		{"not complete", upload(true, staging.StatusActive), "t", "F1", "", isState(staging.StatusActive), ""},
		{"claimed", p, "t", "F1", "", noErr, "F1"},
		{"claimed again by its claimant", p, "t", "F1", "", noErr, "F1"},
		{"held by another", p, "t", "F2", "", isHeldBy("F1"), "F1"},
		{"held by another than the ended one", p, "t", "F2", "F3", isHeldBy("F1"), "F1"},
		{"taken from the ended one", p, "t", "F2", "F1", noErr, "F2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.ClaimPartial(ctx, tc.id, tc.tenant, tc.final, tc.from); !tc.want(err) {
				t.Fatalf("got %v", err)
			}
			if tc.after != "" && claimed(tc.id) != tc.after {
				t.Fatalf("claimed by %q, want %q", claimed(tc.id), tc.after)
			}
		})
	}
}

func noErr(err error) bool { return err == nil }

func isState(s staging.Status) func(error) bool {
	return func(err error) bool {
		var se *staging.StateError
		return errors.As(err, &se) && se.Status == s
	}
}

func isHeldBy(final string) func(error) bool {
	return func(err error) bool {
		var ce *ClaimedError
		return errors.As(err, &ce) && ce.Final == final
	}
}

// TestClaimPartialWaitsForReplicas: with replicas required, a claim counts only once
// they have it; a Redis without them answers ErrNotReplicated (the door's 503), and
// the claimant that tries again, after its final upload ended, gets the partial.
func TestClaimPartialWaitsForReplicas(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	client := testenv.StartRedis(t).Client(t)
	cfg := staging.Config{MinReplicas: 1, ReplicaTimeout: 50 * time.Millisecond}
	ob, err := outbox.New(client, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(client, cfg, ob, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := ids.New()
	if _, err := s.Create(ctx, staging.NewUpload{ID: id, Bucket: "b", Key: "k", ChunkSize: 4, ExpectedSize: 4, Total: 1, Tenant: "t", Partial: true}); err != nil && !errors.Is(err, staging.ErrNotReplicated) {
		t.Fatal(err)
	}
	if err := client.HSet(ctx, rdb.StateKey(id), "status", string(staging.StatusCompleted)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimPartial(ctx, id, "t", "F1", ""); !errors.Is(err, staging.ErrNotReplicated) {
		t.Fatalf("claim without a replica: %v, want ErrNotReplicated", err)
	}
	// The unconfirmed claim is written: another final upload is refused.
	if err := s.ClaimPartial(ctx, id, "t", "F3", ""); !isHeldBy("F1")(err) {
		t.Fatalf("claim by another: %v, want held by F1", err)
	}
	if err := s.ClaimPartial(ctx, id, "t", "F2", "F1"); !errors.Is(err, staging.ErrNotReplicated) {
		t.Fatalf("claim from the ended claimant: %v, want ErrNotReplicated", err)
	}
	if up, err := s.Get(ctx, id); err != nil || up.ClaimedBy != "F2" {
		t.Fatalf("claimed by %q (%v), want F2", up.ClaimedBy, err)
	}
}
