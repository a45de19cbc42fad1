package ids

import (
	"strings"
	"testing"
)

func TestNewUUID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		u := NewUUID()
		c, ok := UUID(u)
		if !ok || c != u || u[14] != '4' || !strings.ContainsRune("89ab", rune(u[19])) {
			t.Fatalf("NewUUID() = %q: not a canonical version 4 UUID", u)
		}
		if seen[u] {
			t.Fatalf("NewUUID() repeated %q", u)
		}
		seen[u] = true
	}
}

func TestUUID(t *testing.T) {
	for in, want := range map[string]string{
		"0F8E3C1A-5B7D-4E2F-9A6C-1D2E3F4A5B6C":   "0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c",
		"0f8e3c1a-5b7d-1e2f-9a6c-1d2e3f4a5b6c":   "0f8e3c1a-5b7d-1e2f-9a6c-1d2e3f4a5b6c", // any version
		"00000000-0000-0000-0000-000000000000":   "",                                     // the nil UUID names nothing
		"0f8e3c1a5b7d4e2f9a6c1d2e3f4a5b6c":       "",
		"{0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c}": "",
		"0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6g":   "",
		"0f8e3c1a_5b7d-4e2f-9a6c-1d2e3f4a5b6c":   "",
		"abcdefghijklmnopqrstuvwxyz":             "",
		"":                                       "",
	} {
		got, ok := UUID(in)
		if got != want || ok != (want != "") {
			t.Errorf("UUID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
