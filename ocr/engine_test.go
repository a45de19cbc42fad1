package ocr_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/staging/documents"
)

func TestParseTSV(t *testing.T) {
	tsv := "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n" +
		"1\t1\t0\t0\t0\t0\t0\t0\t100\t100\t-1\t\n" +
		"5\t1\t1\t1\t1\t1\t0\t0\t1\t1\t90\tHello\n" +
		"5\t1\t1\t1\t1\t2\t0\t0\t1\t1\t80\tworld\n" +
		"5\t1\t1\t1\t2\t1\t0\t0\t1\t1\t70\tline2\n" +
		"5\t1\t2\t1\t1\t1\t0\t0\t1\t1\t60\tblock2\n" +
		"5\t1\t2\t1\t1\t2\t0\t0\t1\t1\t-1\t \n" +
		"1\t2\t0\t0\t0\t0\t0\t0\t100\t100\t-1\t\n" +
		"5\t2\t1\t1\t1\t1\t0\t0\t1\t1\t50\tpage2\n"
	pages, err := ocr.ParseTSV([]byte(tsv))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 2 {
		t.Fatalf("%d pages, want 2", len(pages))
	}
	if p := pages[0]; p.Text != "Hello world\nline2\n\nblock2" || p.Words != 4 || p.Confidence != 75 {
		t.Fatalf("page 1: %+v", p)
	}
	if p := pages[1]; p.Number != 2 || p.Text != "page2" || p.Words != 1 || p.Confidence != 50 {
		t.Fatalf("page 2: %+v", p)
	}
	if _, err := ocr.ParseTSV([]byte("garbage\n")); err == nil {
		t.Fatal("no error for output without a header")
	}
}

func TestEvaluate(t *testing.T) {
	page := func(text string, words int, conf float64) *ocr.Result {
		return &ocr.Result{Pages: []ocr.Page{{Number: 1, Text: text, Words: words, Confidence: conf}}}
	}
	tests := []struct {
		name  string
		rules ocr.Rules
		res   *ocr.Result
		score int
		want  documents.Status
	}{
		{"confident", ocr.Rules{}, page("a b c d", 4, 92), 92, documents.AutoApproved},
		{"too few words", ocr.Rules{}, page("a", 1, 90), 30, documents.NeedsReview},
		{"nothing read", ocr.Rules{}, page("", 0, 0), 0, documents.AutoRejected},
		{"low confidence", ocr.Rules{}, page("a b c", 3, 50), 50, documents.NeedsReview},
		{"below reject", ocr.Rules{}, page("a b c", 3, 20), 20, documents.AutoRejected},
		{"pattern found", ocr.Rules{RequiredPatterns: []string{`(?i)invoice`, `\d{5}`}}, page("INVOICE 12345 due", 3, 90), 90, documents.AutoApproved},
		{"pattern missing", ocr.Rules{RequiredPatterns: []string{`(?i)invoice`, `\d{5}`}}, page("INVOICE due now", 3, 90), 45, documents.NeedsReview},
		{"custom thresholds", ocr.Rules{ApproveScore: 95, RejectScore: 91}, page("a b c", 3, 93), 93, documents.NeedsReview},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := ocr.NewEvaluator(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			got := ev.Evaluate(tc.res)
			if got.Score != tc.score || got.Decision != tc.want {
				t.Fatalf("got score %d %s (%v), want %d %s", got.Score, got.Decision, got.Reasons, tc.score, tc.want)
			}
			if got.Decision == documents.AutoApproved && len(got.Reasons) > 0 {
				t.Fatalf("approved with reasons %v", got.Reasons)
			}
		})
	}
	for _, bad := range []ocr.Rules{{RequiredPatterns: []string{"("}}, {ApproveScore: 20, RejectScore: 50}, {MinMeanConfidence: 101}} {
		if _, err := ocr.NewEvaluator(bad); err == nil {
			t.Errorf("rules %+v accepted", bad)
		}
	}
}

// TestTesseract runs the real tesseract (and pdftoppm) on rendered documents.
func TestTesseract(t *testing.T) {
	eng, err := ocr.NewTesseract(ocr.TesseractConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		typ   ocr.FileType
		data  []byte
		words []string
	}{
		{"png", ocr.PNG, testdocs.PNG("INVOICE 12345", "CHUNKUP OCR WORKS"), []string{"INVOICE", "12345", "CHUNKUP", "WORKS"}},
		{"pdf", ocr.PDF, testdocs.PDF("INVOICE 67890", "Chunkup reads PDFs"), []string{"INVOICE", "67890", "Chunkup", "PDFs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := eng.Recognize(ctxT(t), tc.data, tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.words {
				if !strings.Contains(res.Text(), w) {
					t.Errorf("text %q lacks %q", res.Text(), w)
				}
			}
			if len(res.Pages) != 1 || res.MeanConfidence() < 60 {
				t.Fatalf("%d pages, mean confidence %.1f", len(res.Pages), res.MeanConfidence())
			}
		})
	}
}

// TestTesseractKilledWithContext: a hanging engine subprocess is killed when the job's
// context ends (as when its lease is lost), and Recognize returns promptly.
func TestTesseractKilledWithContext(t *testing.T) {
	script := filepath.Join(t.TempDir(), "tesseract")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	eng, err := ocr.NewTesseract(ocr.TesseractConfig{Path: script})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(ctxT(t))
	lost := errors.New("lease lost")
	time.AfterFunc(200*time.Millisecond, func() { cancel(lost) })
	start := time.Now()
	_, err = eng.Recognize(ctx, testdocs.PNG("A"), ocr.PNG)
	if !errors.Is(err, lost) {
		t.Fatalf("err %v, want the context's cause", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Recognize took %v after the context ended", d)
	}
}
