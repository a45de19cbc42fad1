// Package metrics defines every Prometheus series chunkup exports, in one place (see
// docs/observability.md for the list). A Set owns its own registry, so several
// processes (Apps) in one Go process, and tests, never collide; nothing here is
// package-global.
//
// Packages that record metrics declare a narrow interface of the methods they call and
// take it in their Config; *Set implements all of them. Every method is safe on a nil
// *Set (it records nothing), so "no metrics" needs no special case.
//
// Counters and histograms are updated in memory on the hot path. Gauges that need a
// Redis round trip (staged bytes, outbox depth and age, pending chunks, OCR queue
// depth) are never updated per chunk: they are read at scrape time, all of them within
// one bounded timeout (ScrapeTimeout), by a custom collector.
package metrics

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Namespace prefixes every domain series.
const Namespace = "chunkup"

// Outcomes of a staged chunk (label outcome of chunkup_chunks_staged_total).
const (
	StagedNew       = "new"
	StagedDuplicate = "duplicate"
	// StagedWrittenThrough: stored in S3 before the acknowledgement (adaptive staging),
	// not staged in Redis.
	StagedWrittenThrough = "written_through"
)

// Outcomes of a completion (label outcome of chunkup_completions_total).
const (
	CompletionCompleted = "completed"
	CompletionFailed    = "failed"
)

// DefaultScrapeTimeout bounds the Redis reads of one scrape.
const DefaultScrapeTimeout = 2 * time.Second

// Set is one process's metrics and their registry.
type Set struct {
	reg  *prometheus.Registry
	grpc *grpcprom.ServerMetrics

	chunksStaged   *prometheus.CounterVec
	chunkAck       prometheus.Histogram
	bytesReceived  prometheus.Counter
	created        prometheus.Counter
	bytesUploaded  prometheus.Counter
	completeTime   prometheus.Histogram
	ocrDuration    *prometheus.HistogramVec
	ocrFallbacks   *prometheus.CounterVec
	chunksClaimed  prometheus.Counter
	leaseReclaims  prometheus.Counter
	partsUploaded  prometheus.Counter
	partLatency    prometheus.Histogram
	completions    *prometheus.CounterVec
	expired        prometheus.Counter
	aborted        prometheus.Counter
	ocrJobs        *prometheus.CounterVec
	gaugeErrors    *prometheus.CounterVec
	scrapeGauges   *scrapeCollector
	registerGauges sync.Mutex
}

// Options tune a Set. Zero values mean the defaults.
type Options struct {
	// ScrapeTimeout bounds the Redis reads of one scrape. Zero means 2 s.
	ScrapeTimeout time.Duration
	// PartLatencyBuckets are the buckets (seconds) of the part upload latency
	// histogram. Nil means 10 ms to about 80 s, doubling.
	PartLatencyBuckets []float64
}

