package upload

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/chunkup/chunkup/staging"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30

	defChunk = 8 * mib  // server.Config's default chunk size
	maxChunk = 64 * mib // server.Config's default max chunk size
)

// isInvalid reports whether err is an *InvalidError.
func isInvalid(err error) bool {
	var inv *InvalidError
	return errors.As(err, &inv)
}

// isRange reports whether err is a *RangeError.
func isRange(err error) bool {
	var rng *RangeError
	return errors.As(err, &rng)
}

func TestChunkSizeFor(t *testing.T) {
	for _, tc := range []struct {
		name               string
		expected, def, max int64
		want               int64 // 0: an *InvalidError
	}{
		{"unknown size takes the default", -1, defChunk, maxChunk, defChunk},
		{"empty file takes the default", 0, defChunk, maxChunk, defChunk},
		{"small file takes the default", 3 * mib, defChunk, maxChunk, defChunk},
		{"exactly 10,000 default chunks stays", MaxParts * defChunk, defChunk, maxChunk, defChunk},
		{"one byte more grows to the next MiB", MaxParts*defChunk + 1, defChunk, maxChunk, 9 * mib},
		{"grows to the smallest MiB multiple that fits", MaxParts*20*mib - 5, defChunk, maxChunk, 20 * mib},
		{"a MiB multiple that fits exactly", MaxParts * 20 * mib, defChunk, maxChunk, 20 * mib},
		{"exactly the maximum upload", MaxParts * maxChunk, defChunk, maxChunk, maxChunk},
		{"one byte over the maximum upload", MaxParts*maxChunk + 1, defChunk, maxChunk, 0},
		{"far over the maximum", 1 << 50, defChunk, maxChunk, 0},
		// Found by FuzzValidateChunk (testdata/fuzz/FuzzValidateChunk/huge-expected-size):
		// expected + MaxParts - 1 overflows, and a negative chunk size came back.
		{"largest int64", math.MaxInt64, defChunk, maxChunk, 0},
		{"largest int64 minus 9998", math.MaxInt64 - (MaxParts - 2), defChunk, maxChunk, 0},
		{"largest int64 minus 9999", math.MaxInt64 - (MaxParts - 1), defChunk, maxChunk, 0},
		{"never below S3's 5 MiB part minimum", 1, 1 * mib, maxChunk, MinPartSize},
		{"zero default means the 5 MiB minimum", -1, 0, maxChunk, MinPartSize},
		{"minimum default grows too", MaxParts*MinPartSize + 1, MinPartSize, maxChunk, 6 * mib},
		{"a larger default is kept", 100 * mib, 16 * mib, maxChunk, 16 * mib},
		{"default above the max is an error", -1, 128 * mib, maxChunk, 0},
		{"5 GiB parts for the largest S3 object", MaxParts * MaxPartSize, defChunk, MaxPartSize, MaxPartSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChunkSizeFor(tc.expected, tc.def, tc.max)
			if tc.want == 0 {
				if !isInvalid(err) {
					t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d, %v; want an *InvalidError", tc.expected, tc.def, tc.max, got, err)
				}
				if !strings.Contains(err.Error(), "maximum chunk size") {
					t.Errorf("message %q does not say what limit was hit", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d, %v; want %d", tc.expected, tc.def, tc.max, got, err, tc.want)
			}
			if tc.expected > 0 && got*MaxParts < tc.expected {
				t.Errorf("%d bytes do not fit %d parts of %d bytes", tc.expected, MaxParts, got)
			}
		})
	}
}

func TestAcceptChunkSize(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		proposed, expected, max int64
		ok                      bool
		msg                     string // part of the message when refused
	}{
		{"S3's minimum", MinPartSize, -1, maxChunk, true, ""},
		{"the maximum", maxChunk, 10 * mib, maxChunk, true, ""},
		{"not a MiB multiple", 5*mib + 1, 100 * mib, maxChunk, true, ""},
		{"under S3's minimum", MinPartSize - 1, 3, maxChunk, false, "use 5242880 to"},
		{"over the maximum", maxChunk + 1, -1, maxChunk, false, "maximum chunk size is"},
		{"too small for 10,000 parts", 6 * mib, MaxParts*6*mib + 1, maxChunk, false, "use 6291457 to"},
		{"just enough for 10,000 parts", 6 * mib, MaxParts * 6 * mib, maxChunk, true, ""},
		{"the upload cannot fit", maxChunk, MaxParts*maxChunk + 1, maxChunk, false, "needs chunks of at least"},
		{"largest int64", maxChunk, math.MaxInt64, maxChunk, false, "needs chunks of at least"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AcceptChunkSize(tc.proposed, tc.expected, tc.max)
			if tc.ok {
				if err != nil || got != tc.proposed {
					t.Fatalf("AcceptChunkSize(%d, %d, %d) = %d, %v; want it taken", tc.proposed, tc.expected, tc.max, got, err)
				}
				return
			}
			if !isInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("AcceptChunkSize(%d, %d, %d) = %d, %v; want an *InvalidError saying %q", tc.proposed, tc.expected, tc.max, got, err, tc.msg)
			}
		})
	}
}

