package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/server"
)

// isUUIDv4 reports whether s is a lowercase canonical version 4 UUID.
func isUUIDv4(s string) bool {
	c, ok := ids.UUID(s)
	return ok && c == s && s[14] == '4' && strings.ContainsRune("89ab", rune(s[19]))
}

// TestDocumentIdentityEndToEnd: an upload created with every document field (and nested
// custom metadata) produces an UploadCompleted that carries them, with node_id a UUID
// the server made and instance_id the process; the key template
// connectors/{connector_id}/{node_id}.pb places the object there; a client's node id is
// kept (lowercased); a request the template cannot fill is refused and changes nothing.
func TestDocumentIdentityEndToEnd(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	cfg := withKafka(e.config(), k)
	cfg.InstanceID = "api-7"
	cfg.Upload.KeyTemplate = "connectors/{connector_id}/{node_id}.pb"
	a := e.start(t, cfg)
	c := e.client(t, a)

	custom, err := structpb.NewStruct(map[string]any{
		"case":  map[string]any{"id": 4711.0, "labels": []any{"finance", "q3"}, "owner": map[string]any{"name": "Ann", "active": true}},
		"score": 0.5, "none": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	doc := client.Document{ConnectorID: "gdrive-eu", ParentID: "folder-0042", Path: "/Finance/2026/Q3/statement.bin",
		Drive: "shared-finance", CustomMetadata: custom}
	data := randomBytes(chunk+777, 31)
	up, err := c.Upload(ctx(t), reader(data), client.WithName("statement.bin"), client.WithClientNodeID("gdrive-file-17"),
		client.WithMetadata(map[string]string{"team": "blue"}), client.WithDocument(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !isUUIDv4(up.NodeId) {
		t.Fatalf("node_id %q is not a UUIDv4 the server made", up.NodeId)
	}
	if want := "connectors/gdrive-eu/" + up.NodeId + ".pb"; up.Key != want {
		t.Fatalf("key %q, want %q (the key template)", up.Key, want)
	}
	e.requireExact(t, up, data) // the object is there, exactly
	if up.ConnectorId != doc.ConnectorID || up.ParentId != doc.ParentID || up.Path != doc.Path || up.Drive != doc.Drive ||
		!proto.Equal(up.CustomMetadata, custom) {
		t.Fatalf("upload carries %v", up)
	}

	var ev chunkupv1.UploadCompleted
	waitFor(t, "the UploadCompleted event", func() bool {
		evs := eventsFor(allEvents(t, k), up.UploadId, "chunkup.v1.UploadCompleted")
		return len(evs) == 1 && protojson.Unmarshal(evs[0].Value, &ev) == nil
	})
	if ev.NodeId != up.NodeId || ev.InstanceId != "api-7" || ev.UploadId != up.UploadId || ev.ClientNodeId != "gdrive-file-17" ||
		ev.ConnectorId != doc.ConnectorID || ev.ParentId != doc.ParentID || ev.Path != doc.Path || ev.Drive != doc.Drive ||
		!proto.Equal(ev.CustomMetadata, custom) || ev.Metadata["team"] != "blue" || ev.Key != up.Key {
		t.Fatalf("UploadCompleted %v does not carry the document's identity", &ev)
	}
	if got := ev.CustomMetadata.GetFields()["case"].GetStructValue().GetFields()["owner"].GetStructValue().GetFields()["name"].GetStringValue(); got != "Ann" {
		t.Fatalf("nested custom metadata lost: %v", ev.CustomMetadata)
	}

	// A client's node id is the document's, in its canonical form.
	given := "0F8E3C1A-5B7D-4E2F-9A6C-1D2E3F4A5B6C"
	up2, err := c.Upload(ctx(t), reader([]byte("second")), client.WithDocument(client.Document{NodeID: given, ConnectorID: "gdrive-eu"}))
	if err != nil {
		t.Fatal(err)
	}
	if up2.NodeId != strings.ToLower(given) || up2.Key != "connectors/gdrive-eu/"+strings.ToLower(given)+".pb" {
		t.Fatalf("client's node id: upload %s key %s", up2.NodeId, up2.Key)
	}

	// The template needs a connector id: a create without one is refused before anything
	// is written, not even the client_node_id's binding.
	_, err = c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "x.pdf", ClientNodeId: "never-bound"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "connector_id") || !strings.Contains(err.Error(), "connectors/{connector_id}/{node_id}.pb") {
		t.Fatalf("create the template cannot fill: %v, want INVALID_ARGUMENT naming connector_id and the template", err)
	}
	if n, err := e.rdb(t).Exists(ctx(t), "chunkup:idem:/never-bound").Result(); err != nil || n != 0 {
		t.Fatalf("the refused create bound its client_node_id (%d, %v)", n, err)
	}
}

// docsAs is a DocumentService client with apiKey (none when empty).
func docsAs(t *testing.T, addr, apiKey string) chunkupv1.DocumentServiceClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if apiKey != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(client.APIKey(apiKey)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return chunkupv1.NewDocumentServiceClient(conn)
}

// watchToEnd watches document ref until the stream ends and returns what it sent.
func watchToEnd(t *testing.T, docs chunkupv1.DocumentServiceClient, ref string) []*chunkupv1.Document {
	t.Helper()
	stream, err := docs.WatchDocument(ctx(t), &chunkupv1.WatchDocumentRequest{DocumentId: ref})
	if err != nil {
		t.Fatal(err)
	}
	var got []*chunkupv1.Document
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("watch %s: %v (after %d documents)", ref, err, len(got))
		}
		got = append(got, r.Document)
	}
}

var settled = map[chunkupv1.DocumentStatus]bool{
	chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_APPROVED: true, chunkupv1.DocumentStatus_DOCUMENT_STATUS_AUTO_REJECTED: true,
	chunkupv1.DocumentStatus_DOCUMENT_STATUS_NEEDS_REVIEW: true, chunkupv1.DocumentStatus_DOCUMENT_STATUS_APPROVED: true,
	chunkupv1.DocumentStatus_DOCUMENT_STATUS_REJECTED: true, chunkupv1.DocumentStatus_DOCUMENT_STATUS_FAILED: true,
}

// TestDocumentsThroughTheAPI: a PNG uploaded with no content type is recognized from its
// bytes and becomes a document; with authentication on, its tenant follows it by node
// id (WatchDocument until settled), reads its recognized text (GetDocument
// include_text), reprocesses it (force), and the webhook records a decision named by
// node id; another tenant finds none of it, and only an admin tenant sees the queue.
func TestDocumentsThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	cfg := withOCR(e.config())
	cfg.InstanceID = "ocr-api-1"
	cfg.Auth = server.AuthConfig{APIKeys: map[string]string{server.HashAPIKey("acme-key"): "acme",
		server.HashAPIKey("beta-key"): "beta", server.HashAPIKey("ops-key"): "ops"}}
	cfg.Documents.AdminTenants = []string{"ops"}
	a := e.start(t, cfg)
	acme, beta, ops := docsAs(t, a.GRPCAddr(), "acme-key"), docsAs(t, a.GRPCAddr(), "beta-key"), docsAs(t, a.GRPCAddr(), "ops-key")
	c := e.client(t, a, client.WithAPIKey("acme-key"))

	node := ids.NewUUID()
	png := testdocs.PNG("INVOICE 24681", "PAYABLE TO CHUNKUP")
	up, err := c.Upload(ctx(t), reader(png), client.WithName("scan"), client.WithDocument(client.Document{NodeID: node}))
	if err != nil {
		t.Fatal(err)
	}
	if up.ContentType != "" || up.DetectedContentType != "image/png" {
		t.Fatalf("content type %q detected %q, want none declared and image/png detected", up.ContentType, up.DetectedContentType)
	}
	waitFor(t, "the document to exist", func() bool {
		_, err := acme.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: node})
		return err == nil
	})
	seen := watchToEnd(t, acme, node)
	last := seen[len(seen)-1]
	if !settled[last.Status] || last.NodeId != node || last.DocumentId != up.UploadId || last.ContentType != "image/png" {
		t.Fatalf("watch ended on %v", last)
	}
	for i := 1; i < len(seen); i++ {
		if proto.Equal(seen[i], seen[i-1]) {
			t.Fatalf("watch sent the same document twice: %v", seen[i])
		}
	}

	r, err := acme.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: node, IncludeText: true})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Document
	if d.Text == nil || len(d.Text.Pages) != 1 || d.Text.Truncated || d.Text.ResultKey != d.Ocr.GetResultKey() || d.Text.Engine != "tesseract" {
		t.Fatalf("text %v of document %v", d.Text, d)
	}
	p := d.Text.Pages[0]
	for _, w := range []string{"INVOICE", "24681", "PAYABLE", "CHUNKUP"} {
		if !strings.Contains(p.Text, w) {
			t.Errorf("page text %q lacks %q", p.Text, w)
		}
	}
	if p.Page != 1 || p.Words < 5 || p.MeanConfidence < 60 {
		t.Fatalf("page %v", p)
	}
	if r, err := acme.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: up.UploadId}); err != nil || r.Document.Text != nil || r.Document.NodeId != node {
		t.Fatalf("by upload id, without text: %v %v", r.GetDocument(), err)
	}

	// Another tenant finds nothing, by either name; bad names are refused.
	for _, ref := range []string{node, up.UploadId} {
		if _, err := beta.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: ref}); status.Code(err) != codes.NotFound {
			t.Fatalf("beta gets acme's document %s: %v, want NOT_FOUND", ref, err)
		}
		if _, err := beta.ReprocessDocument(ctx(t), &chunkupv1.ReprocessDocumentRequest{DocumentId: ref, Force: true}); status.Code(err) != codes.NotFound {
			t.Fatalf("beta reprocesses acme's document %s: %v, want NOT_FOUND", ref, err)
		}
		stream, err := beta.WatchDocument(ctx(t), &chunkupv1.WatchDocumentRequest{DocumentId: ref})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.NotFound {
			t.Fatalf("beta watches acme's document %s: %v, want NOT_FOUND", ref, err)
		}
	}
	if _, err := acme.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: "../x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad document id: %v, want INVALID_ARGUMENT", err)
	}

	// Reprocessing: without force the document has its job; with force it runs again.
	if r, err := acme.ReprocessDocument(ctx(t), &chunkupv1.ReprocessDocumentRequest{DocumentId: node}); err != nil || r.Enqueued || r.JobId != d.JobId {
		t.Fatalf("reprocess without force: %v %v, want not enqueued (job %s)", r, err, d.JobId)
	}
	rp, err := acme.ReprocessDocument(ctx(t), &chunkupv1.ReprocessDocumentRequest{DocumentId: node, Force: true})
	if err != nil || !rp.Enqueued || rp.JobId == d.JobId {
		t.Fatalf("reprocess with force: %v %v", rp, err)
	}
	waitFor(t, "the reprocessed document to be settled by its new job", func() bool {
		r, err := acme.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: node})
		return err == nil && r.Document.JobId == rp.JobId && settled[r.Document.Status]
	})

	// The queue's administration: ops only.
	if _, err := acme.GetOCRStats(ctx(t), &chunkupv1.GetOCRStatsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("acme asks for the queue's stats: %v, want PERMISSION_DENIED", err)
	}
	if _, err := acme.PurgeQueue(ctx(t), &chunkupv1.PurgeQueueRequest{Queue: chunkupv1.OCRQueueSet_OCR_QUEUE_SET_DEAD}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("acme purges: %v, want PERMISSION_DENIED", err)
	}
	var st *chunkupv1.GetOCRStatsResponse
	waitFor(t, "the OCR worker's report", func() bool {
		st, err = ops.GetOCRStats(ctx(t), &chunkupv1.GetOCRStatsRequest{})
		return err == nil && len(st.Workers) == 1
	})
	if w := st.Workers[0]; w.InstanceId != "ocr-api-1" || w.Engine != "tesseract" || w.ActiveEngine != "tesseract" || !w.EngineHealthy {
		t.Fatalf("worker %v", w)
	}
	if _, err := ops.PurgeQueue(ctx(t), &chunkupv1.PurgeQueueRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("purge without a queue: %v, want INVALID_ARGUMENT", err)
	}

	// The design's webhook request names the document by node id (with its tenant).
	body := fmt.Sprintf(`{"documentId":%q,"tenant":"acme","verificationResult":"approved"}`, node)
	if code, answer := verify(t, a.HTTPAddr(), body); code != http.StatusOK || !strings.Contains(answer, `"message":"Verification result received"`) {
		t.Fatalf("webhook answered %d %s", code, answer)
	}
	if r, err := acme.GetDocument(ctx(t), &chunkupv1.GetDocumentRequest{DocumentId: node}); err != nil ||
		r.Document.Status != chunkupv1.DocumentStatus_DOCUMENT_STATUS_APPROVED {
		t.Fatalf("after the webhook: %v %v", r.GetDocument(), err)
	}
}