// New returns a Set with its own registry holding the Go runtime and process
// collectors, the gRPC server metrics and chunkup's domain series.
func New(opts Options) *Set {
	if opts.ScrapeTimeout <= 0 {
		opts.ScrapeTimeout = DefaultScrapeTimeout
	}
	if opts.PartLatencyBuckets == nil {
		opts.PartLatencyBuckets = prometheus.ExponentialBuckets(0.01, 2, 14)
	}
	s := &Set{reg: prometheus.NewRegistry()}
	s.grpc = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets([]float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}),
	))
	s.chunksStaged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "chunks_staged_total",
		Help: "Chunks acknowledged to clients, by outcome: new (staged in Redis), written_through (stored in S3 before the acknowledgement, never staged) or duplicate (a repeat acknowledged again, not staged or stored twice).",
	}, []string{"outcome"})
	s.chunkAck = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "chunk_ack_duration_seconds",
		Help:    "Time from receiving a chunk on an UploadChunk stream to acknowledging it (checked, staged durably or stored, duplicates included).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	s.bytesReceived = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "bytes_received_total",
		Help: "Bytes of chunks acknowledged to clients as new (repeats acknowledged again are not counted).",
	})
	s.created = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "uploads_created_total",
		Help: "Uploads created (a repeated create of the same client_node_id is not counted).",
	})
	s.bytesUploaded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "bytes_uploaded_total",
		Help: "Bytes stored in S3 as completed objects, counted by the completer when it completes an upload.",
	})
	s.completeTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "upload_first_chunk_to_completed_seconds",
		Help:    "Time from an upload's first chunk (staged or stored) to its completion, per completed upload.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
	s.ocrDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "ocr_job_duration_seconds",
		Help:    "Time of an OCR job that reached a decision, from taking the document to the decision, by the engine that recognized it.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
	}, []string{"engine"})
	s.ocrFallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "ocr_engine_fallbacks_total",
		Help: "OCR jobs the configured engine could not take (unavailable) that ran on the fallback engine, by the configured engine.",
	}, []string{"engine"})
	s.chunksClaimed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "chunks_claimed_total",
		Help: "Staged chunks leased by a worker for upload to S3.",
	})
	s.leaseReclaims = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "lease_reclaims_total",
		Help: "Claims that took over another worker's expired lease (that worker died or stalled).",
	})
	s.partsUploaded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "parts_uploaded_total",
		Help: "Chunks uploaded to S3 and recorded as parts (a one-chunk upload's PutObject counts as one).",
	})
	s.partLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "part_upload_duration_seconds",
		Help:    "Time to upload one recorded part: reading the staged bytes from Redis and the S3 UploadPart (or PutObject).",
		Buckets: opts.PartLatencyBuckets,
	})
	s.completions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "completions_total",
		Help: "Uploads finalized, by outcome: completed (object written, event recorded) or failed (the upload ended FAILED).",
	}, []string{"outcome"})
	s.expired = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "uploads_expired_total",
		Help: "Idle uploads expired by cleanup (S3 multipart upload aborted, staged chunks dropped).",
	})
	s.aborted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "uploads_aborted_total",
		Help: "Uploads aborted by clients.",
	})
	s.ocrJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "ocr_jobs_total",
		Help: "OCR jobs finished by a worker, by outcome.",
	}, []string{"outcome"})
	s.gaugeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "scrape_gauge_errors_total",
		Help: "Scrape-time gauge reads that failed or timed out (the gauge is left out of that scrape).",
	}, []string{"gauge"})
	s.scrapeGauges = &scrapeCollector{timeout: opts.ScrapeTimeout, errors: s.gaugeErrors}
	s.chunksStaged.WithLabelValues(StagedNew)
	s.chunksStaged.WithLabelValues(StagedDuplicate)
	s.completions.WithLabelValues(CompletionCompleted)
	s.completions.WithLabelValues(CompletionFailed)

	s.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		s.grpc, s.chunksStaged, s.chunkAck, s.bytesReceived, s.created, s.bytesUploaded, s.completeTime,
		s.ocrDuration, s.ocrFallbacks, s.chunksClaimed, s.leaseReclaims, s.partsUploaded, s.partLatency,
		s.completions, s.expired, s.aborted, s.ocrJobs, s.gaugeErrors, s.scrapeGauges,
	)
	return s
}

// Registry is the Set's registry, to register more collectors or gather in tests.
func (s *Set) Registry() *prometheus.Registry { return s.reg }

// Handler serves the registry in the Prometheus text format (and OpenMetrics, with
// exemplars, to scrapers that ask for it).
func (s *Set) Handler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		Registry: s.reg, EnableOpenMetrics: true, Timeout: s.scrapeGauges.timeout + 3*time.Second,
	})
}

// GRPCServerInterceptors returns the go-grpc-middleware prometheus interceptors that
// record grpc_server_* series; counters and the latency histogram carry the trace id
// as an exemplar when the call is traced.
func (s *Set) GRPCServerInterceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	ex := grpcprom.WithExemplarFromContext(exemplar)
	return s.grpc.UnaryServerInterceptor(ex), s.grpc.StreamServerInterceptor(ex)
}

// InitializeGRPC pre-creates the grpc_server_* series (at zero) for every method of srv,
// so they exist before the first call.
func (s *Set) InitializeGRPC(srv *grpc.Server) {
	if s != nil {
		s.grpc.InitializeMetrics(srv)
	}
}

func exemplar(ctx context.Context) prometheus.Labels {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return prometheus.Labels{"trace_id": sc.TraceID().String()}
	}
	return nil
}

// ChunkStaged records a chunk acknowledged to a client; duplicate when it repeated one
// already staged or uploaded.
func (s *Set) ChunkStaged(duplicate bool) {
	if s == nil {
		return
	}
	if duplicate {
		s.chunksStaged.WithLabelValues(StagedDuplicate).Inc()
	} else {
		s.chunksStaged.WithLabelValues(StagedNew).Inc()
	}
}

// ChunkAcked records a chunk acknowledged on a stream d after it was received, with
// size bytes; duplicate when it repeated one the server had (its bytes are not
// counted as received).
func (s *Set) ChunkAcked(d time.Duration, size int64, duplicate bool) {
	if s == nil {
		return
	}
	s.chunkAck.Observe(d.Seconds())
	if !duplicate {
		s.bytesReceived.Add(float64(size))
	}
}