func TestQuoteIsShort(t *testing.T) {
	for _, in := range []string{"", "abc", strings.Repeat("é", 1000), strings.Repeat("x", 32<<20)} {
		q := Quote(in)
		if len(q) > 2*maxQuoted {
			t.Errorf("quote of %d bytes is %d bytes long", len(in), len(q))
		}
		if len(in) <= maxQuoted && q != strconv.Quote(in) {
			t.Errorf("Quote(%q) = %s, want it whole", in, q)
		}
		if !utf8.ValidString(q) {
			t.Errorf("quote cut a rune: %q", q)
		}
	}
}

// checkChunkSize checks ChunkSizeFor's contract for one input: an error is an
// *InvalidError; a size is at least S3's minimum part, at most max, and lets the expected
// bytes fit S3's 10,000 parts; a grown size is a MiB multiple and the smallest that fits.
func checkChunkSize(t *testing.T, expected, def, max int64) {
	t.Helper()
	size, err := ChunkSizeFor(expected, def, max)
	if err != nil {
		if !isInvalid(err) {
			t.Fatalf("ChunkSizeFor(%d, %d, %d): error %T %v, want *InvalidError", expected, def, max, err, err)
		}
		return
	}
	base := max64(def, MinPartSize)
	switch {
	case size < MinPartSize:
		t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d, under S3's 5 MiB minimum part", expected, def, max, size)
	case size > max:
		t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d, over the maximum", expected, def, max, size)
	case size < base:
		t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d, under the default", expected, def, max, size)
	case expected > 0 && ceilDiv(expected, size) > MaxParts:
		t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d: %d chunks, over S3's %d parts", expected, def, max, size, ceilDiv(expected, size), MaxParts)
	case size != base && size%mib != 0:
		t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d, grown but not a MiB multiple", expected, def, max, size)
	case size != base && (size-mib)*MaxParts >= expected:
		t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d, but %d would fit", expected, def, max, size, size-mib)
	}
	if expected >= 0 {
		if total := staging.TotalChunks(expected, size); total < 1 || total > MaxParts {
			t.Fatalf("ChunkSizeFor(%d, %d, %d) = %d makes %d chunks", expected, def, max, size, total)
		}
	}
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0, without overflowing.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// params are an upload's parameters as the server derives them from expected (-1:
// unknown) with the default chunk sizes.
func params(t testing.TB, expected int64) staging.Params {
	t.Helper()
	size, err := ChunkSizeFor(expected, defChunk, maxChunk)
	if err != nil {
		t.Fatalf("ChunkSizeFor(%d): %v", expected, err)
	}
	p := staging.Params{ChunkSize: size, ExpectedSize: expected}
	if expected >= 0 {
		p.Total = staging.TotalChunks(expected, size)
	}
	return p
}

func TestValidateChunk(t *testing.T) {
	const c = defChunk
	unknown := staging.Params{ChunkSize: c, ExpectedSize: -1}
	three := staging.Params{ChunkSize: c, ExpectedSize: 2*c + 10, Total: 3} // 8 MiB, 8 MiB, 10 B
	even := staging.Params{ChunkSize: c, ExpectedSize: 2 * c, Total: 2}     // last chunk full
	empty := staging.Params{ChunkSize: c, ExpectedSize: 0, Total: 1}        // one empty chunk
	one := staging.Params{ChunkSize: c, ExpectedSize: 5, Total: 1}
	maxed := staging.Params{ChunkSize: c, ExpectedSize: MaxParts * c, Total: MaxParts}

	type check func(error) bool
	ok := func(err error) bool { return err == nil }
	for _, tc := range []struct {
		name   string
		p      staging.Params
		n      uint32
		size   int64
		isLast bool
		want   check
		msg    string // part of the message
	}{
		// Rules for every upload.
		{"chunk zero", three, 0, c, false, isInvalid, "at least 1"},
		{"chunk zero of an unknown size", unknown, 0, 0, true, isInvalid, "numbered from 1"},
		{"chunk beyond S3's parts", unknown, MaxParts + 1, c, false, isRange, "10000 parts"},
		{"largest chunk number", unknown, math.MaxUint32, 1, true, isRange, "beyond"},
		{"chunk larger than chunk_size", unknown, 1, c + 1, true, isInvalid, "more than the upload's chunk_size"},
		{"known size: larger last chunk", three, 3, c + 1, true, isInvalid, "more than"},

		// Known size.
		{"known: first chunk", three, 1, c, false, ok, ""},
		{"known: middle chunk", three, 2, c, false, ok, ""},
		{"known: last chunk", three, 3, 10, false, ok, ""},
		{"known: last chunk with is_last", three, 3, 10, true, ok, ""},
		{"known: beyond the total", three, 4, 10, false, isRange, "beyond the upload's 3 chunks"},
		{"known: far beyond the total", three, MaxParts, c, false, isRange, "beyond"},
		{"known: is_last before the last", three, 2, c, true, isInvalid, "makes chunk 3 the last"},
		{"known: short middle chunk", three, 2, c - 1, false, isInvalid, "every chunk but the last"},
		{"known: empty middle chunk", three, 1, 0, false, isInvalid, "every chunk but the last"},
		{"known: short last chunk", three, 3, 9, false, isInvalid, "must have 10 bytes"},
		{"known: long last chunk", three, 3, 11, false, isInvalid, "must have 10 bytes"},
		{"known: full last chunk", even, 2, c, false, ok, ""},
		{"known: full last chunk short", even, 2, c - 1, true, isInvalid, "must have 8388608 bytes"},
		{"known: one chunk", one, 1, 5, false, ok, ""},
		{"known: one chunk too long", one, 1, 6, false, isInvalid, "must have 5 bytes"},
		{"empty file: the empty chunk", empty, 1, 0, true, ok, ""},
		{"empty file: without is_last", empty, 1, 0, false, ok, ""},
		{"empty file: a byte", empty, 1, 1, true, isInvalid, "must have 0 bytes"},
		{"empty file: chunk 2", empty, 2, 0, true, isRange, "beyond the upload's 1 chunks"},
		{"10,000 chunks: the last", maxed, MaxParts, c, true, ok, ""},
		{"10,000 chunks: one more", maxed, MaxParts + 1, c, true, isRange, "S3's limit"},

		// Unknown size.
		{"unknown: full chunk", unknown, 1, c, false, ok, ""},
		{"unknown: full chunk far on", unknown, 9999, c, false, ok, ""},
		{"unknown: chunk 10,000 must be the last", unknown, MaxParts, c, false, isRange, "mark it is_last"},
		{"unknown: chunk 10,000 as the last", unknown, MaxParts, c, true, ok, ""},
		{"unknown: short chunk without is_last", unknown, 2, c - 1, false, isInvalid, "mark the last chunk with is_last"},
		{"unknown: empty chunk without is_last", unknown, 1, 0, false, isInvalid, "is_last"},
		{"unknown: short last chunk", unknown, 3, 1, true, ok, ""},
		{"unknown: full last chunk", unknown, 3, c, true, ok, ""},
		{"unknown: empty only chunk", unknown, 1, 0, true, ok, ""},
		{"unknown: empty last chunk after others", unknown, 2, 0, true, isInvalid, "only a one-chunk upload may have an empty chunk"},
		{"unknown: last chunk at S3's limit", unknown, MaxParts, 1, true, ok, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateChunk(tc.p, tc.n, tc.size, tc.isLast)
			if !tc.want(err) {
				t.Fatalf("ValidateChunk(%+v, n=%d, size=%d, last=%v) = %T %v", tc.p, tc.n, tc.size, tc.isLast, err, err)
			}
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q does not contain %q", err, tc.msg)
			}
		})
	}
}

