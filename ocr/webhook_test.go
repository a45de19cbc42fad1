package ocr_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/staging/documents"
)

const serviceKey = "s3cret-key"

// reviewable makes a document that reached needs_review.
func (e *env) reviewable(t *testing.T) string {
	t.Helper()
	cfg := e.config()
	cfg.Rules.ApproveScore = 100 // the counting engine's 95 then needs review
	q := e.queue(t, cfg)
	u := e.upload(t, "image/png", testdocs.PNG("HELLO"))
	if err := q.Handoff(ctxT(t), u, false); err != nil {
		t.Fatal(err)
	}
	e.runOne(t, e.worker(t, &countingEngine{}, cfg))
	if d := e.doc(t, u.ID); d.Status != documents.NeedsReview {
		t.Fatalf("document %s, want needs_review", d.Status)
	}
	return u.ID
}

func post(t *testing.T, h http.Handler, key, body string) (int, ocr.VerificationResponse) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, ocr.WebhookPath, strings.NewReader(body)).WithContext(ctxT(t))
	if key != "" {
		req.Header.Set(ocr.ServiceKeyHeader, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var resp ocr.VerificationResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("answer %q is not JSON: %v", rec.Body.String(), err)
	}
	if _, err := time.Parse(time.RFC3339Nano, resp.Timestamp); err != nil {
		t.Fatalf("timestamp %q: %v", resp.Timestamp, err)
	}
	return rec.Code, resp
}

func TestWebhook(t *testing.T) {
	e := newEnv(t)
	id := e.reviewable(t)
	other := e.reviewable(t)
	h := ocr.NewWebhookHandler(e.stores.Docs, ocr.WebhookConfig{ServiceKey: serviceKey, Logger: testLogger()})
	good := `{"documentId":"` + id + `","userId":"u-7","verificationResult":"approved","score":91.5,"decision":"looks right","metadata":{"reviewer":"ann","n":2}}`
	tests := []struct {
		name, key, body string
		code            int
		msg             string
	}{
		{"missing key", "", good, http.StatusUnauthorized, "missing x-service-key"},
		{"wrong key", "s3cret-kez", good, http.StatusUnauthorized, "wrong x-service-key"},
		{"bad json", serviceKey, `{"documentId":`, http.StatusBadRequest, "not a JSON object"},
		{"trailing data", serviceKey, good + `{}`, http.StatusBadRequest, "after the JSON object"},
		{"no user", serviceKey, `{"documentId":"` + id + `","verificationResult":"approved"}`, http.StatusBadRequest, "userId is required"},
		{"bad result", serviceKey, `{"documentId":"` + id + `","userId":"u","verificationResult":"maybe"}`, http.StatusBadRequest, "approved or rejected"},
		{"bad score", serviceKey, `{"documentId":"` + id + `","userId":"u","verificationResult":"approved","score":101}`, http.StatusBadRequest, "score"},
		{"metadata not object", serviceKey, `{"documentId":"` + id + `","userId":"u","verificationResult":"approved","metadata":[1]}`, http.StatusBadRequest, "metadata"},
		{"bad id", serviceKey, `{"documentId":"../x","userId":"u","verificationResult":"approved"}`, http.StatusBadRequest, "not a document id"},
		{"unknown document", serviceKey, `{"documentId":"` + ids.New() + `","userId":"u","verificationResult":"approved"}`, http.StatusNotFound, "not found"},
	}
	before := len(e.docEvents(t, id))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, resp := post(t, h, tc.key, tc.body)
			if code != tc.code || resp.Success || !strings.Contains(resp.Message, tc.msg) {
				t.Fatalf("got %d %+v, want %d with %q", code, resp, tc.code, tc.msg)
			}
			if d := e.doc(t, id); d.Status != documents.NeedsReview || d.Verification != nil {
				t.Fatalf("a refused call changed the document: %+v", d)
			}
			if n := len(e.docEvents(t, id)); n != before {
				t.Fatalf("a refused call emitted an event (%d events, was %d)", n, before)
			}
		})
	}

	code, resp := post(t, h, serviceKey, good)
	if code != http.StatusOK || !resp.Success {
		t.Fatalf("right key: %d %+v", code, resp)
	}
	d := e.doc(t, id)
	if d.Status != documents.Approved || d.Verification == nil || d.Verification.UserID != "u-7" ||
		d.Verification.Score != 91.5 || !strings.Contains(d.Verification.Metadata, `"reviewer":"ann"`) {
		t.Fatalf("document after the decision: %+v %+v", d, d.Verification)
	}
	evs := e.docEvents(t, id)
	if len(evs) != before+1 {
		t.Fatalf("%d events after the decision, want %d", len(evs), before+1)
	}
	found := false
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), `"DOCUMENT_STATUS_APPROVED"`) && strings.Contains(string(ev.Payload), `"u-7"`) {
			found = ev.CorrelationID == "corr-"+id && ev.Type == "chunkup.v1.DocumentStatusChanged"
		}
	}
	if !found {
		t.Fatal("no DocumentStatusChanged event to approved with the correlation id")
	}
	// A decided document accepts no second decision.
	if code, resp := post(t, h, serviceKey, good); code != http.StatusConflict || resp.Success {
		t.Fatalf("second decision: %d %+v, want 409", code, resp)
	}
	// Rejection of the other document.
	if code, _ := post(t, h, serviceKey, `{"documentId":"`+other+`","userId":"u","verificationResult":"rejected"}`); code != http.StatusOK {
		t.Fatalf("reject: %d", code)
	}
	if d := e.doc(t, other); d.Status != documents.Rejected {
		t.Fatalf("other document %s, want rejected", d.Status)
	}
}

func TestWebhookDisabledWithoutKey(t *testing.T) {
	e := newEnv(t)
	h := ocr.NewWebhookHandler(e.stores.Docs, ocr.WebhookConfig{Logger: testLogger()})
	code, resp := post(t, h, "anything", `{}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(resp.Message, "CHUNKUP_SERVICE_INTERNAL_KEY") {
		t.Fatalf("got %d %+v, want 503 naming the setting", code, resp)
	}
}
