package client

import "testing"

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
