package e2e

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/internal/tracing"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
	"github.com/chunkup/chunkup/upload"
)

// scrapeMetrics reads and parses the process's /metrics over HTTP.
func scrapeMetrics(t *testing.T, a *running) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricValue is the value of the first series of name whose labels include labels
// (name/value pairs): a counter's or gauge's value, a histogram's sample count.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsAfterUpload uploads a three-chunk file through a process with every role
// and Kafka, then scrapes /metrics over HTTP and checks the named series, with each
// staging mode: staging every chunk, each is staged and claimed by a worker; adaptive,
// chunks written through to S3 are neither (a chunk may still be staged when a part is
// slow on a busy machine, and is then counted as staged and claimed).
func TestMetricsAfterUpload(t *testing.T) {
	for _, mode := range []string{upload.StagingAlways, upload.StagingAdaptive} {
		t.Run(mode, func(t *testing.T) { testMetricsAfterUpload(t, mode) })
	}
}

func testMetricsAfterUpload(t *testing.T, mode string) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	cfg := withKafka(e.config(), k)
	cfg.Upload.ChunkSize = 5 * MiB
	cfg.Upload.Staging = mode
	a := e.start(t, cfg)
	c := e.client(t, a)
	const chunks = 3
	data := randomBytes(2*5*MiB+4321, 77)
	up, err := c.Upload(ctx(t), reader(data), client.WithSize(int64(len(data))), client.WithName("m.bin"))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	if up.TotalChunks != chunks {
		t.Fatalf("%d chunks, want %d", up.TotalChunks, chunks)
	}
	waitOutboxEmpty(t, a.Outbox())

	// Counters are bumped right after the state they count is written; poll briefly.
	var fams map[string]*dto.MetricFamily
	waitFor(t, "the completion and the published event in /metrics", func() bool {
		fams = scrapeMetrics(t, a)
		done, _ := metricValue(fams, "chunkup_completions_total", "outcome", "completed")
		depth, ok := metricValue(fams, "chunkup_outbox_depth")
		return done == 1 && ok && depth == 0
	})
	staged, _ := metricValue(fams, "chunkup_chunks_staged_total", "outcome", "new")
	through, _ := metricValue(fams, "chunkup_chunks_staged_total", "outcome", "written_through")
	if staged+through != chunks || (mode == upload.StagingAlways && through != 0) {
		t.Errorf("%v chunks staged and %v written through; want %d in all (none written through when staging always)", staged, through, chunks)
	}
	t.Logf("%s: %v chunks staged, %v written through", mode, staged, through)
	for _, tc := range []struct {
		name   string
		labels []string
		check  func(float64) bool
		want   string
	}{
		{"chunkup_chunks_staged_total", []string{"outcome", "duplicate"}, eq(0), "0"},
		// A chunk staged while its write-through's part upload went on is recorded by
		// that upload, not claimed.
		{"chunkup_chunks_claimed_total", nil, func(v float64) bool { return v == staged || (mode == upload.StagingAdaptive && v < staged) }, "== chunks staged"},
		{"chunkup_lease_reclaims_total", nil, eq(0), "0"},
		{"chunkup_parts_uploaded_total", nil, eq(chunks), "== chunks"},
		{"chunkup_part_upload_duration_seconds", nil, eq(chunks), "count == chunks"},
		{"chunkup_completions_total", []string{"outcome", "completed"}, eq(1), "1"},
		{"chunkup_completions_total", []string{"outcome", "failed"}, eq(0), "0"},
		{"chunkup_uploads_expired_total", nil, eq(0), "0"},
		{"chunkup_outbox_depth", nil, eq(0), "0 after publish"},
		{"chunkup_outbox_oldest_age_seconds", nil, eq(0), "0 after publish"},
		{"chunkup_chunks_pending", nil, eq(0), "0 after upload"},
		{"chunkup_staged_bytes", nil, func(v float64) bool { return v >= 0 }, "present"},
		{"chunkup_chunk_ack_duration_seconds", nil, eq(chunks), "count == chunks"},
		{"chunkup_bytes_received_total", nil, eq(float64(len(data))), "== the file's size"},
		{"chunkup_bytes_uploaded_total", nil, eq(float64(len(data))), "== the file's size"},
		{"chunkup_upload_first_chunk_to_completed_seconds", nil, eq(1), "count 1"},
		{"chunkup_uploads_created_total", nil, eq(1), "1"},
		{"chunkup_uploads_active", nil, eq(0), "0 once completed"},
		{"grpc_server_handled_total", []string{"grpc_method", "UploadChunk", "grpc_code", "OK"}, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"grpc_server_handled_total", []string{"grpc_method", "CreateUpload", "grpc_code", "OK"}, eq(1), "1"},
		{"grpc_server_handling_seconds", []string{"grpc_method", "CreateUpload"}, eq(1), "count 1"},
		{"go_goroutines", nil, func(v float64) bool { return v > 0 }, "> 0"},
		{"process_resident_memory_bytes", nil, func(v float64) bool { return v > 0 }, "> 0"},
	} {
		v, ok := metricValue(fams, tc.name, tc.labels...)
		switch {
		case !ok:
			t.Errorf("%s%v is missing from /metrics", tc.name, tc.labels)
		case !tc.check(v):
			t.Errorf("%s%v = %v, want %s", tc.name, tc.labels, v, tc.want)
		}
	}
	// Every domain series is documented.
	for name, f := range fams {
		if strings.HasPrefix(name, "chunkup_") && f.GetHelp() == "" {
			t.Errorf("%s has no help text", name)
		}
	}
}

