package ocr

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/s3store"
)

// MaxText is how much recognized text (UTF-8 bytes, all pages together) GetDocument
// returns; the full result stays in S3 at the document's result key. 256 KiB keeps an
// answer far below gRPC's 4 MiB default message limit, whatever the client.
const MaxText = 256 << 10

// maxResultObject bounds the result object read back from S3 (a result is the text and
// a few numbers per page; 64 MiB is far beyond any real one).
const maxResultObject = 64 << 20

// ResultObjects is the part of the S3 store that reads results back.
type ResultObjects interface {
	Open(ctx context.Context, bucket, key string) (io.ReadCloser, int64, error)
}

var _ ResultObjects = (*s3store.Store)(nil)

// Results reads documents' OCR results back from S3 for the API.
type Results struct{ s3 ResultObjects }

// NewResults returns a Results reading from s3c.
func NewResults(s3c ResultObjects) *Results { return &Results{s3: s3c} }

// Text reads the result at bucket/key and returns its pages, with at most MaxText bytes
// of text in all: the pages past the limit keep their counts and lose (part of) their
// text, and Truncated says so.
func (r *Results) Text(ctx context.Context, bucket, key string) (*chunkupv1.OCRText, error) {
	body, _, err := r.s3.Open(ctx, bucket, key)
	if err != nil {
		return nil, fmt.Errorf("read OCR result %s: %w", key, err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxResultObject))
	if err != nil {
		return nil, fmt.Errorf("read OCR result %s: %w", key, err)
	}
	var doc resultDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("OCR result %s is not a result: %w", key, err)
	}
	out := &chunkupv1.OCRText{ResultKey: key, Engine: doc.Engine}
	left := MaxText
	for _, p := range doc.Pages {
		text := p.Text
		if len(text) > left {
			text, out.Truncated = cut(text, left), true
		}
		left -= len(text)
		out.Pages = append(out.Pages, &chunkupv1.OCRPage{Page: int32(p.Number), Text: text, Words: int32(p.Words),
			MeanConfidence: p.Confidence})
	}
	return out, nil
}

// cut returns the longest prefix of s of at most n bytes that ends on a rune boundary.
func cut(s string, n int) string {
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
