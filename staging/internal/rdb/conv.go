package rdb

import (
	"strconv"
	"strings"
	"time"
)

// Conversions of the values scripts and hashes return.

// U32 reads a script's integer or a hash's decimal string.
func U32(v any) uint32 {
	switch x := v.(type) {
	case int64:
		return uint32(x)
	case string:
		n, _ := strconv.ParseUint(x, 10, 32)
		return uint32(n)
	}
	return 0
}

// I64 reads a script's integer or a hash's decimal string.
func I64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// Str reads a script's string (or nil as "").
func Str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// MsTime reads a unix-ms decimal string; "" is the zero time.
func MsTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	return time.UnixMilli(I64(s))
}

// ParseCRCSize parses a received-hash value "crc:size".
func ParseCRCSize(v string) (crc uint32, size int64, ok bool) {
	c, sz, found := strings.Cut(v, ":")
	if !found {
		return 0, 0, false
	}
	if c == NoCRC {
		sn, err := strconv.ParseInt(sz, 10, 64)
		return 0, sn, err == nil
	}
	cn, err1 := strconv.ParseUint(c, 10, 32)
	sn, err2 := strconv.ParseInt(sz, 10, 64)
	return uint32(cn), sn, err1 == nil && err2 == nil
}

// NoCRC stands for a CRC32C that is not known (a direct upload's part from a client
// that gave none) where a record holds a chunk's or part's CRC32C.
const NoCRC = "-"

// OneLine keeps a message on one line (error histories are lists of lines).
func OneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", " ") }
