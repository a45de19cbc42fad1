package app

import (
	"context"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/chunkup/chunkup/internal/metrics"
	"github.com/chunkup/chunkup/internal/tracing"
	"github.com/chunkup/chunkup/server"
)

// ObserveConfig configures metrics and tracing (see docs/observability.md).
type ObserveConfig struct {
	// Metrics receives the process's metrics and is served at /metrics on the HTTP
	// address. Nil means a new Set (its own registry) per App.
	Metrics *metrics.Set
	// Tracing makes the spans of RPCs. Nil means a provider built from the standard
	// OTEL_* environment: spans are exported over OTLP only when
	// OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set.
	Tracing *tracing.Provider
}

// setupObservability makes the process's metrics and tracer (the roles get them where
// their configurations leave them zero), and registers the scrape-time gauges read
// from Redis. It runs once the stores exist and before the roles are built.
func (a *App) setupObservability(ctx context.Context, cfg *Config) error {
	m := cfg.Observe.Metrics
	if m == nil {
		m = metrics.New(metrics.Options{})
	}
	tp := cfg.Observe.Tracing
	if tp == nil {
		var err error
		if tp, err = tracing.FromEnv(ctx, cfg.InstanceID); err != nil {
			return err
		}
		a.ownTracing = tp // shut down (flushed) with the App
		if tp.Exporting != "" {
			a.log.Info("exporting trace spans", "exporter", tp.Exporting)
		}
	}
	a.metrics = m
	a.observability = server.Observability{Metrics: m, TracerProvider: tp.TracerProvider, Propagator: tp.Propagator}

	ob := a.outbox
	errs := []error{
		m.StagedBytes(a.uploads.StagedBytes),
		m.PendingChunks(a.uploads.Chunks().Pending),
		m.ActiveUploads(a.uploads.Active),
		m.OutboxDepth(ob.Len),
		m.OutboxOldestAge(func(ctx context.Context) (time.Duration, error) {
			t, ok, err := ob.Oldest(ctx)
			if !ok || err != nil {
				return 0, err
			}
			return ob.Now().Sub(t), nil
		}),
	}
	if cfg.OCR.Enabled {
		errs = append(errs,
			m.OCRQueueDepth(func(ctx context.Context) (map[string]int64, error) {
				q := a.OCRQueue()
				if q == nil {
					return nil, nil
				}
				s, err := q.Stats(ctx)
				return map[string]int64{"pending": s.Pending, "in_flight": s.InFlight, "delayed": s.Delayed, "dead": s.Dead}, err
			}),
			m.OCRQueueOldestAge(func(ctx context.Context) (time.Duration, error) {
				q := a.OCRQueue()
				if q == nil {
					return 0, nil
				}
				s, err := q.Stats(ctx)
				return s.OldestAge, err
			}),
		)
	}
	for _, err := range errs {
		if err != nil {
			// A Set shared by several Apps: the first App's gauges stand.
			a.log.Debug("scrape-time gauge not registered", "err", err)
		}
	}
	return nil
}

// withMetrics serves /metrics beside h. The gRPC server exists by now: its methods'
// series are created at zero, so rates work from the first scrape.
func (a *App) withMetrics(h http.Handler) http.Handler {
	if a.grpc != nil {
		a.metrics.InitializeGRPC(a.grpc)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metrics.Handler())
	if a.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/", h)
	return mux
}

// closeObservability flushes spans the App's own tracer has not exported yet.
func (a *App) closeObservability() {
	if a.ownTracing == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.ownTracing.Shutdown(ctx); err != nil {
		a.log.Warn("flush trace spans", "err", err)
	}
	a.ownTracing = nil
}
