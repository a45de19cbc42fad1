package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"sync"

	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
)

// RoleOCR runs OCR workers and the OCR reaper (when OCR is enabled).
const RoleOCR = "ocr"

// OCRConfig configures the OCR pipeline (see docs/ocr.md). Zero values mean the
// documented defaults.
type OCRConfig struct {
	// Enabled hands completed image and PDF uploads to the OCR queue (in the completer
	// role) and runs OCR workers and the reaper (in the ocr role). Zero means off, so a
	// process assembled in code does no OCR unless asked; `chunkup serve` turns it on
	// by default (--ocr).
	Enabled bool
	// Config tunes the queue, workers, reaper and evaluation rules; the App fills NodeID,
	// Logger and Metrics when they are zero.
	ocr.Config
	// Tesseract configures the default engine.
	Tesseract ocr.TesseractConfig
	// Engine, when set, replaces Tesseract (tests, benchmarks).
	Engine ocr.Engine
	// ServiceKey authenticates the verification webhook (x-service-key). Zero leaves the
	// webhook answering 503.
	ServiceKey string
}

func (c *OCRConfig) validate() error {
	return errors.Join(c.Config.Validate(), c.Tesseract.Validate())
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
		if a.cfg.has(RoleOCR) && len(a.cfg.Roles) > 0 {
			a.log.Warn("the ocr role is asked for but OCR is disabled: no OCR jobs will run")
		}
		return nil
	}
	oc := c.Config
	if oc.NodeID == "" {
		oc.NodeID = a.cfg.NodeID
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
	engine := c.Engine
	if engine == nil {
		if _, lerr := exec.LookPath(orDefault(c.Tesseract.Path, "tesseract")); lerr != nil {
			a.log.Warn("tesseract not found: OCR jobs will be released and retried until it is installed (apt-get install tesseract-ocr tesseract-ocr-eng poppler-utils)", "err", lerr)
		}
		if engine, err = ocr.NewTesseract(c.Tesseract); err != nil {
			return err
		}
	}
	if a.ocr.worker, err = ocr.NewWorker(a.jobs, a.docs, a.s3, engine, oc); err != nil {
		return err
	}
	a.ocr.reaper, err = ocr.NewReaper(a.jobs, a.docs, oc)
	return err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// withWebhook mounts the verification webhook on mux.
func (a *App) withWebhook(mux *http.ServeMux) *http.ServeMux {
	mux.Handle("POST "+ocr.WebhookPath, ocr.NewWebhookHandler(a.docs, ocr.WebhookConfig{
		ServiceKey: a.cfg.OCR.ServiceKey, DocumentTTL: a.cfg.OCR.DocumentTTL, NodeID: a.cfg.NodeID,
		Logger: a.log.With("role", "webhook"),
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
func (a *App) registerDocuments() {
	server.RegisterDocumentService(a.grpc, server.NewDocumentService(a.docs))
}

// OCRQueue is the process's OCR queue, or nil when OCR is disabled.
func (a *App) OCRQueue() *ocr.Queue {
	if a.ocr == nil {
		return nil
	}
	return a.ocr.queue
}

// OCRWorker is the process's OCR worker, or nil without the ocr role.
func (a *App) OCRWorker() *ocr.Worker {
	if a.ocr == nil {
		return nil
	}
	return a.ocr.worker
}

// OCRAdmin opens the OCR queue on the Redis at redisURL for the admin commands (stats,
// dead-letter listing and requeue, reprocessing), without running any role. close
// releases the connection.
func OCRAdmin(redisURL string) (q *ocr.Queue, close func(), err error) {
	rdb, _, err := NewRedisClient(redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	defer func() {
		if err != nil {
			rdb.Close()
		}
	}()
	cfg := staging.Config{}
	ob, err := outbox.New(rdb, cfg, nil)
	if err != nil {
		return nil, nil, err
	}
	ups, err := uploads.New(rdb, cfg, ob, nil)
	if err != nil {
		return nil, nil, err
	}
	docs, err := documents.New(rdb, cfg, ob)
	if err != nil {
		return nil, nil, err
	}
	jobs, err := ocrqueue.New(rdb, cfg)
	if err != nil {
		return nil, nil, err
	}
	q, err = ocr.NewQueue(jobs, docs, ups, ocr.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	return q, func() { rdb.Close() }, nil
}
