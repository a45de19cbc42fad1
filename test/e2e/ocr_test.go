package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/test/harness"
)

const ocrKey = "test-service-key"

// withOCR turns OCR on in cfg with the real Tesseract engine and a fast reaper.
func withOCR(cfg app.Config) app.Config {
	cfg.OCR = app.OCRConfig{Enabled: true, ServiceKey: ocrKey}
	cfg.OCR.ReapInterval = 100 * time.Millisecond
	cfg.OCR.FetchBlock = time.Second
	return cfg
}

// verify posts body to the verification webhook at httpAddr with the test's service key
// and returns the answer's status and body.
func verify(t *testing.T, httpAddr, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx(t), http.MethodPost, "http://"+httpAddr+ocr.WebhookPath, strings.NewReader(body))
	req.Header.Set(ocr.ServiceKeyHeader, ocrKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

func documents(t *testing.T, addr string) chunkupv1.DocumentServiceClient { return docsAs(t, addr, "") }

var decided = []chunkupv1.DocumentStatus{
	chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_APPROVED,
	chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_REJECTED,
	chunkupv1.DocumentStatus_DOCUMENT_STATUS_NEEDS_REVIEW,
}

// waitDecision waits until document id has an automatic decision and returns it.
func waitDecision(t *testing.T, docs chunkupv1.DocumentServiceClient, id string) *chunkupv1.Document {
	t.Helper()
	var d *chunkupv1.Document
	waitFor(t, "document "+id+" to be decided", func() bool {
		r, err := docs.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: id})
		if err != nil {
			return false
		}
		d = r.Document
		if d.Status == chunkupv1.DocumentStatus_DOCUMENT_STATUS_FAILED {
			t.Fatalf("document %s failed: %s", id, d.Error)
		}
		return slices.Contains(decided, d.Status)
	})
	return d
}

// TestOCRDocumentsReachDecision: a PNG and a one-page PDF rendered with known words are
// uploaded through the API; OCR (real Tesseract) reads the words, the result lands in
// S3 beside the object, the document reaches a decision through every status with an
// event each (carrying the upload's correlation id) on Kafka, and the verification
// webhook records a reviewer's decision.
func TestOCRDocumentsReachDecision(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	a := e.start(t, withOCR(withKafka(e.config(), k)))
	c := e.client(t, a)
	docs := documents(t, a.GRPCAddr())
	tests := []struct {
		name, contentType string
		data              []byte
		words             []string
	}{
		{"png", "image/png", testdocs.PNG("INVOICE 12345", "CHUNKUP OCR WORKS"), []string{"INVOICE", "12345", "CHUNKUP", "WORKS"}},
		{"pdf", "application/pdf", testdocs.PDF("INVOICE 67890", "Chunkup reads PDFs"), []string{"INVOICE", "67890", "Chunkup", "PDFs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up, err := c.Upload(ctx(t), reader(tc.data), client.WithName("scan."+tc.name), client.WithContentType(tc.contentType))
			if err != nil {
				t.Fatal(err)
			}
			e.requireExact(t, up, tc.data)
			d := waitDecision(t, docs, up.UploadId)
			if d.Ocr == nil || d.Ocr.Pages != 1 || d.Ocr.Words < int32(len(tc.words)) || d.Evaluation == nil || d.CorrelationId != up.CorrelationId {
				t.Fatalf("document %v", d)
			}
			var res struct {
				Text  string     `json:"text"`
				Pages []ocr.Page `json:"pages"`
			}
			if err := json.Unmarshal(e.object(t, up.Key+ocr.ResultSuffix), &res); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.words {
				if !strings.Contains(res.Text, w) {
					t.Errorf("recognized text %q lacks %q", res.Text, w)
				}
			}
			if d.Ocr.ResultKey != up.Key+ocr.ResultSuffix || len(res.Pages) != 1 || res.Pages[0].Confidence < 60 {
				t.Fatalf("result key %s, pages %+v", d.Ocr.ResultKey, res.Pages)
			}

			// The reviewer's decision, through the HTTP address.
			body := fmt.Sprintf(`{"documentId":%q,"userId":"reviewer-1","verificationResult":"rejected","score":12,"decision":"blurry","metadata":{"why":"test"}}`, up.UploadId)
			if code, answer := verify(t, a.HTTPAddr(), body); code != http.StatusOK {
				t.Fatalf("webhook answered %d %s", code, answer)
			}
			r, err := docs.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: up.UploadId})
			if err != nil || r.Document.Status != chunkupv1.DocumentStatus_DOCUMENT_STATUS_REJECTED || r.Document.Verification.GetUserId() != "reviewer-1" {
				t.Fatalf("after the webhook: %v %v", r.GetDocument(), err)
			}

			// Every transition is on Kafka, with the upload's correlation id.
			want := []chunkupv1.DocumentStatus{
				chunkupv1.DocumentStatus_DOCUMENT_STATUS_UPLOADED, chunkupv1.DocumentStatus_DOCUMENT_STATUS_PROCESSING,
				chunkupv1.DocumentStatus_DOCUMENT_STATUS_OCR_COMPLETED, chunkupv1.DocumentStatus_DOCUMENT_STATUS_AI_EVALUATED,
				d.Status, chunkupv1.DocumentStatus_DOCUMENT_STATUS_REJECTED,
			}
			var got []chunkupv1.DocumentStatus
			waitFor(t, "the document events on Kafka", func() bool {
				got = nil
				for _, ev := range eventsFor(allEvents(t, k), up.UploadId, "chunkup.v1.DocumentStatusChanged") {
					var m chunkupv1.DocumentStatusChanged
					if err := protojson.Unmarshal(ev.Value, &m); err != nil {
						t.Fatal(err)
					}
					if ev.CorrelationID != up.CorrelationId || m.CorrelationId != up.CorrelationId {
						t.Fatalf("event correlation id %q/%q, want %q", ev.CorrelationID, m.CorrelationId, up.CorrelationId)
					}
					got = append(got, m.Status)
				}
				return len(got) >= len(want)
			})
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("document events %v, want %v", got, want)
			}
		})
	}
}

