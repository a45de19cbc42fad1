package ocr

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// FallbackMetrics counts jobs that ran on the fallback engine (see internal/metrics).
type FallbackMetrics interface {
	// OCREngineFallback records a job that engine could not take and that ran on the
	// fallback engine instead.
	OCREngineFallback(engine string)
}

// FallbackConfig configures a Fallback. Zero values mean the documented defaults.
type FallbackConfig struct {
	// ProbeInterval is how often an engine found unavailable is checked again (with its
	// Health) before a job; jobs run on the fallback meanwhile. Zero means 10 s.
	ProbeInterval time.Duration
	// Now is the clock. Nil means time.Now.
	Now     func() time.Time
	Logger  *slog.Logger
	Metrics FallbackMetrics
}

// EngineStatus is what a Fallback (or any engine) reports about itself.
type EngineStatus struct {
	// Engine is the configured engine; Active the one jobs run on now.
	Engine, Active string
	// Healthy is the configured engine's last health check; Err says why it failed.
	Healthy bool
	Err     string
	// Fallback is true when another engine takes the jobs the configured one cannot.
	Fallback bool
}

// Fallback runs jobs on a primary engine (a remote one) and, while that is unavailable,
// on a secondary one (Tesseract), so an outage of the accelerated engine slows OCR down
// instead of stopping it. The primary is taken to be unavailable when a job or a health
// check finds it so (an *UnavailableError, a failing Health), and is checked again
// every ProbeInterval; each job that runs on the secondary is counted and logged, and
// so are the primary's loss and return.
type Fallback struct {
	primary, secondary Engine
	cfg                FallbackConfig

	mu        sync.Mutex
	healthy   bool
	lastErr   error
	lastProbe time.Time
}

// NewFallback returns an engine that runs jobs on primary, and on secondary while
// primary is unavailable. A nil secondary means no fallback: while primary is
// unavailable jobs wait (released, not counted as attempts).
func NewFallback(primary, secondary Engine, cfg FallbackConfig) *Fallback {
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Fallback{primary: primary, secondary: secondary, cfg: cfg, healthy: true}
}

// Name implements Engine: the primary's name.
func (f *Fallback) Name() string { return f.primary.Name() }

// Health implements Engine: it checks the primary now (logging a loss or a return)
// and reports nil when jobs can run (on the primary, or on the fallback).
func (f *Fallback) Health(ctx context.Context) error {
	err := f.probe(ctx)
	if err != nil && f.secondary != nil {
		return f.secondary.Health(ctx)
	}
	return err
}

// Status reports the engines' state.
func (f *Fallback) Status() EngineStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := EngineStatus{Engine: f.primary.Name(), Active: f.primary.Name(), Healthy: f.healthy, Fallback: f.secondary != nil}
	if !f.healthy {
		st.Err = f.lastErr.Error()
		if f.secondary != nil {
			st.Active = f.secondary.Name()
		}
	}
	return st
}

// probe checks the primary's health and records the result.
func (f *Fallback) probe(ctx context.Context) error {
	err := f.primary.Health(ctx)
	f.record(err)
	return err
}

// record notes the primary's health, logging a change.
func (f *Fallback) record(err error) {
	f.mu.Lock()
	was := f.healthy
	f.healthy, f.lastErr, f.lastProbe = err == nil, err, f.cfg.Now()
	f.mu.Unlock()
	switch {
	case was && err != nil:
		to := "jobs wait (released, not counted) until it is back"
		if f.secondary != nil {
			to = "jobs run on " + f.secondary.Name() + " until it is back"
		}
		f.cfg.Logger.Warn("OCR engine "+f.primary.Name()+" unavailable; "+to, "err", err)
	case !was && err == nil:
		f.cfg.Logger.Info("OCR engine " + f.primary.Name() + " is available again; jobs run on it")
	}
}

// usePrimary says whether the next job should try the primary: it is healthy, or it was
// not and its probe interval has passed (it is probed now).
func (f *Fallback) usePrimary(ctx context.Context) bool {
	f.mu.Lock()
	healthy, due := f.healthy, f.cfg.Now().Sub(f.lastProbe) >= f.cfg.ProbeInterval
	f.mu.Unlock()
	if healthy {
		return true
	}
	return due && f.probe(ctx) == nil
}

// Recognize implements Engine.
func (f *Fallback) Recognize(ctx context.Context, file []byte, typ FileType) (*Result, error) {
	var unavailable error
	if f.usePrimary(ctx) {
		res, err := f.primary.Recognize(ctx, file, typ)
		var ue *UnavailableError
		if !errors.As(err, &ue) || ctx.Err() != nil {
			return res, err
		}
		f.record(err)
		unavailable = err
	} else {
		f.mu.Lock()
		unavailable = &UnavailableError{Engine: f.primary.Name(), Err: f.lastErr}
		f.mu.Unlock()
	}
	if f.secondary == nil {
		return nil, unavailable
	}
	if f.cfg.Metrics != nil {
		f.cfg.Metrics.OCREngineFallback(f.primary.Name())
	}
	id, _ := ctx.Value(docIDKey{}).(string)
	f.cfg.Logger.Warn("OCR job runs on the fallback engine", "document_id", id, "engine", f.primary.Name(),
		"fallback", f.secondary.Name(), "err", unavailable)
	return f.secondary.Recognize(ctx, file, typ)
}
