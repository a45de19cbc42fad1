package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/test/harness"
)

// cli runs the chunkup binary with args and returns its stdout, failing the test when
// it does not exit 0.
func cli(t *testing.T, bin string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx(t), bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "CHUNKUP_STATE_DIR="+t.TempDir())
	if err := cmd.Run(); err != nil {
		t.Fatalf("chunkup %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestCLIUploadScanReachesDecision: `chunkup upload scan.png`, with no flags, against a
// real `chunkup serve` (OCR on, as by default) makes a document that Tesseract reads;
// `chunkup ocr watch` follows it to a decision, `chunkup ocr status ID --text` prints
// the words the image holds (by upload id and by node id), `chunkup ocr stats` shows the
// worker and its engine, and the design's webhook request (node id and result only) is
// accepted.
func TestCLIUploadScanReachesDecision(t *testing.T) {
	e := newEnv(t)
	node := e.serveProcess(t, nil, "serve", "api,worker,completer,cleanup,ocr", "--ocr-reap-interval", "100ms",
		"--service-internal-key", ocrKey)
	bin := harness.Binary(t)
	scan := filepath.Join(t.TempDir(), "scan.png")
	if err := os.WriteFile(scan, testdocs.PNG("SCANNED PAGE 1357", "HELLO CHUNKUP"), 0o600); err != nil {
		t.Fatal(err)
	}

	// No flags but the server's address (its port is the test's).
	f := strings.Fields(cli(t, bin, "upload", "--server", node.GRPCAddr, scan))
	if len(f) < 2 || f[1] != "COMPLETED" {
		t.Fatalf("upload printed %q", f)
	}
	r, err := harness.Dial(t, node.GRPCAddr).API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: f[0]})
	if err != nil {
		t.Fatal(err)
	}
	up := r.Upload
	if up.ContentType != "image/png" || up.NodeId == "" {
		t.Fatalf("upload %v: want image/png (from the extension) and a node id", up)
	}

	watched := cli(t, bin, "ocr", "watch", "--server", node.GRPCAddr, up.UploadId)
	lastLine := watched[strings.LastIndex(strings.TrimSpace(watched), "\n")+1:]
	if !strings.Contains(lastLine, "auto_approved") && !strings.Contains(lastLine, "needs_review") && !strings.Contains(lastLine, "auto_rejected") {
		t.Fatalf("ocr watch ended on %q, want a decision:\n%s", lastLine, watched)
	}
	for _, ref := range []string{up.UploadId, up.NodeId} {
		out := cli(t, bin, "ocr", "status", "--server", node.GRPCAddr, ref, "--text")
		for _, w := range []string{"SCANNED", "1357", "HELLO", "CHUNKUP", "--- page 1:"} {
			if !strings.Contains(out, w) {
				t.Fatalf("ocr status %s --text lacks %q:\n%s", ref, w, out)
			}
		}
	}
	stats := cli(t, bin, "ocr", "stats", "--server", node.GRPCAddr)
	if !strings.Contains(stats, "worker serve: running, engine tesseract healthy") || !strings.Contains(stats, "0 pending") {
		t.Fatalf("ocr stats:\n%s", stats)
	}
	if out := cli(t, bin, "ocr", "purge", "--server", node.GRPCAddr, "dead", "--yes"); !strings.Contains(out, "purged 0 dead jobs") {
		t.Fatalf("ocr purge dead --yes: %s", out)
	}

	// The design's own webhook call: the node id and the result, nothing else.
	body := fmt.Sprintf(`{"documentId":%q,"verificationResult":"rejected"}`, up.NodeId)
	if code, answer := verify(t, node.HTTPAddr, body); code != http.StatusOK || !strings.Contains(answer, `"success":true`) ||
		!strings.Contains(answer, `"message":"Verification result received"`) || !strings.Contains(answer, `"timestamp":"`) {
		t.Fatalf("webhook answered %d %s", code, answer)
	}
	if out := cli(t, bin, "ocr", "status", "--server", node.GRPCAddr, up.NodeId); !strings.Contains(out, " rejected ") {
		t.Fatalf("after the webhook: %s", out)
	}
}
