package ocr

import (
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/chunkup/chunkup/staging/documents"
)

// Rules is the automatic evaluation's rule set. Zero values mean the documented
// defaults. See docs/ocr.md.
//
// The score (0–100) starts as the mean word confidence, is scaled by
// min(1, words/MinWords) and by the fraction of RequiredPatterns found. The decision is
// auto_approved when the score is at least ApproveScore and no rule was broken (enough
// words, every pattern found, mean confidence at least MinMeanConfidence);
// auto_rejected when the score is below RejectScore; needs_review otherwise.
type Rules struct {
	// MinMeanConfidence is the mean word confidence (0–100) below which a document is
	// never approved automatically. Zero means 60.
	MinMeanConfidence float64
	// MinWords is the number of words below which the score is scaled down and a
	// document is never approved automatically. Zero means 3.
	MinWords int
	// RequiredPatterns are regular expressions (RE2 syntax) the text must all match.
	// Zero means none.
	RequiredPatterns []string
	// ApproveScore is the lowest score approved automatically. Zero means 80.
	ApproveScore int
	// RejectScore: scores below it are rejected automatically. Zero means 30.
	RejectScore int
}

// Validate checks the rules.
func (r Rules) Validate() error {
	if r.MinMeanConfidence < 0 || r.MinMeanConfidence > 100 {
		return errors.New("ocr: min mean confidence must be between 0 and 100")
	}
	if r.MinWords < 0 || r.ApproveScore < 0 || r.ApproveScore > 100 || r.RejectScore < 0 || r.RejectScore > 100 {
		return errors.New("ocr: min words must not be negative, scores must be between 0 and 100")
	}
	d := r.withDefaults()
	if d.RejectScore > d.ApproveScore {
		return fmt.Errorf("ocr: reject score %d above approve score %d", d.RejectScore, d.ApproveScore)
	}
	for _, p := range r.RequiredPatterns {
		if _, err := regexp.Compile(p); err != nil {
			return fmt.Errorf("ocr: required pattern %q: %w", p, err)
		}
	}
	return nil
}

func (r Rules) withDefaults() Rules {
	if r.MinMeanConfidence == 0 {
		r.MinMeanConfidence = 60
	}
	if r.MinWords == 0 {
		r.MinWords = 3
	}
	if r.ApproveScore == 0 {
		r.ApproveScore = 80
	}
	if r.RejectScore == 0 {
		r.RejectScore = 30
	}
	return r
}

// Evaluator scores OCR results by a rule set.
type Evaluator struct {
	rules    Rules
	patterns []*regexp.Regexp
}

// NewEvaluator returns an evaluator for rules.
func NewEvaluator(rules Rules) (*Evaluator, error) {
	if err := rules.Validate(); err != nil {
		return nil, err
	}
	e := &Evaluator{rules: rules.withDefaults()}
	for _, p := range rules.RequiredPatterns {
		e.patterns = append(e.patterns, regexp.MustCompile(p))
	}
	return e, nil
}

// Evaluate scores r and decides.
func (e *Evaluator) Evaluate(r *Result) documents.Evaluation {
	mean, words, text := r.MeanConfidence(), r.Words(), r.Text()
	score := mean
	var reasons []string
	if words < e.rules.MinWords {
		score *= float64(words) / float64(e.rules.MinWords)
		reasons = append(reasons, fmt.Sprintf("only %d words recognized (minimum %d)", words, e.rules.MinWords))
	}
	if len(e.patterns) > 0 {
		found := 0
		for _, p := range e.patterns {
			if p.MatchString(text) {
				found++
			} else {
				reasons = append(reasons, fmt.Sprintf("required pattern %q not found", p.String()))
			}
		}
		score *= float64(found) / float64(len(e.patterns))
	}
	if mean < e.rules.MinMeanConfidence {
		reasons = append(reasons, fmt.Sprintf("mean confidence %.1f below %.1f", mean, e.rules.MinMeanConfidence))
	}
	s := int(math.Round(max(0, min(100, score))))
	ev := documents.Evaluation{Score: s, Reasons: reasons}
	switch {
	case s >= e.rules.ApproveScore && len(reasons) == 0:
		ev.Decision = documents.AutoApproved
	case s < e.rules.RejectScore:
		ev.Decision = documents.AutoRejected
	default:
		ev.Decision = documents.NeedsReview
	}
	return ev
}
