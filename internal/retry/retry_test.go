package retry

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func respErr(code int) error {
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("api error"),
	}}
}

func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"marked", &PermanentError{errors.New("corrupt")}, true},
		{"wrapped mark", fmt.Errorf("x: %w", &PermanentError{errors.New("corrupt")}), true},
		{"404", respErr(404), true},
		{"403", respErr(403), true},
		{"429 throttled", respErr(429), false},
		{"500", respErr(500), false},
		{"503", respErr(503), false},
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"plain error", errors.New("boom"), false},
	} {
		if got := Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	base, max := 100*time.Millisecond, 2*time.Second
	for n := 1; n <= 40; n++ {
		limit := min(base<<(n-1), max)
		if n >= 32 {
			limit = max
		}
		for range 50 {
			if d := Backoff(base, max, n); d <= 0 || d > limit {
				t.Fatalf("Backoff(n=%d) = %v, want in (0, %v]", n, d, limit)
			}
		}
	}
}
