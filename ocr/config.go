package ocr

import (
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"
)

// Config tunes the OCR queue, worker and reaper. Zero values mean the documented
// defaults.
type Config struct {
	// Concurrency is how many jobs one worker process runs at once. Zero means 2.
	Concurrency int
	// Lease is the stuck-job timeout: a job whose worker stops renewing its lease (it
	// died or hangs) is reclaimed this long after the last renewal. Workers renew every
	// Lease/3. Zero means 5 min.
	Lease time.Duration
	// MaxAttempts is how many failed attempts a job gets before it is dead-lettered.
	// Only failures of the job count (an engine error), not outages of Redis, S3 or the
	// engine, nor a worker that died holding it (see MaxReclaims). Zero means 3.
	MaxAttempts int
	// MaxReclaims is how many times a job may be taken back from a worker that died or
	// stalled holding it (its lease ran out) before it is dead-lettered: a crash is not
	// the document's fault, but a job that kills every worker must end. Zero means 3.
	MaxReclaims int
	// ReportInterval is how often a worker process reports its status (engine, jobs
	// running) in Redis for `chunkup ocr stats`. Zero means 5 s.
	ReportInterval time.Duration
	// BackoffBase is the wait before the first retry; the n-th waits BackoffBase·3^(n-1)
	// (3 s, 9 s, 27 s by default), capped at BackoffMax, with jitter. Zero means 3 s.
	BackoffBase time.Duration
	// BackoffMax caps the wait between attempts. Zero means 10 min.
	BackoffMax time.Duration
	// Jitter is the fraction of each wait added or taken away at random, so retries of
	// many jobs spread out. Zero means 0.1 (±10%); at most 1.
	Jitter float64
	// FetchBlock is how long one blocking fetch waits for a job before checking for
	// shutdown; it adds no latency (a job wakes the fetch at once). Zero means 2 s.
	FetchBlock time.Duration
	// ReapInterval is how often the reaper promotes due retries and reclaims jobs with
	// expired leases. Zero means 1 s.
	ReapInterval time.Duration
	// DocumentTTL is how long a document's state is kept after its last change, and how
	// long an unforced enqueue of the same document is a no-op. Zero means 30 days.
	DocumentTTL time.Duration
	// MaxFileSize bounds the objects downloaded for OCR; larger ones fail permanently.
	// Zero means 100 MiB.
	MaxFileSize int64
	// Rules evaluate OCR results.
	Rules Rules
	// InstanceID names this process in events, logs and status reports.
	InstanceID string
	// Metrics, when set, counts finished jobs by outcome (succeeded, retried, dead,
	// released) and times them by engine.
	Metrics JobMetrics
	// Now is the clock for backoff due times. Nil means time.Now. (Lease and due times
	// in Redis use the staging store's clock; tests give both the same clock.)
	Now    func() time.Time
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Concurrency < 0 || c.Lease < 0 || c.MaxAttempts < 0 || c.MaxReclaims < 0 || c.ReportInterval < 0 ||
		c.BackoffBase < 0 || c.BackoffMax < 0 || c.Jitter < 0 || c.FetchBlock < 0 || c.ReapInterval < 0 ||
		c.DocumentTTL < 0 || c.MaxFileSize < 0 {
		return errors.New("ocr: settings must not be negative")
	}
	if c.Jitter > 1 {
		return errors.New("ocr: jitter must be at most 1")
	}
	if c.FetchBlock > 0 && c.FetchBlock < time.Second {
		return errors.New("ocr: fetch block must be at least 1s (Redis blocks in whole seconds)")
	}
	if c.Lease > 0 && c.Lease < 300*time.Millisecond {
		return errors.New("ocr: lease must be at least 300ms")
	}
	if c.DocumentTTL > 0 && c.DocumentTTL < time.Second {
		return errors.New("ocr: document TTL must be at least 1s")
	}
	return c.Rules.Validate()
}

func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = 2
	}
	if c.Lease == 0 {
		c.Lease = 5 * time.Minute
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.MaxReclaims == 0 {
		c.MaxReclaims = 3
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = 5 * time.Second
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 3 * time.Second
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 10 * time.Minute
	}
	if c.Jitter == 0 {
		c.Jitter = 0.1
	}
	if c.FetchBlock == 0 {
		c.FetchBlock = 2 * time.Second
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = time.Second
	}
	if c.DocumentTTL == 0 {
		c.DocumentTTL = 30 * 24 * time.Hour
	}
	if c.MaxFileSize == 0 {
		c.MaxFileSize = 100 << 20
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	return c
}

// JobMetrics counts and times OCR jobs (see internal/metrics).
type JobMetrics interface {
	// OCRJob records a job finished by a worker with its outcome.
	OCRJob(outcome string)
	// OCRJobDuration records how long a job that reached a decision took, from taking
	// the document to its decision, by the engine that recognized it.
	OCRJobDuration(engine string, d time.Duration)
}

type noMetrics struct{}

func (noMetrics) OCRJob(string)                        {}
func (noMetrics) OCRJobDuration(string, time.Duration) {}

// Backoff is the wait before retry n (from 1): BackoffBase·3^(n-1), capped at
// BackoffMax, times a random factor in [1-Jitter, 1+Jitter].
func (c Config) Backoff(n int) time.Duration {
	c = c.withDefaults()
	d := float64(c.BackoffBase) * math.Pow(3, float64(max(n, 1)-1))
	d = min(d, float64(c.BackoffMax))
	d *= 1 + c.Jitter*(2*rand.Float64()-1)
	return time.Duration(d)
}
