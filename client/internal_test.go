package client

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestSmallBufferClasses: a small input is read into a buffer of at most twice its size
// (at least 64 KiB), never more than one message holds.
func TestSmallBufferClasses(t *testing.T) {
	for _, tc := range []struct{ size, want int64 }{{0, 64 << 10}, {1, 64 << 10}, {64 << 10, 64 << 10}, {64<<10 + 1, 128 << 10}, {256 << 10, 256 << 10}, {1 << 20, 1 << 20}, {4<<20 + 1, oneMessageMax}, {oneMessageMax, oneMessageMax}} {
		b := smallBuffer(tc.size).Get().(*[]byte)
		if int64(len(*b)) != tc.want {
			t.Errorf("size %d: buffer of %d, want %d", tc.size, len(*b), tc.want)
		}
	}
}

// TestStaleSignedURL: a URL signed ahead is signed again before its PUT when it
// expires within resignWithin; one without an expiry is used as it is.
func TestStaleSignedURL(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		sp   *chunkupv1.SignedPart
		want bool
	}{
		{"fresh", &chunkupv1.SignedPart{ExpireTime: timestamppb.New(now.Add(15 * time.Minute))}, false},
		{"just outside the margin", &chunkupv1.SignedPart{ExpireTime: timestamppb.New(now.Add(resignWithin))}, false},
		{"within the margin", &chunkupv1.SignedPart{ExpireTime: timestamppb.New(now.Add(resignWithin - time.Second))}, true},
		{"expired", &chunkupv1.SignedPart{ExpireTime: timestamppb.New(now.Add(-time.Second))}, true},
		{"no expiry", &chunkupv1.SignedPart{}, false},
	} {
		if got := stale(tc.sp, now); got != tc.want {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.want)
		}
	}
}
