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
