package crc

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCombineMatchesWholeChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ a, b int }{
		{0, 0}, {0, 5}, {5, 0}, {1, 1}, {3, 1000}, {4096, 4097}, {1 << 16, 12345}, {7, 8<<20 + 7},
	} {
		a := make([]byte, tc.a)
		b := make([]byte, tc.b)
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want := Checksum(append(append([]byte{}, a...), b...))
		if got := Combine(Checksum(a), Checksum(b), int64(len(b))); got != want {
			t.Errorf("Combine(%d bytes, %d bytes) = %08x, want %08x", tc.a, tc.b, got, want)
		}
	}
}

// TestCombineLarge: parts of 512 MiB and more (up to S3's 5 GiB), where the powers of x
// the combination multiplies by go beyond 2^32: zeros appended to a checksum, checked
// against the standard library's running update.
func TestCombineLarge(t *testing.T) {
	zeros := make([]byte, 1<<20)
	for _, n := range []int64{1<<29 - 1, 1 << 29, 1<<30 + 7, 5 << 30} {
		var sumZeros uint32
		for left := n; left > 0; left -= int64(len(zeros)) {
			sumZeros = crc32.Update(sumZeros, Table, zeros[:min(left, int64(len(zeros)))])
		}
		a := Checksum([]byte("the bytes before"))
		want := a
		for left := n; left > 0; left -= int64(len(zeros)) {
			want = crc32.Update(want, Table, zeros[:min(left, int64(len(zeros)))])
		}
		if got := Combine(a, sumZeros, n); got != want {
			t.Errorf("Combine over %d bytes = %08x, want %08x", n, got, want)
		}
	}
}

func FuzzCombine(f *testing.F) {
	f.Add([]byte("hello "), []byte("world"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		want := Checksum(append(append([]byte{}, a...), b...))
		if got := Combine(Checksum(a), Checksum(b), int64(len(b))); got != want {
			t.Fatalf("Combine = %08x, want %08x", got, want)
		}
	})
}

// BenchmarkCombine: one 8 MiB part's CRC32C appended, as a direct upload's completion
// does per part.
func BenchmarkCombine(b *testing.B) {
	sum := uint32(1)
	for b.Loop() {
		sum = Combine(sum, 0x12345678, 8<<20)
	}
	_ = sum
}