// TestValidateChunkWholeFiles cuts files of several sizes into chunks the way the
// client does and checks that every chunk of the right cut is accepted and the
// sequence adds up to the file.
func TestValidateChunkWholeFiles(t *testing.T) {
	for _, size := range []int64{0, 1, defChunk - 1, defChunk, defChunk + 1, 3*defChunk + 7, MaxParts*defChunk + 1} {
		for _, known := range []bool{true, false} {
			expected := int64(-1)
			if known {
				expected = size
			} else if size > MaxParts*defChunk {
				continue // a stream of unknown size is limited to 10,000 default chunks
			}
			p := params(t, expected)
			var sum int64
			n := uint32(1)
			for left := size; ; n++ {
				c := min(left, p.ChunkSize)
				left -= c
				last := left == 0
				if err := ValidateChunk(p, n, c, last); err != nil {
					t.Fatalf("size %d (known %v): chunk %d of %d bytes: %v", size, known, n, c, err)
				}
				sum += c
				if last {
					break
				}
			}
			if sum != size || (known && n != p.Total) {
				t.Fatalf("size %d: %d chunks adding to %d (total %d)", size, n, sum, p.Total)
			}
		}
	}
}

func TestValidateCreate(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	bigMeta := map[string]string{}
	for i := range MaxMetadataPairs + 1 {
		bigMeta[long(i+1)] = "v"
	}
	okMeta := map[string]string{}
	for i := range MaxMetadataPairs {
		okMeta[long(i+1)] = "v"
	}
	for _, tc := range []struct {
		name string
		req  *CreateRequest
		msg  string // "" means valid; else part of the message
	}{
		{"empty request", &CreateRequest{}, ""},
		{"everything set", &CreateRequest{
			ClientNodeID: "node-1", Name: "report 2024.pdf", Key: "tenants/acme/report.pdf",
			ContentType: "application/pdf", Size: 12345,
			Metadata: map[string]string{"tenant": "acme", "ünïcode": "värde"},
		}, ""},
		{"zero expected size", &CreateRequest{Size: 0}, ""},
		{"negative expected size", &CreateRequest{Size: -2}, "leave it unset"},
		{"client node id at the limit", &CreateRequest{ClientNodeID: long(maxClientNodeID)}, ""},
		{"client node id too long", &CreateRequest{ClientNodeID: long(maxClientNodeID + 1)}, "client_node_id"},
		{"client node id with a newline", &CreateRequest{ClientNodeID: "a\nb"}, "client_node_id"},
		{"name at the limit", &CreateRequest{Name: long(maxNameLen)}, ""},
		{"name too long", &CreateRequest{Name: long(maxNameLen + 1)}, "name must be"},
		{"name with NUL", &CreateRequest{Name: "a\x00b"}, "name must be"},
		{"name not UTF-8", &CreateRequest{Name: "a\xffb"}, "name must be"},
		{"name with a path", &CreateRequest{Name: "../../etc/passwd"}, ""}, // reduced by DefaultKey
		{"name with a bidi override", &CreateRequest{Name: "invoice\u202Efdp.exe"}, "U+202E"},
		{"key with a bidi override", &CreateRequest{Key: "docs/invoice\u202Efdp.exe"}, "format characters"},
		{"key with a zero-width space", &CreateRequest{Key: "docs/a\u200Bb"}, "format characters"},
		{"content type too long", &CreateRequest{ContentType: long(maxContentType + 1)}, "content_type"},
		{"content type with a tab", &CreateRequest{ContentType: "text/plain;\tcharset=utf-8"}, "content_type"},
		{"bad key", &CreateRequest{Key: "../../etc/passwd"}, "'..' segments"},
		{"absolute key", &CreateRequest{Key: "/etc/passwd"}, "must not start or end"},
		{"metadata at the limit", &CreateRequest{Metadata: okMeta}, ""},
		{"too much metadata", &CreateRequest{Metadata: bigMeta}, "at most 64 are allowed"},
		{"metadata with an empty key", &CreateRequest{Metadata: map[string]string{"": "v"}}, "non-empty"},
		{"metadata key with a newline", &CreateRequest{Metadata: map[string]string{"a\nb": "v"}}, "printable"},
		{"metadata value with a newline", &CreateRequest{Metadata: map[string]string{"k": "a\r\nb"}}, "printable"},
		{"metadata bytes at the limit", &CreateRequest{Metadata: map[string]string{"k": long(maxMetadataBytes - 1)}}, ""},
		{"metadata bytes over the limit", &CreateRequest{Metadata: map[string]string{"k": long(maxMetadataBytes)}}, "8192 are allowed"},
		{"every document field", &CreateRequest{NodeID: "0F8E3C1A-5B7D-4E2F-9A6C-1D2E3F4A5B6C",
			ConnectorID: "gdrive-7", ParentID: "folder 12", Path: "/Finance/2026/invoice.pdf", Drive: "shared",
			CustomMetadata: `{"case":{"id":7,"tags":["a","b"]},"ok":true,"none":null}`}, ""},
		{"node id not a UUID", &CreateRequest{NodeID: "node-1"}, "node_id \"node-1\" is not a UUID"},
		{"node id with braces", &CreateRequest{NodeID: "{0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c}"}, "not a UUID"},
		{"nil node id", &CreateRequest{NodeID: "00000000-0000-0000-0000-000000000000"}, "node_id is the nil UUID, which names no document"},
		{"connector id too long", &CreateRequest{ConnectorID: long(MaxPlaceField + 1)}, "connector_id must be"},
		{"parent id with a newline", &CreateRequest{ParentID: "a\nb"}, "parent_id must be"},
		{"drive with a bidi override", &CreateRequest{Drive: "d\u202Ee"}, "drive must be"},
		{"path at the limit", &CreateRequest{Path: long(maxPath)}, ""},
		{"path too long", &CreateRequest{Path: long(maxPath + 1)}, "path must be"},
		{"custom metadata too big", &CreateRequest{CustomMetadata: `{"k":"` + long(MaxCustomMetadata) + `"}`}, "16384 are allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("ValidateCreate: %v, want nil", err)
				}
				return
			}
			if !isInvalid(err) {
				t.Fatalf("ValidateCreate = %T %v, want *InvalidError", err, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q does not contain %q", err, tc.msg)
			}
		})
	}
}

