package httpdoor

// Parsers and formatters for the protocol headers that are not Structured Fields:
// tus's Upload-Metadata and Upload-Checksum, and the checksums of RFC 9530's
// Content-Digest and Repr-Digest (which are Structured Field Dictionaries).

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"hash"
	"hash/crc32"
	"mime"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on Upload-Metadata, so that a header cannot make the door allocate much; the
// core applies chunkup's own (tighter) limits on what it stores.
const (
	maxMetadataPairs = 256
	maxMetadataKey   = 256
)

// parseTusMetadata parses tus Upload-Metadata: comma-separated pairs of a key and the
// base64 of its value, separated by one space; a value may be empty and its space left
// out. Keys are unique. Values must be UTF-8 text, because chunkup stores metadata as
// strings.
func parseTusMetadata(v string) (map[string]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	pairs := strings.Split(v, ",")
	if len(pairs) > maxMetadataPairs {
		return nil, fmt.Errorf("%w: Upload-Metadata has %d pairs; at most %d are allowed", ErrInvalid, len(pairs), maxMetadataPairs)
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		p = strings.Trim(p, " \t")
		key, enc, _ := strings.Cut(p, " ")
		if key == "" || len(key) > maxMetadataKey || strings.ContainsAny(key, " \t,") || !printableASCII(key) {
			return nil, fmt.Errorf("%w: Upload-Metadata: each pair is a key (printable ASCII, no spaces or commas, at most %d bytes), a space and a base64 value", ErrInvalid, maxMetadataKey)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%w: Upload-Metadata: key %q appears twice", ErrInvalid, key)
		}
		val, err := decodeBase64(strings.Trim(enc, " \t"))
		if err != nil {
			return nil, fmt.Errorf("%w: Upload-Metadata: the value of %q is not base64", ErrInvalid, key)
		}
		if !utf8.Valid(val) {
			return nil, fmt.Errorf("%w: Upload-Metadata: the value of %q is not UTF-8 text", ErrInvalid, key)
		}
		out[key] = string(val)
	}
	return out, nil
}

// decodeBase64 decodes standard base64 with or without padding.
func decodeBase64(s string) ([]byte, error) {
	return base64.RawStdEncoding.Strict().DecodeString(strings.TrimRight(s, "="))
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// formatTusMetadata writes metadata as Upload-Metadata, keys sorted. Values are
// base64, so no value can inject anything into the header.
func formatTusMetadata(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "" && printableASCII(k) && !strings.ContainsAny(k, ",") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		if v := m[k]; v != "" {
			b.WriteByte(' ')
			b.WriteString(base64.StdEncoding.EncodeToString([]byte(v)))
		}
	}
	return b.String()
}

// nameAndType picks the file name and media type from tus metadata, under the keys
// tus-js-client, Uppy and the tus clients of other languages use.
func nameAndType(m map[string]string) (name, ctype string) {
	for _, k := range []string{"filename", "name"} {
		if v := m[k]; v != "" {
			name = v
			break
		}
	}
	for _, k := range []string{"filetype", "type", "contentType", "content-type"} {
		if v := m[k]; v != "" {
			ctype = v
			break
		}
	}
	return name, ctype
}

