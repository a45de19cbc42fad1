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

// reviewable makes a document of tenant, with node id nodeID, that reached
// needs_review.
func (e *env) reviewable(t *testing.T, nodeID, tenant string) string {
	t.Helper()
	cfg := e.config()
	cfg.Rules.ApproveScore = 100 // the counting engine's 95 then needs review
	q := e.queue(t, cfg)
	u := e.upload(t, "image/png", testdocs.PNG("HELLO"))
	u.NodeID, u.Tenant = nodeID, tenant
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

// TestWebhook: the design's request (documentId, the node id, and verificationResult
// only) and today's richer one (an upload id, userId, score, decision, metadata) are
// both accepted and answered as the design says; every refusal has its status and
// changes nothing; node ids are per tenant.
func TestWebhook(t *testing.T) {
	e := newEnv(t)
	node, richNode, acmeNode := ids.NewUUID(), ids.NewUUID(), ids.NewUUID()
	id := e.reviewable(t, node, "")
	rich := e.reviewable(t, richNode, "")
	acme := e.reviewable(t, acmeNode, "acme")
	h := ocr.NewWebhookHandler(e.stores.Docs, ocr.WebhookConfig{ServiceKey: serviceKey, Nodes: e.stores.Uploads, Logger: testLogger()})
	design := `{"documentId":"` + node + `","verificationResult":"approved"}`
	tests := []struct {
		name, key, body string
		code            int
		msg             string
	}{
		{"missing key", "", design, http.StatusUnauthorized, "missing x-service-key"},
		{"wrong key", "s3cret-kez", design, http.StatusUnauthorized, "wrong x-service-key"},
		{"bad json", serviceKey, `{"documentId":`, http.StatusBadRequest, "not a JSON object"},
		{"trailing data", serviceKey, design + `{}`, http.StatusBadRequest, "after the JSON object"},
		{"no result", serviceKey, `{"documentId":"` + node + `"}`, http.StatusBadRequest, "approved or rejected"},
		{"bad result", serviceKey, `{"documentId":"` + node + `","userId":"u","verificationResult":"maybe"}`, http.StatusBadRequest, "approved or rejected"},
		{"bad score", serviceKey, `{"documentId":"` + node + `","verificationResult":"approved","score":101}`, http.StatusBadRequest, "score"},
		{"metadata not object", serviceKey, `{"documentId":"` + node + `","verificationResult":"approved","metadata":[1]}`, http.StatusBadRequest, "metadata"},
		{"no id", serviceKey, `{"verificationResult":"approved"}`, http.StatusBadRequest, "documentId is required"},
		{"bad id", serviceKey, `{"documentId":"../x","verificationResult":"approved"}`, http.StatusBadRequest, "neither a node id"},
		{"unknown node id", serviceKey, `{"documentId":"` + ids.NewUUID() + `","verificationResult":"approved"}`, http.StatusNotFound, "not found"},
		{"unknown upload id", serviceKey, `{"documentId":"` + ids.New() + `","verificationResult":"approved"}`, http.StatusNotFound, "not found"},
		{"another tenant's node id", serviceKey, `{"documentId":"` + node + `","tenant":"acme","verificationResult":"approved"}`, http.StatusNotFound, "not found"},
		{"another tenant's upload id", serviceKey, `{"documentId":"` + id + `","tenant":"acme","verificationResult":"approved"}`, http.StatusNotFound, "not found"},
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

	// The design's own test call: the node id and the result, nothing else.
	code, resp := post(t, h, serviceKey, design)
	if code != http.StatusOK || !resp.Success || resp.Message != "Verification result received" {
		t.Fatalf("the design's request: %d %+v", code, resp)
	}
	if d := e.doc(t, id); d.Status != documents.Approved || d.Verification == nil || d.Verification.Result != "approved" {
		t.Fatalf("document after the design's request: %+v", d)
	}
	evs := e.docEvents(t, id)
	if len(evs) != before+1 {
		t.Fatalf("%d events after the decision, want %d", len(evs), before+1)
	}
	found := false
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), `"DOCUMENT_STATUS_APPROVED"`) && strings.Contains(string(ev.Payload), `"node_id":"`+node+`"`) {
			found = ev.CorrelationID == "corr-"+id && ev.Type == "chunkup.v1.DocumentStatusChanged"
		}
	}
	if !found {
		t.Fatal("no DocumentStatusChanged event to approved with the node id and the correlation id")
	}
	// A decided document accepts no second decision.
	if code, resp := post(t, h, serviceKey, design); code != http.StatusConflict || resp.Success {
		t.Fatalf("second decision: %d %+v, want 409", code, resp)
	}

	// Today's richer request, by upload id.
	body := `{"documentId":"` + rich + `","userId":"u-7","verificationResult":"rejected","score":12.5,"decision":"blurry","metadata":{"reviewer":"ann","n":2}}`
	if code, resp := post(t, h, serviceKey, body); code != http.StatusOK || !resp.Success || resp.Message != "Verification result received" {
		t.Fatalf("the richer request: %d %+v", code, resp)
	}
	d := e.doc(t, rich)
	if d.Status != documents.Rejected || d.Verification == nil || d.Verification.UserID != "u-7" || d.Verification.Score != 12.5 ||
		d.Verification.Decision != "blurry" || !strings.Contains(d.Verification.Metadata, `"reviewer":"ann"`) {
		t.Fatalf("document after the richer request: %+v %+v", d, d.Verification)
	}

	// A tenant's node id, with its tenant.
	if code, resp := post(t, h, serviceKey, `{"documentId":"`+acmeNode+`","verificationResult":"approved"}`); code != http.StatusNotFound {
		t.Fatalf("acme's node id without its tenant: %d %+v, want 404", code, resp)
	}
	if code, resp := post(t, h, serviceKey, `{"documentId":"`+strings.ToUpper(acmeNode)+`","tenant":"acme","verificationResult":"approved"}`); code != http.StatusOK {
		t.Fatalf("acme's node id (upper case) with its tenant: %d %+v", code, resp)
	}
	if d := e.doc(t, acme); d.Status != documents.Approved {
		t.Fatalf("acme's document %s, want approved", d.Status)
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
