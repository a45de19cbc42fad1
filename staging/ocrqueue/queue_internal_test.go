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
