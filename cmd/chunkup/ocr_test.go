package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/app"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/stagingtest"
)

// TestOCRAdminCommands drives `chunkup ocr stats`, `ocr dead list`, `ocr dead requeue`,
// `ocr purge` and `ocr reprocess` against a real server (API role, OCR on, no workers
// so the queue holds still) through its DocumentService: the commands reach the server
// they are pointed at, never Redis.
func TestOCRAdminCommands(t *testing.T) {
	clearEnv(t)
	ctx := testenv.Context(t, time.Minute)
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	cfg := app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: r.URL(), S3: m.S3Config(), Bucket: bucket,
		ShutdownTimeout: 5 * time.Second, Roles: []string{app.RoleAPI}}
	cfg.OCR.Enabled = true
	addr := runApp(t, cfg).GRPCAddr()

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

	ocrCLI := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append([]string{"ocr"}, append(args, "--server", addr)...)...)
	}
	stats := func() *chunkupv1.GetOCRStatsResponse {
		t.Helper()
		code, out, stderr := ocrCLI("stats", "--json")
		var st chunkupv1.GetOCRStatsResponse
		if code != exitOK || protojson.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("ocr stats --json: exit %d %q %s", code, out, stderr)
		}
		return &st
	}
	if st := stats(); st.Dead != 1 || st.Pending != 0 || len(st.Workers) != 0 {
		t.Fatalf("ocr stats: %v; want one dead job and no workers", st)
	}
	if code, out, _ := ocrCLI("stats"); code != exitOK || !strings.Contains(out, "1 dead") || !strings.Contains(out, "workers: none reporting") {
		t.Fatalf("ocr stats: exit %d\n%s", code, out)
	}
	code, out, _ := ocrCLI("dead", "list", "--json")
	var dead chunkupv1.ListDeadJobsResponse
	if code != exitOK || protojson.Unmarshal([]byte(out), &dead) != nil || dead.Total != 1 || len(dead.Jobs) != 1 {
		t.Fatalf("ocr dead list: exit %d %s", code, out)
	}
	if j := dead.Jobs[0]; j.JobId != id || j.DocumentId != doc || j.CorrelationId != "corr-1" || !strings.Contains(j.Reason, "not a PNG") ||
		len(j.Errors) == 0 || !strings.Contains(j.Errors[0].Error, "not a PNG") {
		t.Fatalf("dead job %v does not keep its id, document, correlation id and error", j)
	}
	if code, _, stderr := ocrCLI("dead", "requeue"); code != exitUsage || !strings.Contains(stderr, "--all") {
		t.Fatalf("requeue without jobs: exit %d %q, want usage error", code, stderr)
	}
	if code, out, _ := ocrCLI("dead", "requeue", "--all"); code != exitOK || !strings.Contains(out, "requeued 1 jobs") {
		t.Fatalf("ocr dead requeue --all: exit %d %s", code, out)
	}
	if st := stats(); st.Dead != 0 || st.Pending != 1 {
		t.Fatalf("after requeue: %v; want the job pending again", st)
	}

	// Purge asks first: a wrong answer purges nothing, the queue's name does.
	old := stdin
	t.Cleanup(func() { stdin = old })
	stdin = strings.NewReader("yes\n")
	if code, _, stderr := ocrCLI("purge", "pending"); code != exitFailure || !strings.Contains(stderr, "Purge 1 pending OCR jobs?") ||
		!strings.Contains(stderr, "not confirmed; nothing purged") {
		t.Fatalf("purge, not confirmed: exit %d %q", code, stderr)
	}
	if st := stats(); st.Pending != 1 {
		t.Fatalf("an unconfirmed purge changed the queue: %v", st)
	}
	stdin = strings.NewReader("pending\n")
	if code, out, stderr := ocrCLI("purge", "pending"); code != exitOK || !strings.Contains(out, "purged 1 pending jobs") {
		t.Fatalf("purge, confirmed: exit %d %q %q", code, out, stderr)
	}
	if st := stats(); st.Pending != 0 {
		t.Fatalf("after the purge: %v", st)
	}
	if code, _, stderr := ocrCLI("purge", "active", "--yes"); code != exitUsage || !strings.Contains(stderr, "pending, delayed or dead") {
		t.Fatalf("purge of jobs in flight: exit %d %q, want a usage error", code, stderr)
	}
	if code, _, stderr := ocrCLI("reprocess", ids.NewUUID()); code != exitFailure || !strings.Contains(stderr, "NotFound") {
		t.Fatalf("reprocess an unknown document: exit %d %q", code, stderr)
	}
	if code, _, stderr := ocrCLI("status", "not-an-id"); code != exitFailure || !strings.Contains(stderr, "InvalidArgument") {
		t.Fatalf("status of a bad id: exit %d %q", code, stderr)
	}
}
