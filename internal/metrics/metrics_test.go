package metrics_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/chunkup/chunkup/internal/metrics"
)

// scrape fetches h's /metrics and parses it.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return fams
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
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

func want(t *testing.T, fams map[string]*dto.MetricFamily, w float64, name string, labels ...string) {
	t.Helper()
	got, ok := value(t, fams, name, labels...)
	if !ok {
		t.Errorf("%s%v: missing", name, labels)
	} else if got != w {
		t.Errorf("%s%v = %v, want %v", name, labels, got, w)
	}
}

func TestDomainSeries(t *testing.T) {
	s := metrics.New(metrics.Options{})
	s.ChunkStaged(false)
	s.ChunkStaged(false)
	s.ChunkStaged(true)
	s.ChunkClaimed(false)
	s.ChunkClaimed(true)
	s.PartUploaded(30 * time.Millisecond)
	s.PartUploaded(2 * time.Second)
	s.UploadCompleted(1000, 3*time.Second)
	s.UploadCompleted(24, 0) // the first chunk's time unknown: not observed
	s.ChunkAcked(4*time.Millisecond, 100, false)
	s.ChunkAcked(2*time.Millisecond, 100, true) // a repeat: timed, its bytes not counted again
	s.UploadCreated()
	s.OCRJobDuration("tesseract", 1500*time.Millisecond)
	s.OCRJobDuration("remote", 200*time.Millisecond)
	s.OCREngineFallback("remote")
	s.UploadEnded("FAILED")
	s.UploadEnded("EXPIRED")
	s.UploadEnded("ABORTED")
	s.UploadEnded("COMPLETED") // not an "ended otherwise": ignored
	s.OCRJob("succeeded")
	s.OCRJob("dead")

	fams := scrape(t, s.Handler())
	want(t, fams, 2, "chunkup_chunks_staged_total", "outcome", "new")
	want(t, fams, 1, "chunkup_chunks_staged_total", "outcome", "duplicate")
	want(t, fams, 2, "chunkup_chunks_claimed_total")
	want(t, fams, 1, "chunkup_lease_reclaims_total")
	want(t, fams, 2, "chunkup_parts_uploaded_total")
	want(t, fams, 2, "chunkup_part_upload_duration_seconds")
	want(t, fams, 2, "chunkup_completions_total", "outcome", "completed")
	want(t, fams, 1, "chunkup_completions_total", "outcome", "failed")
	want(t, fams, 1024, "chunkup_bytes_uploaded_total")
	want(t, fams, 1, "chunkup_upload_first_chunk_to_completed_seconds")
	want(t, fams, 2, "chunkup_chunk_ack_duration_seconds")
	want(t, fams, 100, "chunkup_bytes_received_total")
	want(t, fams, 1, "chunkup_uploads_created_total")
	want(t, fams, 1, "chunkup_ocr_job_duration_seconds", "engine", "tesseract")
	want(t, fams, 1, "chunkup_ocr_job_duration_seconds", "engine", "remote")
	want(t, fams, 1, "chunkup_ocr_engine_fallbacks_total", "engine", "remote")
	want(t, fams, 1, "chunkup_uploads_expired_total")
	want(t, fams, 1, "chunkup_uploads_aborted_total")
	want(t, fams, 1, "chunkup_ocr_jobs_total", "outcome", "succeeded")
	want(t, fams, 1, "chunkup_ocr_jobs_total", "outcome", "dead")
	if h := fams["chunkup_part_upload_duration_seconds"].Metric[0].Histogram; h.GetSampleSum() < 2.0 || h.GetSampleSum() > 2.1 {
		t.Errorf("part latency sum %v, want 2.03", h.GetSampleSum())
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing: the Go and process collectors must be registered", name)
		}
	}
}

