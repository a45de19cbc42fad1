package s3store_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/s3store"
)

// TestPresignedFromForm: a part URL signed from its upload's template (every part but
// the first) is the very URL, headers and signature the SDK's presign client makes,
// whatever the key's characters, the endpoint's style, the signed headers and the
// credentials (a session token too).
func TestPresignedFromForm(t *testing.T) {
	sum := uint32(0xdeadbeef)
	for _, tc := range []struct {
		name      string
		pathStyle bool
		token     string
		key       string
		size      int64
		crc       *uint32
	}{
		{"path style, size and crc", true, "", "a b/c+d%e~é.bin", 8 << 20, &sum},
		{"virtual host, size only", false, "", "plain.bin", 5 << 20, nil},
		{"no size, no crc", true, "", "dir/x", 0, nil},
		{"session token", true, "tok/en+=", "k", 1, &sum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := s3.New(s3.Options{Region: "eu-west-3", BaseEndpoint: aws.String("https://s3.example.com:9000"), UsePathStyle: tc.pathStyle,
				Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
					return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: tc.token}, nil
				}))})
			ctx := context.Background()
			for attempt := 0; ; attempt++ {
				// Two signers: one signs part 7 fresh (the SDK's presign client), the other
				// from the template its part 1 left.
				fresh, formed := s3store.NewPresigner(c, "", nil), s3store.NewPresigner(c, "", nil)
				if _, err := formed.SignPart(ctx, "bkt", tc.key, "up/load=id", 1, 15*time.Minute, tc.size, tc.crc); err != nil {
					t.Fatal(err)
				}
				want, err := fresh.SignPart(ctx, "bkt", tc.key, "up/load=id", 7, 15*time.Minute, tc.size, tc.crc)
				if err != nil {
					t.Fatal(err)
				}
				got, err := formed.SignPart(ctx, "bkt", tc.key, "up/load=id", 7, 15*time.Minute, tc.size, tc.crc)
				if err != nil {
					t.Fatal(err)
				}
				wu, _ := url.Parse(want.URL)
				gu, _ := url.Parse(got.URL)
				if wu.Query().Get("X-Amz-Date") != gu.Query().Get("X-Amz-Date") && attempt < 3 {
					continue // a second ticked between the two: sign again
				}
				if got.URL != want.URL || got.Method != want.Method {
					t.Fatalf("from the template:\n%s %s\nfrom the SDK:\n%s %s", got.Method, got.URL, want.Method, want.URL)
				}
				if len(got.Headers) != len(want.Headers) {
					t.Fatalf("headers %v, want %v", got.Headers, want.Headers)
				}
				for k := range want.Headers {
					if got.Headers.Get(k) != want.Headers.Get(k) {
						t.Fatalf("header %s: %q, want %q", k, got.Headers.Get(k), want.Headers.Get(k))
					}
				}
				return
			}
		})
	}
}
