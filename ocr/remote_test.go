package ocr_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/staging/documents"
)

// fakeRemote is a remote OCR engine in the test: it answers a fixed text while up, and
// 503 to everything (health included) while down.
type fakeRemote struct {
	mu     sync.Mutex
	down   bool
	status int // when set, recognize answers it with an error body
	calls  int
	last   ocr.RemoteRequest
}

func (f *fakeRemote) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/healthz":
		w.WriteHeader(http.StatusOK)
	case "/v1/recognize":
		f.calls++
		if err := json.NewDecoder(r.Body).Decode(&f.last); err != nil {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		if f.status != 0 {
			w.WriteHeader(f.status)
			_, _ = w.Write([]byte(`{"error":"cannot read this file"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(ocr.RemoteResponse{Pages: []ocr.Page{{Text: "REMOTE ENGINE TEXT", Words: 3, Confidence: 97}}})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeRemote) set(fn func(f *fakeRemote)) { f.mu.Lock(); fn(f); f.mu.Unlock() }

func (f *fakeRemote) recognized() (int, ocr.RemoteRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.last
}

// engineMetrics records what the worker and the fallback count.
type engineMetrics struct {
	mu        sync.Mutex
	fallbacks map[string]int
	durations map[string]int
}

func newEngineMetrics() *engineMetrics {
	return &engineMetrics{fallbacks: map[string]int{}, durations: map[string]int{}}
}
func (m *engineMetrics) OCRJob(string) {}
func (m *engineMetrics) OCRJobDuration(engine string, _ time.Duration) {
	m.mu.Lock()
	m.durations[engine]++
	m.mu.Unlock()
}
func (m *engineMetrics) OCREngineFallback(engine string) {
	m.mu.Lock()
	m.fallbacks[engine]++
	m.mu.Unlock()
}
func (m *engineMetrics) counts() (fallbacks, durations map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return map[string]int{"remote": m.fallbacks["remote"]}, map[string]int{"remote": m.durations["remote"], "tesseract": m.durations["tesseract"]}
}

// syncBuffer is a log sink safe for the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// engines starts fake as a remote engine and returns it with a Tesseract engine for
// its fallback.
func engines(t *testing.T, fake *fakeRemote) (*ocr.Remote, *ocr.Tesseract) {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	remote, err := ocr.NewRemote(ocr.RemoteConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	tess, err := ocr.NewTesseract(ocr.TesseractConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return remote, tess
}

// resultEngine reads the engine and text of a document's stored OCR result.
func (e *env) resultEngine(t *testing.T, id string) (engine, text string) {
	t.Helper()
	d := e.doc(t, id)
	if d.OCR == nil {
		t.Fatalf("document %s (%s) has no OCR result: %s", id, d.Status, d.Error)
	}
	var res struct {
		Engine string `json:"engine"`
		Text   string `json:"text"`
	}
	if err := json.Unmarshal(e.object(t, d.OCR.ResultKey), &res); err != nil {
		t.Fatal(err)
	}
	return res.Engine, res.Text
}

// TestRemoteEngineOutageFallsBackAndRecovers runs jobs on a remote engine (an HTTP
// server in the test) with Tesseract as its fallback: while the remote engine answers,
// it reads the documents; during its outage jobs run on the real Tesseract, each
// counted and logged, without asking the remote engine again before the probe
// interval; once it is back and the interval has passed, jobs run on it again.
func TestRemoteEngineOutageFallsBackAndRecovers(t *testing.T) {
	e := newEnv(t)
	fake := &fakeRemote{}
	remote, tess := engines(t, fake)
	var logs syncBuffer
	m := newEngineMetrics()
	const probe = time.Minute
	eng := ocr.NewFallback(remote, tess, ocr.FallbackConfig{ProbeInterval: probe, Now: e.clk.Now, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	cfg := e.config()
	cfg.Metrics = m
	q, w := e.queue(t, cfg), e.worker(t, eng, cfg)
	doc := func(words string) string {
		t.Helper()
		u := e.upload(t, "image/png", testdocs.PNG(words))
		if err := q.Handoff(ctxT(t), u, false); err != nil {
			t.Fatal(err)
		}
		e.runOne(t, w)
		return u.ID
	}

	png := testdocs.PNG("REMOTE 1")
	u := e.upload(t, "image/png", png)
	if err := q.Handoff(ctxT(t), u, false); err != nil {
		t.Fatal(err)
	}
	e.runOne(t, w)
	if engine, text := e.resultEngine(t, u.ID); engine != "remote" || text != "REMOTE ENGINE TEXT" {
		t.Fatalf("with the remote engine up: result by %q: %q", engine, text)
	}
	calls, req := fake.recognized()
	if calls != 1 || req.ContentType != "image/png" || !bytes.Equal(req.File, png) || req.DocumentID != u.ID {
		t.Fatalf("the remote engine got %d calls, the last for %s (%s, %d bytes)", calls, req.DocumentID, req.ContentType, len(req.File))
	}

	// Outage: jobs run on Tesseract, which really reads the image.
	fake.set(func(f *fakeRemote) { f.down = true })
	id := doc("FALLBACK WORKS 77")
	if engine, text := e.resultEngine(t, id); engine != "tesseract" || !strings.Contains(text, "77") || !strings.Contains(text, "FALLBACK") {
		t.Fatalf("during the outage: result by %q: %q", engine, text)
	}
	if st := eng.Status(); st.Healthy || st.Active != "tesseract" || st.Engine != "remote" || !st.Fallback || !strings.Contains(st.Err, "503") {
		t.Fatalf("status during the outage: %+v", st)
	}
	if !strings.Contains(logs.String(), "OCR engine remote unavailable") || !strings.Contains(logs.String(), "runs on the fallback engine") {
		t.Fatalf("no log line says so:\n%s", logs.String())
	}
	// Within the probe interval the remote engine is not asked again.
	doc("SECOND FALLBACK 78")
	if calls, _ := fake.recognized(); calls != 1 {
		t.Fatalf("the remote engine was asked %d times, want 1 (it is down and the probe interval has not passed)", calls)
	}
	fallbacks, _ := m.counts()
	if fallbacks["remote"] != 2 {
		t.Fatalf("fallbacks counted %v, want 2", fallbacks)
	}

	// Recovery: back up, and the probe interval passed.
	fake.set(func(f *fakeRemote) { f.down = false })
	e.clk.Add(probe)
	id = doc("BACK AGAIN")
	if engine, _ := e.resultEngine(t, id); engine != "remote" {
		t.Fatalf("after the remote engine came back: result by %q", engine)
	}
	if st := eng.Status(); !st.Healthy || st.Active != "remote" {
		t.Fatalf("status after recovery: %+v", st)
	}
	if !strings.Contains(logs.String(), "OCR engine remote is available again") {
		t.Fatalf("no log line says it is back:\n%s", logs.String())
	}
	fallbacks, durations := m.counts()
	if fallbacks["remote"] != 2 || durations["remote"] != 2 || durations["tesseract"] != 2 {
		t.Fatalf("fallbacks %v, job durations by engine %v; want 2 fallbacks, 2 jobs on each engine", fallbacks, durations)
	}
}

// TestRemoteEngineWithoutFallback: with no fallback, a job the remote engine cannot
// take now waits (released to the delayed set) without counting an attempt; a file the
// engine refuses (4xx) fails for good.
func TestRemoteEngineWithoutFallback(t *testing.T) {
	e := newEnv(t)
	fake := &fakeRemote{down: true}
	remote, _ := engines(t, fake)
	eng := ocr.NewFallback(remote, nil, ocr.FallbackConfig{Now: e.clk.Now, Logger: testLogger()})
	cfg := e.config()
	q, w := e.queue(t, cfg), e.worker(t, eng, cfg)
	u := e.upload(t, "image/png", testdocs.PNG("WAITING"))
	if err := q.Handoff(ctxT(t), u, false); err != nil {
		t.Fatal(err)
	}
	j := e.runOne(t, w)
	if st := e.stats(t); st.Delayed != 1 || st.Dead != 0 {
		t.Fatalf("queue %+v, want the job waiting in the delayed set", st)
	}
	if got, err := e.stores.Jobs.Job(ctxT(t), j.ID); err != nil || got.Attempts != 0 {
		t.Fatalf("job %+v %v, want no attempt counted", got, err)
	}

	fake.set(func(f *fakeRemote) { f.down, f.status = false, http.StatusUnprocessableEntity })
	e.clk.Add(time.Hour) // past the retry's due time and the probe interval
	if err := e.reaper(t, cfg).Tick(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.runOne(t, w)
	if d := e.doc(t, u.ID); d.Status != documents.Failed || !strings.Contains(d.Error, "cannot read this file") {
		t.Fatalf("document %s (%s), want failed with the engine's reason", d.Status, d.Error)
	}
	if st := e.stats(t); st.Dead != 1 {
		t.Fatalf("queue %+v, want the job dead-lettered at once", st)
	}
}

// TestRemoteEngineUnreachable: a remote engine nobody listens for is unavailable, not
// failing the document, and its health check says so.
func TestRemoteEngineUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	remote, err := ocr.NewRemote(ocr.RemoteConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	_, err = remote.Recognize(context.Background(), testdocs.PNG("X"), ocr.PNG)
	var ue *ocr.UnavailableError
	if !errors.As(err, &ue) || ue.Engine != "remote" {
		t.Fatalf("recognize: %v, want an UnavailableError", err)
	}
	if err := remote.Health(context.Background()); err == nil {
		t.Fatal("health of an engine nobody listens for: nil")
	}
	if _, err := ocr.NewRemote(ocr.RemoteConfig{URL: "ftp://x"}); err == nil {
		t.Fatal("an ftp URL was accepted")
	}
}

// TestWorkerReportsItsEngine: a running worker reports its engine and status in Redis
// for `chunkup ocr stats` (here a remote engine that is down, so jobs run on Tesseract),
// and withdraws the report when it stops.
func TestWorkerReportsItsEngine(t *testing.T) {
	e := newEnv(t)
	fake := &fakeRemote{down: true}
	remote, tess := engines(t, fake)
	cfg := e.config()
	cfg.InstanceID = "ocr-7"
	w := e.worker(t, ocr.NewFallback(remote, tess, ocr.FallbackConfig{Now: e.clk.Now, Logger: testLogger()}), cfg)
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var got []string
	waitUntil(t, "the worker's report", func() bool {
		reports, err := e.stores.Jobs.Reports(ctxT(t), time.Minute)
		if err != nil || len(reports) != 1 {
			return false
		}
		r := reports[0]
		got = []string{r.InstanceID, r.Engine, r.ActiveEngine}
		return r.InstanceID == "ocr-7" && r.Engine == "remote" && r.ActiveEngine == "tesseract" && !r.EngineHealthy &&
			r.Fallback && r.Concurrency == 2 && r.Processing == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if reports, err := e.stores.Jobs.Reports(ctxT(t), time.Minute); err != nil || len(reports) != 0 {
		t.Fatalf("reports after the worker stopped: %+v %v (last seen %v)", reports, err, got)
	}
}

// waitUntil polls cond until it holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