// TestKeyTemplate: templates parse once (unknown variables and unbalanced braces stop
// the server at start), expand an upload's fields, and the keys they make pass the same
// checks as a client's key, naming the empty variable that broke one.
func TestKeyTemplate(t *testing.T) {
	for _, tc := range []struct{ src, msg string }{
		{"", "empty"}, {"a/{nope}", "unknown variable {nope}"}, {"a/{node_id", "'{' without '}'"},
		{"a/node_id}", "'}' without '{'"}, {"a/{{node_id}}", "'{' without '}'"},
	} {
		if _, err := ParseKeyTemplate(tc.src); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseKeyTemplate(%q) = %v, want an error with %q", tc.src, err, tc.msg)
		}
	}
	if err := (Config{Bucket: "b", KeyTemplate: "x/{bogus}"}).Validate(); err == nil {
		t.Error("Config.Validate accepted a template with an unknown variable")
	}
	f := KeyFields{UploadID: "abcdefghijklmnopqrstuvwxyz", NodeID: "0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c", ConnectorID: "gdrive",
		Name: "../Scans/Invoice.March.PDF", Tenant: "acme"}
	for _, tc := range []struct {
		src, want, msg string
		f              KeyFields
	}{
		{"connectors/{connector_id}/{node_id}.pb", "connectors/gdrive/0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c.pb", "", f},
		{"docs/{tenant}/{upload_id}/{name}", "docs/acme/abcdefghijklmnopqrstuvwxyz/Invoice.March.PDF", "", f},
		{"by-node/{node_id}{ext}", "by-node/0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c.PDF", "", f},
		{"no-ext/{node_id}{ext}", "no-ext/0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c", "", KeyFields{NodeID: f.NodeID, Name: "README"}},
		{"connectors/{connector_id}/{node_id}.pb", "", "empty in this request: connector_id", KeyFields{NodeID: f.NodeID}},
		{"{name}", "", "empty in this request: name", KeyFields{}},
		{"c/{connector_id}/x", "", "'..' segments", KeyFields{ConnectorID: ".."}},
	} {
		kt, err := ParseKeyTemplate(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := kt.Expand(tc.f)
		if tc.msg != "" {
			if !isInvalid(err) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), tc.src) {
				t.Errorf("%q.Expand(%+v) = %q, %v; want an *InvalidError naming the template and %q", tc.src, tc.f, got, err, tc.msg)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q.Expand = %q, %v; want %q", tc.src, got, err, tc.want)
		}
	}
}

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"report.pdf", true},
		{"uploads/abc/report.pdf", true},
		{"tenants/acme/2024/q1/report final (2).pdf", true},
		{"ünïcødé/文件.txt", true},
		{"a/.../b", true},  // "..." is a name, not a parent reference
		{"a/..b/c", true},  // so is "..b"
		{"a\\..\\b", true}, // S3 keys use '/' only; a backslash is a character
		{".hidden/x", true},
		{strings.Repeat("a", maxKeyLen), true},
		{strings.Repeat("a/", maxKeyLen/2-1) + "bb", true},

		{"", false},
		{"../../etc/passwd", false},
		{"..", false},
		{".", false},
		{"a/../b", false},
		{"a/./b", false},
		{"a/..", false},
		{"/etc/passwd", false},
		{"/", false},
		{"a/", false},
		{"a//b", false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a\rb", false},
		{"a\tb", false},
		{"a\x7fb", false},
		{"a\u0085b", false}, // NEL, a C1 control
		{"a\xffb", false},   // not UTF-8
		{strings.Repeat("a", maxKeyLen+1), false},
		{strings.Repeat("é", maxKeyLen/2) + "a", false}, // 1025 bytes, 513 runes
	} {
		t.Run(tc.key, func(t *testing.T) {
			err := ValidateKey(tc.key)
			if tc.ok && err != nil {
				t.Fatalf("ValidateKey(%q) = %v, want nil", tc.key, err)
			}
			if !tc.ok && !isInvalid(err) {
				t.Fatalf("ValidateKey(%q) = %v, want *InvalidError", tc.key, err)
			}
		})
	}
}

