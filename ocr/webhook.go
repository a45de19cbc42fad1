package ocr

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/uploads"
)

// WebhookPath is where the verification webhook is mounted.
const WebhookPath = "/internal/verification/result"

// ServiceKeyHeader carries the shared secret that authenticates webhook callers.
const ServiceKeyHeader = "x-service-key"

// WebhookStore is the part of the document store the webhook uses.
type WebhookStore interface {
	Now() time.Time
	Get(ctx context.Context, id string) (*documents.Document, error)
	Transition(ctx context.Context, id string, ttl time.Duration, c documents.Change) (*documents.Document, error)
}

var _ WebhookStore = (*documents.Store)(nil)

// NodeIndex finds the upload (so the document) a tenant's node id names.
type NodeIndex interface {
	UploadForNode(ctx context.Context, tenant, nodeID string) (string, error)
}

var _ NodeIndex = (*uploads.Store)(nil)

// WebhookConfig configures the verification webhook.
type WebhookConfig struct {
	// ServiceKey is the secret callers send in x-service-key. Zero disables the webhook:
	// it answers 503 saying so.
	ServiceKey string
	// DocumentTTL is the documents' TTL, refreshed on every change. Zero means 30 days.
	DocumentTTL time.Duration
	// Nodes resolves a documentId that is a node id. Nil: only upload ids are accepted.
	Nodes NodeIndex
	// InstanceID names this process in events.
	InstanceID string
	Logger     *slog.Logger
}

// maxWebhookBody bounds a webhook request's body.
const maxWebhookBody = 1 << 20

// VerificationRequest is the webhook's body: the design's shape, in which only
// documentId and verificationResult are required, with an optional tenant.
type VerificationRequest struct {
	// DocumentID is the document's node id (a UUID) or its upload id.
	DocumentID string `json:"documentId"`
	// Tenant owns the document, for a node id (node ids are per tenant). Empty: the
	// empty tenant, as without authentication. An upload id needs none; given, it must
	// match.
	Tenant string `json:"tenant"`
	// UserID is the reviewer, when given.
	UserID string `json:"userId"`
	// VerificationResult is approved or rejected.
	VerificationResult string `json:"verificationResult"`
	// Score is the reviewer's score, 0–100, when given.
	Score *float64 `json:"score"`
	// Decision is the reviewer's free-form decision label.
	Decision string `json:"decision"`
	// Metadata is any JSON object.
	Metadata json.RawMessage `json:"metadata"`
}

// VerificationResponse is the webhook's answer.
type VerificationResponse struct {
	Success   bool   `json:"success"`
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"`
}

// decidable are the statuses an external decision is accepted from.
var decidable = []documents.Status{documents.NeedsReview, documents.AutoApproved, documents.AutoRejected}

