package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/stagingtest"
)

// TestOCRAdminCommands drives `chunkup ocr stats`, `ocr dead list` and `ocr dead
// requeue` against a real Redis holding a dead-lettered job.
func TestOCRAdminCommands(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	r := testenv.StartRedis(t)
	store := stagingtest.Open(t, r.Client(t), staging.Config{}).Jobs
	doc := ids.New()
	id, _, err := store.Enqueue(ctx, ocrqueue.NewJob{DocumentID: doc, CorrelationID: "corr-1", Bucket: "b", Key: "k", ContentType: "image/png"})
	if err != nil {
		t.Fatal(err)
	}
	job, err := store.Fetch(ctx, time.Second, time.Minute)
	if err != nil || job == nil || job.ID != id {
		t.Fatalf("fetch: %+v %v", job, err)
	}
	if _, err := store.Fail(ctx, job.ID, job.Token, "not a PNG", ocrqueue.FailDead, time.Now(), 3); err != nil {
		t.Fatal(err)
	}

	cli := func(args ...string) (map[string]any, int, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(append(args, "--redis-url", r.URL()), &out, &errb)
		var v map[string]any
		if code == 0 {
			if err := json.Unmarshal(out.Bytes(), &v); err != nil {
				t.Fatalf("chunkup %v: output is not JSON: %q", args, out.String())
			}
		}
		return v, code, errb.String()
	}
	stats, code, _ := cli("ocr", "stats")
	if code != 0 || stats["dead"] != float64(1) || stats["pending"] != float64(0) {
		t.Fatalf("ocr stats: exit %d, %v; want one dead job", code, stats)
	}
	dead, code, _ := cli("ocr", "dead", "list")
	jobs, _ := dead["jobs"].([]any)
	if code != 0 || dead["total"] != float64(1) || len(jobs) != 1 {
		t.Fatalf("ocr dead list: exit %d, %v", code, dead)
	}
	first := jobs[0].(map[string]any)
	if first["job_id"] != id || first["document_id"] != doc || first["correlation_id"] != "corr-1" ||
		!strings.Contains(first["reason"].(string)+jsonString(first["errors"]), "not a PNG") {
		t.Fatalf("dead job %v does not keep its id, document, correlation id and error", first)
	}
	if _, code, stderr := cli("ocr", "dead", "requeue"); code != 2 || !strings.Contains(stderr, "--all") {
		t.Fatalf("requeue without jobs: exit %d %q, want usage error", code, stderr)
	}
	if v, code, _ := cli("ocr", "dead", "requeue", "--all"); code != 0 || v["requeued"] != float64(1) {
		t.Fatalf("ocr dead requeue --all: exit %d, %v", code, v)
	}
	if stats, _, _ := cli("ocr", "stats"); stats["dead"] != float64(0) || stats["pending"] != float64(1) {
		t.Fatalf("after requeue: %v; want the job pending again", stats)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