// UploadCreated records an upload created.
func (s *Set) UploadCreated() {
	if s == nil {
		return
	}
	s.created.Inc()
}

// ChunkWrittenThrough records a chunk acknowledged to a client once written through to
// S3; duplicate when it had been recorded meanwhile.
func (s *Set) ChunkWrittenThrough(duplicate bool) {
	if s == nil {
		return
	}
	if duplicate {
		s.chunksStaged.WithLabelValues(StagedDuplicate).Inc()
	} else {
		s.chunksStaged.WithLabelValues(StagedWrittenThrough).Inc()
	}
}

// ChunkClaimed records a won claim; reclaimed when it replaced another worker's
// expired lease.
func (s *Set) ChunkClaimed(reclaimed bool) {
	if s == nil {
		return
	}
	s.chunksClaimed.Inc()
	if reclaimed {
		s.leaseReclaims.Inc()
	}
}

// PartUploaded records a part uploaded and recorded, and how long its upload took.
func (s *Set) PartUploaded(d time.Duration) {
	if s == nil {
		return
	}
	s.partsUploaded.Inc()
	s.partLatency.Observe(d.Seconds())
}

// UploadCompleted records an upload finalized as COMPLETED: its size, and the time from
// its first chunk to its completion (not observed when zero: unknown).
func (s *Set) UploadCompleted(size int64, sinceFirstChunk time.Duration) {
	if s == nil {
		return
	}
	s.completions.WithLabelValues(CompletionCompleted).Inc()
	s.bytesUploaded.Add(float64(size))
	if sinceFirstChunk > 0 {
		s.completeTime.Observe(sinceFirstChunk.Seconds())
	}
}

// UploadEnded records an upload ended otherwise: status is the staging status it
// ended in (FAILED, ABORTED or EXPIRED; others are ignored).
func (s *Set) UploadEnded(status string) {
	if s == nil {
		return
	}
	switch status {
	case "FAILED":
		s.completions.WithLabelValues(CompletionFailed).Inc()
	case "EXPIRED":
		s.expired.Inc()
	case "ABORTED":
		s.aborted.Inc()
	}
}

// OCRJob records an OCR job finished by a worker with outcome, a short fixed word
// such as "succeeded", "retried", "failed" or "dead" (keep the set small: it is a
// label).
func (s *Set) OCRJob(outcome string) {
	if s == nil {
		return
	}
	s.ocrJobs.WithLabelValues(outcome).Inc()
}

// OCRJobDuration records how long an OCR job that reached a decision took, by engine
// (a short fixed name: tesseract, remote).
func (s *Set) OCRJobDuration(engine string, d time.Duration) {
	if s == nil {
		return
	}
	s.ocrDuration.WithLabelValues(engine).Observe(d.Seconds())
}

// OCREngineFallback records a job that engine could not take and that ran on the
// fallback engine.
func (s *Set) OCREngineFallback(engine string) {
	if s == nil {
		return
	}
	s.ocrFallbacks.WithLabelValues(engine).Inc()
}

// ReadInt reads one number at scrape time.
type ReadInt func(ctx context.Context) (int64, error)

// ReadDuration reads one duration at scrape time.
type ReadDuration func(ctx context.Context) (time.Duration, error)

// ReadInts reads several numbers at scrape time, keyed by a label value.
type ReadInts func(ctx context.Context) (map[string]int64, error)

// ErrRegistered means a scrape-time gauge was given twice.
var ErrRegistered = errors.New("metrics: gauge already registered")

// StagedBytes exports chunkup_staged_bytes, the bytes staged in Redis as the
// staged-bytes budget measures them, read by fn at scrape time.
func (s *Set) StagedBytes(fn ReadInt) error {
	return s.addGauge("chunkup_staged_bytes", "Bytes staged in Redis as the staged-bytes budget measures them (staging.Store.StagedBytes: an upper bound of the chunks acknowledged and not yet uploaded).", nil, intReader(fn))
}

// ActiveUploads exports chunkup_uploads_active, uploads created and not yet completed
// or ended, read by fn at scrape time.
func (s *Set) ActiveUploads(fn ReadInt) error {
	return s.addGauge("chunkup_uploads_active", "Uploads created and not yet completed or ended (the active index; an upper bound).", nil, intReader(fn))
}