func TestDefaultKey(t *testing.T) {
	const id = "abcdefghijklmnopqrstuvwxyz"
	for _, tc := range []struct {
		prefix, name, want string
	}{
		{"uploads", "report.pdf", "uploads/" + id + "/report.pdf"},
		{"uploads/", "report.pdf", "uploads/" + id + "/report.pdf"},
		{"a/b", "x", "a/b/" + id + "/x"},
		{"", "report.pdf", id + "/report.pdf"},
		{"uploads", "", "uploads/" + id},
		{"uploads", "dir/sub/report.pdf", "uploads/" + id + "/report.pdf"},
		{"uploads", "../../etc/passwd", "uploads/" + id + "/passwd"},
		{"uploads", "..", "uploads/" + id},
		{"uploads", ".", "uploads/" + id},
		{"uploads", "a/..", "uploads/" + id},
		{"uploads", "../", "uploads/" + id},
		{"uploads", "/", "uploads/" + id},
		{"uploads", "///", "uploads/" + id},
		{"uploads", "dir/", "uploads/" + id + "/dir"},
		{"uploads", `C:\Users\me\report.pdf`, "uploads/" + id + "/report.pdf"},
		{"uploads", `..\..\windows\system.ini`, "uploads/" + id + "/system.ini"},
		{"uploads", `..\`, "uploads/" + id},
		{"uploads", `\`, "uploads/" + id},
		{"uploads", "...", "uploads/" + id + "/..."},
		{"uploads", "name with spaces.txt", "uploads/" + id + "/name with spaces.txt"},
	} {
		t.Run(tc.prefix+"|"+tc.name, func(t *testing.T) {
			got := DefaultKey(tc.prefix, id, tc.name)
			if got != tc.want {
				t.Fatalf("DefaultKey(%q, id, %q) = %q, want %q", tc.prefix, tc.name, got, tc.want)
			}
			if err := ValidateKey(got); err != nil {
				t.Fatalf("DefaultKey(%q, id, %q) = %q, which ValidateKey rejects: %v", tc.prefix, tc.name, got, err)
			}
		})
	}
}

// FuzzValidateChunk checks ChunkSizeFor and ValidateChunk together: the parameters are
// derived from the fuzzed sizes the way CreateUpload derives them, and an accepted chunk
// must be possible in a real upload.
func FuzzValidateChunk(f *testing.F) {
	f.Add(int64(-1), int64(8<<20), int64(64<<20), uint32(1), int64(8<<20), false)
	f.Add(int64(0), int64(8<<20), int64(64<<20), uint32(1), int64(0), true)
	f.Add(int64(3<<20), int64(8<<20), int64(64<<20), uint32(1), int64(3<<20), false)
	f.Add(int64(10000*8<<20+1), int64(8<<20), int64(64<<20), uint32(10000), int64(1), true)
	f.Add(int64(-1), int64(5<<20), int64(5<<20), uint32(2), int64(0), true)
	f.Fuzz(func(t *testing.T, expected, def, max int64, n uint32, size int64, isLast bool) {
		// Settings server.Config.Validate accepts: 5 MiB <= def <= max <= 5 GiB.
		if def < MinPartSize || def > MaxPartSize {
			def = MinPartSize + abs64(def)%(MaxPartSize-MinPartSize+1)
		}
		if max < def || max > MaxPartSize {
			max = def + abs64(max)%(MaxPartSize-def+1)
		}
		if expected < 0 {
			expected = -1 // the server's "unknown"
		}
		checkChunkSize(t, expected, def, max)
		chunkSize, err := ChunkSizeFor(expected, def, max)
		if err != nil {
			return
		}
		p := staging.Params{ChunkSize: chunkSize, ExpectedSize: expected}
		if expected >= 0 {
			p.Total = staging.TotalChunks(expected, chunkSize)
		}
		size = abs64(size) % (chunkSize + 2) // a chunk's length, mostly near the chunk size
		err = ValidateChunk(p, n, size, isLast)
		if err != nil {
			if !isInvalid(err) && !isRange(err) {
				t.Fatalf("ValidateChunk(%+v, %d, %d, %v): error %T %v, want *InvalidError or *RangeError", p, n, size, isLast, err, err)
			}
			return
		}
		switch {
		case n < 1 || n > MaxParts:
			t.Fatalf("ValidateChunk(%+v) accepted chunk number %d", p, n)
		case size > chunkSize:
			t.Fatalf("ValidateChunk(%+v) accepted chunk %d of %d bytes, larger than the chunk size %d", p, n, size, chunkSize)
		case p.Total > 0 && n > p.Total:
			t.Fatalf("ValidateChunk(%+v) accepted chunk %d beyond %d chunks", p, n, p.Total)
		case p.Total > 0 && n < p.Total && (size != chunkSize || isLast):
			t.Fatalf("ValidateChunk(%+v) accepted chunk %d (%d bytes, last %v) before the last", p, n, size, isLast)
		case p.Total > 0 && n == p.Total && int64(n-1)*chunkSize+size != expected:
			t.Fatalf("ValidateChunk(%+v) accepted a last chunk of %d bytes that does not make the expected size", p, size)
		case p.Total == 0 && !isLast && size != chunkSize:
			t.Fatalf("ValidateChunk(%+v) accepted a short chunk %d (%d bytes) without is_last", p, n, size)
		case size == 0 && n != 1:
			t.Fatalf("ValidateChunk(%+v) accepted an empty chunk %d", p, n)
		}
	})
}

func abs64(x int64) int64 {
	if x < 0 {
		if x == math.MinInt64 {
			return math.MaxInt64
		}
		return -x
	}
	return x
}

// FuzzValidateCreate builds a create request from fuzzed fields and checks that
// ValidateCreate never panics, that what it accepts has the properties it promises, and
// that the key the server would use for it (the client's or DefaultKey's) is valid.
func FuzzValidateCreate(f *testing.F) {
	f.Add("node-1", "report.pdf", "", "application/pdf", int64(1234), true, "tenant", "acme")
	f.Add("", "../../etc/passwd", "", "", int64(0), false, "", "")
	f.Add("", `..\..\x`, "a/b/c", "", int64(-1), true, "k", "v\n")
	f.Add("x\x00", "", "/abs", "text/plain", int64(1<<40), true, "", "v")
	f.Fuzz(func(t *testing.T, nodeID, name, key, contentType string, expected int64, sized bool, mdKey, mdVal string) {
		req := &CreateRequest{
			ClientNodeID: nodeID, Name: name, Key: key, ContentType: contentType, Size: -1,
		}
		if sized {
			req.Size = expected
		}
		if mdKey != "" || mdVal != "" {
			req.Metadata = map[string]string{mdKey: mdVal}
		}
		err := req.Validate()
		if err != nil {
			if !isInvalid(err) {
				t.Fatalf("ValidateCreate: error %T %v, want *InvalidError", err, err)
			}
			return
		}
		switch {
		case sized && expected < -1:
			t.Fatalf("accepted expected_size %d", expected)
		case len(nodeID) > maxClientNodeID || !printableForTest(nodeID):
			t.Fatalf("accepted client_node_id %q", nodeID)
		case len(name) > maxNameLen || !printableForTest(name) || hasFormatChar(name):
			t.Fatalf("accepted name %q", name)
		case len(contentType) > maxContentType || !printableForTest(contentType):
			t.Fatalf("accepted content_type %q", contentType)
		case req.Metadata != nil && (mdKey == "" || !printableForTest(mdKey) || !printableForTest(mdVal) || len(mdKey)+len(mdVal) > maxMetadataBytes):
			t.Fatalf("accepted metadata %q=%q", mdKey, mdVal)
		}
		if key != "" {
			checkKey(t, key)
			return
		}
		const id = "abcdefghijklmnopqrstuvwxyz"
		k := DefaultKey("uploads", id, name)
		if !strings.HasPrefix(k, "uploads/"+id) {
			t.Fatalf("DefaultKey(uploads, id, %q) = %q", name, k)
		}
		if err := ValidateKey(k); err != nil {
			t.Fatalf("DefaultKey(uploads, id, %q) = %q, which ValidateKey rejects: %v", name, k, err)
		}
		checkKey(t, k)
	})
}

// FuzzValidateKey checks that ValidateKey never panics and accepts only safe keys, and
// that DefaultKey makes a key under prefix/id that ValidateKey accepts for every name the
// server accepts.
func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"uploads/abc/report.pdf", "../../etc/passwd", "/abs", "a//b", "a/./b", "a\x00b", "\xff", "ünï/文件"} {
		f.Add(k, "uploads", k)
	}
	f.Add("x", "", `..\..\boot.ini`)
	f.Add("x", "tenants/acme", "dir/")
	f.Fuzz(func(t *testing.T, key, prefix, name string) {
		if ValidateKey(key) == nil {
			checkKey(t, key)
		} else if err := ValidateKey(key); !isInvalid(err) {
			t.Fatalf("ValidateKey(%q): error %T %v, want *InvalidError", key, err, err)
		}

		// DefaultKey is given a server-configured prefix (a valid key, or empty) and a
		// name that ValidateCreate accepted.
		if prefix != "" && ValidateKey(prefix) != nil {
			return
		}
		const id = "abcdefghijklmnopqrstuvwxyz" // as staging.NewID makes
		if len(prefix) > maxKeyLen-len(id)-2-maxNameLen {
			return // a prefix this long leaves no room for names; not a client's doing
		}
		k := DefaultKey(prefix, id, name)
		start := prefix + "/" + id
		if prefix == "" {
			start = id
		}
		if k != start && !strings.HasPrefix(k, start+"/") {
			t.Fatalf("DefaultKey(%q, %q, %q) = %q, not under %q", prefix, id, name, k, start)
		}
		if strings.Contains(k[len(start):], "\\") {
			t.Fatalf("DefaultKey(%q, %q, %q) = %q keeps a backslash", prefix, id, name, k)
		}
		if (&CreateRequest{Name: name}).Validate() != nil {
			return
		}
		if err := ValidateKey(k); err != nil {
			t.Fatalf("DefaultKey(%q, %q, %q) = %q, which ValidateKey rejects: %v", prefix, id, name, k, err)
		}
		checkKey(t, k)
	})
}

// checkKey checks the properties every accepted key must have, independently of how
// ValidateKey is written.
func checkKey(t *testing.T, key string) {
	t.Helper()
	if len(key) == 0 || len(key) > maxKeyLen {
		t.Fatalf("accepted key of %d bytes", len(key))
	}
	if key[0] == '/' {
		t.Fatalf("accepted key %q starting with '/'", key)
	}
	if !printableForTest(key) || hasFormatChar(key) {
		t.Fatalf("accepted key %q with control or format characters, or invalid UTF-8", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == ".." || seg == "." || seg == "" {
			t.Fatalf("accepted key %q with segment %q", key, seg)
		}
	}
}

// hasFormatChar reports a Unicode format character (category Cf), such as U+202E.
func hasFormatChar(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.In(r, unicode.Cf) }) >= 0
}

// printableForTest is valid UTF-8 without control characters, written out separately
// from the code under test.
func printableForTest(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, unicode.IsControl) < 0
}
