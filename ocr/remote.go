package ocr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// RemoteConfig configures the remote OCR engine. Zero values mean the documented
// defaults.
type RemoteConfig struct {
	// URL is the engine's base URL (http or https). Required. Recognition is POST
	// URL/v1/recognize, the health check GET URL/healthz (docs/ocr.md has the contract).
	URL string
	// Timeout bounds one recognition. Zero means 2 min.
	Timeout time.Duration
	// HealthTimeout bounds one health check. Zero means 2 s.
	HealthTimeout time.Duration
	// Client makes the requests. Nil means a client of its own.
	Client *http.Client
}

// Validate checks the configuration.
func (c RemoteConfig) Validate() error {
	if c.Timeout < 0 || c.HealthTimeout < 0 {
		return errors.New("ocr: remote engine timeouts must not be negative")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("ocr: remote engine URL %q: want http(s)://host[:port][/path]", c.URL)
	}
	return nil
}

// Remote is an OCR engine behind HTTP (an accelerated engine on a GPU host, a cloud
// service behind an adapter): chunkup sends the file as JSON and reads back pages of
// text. The engine's errors say whose fault a failure is: 4xx is the file's
// (permanent), 5xx, 429, timeouts and refused connections are the engine's
// (*UnavailableError: the job falls back to Tesseract, or waits, without counting an
// attempt).
type Remote struct {
	cfg  RemoteConfig
	base string
}

// NewRemote returns the remote engine at cfg.URL.
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = 2 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	return &Remote{cfg: cfg, base: strings.TrimSuffix(cfg.URL, "/")}, nil
}

// RemoteName is the remote engine's name in results, metrics and status.
const RemoteName = "remote"

// Name implements Engine.
func (r *Remote) Name() string { return RemoteName }

// RemoteRequest is the body of POST /v1/recognize.
type RemoteRequest struct {
	DocumentID  string `json:"document_id,omitempty"`
	ContentType string `json:"content_type"`
	// File is the file's bytes (base64 in JSON).
	File []byte `json:"file"`
}

// RemoteResponse is the answer to POST /v1/recognize: the pages in order, each with its
// text, word count and mean word confidence (0–100).
type RemoteResponse struct {
	Pages []Page `json:"pages"`
}

// remoteError is the body of a remote engine's error answer.
type remoteError struct {
	Error string `json:"error"`
}

type docIDKey struct{}

// withDocumentID tells an engine which document it reads (for its logs).
func withDocumentID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, docIDKey{}, id)
}

// Recognize implements Engine.
func (r *Remote) Recognize(ctx context.Context, file []byte, typ FileType) (*Result, error) {
	id, _ := ctx.Value(docIDKey{}).(string)
	body, err := json.Marshal(RemoteRequest{DocumentID: id, ContentType: string(typ), File: file})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/v1/recognize", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.DeadlineExceeded) {
			return nil, cause // the job was stopped (lease lost, shutdown): not the engine's fault
		}
		return nil, &UnavailableError{Engine: RemoteName, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &UnavailableError{Engine: RemoteName, Err: fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		var e remoteError
		msg := strings.TrimSpace(string(b[:min(len(b), 500)]))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		err := fmt.Errorf("remote OCR engine answered %s: %s", resp.Status, msg)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			return nil, &UnavailableError{Engine: RemoteName, Err: err}
		case resp.StatusCode >= 400:
			return nil, Permanent(err)
		}
		return nil, err
	}
	var out RemoteResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("remote OCR engine: answer is not the expected JSON: %w", err)
	}
	for i := range out.Pages {
		if out.Pages[i].Number == 0 {
			out.Pages[i].Number = i + 1
		}
	}
	return &Result{Pages: out.Pages, Engine: RemoteName}, nil
}

// Health implements Engine: GET /healthz must answer 200 within HealthTimeout.
func (r *Remote) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /healthz answered %s", resp.Status)
	}
	return nil
}
