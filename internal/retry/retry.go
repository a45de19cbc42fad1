// Package retry holds the two retry decisions every chunkup loop shares: whether an S3
// error is worth retrying, and how long to wait before the next attempt.
package retry

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
)

// PermanentError marks an error as not worth retrying.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// TransientError marks an error as worth retrying although S3 answered with a 4xx
// status: a chunk whose checksum S3 refused was checked before it was sent, so the
// bytes were corrupted on the way and the next attempt carries them intact.
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

var retryables = awsretry.IsErrorRetryables(awsretry.DefaultRetryables)

// Permanent reports whether an error will not go away by retrying: it is marked
// PermanentError, or, unless it is marked TransientError, the AWS SDK's own classifier
// says it is not retryable and S3 answered with a 4xx status (a missing bucket or
// multipart upload, denied access, a malformed request). Network errors, throttling and
// 5xx answers are transient.
func Permanent(err error) bool {
	var pe *PermanentError
	if errors.As(err, &pe) {
		return true
	}
	var te *TransientError
	if errors.As(err, &te) {
		return false
	}
	if retryables.IsErrorRetryable(err) == aws.TrueTernary {
		return false
	}
	var hs interface{ HTTPStatusCode() int }
	if errors.As(err, &hs) {
		code := hs.HTTPStatusCode()
		return code >= 400 && code < 500 && code != 408 && code != 429
	}
	return false
}

// Backoff returns the wait before attempt n (from 1): a random duration up to
// base·2^(n-1), capped at max ("full jitter", so retries of many clients spread out).
func Backoff(base, max time.Duration, n int) time.Duration {
	d := max
	if n >= 1 && n < 32 {
		if e := base << (n - 1); e > 0 && e < max {
			d = e
		}
	}
	return rand.N(d) + 1
}

// Pacer paces a background loop: its interval while things work, a growing jittered
// backoff while they fail (Redis down, say), so a broken dependency costs neither CPU
// nor a log line per interval. It logs once when failures start and once when they end.
type Pacer struct {
	What     string // e.g. "sweep pending chunks"
	Interval time.Duration
	Max      time.Duration // zero means 30 s
	Logger   interface {
		Warn(string, ...any)
		Info(string, ...any)
	}
	failures  int
	firstFail time.Time
}

// Next returns how long to wait after a round that ended with err.
func (p *Pacer) Next(err error) time.Duration {
	if err == nil {
		if p.failures > 0 && p.Logger != nil {
			p.Logger.Info(p.What+" works again", "failed_rounds", p.failures, "for", time.Since(p.firstFail).Round(time.Millisecond))
		}
		p.failures = 0
		return p.Interval
	}
	if p.failures == 0 {
		p.firstFail = time.Now()
		if p.Logger != nil {
			p.Logger.Warn(p.What+" failing; backing off until it works again", "err", err)
		}
	}
	p.failures++
	max := p.Max
	if max == 0 {
		max = 30 * time.Second
	}
	return Backoff(p.Interval, max, p.failures)
}
