package upload

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestKeyForStaysInTheTenant(t *testing.T) {
	id := "abcdefghijklmnopqrstuvwxyz"
	for _, tc := range []struct{ name, key, want string }{
		{"../../etc/passwd", "", "acme/uploads/" + id + "/passwd"},
		{"..", "", "acme/uploads/" + id},
		{`..\..\windows\system.ini`, "", "acme/uploads/" + id + "/system.ini"},
		{"report.pdf", "docs/2026/report.pdf", "acme/docs/2026/report.pdf"},
	} {
		if got := KeyFor("acme", "uploads", id, tc.key, tc.name); got != tc.want {
			t.Errorf("KeyFor(name %q, key %q) = %q, want %q", tc.name, tc.key, got, tc.want)
		}
	}
}

// FuzzKeyFor: whatever a client sends as name and key, a key that passes validation
// lands inside its tenant's prefix and is itself a valid key.
func FuzzKeyFor(f *testing.F) {
	f.Add("../../etc/passwd", "")
	f.Add("a", "../x")
	f.Add("", "/abs")
	f.Add("n", "a/./b")
	f.Fuzz(func(t *testing.T, name, key string) {
		if key != "" && ValidateKey(key) != nil {
			return
		}
		if !utf8.ValidString(name) || !Printable(name) {
			return
		}
		got := KeyFor("acme", "uploads", "abcdefghijklmnopqrstuvwxyz", key, name)
		if !strings.HasPrefix(got, "acme/") {
			t.Fatalf("key %q escapes the tenant prefix", got)
		}
		if err := ValidateKey(got); err != nil && len(got) <= maxKeyLen {
			t.Fatalf("built key %q is invalid: %v", got, err)
		}
	})
}
