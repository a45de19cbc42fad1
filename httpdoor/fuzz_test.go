package httpdoor

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The header parsers are hand-written, so they are fuzzed: go test -fuzz=FuzzX
// ./httpdoor. The seeds below run as ordinary tests.

// FuzzTusMetadata checks that what parseTusMetadata accepts, formatTusMetadata writes
// back to the same pairs.
func FuzzTusMetadata(f *testing.F) {
	for _, s := range []string{
		"", "filename d29ybGRfZG9taW5hdGlvbl9wbGFuLnBkZg==,is_confidential",
		"filename bm90ZXMudHh0,filetype dGV4dC9wbGFpbg==", "a YQ, b Yg", "a YQ,a Yg", "a %%%", "k\x00 YQ==",
		"name 4pyTIMOgIGxhIG1vZGU=", "x", ",", " , ", "a YQ==,", "key  YQ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseTusMetadata(s)
		if err != nil {
			return
		}
		out := formatTusMetadata(m)
		if strings.ContainsAny(out, "\r\n\x00") {
			t.Fatalf("formatted metadata %q can break a header", out)
		}
		m2, err := parseTusMetadata(out)
		if err != nil || len(m) != len(m2) {
			t.Fatalf("%q → %v → %q → %v, %v", s, m, out, m2, err)
		}
		for k, v := range m {
			if m2[k] != v {
				t.Fatalf("%q: key %q: %q became %q", s, k, v, m2[k])
			}
		}
	})
}

// FuzzUploadChecksum checks that an accepted Upload-Checksum has a digest of its
// algorithm's size.
func FuzzUploadChecksum(f *testing.F) {
	for _, s := range []string{
		"sha1 Kq5sNclPz7QV2+lfQIuc6R7oRu0=", "crc32c AAAAAA==", "md5 1B2M2Y8AsgTpgAmY7PhCfg==", "sha1", "sha1 ",
		"whirlpool AAAA", "crc32c AAAAAA", "sha256 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", " md5  x ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseUploadChecksum(s)
		if err != nil {
			return
		}
		if len(c.want) != c.h.Size() {
			t.Fatalf("%q: a digest of %d bytes for %s", s, len(c.want), c.name)
		}
	})
}

var sfIntRE = regexp.MustCompile(`^ *-?[0-9]{1,15} *$`)

// FuzzStructuredFields checks the structured field parser three ways: what it accepts
// as an Item or a Dictionary serializes to a field that parses to the same value; an
// Integer is exactly 1 to 15 digits (with an optional minus); a Boolean is ?0 or ?1.
func FuzzStructuredFields(f *testing.F) {
	for _, s := range []string{
		"?1", "?0", "?2", "1", "0", "-0", "+1", "007", "123456789012345", "1234567890123456", "1.5", "1.", ".5",
		"123456789012.123", "1234567890123.1", "1.1234", `"a\"b"`, `"\x"`, "tok/en:x", "*a", ":YWJj:", ":YWJj", ":YW=j:",
		"@1659578233", `%"caf%c3%a9"`, `%"%C3"`, "1;a=2;b", "1;A=2", "1; a", "?1;x=?0",
		"sha-256=:d435Qo+nKZ+gLcUHn7GQtQ72hiBVAgqoLsZnZPiTGPk=:", "max-size=1234567890, max-age=3600",
		"a=(1 2 \"x\");p, b, c=?0", "a=(", "a=()", "a,", "a=1,,b=2", "a=1, a=2", "sha-512=3, sha-256=10", " 5 ", "5 ,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if it, err := parseSFItem(s); err == nil {
			out := serializeSFItem(it)
			it2, err := parseSFItem(out)
			if err != nil || !reflect.DeepEqual(it, it2) {
				t.Fatalf("item %q → %#v → %q → %#v, %v", s, it, out, it2, err)
			}
		}
		if d, err := parseSFDictionary(s); err == nil {
			out := serializeSFDictionary(d)
			d2, err := parseSFDictionary(out)
			if err != nil || !reflect.DeepEqual(d, d2) && !(len(d) == 0 && len(d2) == 0) {
				t.Fatalf("dictionary %q → %#v → %q → %#v, %v", s, d, out, d2, err)
			}
		}
		n, _, ok := sfInteger([]string{s})
		if sfIntRE.MatchString(s) {
			want, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if (want >= 0) != ok || ok && n != want {
				t.Fatalf("Integer %q read as %d, %v", s, n, ok)
			}
		} else if ok && !strings.Contains(s, ";") {
			t.Fatalf("%q is no non-negative Integer, yet read as %d", s, n)
		}
		b, _, ok := sfBoolean([]string{s})
		if ok && !strings.Contains(s, ";") && strings.TrimLeft(strings.TrimRight(s, " "), " ") != sfBool(b) {
			t.Fatalf("%q read as the Boolean %v", s, b)
		}
	})
}
