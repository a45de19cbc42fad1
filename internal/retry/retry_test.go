package retry

import (
	"testing"
	"time"
)

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
