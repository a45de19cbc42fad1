package app

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/server"
)

// RoleOCR runs OCR workers and the OCR reaper (when OCR is enabled).
const RoleOCR = "ocr"

// OCRConfig configures the OCR pipeline (see docs/ocr.md). Zero values mean the
// documented defaults.
type OCRConfig struct {
	// Enabled hands completed image and PDF uploads to the OCR queue (in the completer
	// role) and runs OCR workers and the reaper (in the ocr role). Zero means off, so a
	// process assembled in code does no OCR unless asked; `chunkup serve` turns it on
	// by default (--ocr), and `chunkup dev` when tesseract is installed.
	Enabled bool
	// Config tunes the queue, workers, reaper and evaluation rules; the App fills
	// InstanceID, Logger and Metrics when they are zero.
	ocr.Config
	// Tesseract configures the Tesseract engine: the default engine, and the fallback of
	// a remote one.
	Tesseract ocr.TesseractConfig
	// Remote, when its URL is set, makes a remote OCR engine over HTTP the engine (see
	// ocr.Remote). Zero means Tesseract.
	Remote ocr.RemoteConfig
	// NoFallback keeps jobs waiting while the remote engine is unavailable instead of
	// running them on Tesseract. Zero means they fall back to Tesseract.
	NoFallback bool
	// ProbeInterval is how often an unavailable remote engine is checked again. Zero
	// means 10 s.
	ProbeInterval time.Duration
	// Engine, when set, replaces the engines above (tests, benchmarks).
	Engine ocr.Engine
	// ServiceKey authenticates the verification webhook (x-service-key). Zero leaves the
	// webhook answering 503.
	ServiceKey string
}

func (c *OCRConfig) validate() error {
	errs := []error{c.Config.Validate(), c.Tesseract.Validate()}
	if c.Remote.URL != "" {
		errs = append(errs, c.Remote.Validate())
	}
	if c.ProbeInterval < 0 {
		errs = append(errs, errors.New("ocr: probe interval must not be negative"))
	}
	return errors.Join(errs...)
}

// The OCR queue is the completer's hand-off.
var _ completion.Handoff = (*ocr.Queue)(nil)

// ocrParts are the OCR pipeline's pieces in a process.
type ocrParts struct {
	queue  *ocr.Queue
	worker *ocr.Worker
	reaper *ocr.Reaper
}

// setupOCR builds the queue (the completer's hand-off) and, with the ocr role, the
// worker and reaper.
func (a *App) setupOCR() error {
	c := a.cfg.OCR
	if !c.Enabled {
		// Every role is what serve runs by default: OCR turned off there is a choice,
		// not a mistake; an ocr role named among fewer is one.
		if a.cfg.has(RoleOCR) && len(a.cfg.Roles) > 0 && !a.cfg.runsEveryRole() {
			a.log.Warn("the ocr role is asked for but OCR is disabled: no OCR jobs will run")
		}
		return nil
	}
	oc := c.Config
	if oc.InstanceID == "" {
		oc.InstanceID = a.cfg.InstanceID
	}
	if oc.Logger == nil {
		oc.Logger = a.log.With("role", RoleOCR)
	}
	if oc.Metrics == nil && a.metrics != nil {
		oc.Metrics = a.metrics
	}
	a.ocr = &ocrParts{}
	var err error
	if a.ocr.queue, err = ocr.NewQueue(a.jobs, a.docs, a.uploads, oc); err != nil {
		return err
	}
	if !a.cfg.has(RoleOCR) {
		return nil
	}
	engine, err := a.ocrEngine(oc)
	if err != nil {
		return err
	}
	if a.ocr.worker, err = ocr.NewWorker(a.jobs, a.docs, a.s3, engine, oc); err != nil {
		return err
	}
	a.ocr.reaper, err = ocr.NewReaper(a.jobs, a.docs, oc)
	return err
}

// ocrEngine builds the engine the workers run: the one given, or a remote engine with
// Tesseract as its fallback, or Tesseract. It says at start what is missing.
func (a *App) ocrEngine(oc ocr.Config) (ocr.Engine, error) {
	c := a.cfg.OCR
	if c.Engine != nil {
		return c.Engine, nil
	}
	tess, err := ocr.NewTesseract(c.Tesseract)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c.Remote.URL == "" {
		if err := tess.Health(ctx); err != nil {
			a.log.Warn("OCR jobs will be released and retried until tesseract is installed (apt-get install tesseract-ocr tesseract-ocr-eng poppler-utils)", "err", err)
		}
		return tess, nil
	}
	remote, err := ocr.NewRemote(c.Remote)
	if err != nil {
		return nil, err
	}
	var fallback ocr.Engine = tess
	if c.NoFallback {
		fallback = nil
	} else if err := tess.Health(ctx); err != nil {
		a.log.Warn("the remote OCR engine's fallback, tesseract, is not installed: while the remote engine is unavailable jobs will wait", "err", err)
	}
	f := ocr.NewFallback(remote, fallback, ocr.FallbackConfig{ProbeInterval: c.ProbeInterval, Logger: oc.Logger, Metrics: a.metrics})
	if err := f.Health(ctx); err != nil {
		a.log.Warn("the remote OCR engine does not answer its health check yet", "url", c.Remote.URL, "err", err)
	}
	return f, nil
}

// withWebhook mounts the verification webhook on mux.
func (a *App) withWebhook(mux *http.ServeMux) *http.ServeMux {
	mux.Handle("POST "+ocr.WebhookPath, ocr.NewWebhookHandler(a.docs, ocr.WebhookConfig{
		ServiceKey: a.cfg.OCR.ServiceKey, DocumentTTL: a.cfg.OCR.DocumentTTL, Nodes: a.uploads,
		InstanceID: a.cfg.InstanceID, Logger: a.log.With("role", "webhook"),
	}))
	return mux
}

// runOCR starts the OCR worker and reaper, if this process runs them.
func (a *App) runOCR(ctx context.Context, wg *sync.WaitGroup) {
	if a.ocr == nil || a.ocr.worker == nil {
		return
	}
	wg.Go(func() { _ = a.ocr.worker.Run(ctx) })
	wg.Go(func() { _ = a.ocr.reaper.Run(ctx) })
}

// registerDocuments adds the document service to the API's gRPC server.
func (a *App) registerDocuments() error {
	deps := server.DocumentDeps{Docs: a.docs, Changes: a.outbox, Uploads: a.uploads, Jobs: a.jobs, Results: ocr.NewResults(a.s3)}
	if q := a.OCRQueue(); q != nil {
		deps.Queue = q
	}
	if a.api != nil {
		deps.Watches = a.api
	}
	svc, err := server.NewDocumentService(deps, a.cfg.Documents)
	if err != nil {
		return err
	}
	a.docsAPI = svc
	server.RegisterDocumentService(a.grpc, svc)
	return nil
}

// OCRQueue is the process's OCR queue, or nil when OCR is disabled.
func (a *App) OCRQueue() *ocr.Queue {
	if a.ocr == nil {
		return nil
	}
	return a.ocr.queue
}
