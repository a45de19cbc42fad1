package s3store_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/s3store"
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
		{"marked", &retry.PermanentError{Err: errors.New("corrupt")}, true},
		{"wrapped mark", fmt.Errorf("x: %w", &retry.PermanentError{Err: errors.New("corrupt")}), true},
		{"marked transient", &retry.TransientError{Err: respErr(400)}, false},
		{"404", respErr(404), true},
		{"403", respErr(403), true},
		{"429 throttled", respErr(429), false},
		{"500", respErr(500), false},
		{"503", respErr(503), false},
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"plain error", errors.New("boom"), false},
	} {
		if got := s3store.Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