// dispositionName returns the filename of a Content-Disposition header (filename*
// preferred, as mime.ParseMediaType decodes it), or "".
func dispositionName(v string) string {
	if v == "" {
		return ""
	}
	_, params, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// algorithm is a checksum the door can verify.
type algorithm struct {
	tus, digest string // names in Upload-Checksum and in RFC 9530 fields ("" = none)
	new         func() hash.Hash
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// algorithms are tried in this order when naming them in Tus-Checksum-Algorithm. The
// CRCs' digests are their 4 bytes big-endian, as S3's x-amz-checksum-crc32c.
var algorithms = []algorithm{
	{"crc32c", "crc32c", func() hash.Hash { return crc32.New(castagnoli) }},
	{"sha1", "sha", sha1.New},
	{"md5", "md5", md5.New},
	{"sha256", "sha-256", sha256.New},
	{"sha512", "sha-512", sha512.New},
	{"crc32", "", func() hash.Hash { return crc32.NewIEEE() }},
}

// tusChecksumAlgorithms is the Tus-Checksum-Algorithm value.
var tusChecksumAlgorithms = func() string {
	names := make([]string, 0, len(algorithms))
	for _, a := range algorithms {
		names = append(names, a.tus)
	}
	return strings.Join(names, ",")
}()

// bodyCheck is a checksum over one request's body, verified once the body has
// arrived whole and before any of it is staged.
type bodyCheck struct {
	field string // the header that asked for it, for messages
	name  string // the algorithm as the client named it
	h     hash.Hash
	want  []byte
}

func (c *bodyCheck) ok() bool { return bytes.Equal(c.h.Sum(nil), c.want) }

// parseUploadChecksum parses tus Upload-Checksum: an algorithm name, a space and the
// base64 digest of the PATCH body.
func parseUploadChecksum(v string) (*bodyCheck, error) {
	name, enc, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		return nil, fmt.Errorf("%w: Upload-Checksum must be an algorithm name, a space and a base64 digest", ErrInvalid)
	}
	for _, a := range algorithms {
		if a.tus != name {
			continue
		}
		want, err := decodeBase64(strings.TrimSpace(enc))
		if err != nil {
			return nil, fmt.Errorf("%w: Upload-Checksum: the %s digest is not base64", ErrInvalid, name)
		}
		h := a.new()
		if len(want) != h.Size() {
			return nil, fmt.Errorf("%w: Upload-Checksum: a %s digest has %d bytes, not %d", ErrInvalid, name, h.Size(), len(want))
		}
		return &bodyCheck{field: "Upload-Checksum", name: name, h: h, want: want}, nil
	}
	return nil, fmt.Errorf("%w: Upload-Checksum algorithm %q is not supported; use one of %s", ErrInvalid, clip(name), tusChecksumAlgorithms)
}

// parseContentDigest parses an RFC 9530 Content-Digest (a Dictionary of algorithm =
// Byte Sequence) into the checks the door can make. Algorithms it does not know are
// ignored, as RFC 9530 allows; a malformed field is an error, since the client asked
// for a check.
func parseContentDigest(values []string) ([]*bodyCheck, error) {
	if len(values) == 0 {
		return nil, nil
	}
	ms, err := parseSFDictionary(strings.Join(values, ","))
	if err != nil {
		return nil, fmt.Errorf("%w: Content-Digest is not a structured field dictionary of algorithm=:base64:", ErrInvalid)
	}
	var out []*bodyCheck
	for _, m := range ms {
		want, ok := m.Item.Value.([]byte)
		if m.List != nil || !ok {
			return nil, fmt.Errorf("%w: Content-Digest: %s must be a byte sequence (:base64:)", ErrInvalid, m.Key)
		}
		for _, a := range algorithms {
			if a.digest == m.Key {
				h := a.new()
				if len(want) != h.Size() {
					return nil, fmt.Errorf("%w: Content-Digest: a %s digest has %d bytes, not %d", ErrInvalid, m.Key, h.Size(), len(want))
				}
				out = append(out, &bodyCheck{field: "Content-Digest", name: m.Key, h: h, want: want})
			}
		}
	}
	return out, nil
}

// reprCRC32C returns the crc32c member of a Repr-Digest field, if it has one: the
// one representation digest the door can check without reading the object again
// (chunkup combines the chunks' CRC32Cs).
func reprCRC32C(values []string) (crc uint32, ok bool, err error) {
	if len(values) == 0 {
		return 0, false, nil
	}
	ms, perr := parseSFDictionary(strings.Join(values, ","))
	if perr != nil {
		return 0, false, fmt.Errorf("%w: Repr-Digest is not a structured field dictionary of algorithm=:base64:", ErrInvalid)
	}
	for _, m := range ms {
		if m.Key != "crc32c" {
			continue
		}
		b, isBytes := m.Item.Value.([]byte)
		if m.List != nil || !isBytes || len(b) != 4 {
			return 0, false, fmt.Errorf("%w: Repr-Digest: crc32c must be a byte sequence of 4 bytes", ErrInvalid)
		}
		return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), true, nil
	}
	return 0, false, nil
}

// formatReprCRC32C formats a Repr-Digest with a crc32c member.
func formatReprCRC32C(crc uint32) string {
	b := []byte{byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)}
	return "crc32c=:" + base64.StdEncoding.EncodeToString(b) + ":"
}

// clip shortens a client's string for a message.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
