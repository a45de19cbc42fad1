package ocr

import (
	"context"
	"strings"
)

// Engine recognizes the text of a file whose type has been validated.
type Engine interface {
	// Name names the engine in results, metrics and status: a short fixed word
	// (tesseract, remote).
	Name() string
	// Recognize returns the file's text per page. It must stop, and return, when ctx
	// ends: the job's lease may have been lost. An error marked Permanent fails the job
	// at once; an *UnavailableError says the engine cannot take work now (the job is
	// released, or runs on the fallback engine), not counted; any other error counts as
	// a failed attempt.
	Recognize(ctx context.Context, file []byte, typ FileType) (*Result, error)
	// Health reports whether the engine can take work now: nil, or why not. It is
	// cheap enough to call every few seconds.
	Health(ctx context.Context) error
}

// Result is what an engine recognized.
type Result struct {
	Pages []Page `json:"pages"`
	// Engine names the engine that recognized it (set by the engine; with a fallback,
	// the one that ran).
	Engine string `json:"-"`
}

// Page is one page's text and confidence.
type Page struct {
	Number int    `json:"page"`
	Text   string `json:"text"`
	Words  int    `json:"words"`
	// Confidence is the mean confidence of the page's words, 0–100 (0 without words).
	Confidence float64 `json:"confidence"`
}

// Text is the text of every page, separated by form feeds.
func (r *Result) Text() string {
	parts := make([]string, len(r.Pages))
	for i, p := range r.Pages {
		parts[i] = p.Text
	}
	return strings.Join(parts, "\f")
}

// Words is the number of words on all pages.
func (r *Result) Words() int {
	n := 0
	for _, p := range r.Pages {
		n += p.Words
	}
	return n
}

// MeanConfidence is the mean confidence of all words, 0–100.
func (r *Result) MeanConfidence() float64 {
	var sum float64
	n := 0
	for _, p := range r.Pages {
		sum += p.Confidence * float64(p.Words)
		n += p.Words
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Noop is an engine that recognizes nothing but a fixed text, instantly: for measuring
// the queue without OCR's cost.
type Noop struct{}

// Name implements Engine.
func (Noop) Name() string { return "noop" }

// Recognize implements Engine.
func (Noop) Recognize(ctx context.Context, _ []byte, _ FileType) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &Result{Engine: "noop", Pages: []Page{{Number: 1, Text: "noop", Words: 1, Confidence: 100}}}, nil
}

// Health implements Engine: Noop is always ready.
func (Noop) Health(context.Context) error { return nil }
