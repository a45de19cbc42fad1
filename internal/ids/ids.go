// Package ids makes the random identifiers chunkup hands out (upload ids, event ids,
// lease tokens) and recognizes them. It is a leaf: the SDK uses it without pulling in
// the server's packages.
package ids

import (
	"crypto/rand"
	"encoding/base32"
)

var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// New returns a random id: 26 lowercase base32 characters (128 bits).
func New() string { return random(16) }

// NewToken returns a shorter random token (80 bits), for leases and guards.
func NewToken() string { return random(10) }

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux.
	return encoding.EncodeToString(b)
}

// Valid reports whether id has the form of an id made by New.
func Valid(id string) bool {
	if len(id) != 26 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// NewUUID returns a random (version 4) UUID in its canonical lowercase form: the
// document node id the server gives an upload that brings none.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&0x0f])
	}
	return string(out)
}

// UUID returns s in the canonical lowercase form of a UUID (8-4-4-4-12 hex digits,
// either case), and whether s is one. The nil UUID is not: it names nothing.
func UUID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	out := make([]byte, 36)
	zero := true
	for i := 0; i < 36; i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return "", false
			}
		case c >= '0' && c <= '9':
			zero = zero && c == '0'
		case c >= 'a' && c <= 'f':
			zero = false
		case c >= 'A' && c <= 'F':
			c += 'a' - 'A'
			zero = false
		default:
			return "", false
		}
		out[i] = c
	}
	if zero {
		return "", false
	}
	return string(out), true
}
