package ocrqueue

import (
	"errors"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// TestMalformedJobsDeadLettered: a pending entry without a usable job record (written by
// a bug, an older version or by hand) is dead-lettered with its reason when fetched,
// never dropped silently and never retried forever.
func TestMalformedJobsDeadLettered(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	client := testenv.StartRedis(t).Client(t)
	s, err := New(client, staging.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		fields map[string]any // nil: no record at all
		reason string
	}{
		{"no record", nil, "no job record or no document id"},
		{"bad attempts", map[string]any{"doc": "d1", "bucket": "b", "key": "k", "attempts": "many"}, `attempts "many"`},
		{"no bucket", map[string]any{"doc": "d2", "key": "k", "attempts": 0}, "no document, bucket or key"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := "bogus" + string(rune('a'+i))
			if tc.fields != nil {
				if err := client.HSet(ctx, rdb.OCRJobKey(id), tc.fields).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := client.LPush(ctx, rdb.OCRPending, id).Err(); err != nil {
				t.Fatal(err)
			}
			j, err := s.Fetch(ctx, time.Second, time.Minute)
			var mal *MalformedJobError
			if j != nil || !errors.As(err, &mal) || mal.JobID != id {
				t.Fatalf("fetch: %+v %v, want a MalformedJobError for %s", j, err, id)
			}
			dead, total, err := s.Dead(ctx, 0, 10)
			if err != nil || total != int64(i+1) {
				t.Fatalf("dead: %d %v", total, err)
			}
			var found *Job
			for _, d := range dead {
				if d.ID == id {
					found = d
				}
			}
			if found == nil || len(found.Errors) == 0 || !contains(found.Errors[len(found.Errors)-1].Error, tc.reason) {
				t.Fatalf("dead job %+v, want its reason %q in the history", found, tc.reason)
			}
			st, _ := s.Stats(ctx)
			if st.Pending != 0 || st.InFlight != 0 {
				t.Fatalf("malformed job still queued: %+v", st)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestReap: the reaper's one sweep moves a retry that is due (and not one that is not),
// gives a job whose worker died between BLMOVE and its lease a lease from now instead
// of reclaiming it at once, and takes back a job whose lease expired, counting a
// reclaim and no attempt.
func TestReap(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	client := testenv.StartRedis(t).Client(t)
	now := time.UnixMilli(1_800_000_000_000)
	s, err := New(client, staging.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	const lease = 10 * time.Second
	enqueue := func(doc string) string {
		t.Helper()
		id, _, err := s.Enqueue(ctx, NewJob{DocumentID: doc, Bucket: "b", Key: doc})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	fetch := func() *Job {
		t.Helper()
		j, err := s.Fetch(ctx, time.Second, lease)
		if err != nil || j == nil {
			t.Fatalf("fetch: %+v %v", j, err)
		}
		return j
	}
	// due and later: failed jobs waiting for their retry, at now+1s and now+1h.
	due, later := enqueue("due"), enqueue("later")
	for _, w := range []struct {
		id string
		at time.Duration
	}{{due, time.Second}, {later, time.Hour}} {
		j := fetch()
		if j.ID != w.id {
			t.Fatalf("fetched %s, want %s", j.ID, w.id)
		}
		if _, err := s.Fail(ctx, j.ID, j.Token, "try again", FailRetry, now.Add(w.at), 5); err != nil {
			t.Fatal(err)
		}
	}
	// expired: fetched and leased by a worker that then stopped.
	expired := enqueue("expired")
	if j := fetch(); j.ID != expired {
		t.Fatalf("fetched %s, want %s", j.ID, expired)
	}
	// orphan: moved to active by a worker that died before taking the lease.
	orphan := enqueue("orphan")
	if err := client.LMove(ctx, rdb.OCRPending, rdb.OCRActive, "RIGHT", "LEFT").Err(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(lease + 2*time.Second)
	moved, got, err := s.Reap(ctx, 100, lease, 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	if moved != 1 || len(got) != 1 || got[0].JobID != expired || got[0].Dead || got[0].Reclaims != 1 || got[0].DocumentID != "expired" {
		t.Fatalf("reap: moved %d, took back %+v; want the due retry moved and the expired lease (only) taken back", moved, got)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// pending: due and expired; active: the orphan, now leased; delayed: later.
	if st.Pending != 2 || st.InFlight != 1 || st.Delayed != 1 {
		t.Fatalf("after the reap: %+v, want 2 pending, 1 in flight, 1 delayed", st)
	}
	if score, err := client.ZScore(ctx, rdb.OCRLease, orphan).Result(); err != nil || int64(score) != now.Add(lease).UnixMilli() {
		t.Fatalf("orphan's lease ends at %v (%v), want %v", int64(score), err, now.Add(lease).UnixMilli())
	}
	// Nothing more is due until the orphan's lease expires; then it is taken back.
	if moved, got, err := s.Reap(ctx, 100, lease, 3, 100); err != nil || moved != 0 || len(got) != 0 {
		t.Fatalf("second reap: moved %d, took back %+v, %v; want nothing", moved, got, err)
	}
	now = now.Add(lease + time.Millisecond)
	if _, got, err := s.Reap(ctx, 100, lease, 3, 100); err != nil || len(got) != 1 || got[0].JobID != orphan {
		t.Fatalf("reap after the orphan's lease: %+v %v, want the orphan taken back", got, err)
	}
}