func eq(w float64) func(float64) bool { return func(v float64) bool { return v == w } }

// lockedBuffer is a log sink shared by the process's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(l.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestCorrelationIDFlows: a correlation id set in the SDK reaches the upload
// (GetUpload), the request's log lines, its trace span, and the UploadCompleted event's
// Kafka header.
func TestCorrelationIDFlows(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	cfg := withKafka(e.config(), k)
	var logs lockedBuffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	cfg.Observe.Tracing = &tracing.Provider{TracerProvider: tp, Propagator: propagation.TraceContext{}}
	a := e.start(t, cfg)
	c := e.client(t, a)

	const corr = "order-4711-Ab"
	data := randomBytes(chunk+999, 88)
	up, err := c.Upload(ctx(t), reader(data), client.WithCorrelationID(corr))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	if got := getUpload(t, c, up.UploadId).CorrelationId; got != corr {
		t.Fatalf("GetUpload correlation_id %q, want %q", got, corr)
	}

	waitOutboxEmpty(t, a.Outbox())
	evs := eventsFor(allEvents(t, k), up.UploadId, "chunkup.v1.UploadCompleted")
	if len(evs) != 1 || evs[0].CorrelationID != corr {
		t.Fatalf("UploadCompleted events %+v: want one with correlation id %q", evs, corr)
	}

	// The span of CreateUpload (and of each stream) carries the id.
	found := map[string]bool{}
	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == server.CorrelationIDAttribute && kv.Value.AsString() == corr {
				found[s.Name()] = true
			}
		}
	}
	for _, name := range []string{"chunkup.v1.UploadService/CreateUpload", "chunkup.v1.UploadService/UploadChunk"} {
		if !found[name] {
			t.Errorf("no %s span with %s=%q (spans with it: %v)", name, server.CorrelationIDAttribute, corr, found)
		}
	}

	// The logging interceptor's line for CreateUpload has it, with the trace id.
	var createLine map[string]any
	for _, l := range logs.lines() {
		if l["grpc.method"] == "CreateUpload" {
			createLine = l
		}
	}
	if createLine == nil {
		t.Fatal("no log line for CreateUpload")
	}
	if createLine["correlation_id"] != corr || createLine["trace_id"] == nil || createLine["trace_id"] == "" {
		t.Fatalf("CreateUpload log line %v: want correlation_id %q and a trace_id", createLine, corr)
	}

	// Without an id from the caller the server makes one, and logs and stores the same.
	up2, err := c.Upload(ctx(t), reader([]byte("no correlation id")))
	if err != nil {
		t.Fatal(err)
	}
	if up2.CorrelationId == "" {
		t.Fatal("the server made no correlation id")
	}
	var logged []any
	for _, l := range logs.lines() {
		if l["grpc.method"] == "CreateUpload" {
			logged = append(logged, l["correlation_id"])
		}
	}
	if len(logged) != 2 || logged[1] != up2.CorrelationId {
		t.Fatalf("CreateUpload log lines carry correlation ids %v, want the second to be the stored %q", logged, up2.CorrelationId)
	}
}

// TestLeaseReclaimMetric: a worker that takes over a dead worker's expired lease counts
// a lease reclaim.
func TestLeaseReclaimMetric(t *testing.T) {
	e := newEnv(t)
	api := e.start(t, e.config("api"))
	c := e.client(t, api)
	data := randomBytes(4096, 99)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Upload.UploadId
	if err := c.Send(ctx(t), created.Upload, reader(data)); err != nil {
		t.Fatal(err)
	}
	// A "worker" claims the chunk and dies: its lease runs out.
	cl, err := api.Uploads().Chunks().Claim(ctx(t), staging.ChunkRef{UploadID: id, N: 1}, "dead-worker", 300*time.Millisecond)
	if err != nil || cl.Outcome != uploads.Claimed {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	time.Sleep(400 * time.Millisecond)

	w := e.start(t, e.config("worker", "completer"))
	final, err := c.Wait(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, final, data)
	fams := scrapeMetrics(t, w)
	for name, want := range map[string]float64{
		"chunkup_lease_reclaims_total": 1, "chunkup_chunks_claimed_total": 1, "chunkup_parts_uploaded_total": 1,
	} {
		if v, ok := metricValue(fams, name); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if v, ok := metricValue(scrapeMetrics(t, api), "chunkup_chunks_staged_total", "outcome", "new"); !ok || v != 1 {
		t.Errorf("api process: chunks staged %v, want 1", v)
	}
}