// TestOCRWorkerKilledMidJob: an OCR worker process killed with SIGKILL while its engine
// runs leaves the job leased; after the lease it is reclaimed by another worker process
// and completes exactly once, and the crash leaves the document's attempts unchanged (it
// is counted as a reclaim, not a failed attempt).
func TestOCRWorkerKilledMidJob(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	hang := filepath.Join(dir, "tesseract-hangs")
	// An engine that announces it started, then blocks.
	if err := os.WriteFile(hang, []byte("#!/bin/sh\ntouch \""+marker+"\"\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	worker := func(tesseract string) *harness.Node {
		return e.serveProcess(t, nil, "ocr", "ocr", "--ocr-lease", "2s", "--ocr-reap-interval", "100ms",
			"--tesseract-path", tesseract)
	}
	first := worker(hang)

	api := e.start(t, withOCR(e.config("api", "worker", "completer")))
	c := e.client(t, api)
	data := testdocs.PNG("RECLAIMED JOB 4711")
	up, err := c.Upload(ctx(t), reader(data), client.WithContentType("image/png"))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	waitFor(t, "the first worker's engine to start", func() bool { _, err := os.Stat(marker); return err == nil })
	first.Kill(t)

	tess, err := exec.LookPath("tesseract")
	if err != nil {
		t.Fatal(err)
	}
	worker(tess)
	docs := documents(t, api.GRPCAddr())
	d := waitDecision(t, docs, up.UploadId)
	if d.Attempts != 0 || d.Reclaims != 1 {
		t.Fatalf("attempts %d, reclaims %d; want 0 attempts (a crash is not the document's failure) and 1 reclaim", d.Attempts, d.Reclaims)
	}
	res := string(e.object(t, up.Key+ocr.ResultSuffix))
	if !strings.Contains(res, "4711") {
		t.Fatalf("result %s lacks the words", res)
	}
	// Exactly once: one transition to ocr_completed and to a decision among the events
	// (no publisher runs, so every event is still in the outbox).
	evs, _, err := api.Outbox().Events(ctx(t), up.UploadId)
	if err != nil {
		t.Fatal(err)
	}
	count := map[chunkupv1.DocumentStatus]int{}
	for _, ev := range evs {
		if ev.Type != "chunkup.v1.DocumentStatusChanged" {
			continue
		}
		var m chunkupv1.DocumentStatusChanged
		if err := protojson.Unmarshal(ev.Payload, &m); err != nil {
			t.Fatal(err)
		}
		count[m.Status]++
	}
	if count[chunkupv1.DocumentStatus_DOCUMENT_STATUS_OCR_COMPLETED] != 1 || count[d.Status] != 1 ||
		count[chunkupv1.DocumentStatus_DOCUMENT_STATUS_PROCESSING] != 2 {
		t.Fatalf("transitions %v, want processing twice (killed, reclaimed) and everything after once", count)
	}
	st, err := api.Jobs().Stats(ctx(t))
	if err != nil || st != (ocrqueue.Stats{}) {
		t.Fatalf("queue after the job: %+v %v", st, err)
	}
}