func TestScrapeGauges(t *testing.T) {
	s := metrics.New(metrics.Options{ScrapeTimeout: 200 * time.Millisecond})
	calls := 0
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.StagedBytes(func(context.Context) (int64, error) { calls++; return 12345, nil }))
	must(s.OutboxDepth(func(context.Context) (int64, error) { return 3, nil }))
	must(s.OutboxOldestAge(func(context.Context) (time.Duration, error) { return 1500 * time.Millisecond, nil }))
	must(s.OCRQueueDepth(func(context.Context) (map[string]int64, error) {
		return map[string]int64{"pending": 4, "dead": 1}, nil
	}))
	// A read that fails and one that hangs: both are left out, counted, and the scrape
	// still answers within the timeout.
	must(s.PendingChunks(func(context.Context) (int64, error) { return 0, errors.New("redis down") }))
	must(s.OCRQueueOldestAge(func(ctx context.Context) (time.Duration, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}))
	if err := s.StagedBytes(func(context.Context) (int64, error) { return 0, nil }); !errors.Is(err, metrics.ErrRegistered) {
		t.Fatalf("second StagedBytes: %v, want ErrRegistered", err)
	}
	if calls != 0 {
		t.Fatal("a scrape-time gauge was read before any scrape")
	}

	began := time.Now()
	fams := scrape(t, s.Handler())
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("scrape took %v despite a 200ms gauge timeout", d)
	}
	if calls != 1 {
		t.Fatalf("staged bytes read %d times in one scrape", calls)
	}
	want(t, fams, 12345, "chunkup_staged_bytes")
	want(t, fams, 3, "chunkup_outbox_depth")
	want(t, fams, 1.5, "chunkup_outbox_oldest_age_seconds")
	want(t, fams, 4, "chunkup_ocr_queue_depth", "state", "pending")
	want(t, fams, 1, "chunkup_ocr_queue_depth", "state", "dead")
	if _, ok := fams["chunkup_chunks_pending"]; ok {
		t.Error("a gauge whose read failed was exported")
	}
	if _, ok := fams["chunkup_ocr_queue_oldest_age_seconds"]; ok {
		t.Error("a gauge whose read timed out was exported")
	}
	// The error counter is bumped during the scrape; the next one shows it.
	fams = scrape(t, s.Handler())
	if v, _ := value(t, fams, "chunkup_scrape_gauge_errors_total", "gauge", "chunkup_chunks_pending"); v < 1 {
		t.Errorf("failed read not counted: %v", v)
	}
	if v, _ := value(t, fams, "chunkup_scrape_gauge_errors_total", "gauge", "chunkup_ocr_queue_oldest_age_seconds"); v < 1 {
		t.Errorf("timed-out read not counted: %v", v)
	}
}

// TestSetsAreIndependent: two Sets (two Apps in one process) register the same names
// without panicking, and count separately.
func TestSetsAreIndependent(t *testing.T) {
	a, b := metrics.New(metrics.Options{}), metrics.New(metrics.Options{})
	a.UploadCompleted(1, time.Second)
	want(t, scrape(t, a.Handler()), 1, "chunkup_completions_total", "outcome", "completed")
	want(t, scrape(t, b.Handler()), 0, "chunkup_completions_total", "outcome", "completed")
}

// TestNilSet: a nil *Set records nothing and never panics.
func TestNilSet(t *testing.T) {
	var s *metrics.Set
	s.ChunkStaged(true)
	s.ChunkClaimed(true)
	s.PartUploaded(time.Second)
	s.UploadCompleted(1, time.Second)
	s.ChunkAcked(time.Second, 1, false)
	s.UploadCreated()
	s.OCRJobDuration("tesseract", time.Second)
	s.OCREngineFallback("remote")
	s.UploadEnded("FAILED")
	s.OCRJob("failed")
	s.InitializeGRPC(nil)
	if err := s.StagedBytes(func(context.Context) (int64, error) { return 0, nil }); err != nil {
		t.Fatal(err)
	}
}

func TestHelpAndNames(t *testing.T) {
	s := metrics.New(metrics.Options{})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "# HELP chunkup_") && len(strings.Fields(line)) < 4 {
			t.Errorf("series without help: %s", line)
		}
	}
}