// NewWebhookHandler returns the handler of POST /internal/verification/result, which
// records an external reviewer's decision on a document.
func NewWebhookHandler(store WebhookStore, cfg WebhookConfig) http.Handler {
	if cfg.DocumentTTL == 0 {
		cfg.DocumentTTL = 30 * 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &webhook{store: store, cfg: cfg}
}

type webhook struct {
	store WebhookStore
	cfg   WebhookConfig
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.answer(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	if h.cfg.ServiceKey == "" {
		h.answer(w, http.StatusServiceUnavailable, "verification webhook disabled: CHUNKUP_SERVICE_INTERNAL_KEY is not set on the server")
		return
	}
	got := r.Header.Get(ServiceKeyHeader)
	if got == "" {
		h.answer(w, http.StatusUnauthorized, "missing "+ServiceKeyHeader+" header")
		return
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(h.cfg.ServiceKey)) != 1 {
		h.answer(w, http.StatusUnauthorized, "wrong "+ServiceKeyHeader)
		return
	}
	req, err := parseVerification(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		h.answer(w, http.StatusBadRequest, err.Error())
		return
	}
	to := documents.Approved
	if req.VerificationResult == "rejected" {
		to = documents.Rejected
	}
	v := &documents.Verification{UserID: req.UserID, Result: req.VerificationResult, Decision: req.Decision,
		Metadata: string(req.Metadata), Time: h.store.Now()}
	if req.Score != nil {
		v.Score = *req.Score
	}
	id, err := h.resolve(r.Context(), req)
	if err == nil {
		c := events.WithDocumentEvent(h.cfg.InstanceID, h.store.Now(), documents.Change{From: decidable, To: to, Verification: v})
		_, err = h.store.Transition(r.Context(), id, h.cfg.DocumentTTL, c)
	}
	var se *documents.StateError
	switch {
	case errors.Is(err, documents.ErrNotFound), errors.Is(err, staging.ErrNotFound):
		h.answer(w, http.StatusNotFound, fmt.Sprintf("document %s not found", req.DocumentID))
		return
	case errors.As(err, &se):
		h.answer(w, http.StatusConflict, fmt.Sprintf("document %s is %s; a decision is accepted only from needs_review, auto_approved or auto_rejected", req.DocumentID, se.Status))
		return
	case err != nil:
		h.cfg.Logger.Error("record verification", "document_id", req.DocumentID, "err", err)
		h.answer(w, http.StatusServiceUnavailable, "could not record the decision; retry later")
		return
	}
	h.cfg.Logger.Info("verification recorded", "document_id", id, "named_as", req.DocumentID, "result", req.VerificationResult,
		"status", to, "user_id", req.UserID)
	h.answer(w, http.StatusOK, "Verification result received")
}

// resolve returns the upload id of the document req names: its upload id, or the
// upload its tenant's node id names. A tenant given with an upload id must own it.
func (h *webhook) resolve(ctx context.Context, req *VerificationRequest) (string, error) {
	id := req.DocumentID
	if node, ok := ids.UUID(id); ok {
		if h.cfg.Nodes == nil {
			return "", documents.ErrNotFound
		}
		var err error
		if id, err = h.cfg.Nodes.UploadForNode(ctx, req.Tenant, node); err != nil {
			return "", err
		}
	} else if req.Tenant == "" {
		return id, nil
	}
	d, err := h.store.Get(ctx, id)
	if err != nil {
		return "", err
	}
	if d.Tenant != req.Tenant {
		return "", documents.ErrNotFound // another tenant's document does not exist for this request
	}
	return id, nil
}

func parseVerification(body io.Reader) (*VerificationRequest, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	var req VerificationRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("body is not a JSON object of the expected shape: %w", err)
	}
	if dec.More() {
		return nil, errors.New("body has data after the JSON object")
	}
	_, isNode := ids.UUID(req.DocumentID)
	switch {
	case req.DocumentID == "":
		return nil, errors.New("documentId is required")
	case !isNode && !ids.Valid(req.DocumentID):
		return nil, fmt.Errorf("documentId %q is neither a node id (a UUID) nor an upload id (26 lowercase base32 characters)", clip(req.DocumentID))
	case len(req.Tenant) > 63:
		return nil, errors.New("tenant must be at most 63 bytes")
	case len(req.UserID) > 256 || len(req.Decision) > 256:
		return nil, errors.New("userId and decision must be at most 256 bytes")
	case req.VerificationResult != "approved" && req.VerificationResult != "rejected":
		return nil, fmt.Errorf("verificationResult must be approved or rejected, not %q", req.VerificationResult)
	case req.Score != nil && (math.IsNaN(*req.Score) || *req.Score < 0 || *req.Score > 100):
		return nil, errors.New("score must be between 0 and 100")
	}
	if m := bytes.TrimSpace(req.Metadata); len(m) > 0 && !bytes.Equal(m, []byte("null")) {
		if m[0] != '{' {
			return nil, errors.New("metadata must be a JSON object")
		}
		req.Metadata = m
	} else {
		req.Metadata = nil
	}
	return &req, nil
}

// clip cuts caller input quoted in an answer to 100 bytes.
func clip(s string) string {
	if len(s) > 100 {
		return cut(s, 100) + "…"
	}
	return s
}

func (h *webhook) answer(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(VerificationResponse{Success: code == http.StatusOK, Message: msg,
		Timestamp: h.store.Now().UTC().Format(time.RFC3339Nano)})
}
