package client

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestSmallBufferClasses: a small input is read into a buffer at most a quarter larger
// than it (at least 64 KiB), never more than one message holds.
func TestSmallBufferClasses(t *testing.T) {
	for _, tc := range []struct{ size, want int }{{64 << 10, 64 << 10}, {64<<10 + 1, 80 << 10}, {256 << 10, 256 << 10}, {1 << 20, 1 << 20}, {4<<20 + 1, oneMessageMax}, {oneMessageMax, oneMessageMax}} {
		b := smallBuffers.Get(tc.size)
		if len(b) != tc.size || cap(b) != tc.want {
			t.Errorf("size %d: buffer of len %d cap %d, want cap %d", tc.size, len(b), cap(b), tc.want)
		}
		smallBuffers.Put(b)
	}
}

// TestStaleSignedURL: a URL signed ahead is signed again before its PUT once it is
// within a minute of its expiry, or within a quarter of its life when that is shorter;
// one without an expiry is used as it is.
func TestStaleSignedURL(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	expires := func(d time.Duration) *chunkupv1.SignedPart {
		return &chunkupv1.SignedPart{ExpireTime: timestamppb.New(at.Add(d))}
	}
	for _, tc := range []struct {
		name string
		sp   *chunkupv1.SignedPart
		age  time.Duration
		want bool
	}{
		{"15 min, just signed", expires(15 * time.Minute), 0, false},
		{"15 min, a minute left", expires(15 * time.Minute), 14 * time.Minute, false},
		{"15 min, less than a minute left", expires(15 * time.Minute), 14*time.Minute + time.Second, true},
		{"15 min, expired", expires(15 * time.Minute), 16 * time.Minute, true},
		{"2 s, just signed", expires(2 * time.Second), 0, false},
		{"2 s, a quarter left", expires(2 * time.Second), 1500 * time.Millisecond, false},
		{"2 s, less than a quarter left", expires(2 * time.Second), 1600 * time.Millisecond, true},
		{"no expiry", &chunkupv1.SignedPart{}, time.Hour, false},
	} {
		if got := stale(tc.sp, at, at.Add(tc.age)); got != tc.want {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.want)
		}
	}
}