// PendingChunks exports chunkup_chunks_pending, staged chunks whose part is not yet
// recorded, read by fn at scrape time.
func (s *Set) PendingChunks(fn ReadInt) error {
	return s.addGauge("chunkup_chunks_pending", "Chunks staged in Redis whose part is not yet recorded in S3.", nil, intReader(fn))
}

// OutboxDepth exports chunkup_outbox_depth, uploads (and documents) with events
// waiting in their outbox, read by fn at scrape time.
func (s *Set) OutboxDepth(fn ReadInt) error {
	return s.addGauge("chunkup_outbox_depth", "Uploads (and OCR documents) with events waiting in their Redis outbox to be published to Kafka.", nil, intReader(fn))
}

// OutboxOldestAge exports chunkup_outbox_oldest_age_seconds, how long the oldest
// outbox has waited, read by fn at scrape time (0 when none waits).
func (s *Set) OutboxOldestAge(fn ReadDuration) error {
	return s.addGauge("chunkup_outbox_oldest_age_seconds", "Age of the oldest outbox entry waiting to be published to Kafka (0 when none).", nil,
		func(ctx context.Context) (map[string]float64, error) {
			d, err := fn(ctx)
			return map[string]float64{"": max(0, d.Seconds())}, err
		})
}

// OCRQueueDepth exports chunkup_ocr_queue_depth{state}, the OCR queue's jobs by state
// (e.g. pending, in_flight, delayed, dead), read by fn at scrape time.
func (s *Set) OCRQueueDepth(fn ReadInts) error {
	return s.addGauge("chunkup_ocr_queue_depth", "OCR jobs in the queue, by state.", []string{"state"},
		func(ctx context.Context) (map[string]float64, error) {
			m, err := fn(ctx)
			out := make(map[string]float64, len(m))
			for k, v := range m {
				out[k] = float64(v)
			}
			return out, err
		})
}

// OCRQueueOldestAge exports chunkup_ocr_queue_oldest_age_seconds, how long the oldest
// pending OCR job has waited, read by fn at scrape time.
func (s *Set) OCRQueueOldestAge(fn ReadDuration) error {
	return s.addGauge("chunkup_ocr_queue_oldest_age_seconds", "Age of the oldest pending OCR job (0 when none).", nil,
		func(ctx context.Context) (map[string]float64, error) {
			d, err := fn(ctx)
			return map[string]float64{"": max(0, d.Seconds())}, err
		})
}

func intReader(fn ReadInt) func(context.Context) (map[string]float64, error) {
	return func(ctx context.Context) (map[string]float64, error) {
		n, err := fn(ctx)
		return map[string]float64{"": float64(n)}, err
	}
}

func (s *Set) addGauge(name, help string, labels []string, read func(context.Context) (map[string]float64, error)) error {
	if s == nil {
		return nil
	}
	label := ""
	if len(labels) > 0 {
		label = labels[0]
	}
	return s.scrapeGauges.add(scrapeGauge{
		name: name, desc: prometheus.NewDesc(name, help, labels, nil), label: label, read: read,
	})
}

// scrapeGauge is a gauge (or a family of one label) read at scrape time.
type scrapeGauge struct {
	name  string
	desc  *prometheus.Desc
	label string // "" for a single gauge
	read  func(ctx context.Context) (map[string]float64, error)
}

// scrapeCollector reads its gauges when scraped, concurrently, all within one timeout.
// A gauge whose read fails is left out of that scrape and counted in
// chunkup_scrape_gauge_errors_total.
type scrapeCollector struct {
	timeout time.Duration
	errors  *prometheus.CounterVec

	mu     sync.Mutex
	gauges []scrapeGauge
}

func (c *scrapeCollector) add(g scrapeGauge) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, have := range c.gauges {
		if have.name == g.name {
			return ErrRegistered
		}
	}
	c.gauges = append(c.gauges, g)
	c.errors.WithLabelValues(g.name)
	return nil
}

// Describe sends nothing: the collector is unchecked, because its gauges are added
// after registration.
func (c *scrapeCollector) Describe(chan<- *prometheus.Desc) {}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	gauges := append([]scrapeGauge(nil), c.gauges...)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, g := range gauges {
		wg.Go(func() {
			vals, err := g.read(ctx)
			if err != nil {
				c.errors.WithLabelValues(g.name).Inc()
				return
			}
			for lv, v := range vals {
				var lvs []string
				if g.label != "" {
					lvs = []string{lv}
				}
				if m, err := prometheus.NewConstMetric(g.desc, prometheus.GaugeValue, v, lvs...); err == nil {
					ch <- m
				}
			}
		})
	}
	wg.Wait()
}
