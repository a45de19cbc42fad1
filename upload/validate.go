package upload

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
)

// S3 limits that shape the API.
const (
	MaxParts         = 10000
	MinPartSize      = 5 << 20
	MaxPartSize      = 5 << 30
	maxKeyLen        = 1024
	maxNameLen       = 255
	maxClientNodeID  = 128
	maxContentType   = 255
	MaxMetadataPairs = 64
	maxMetadataBytes = 8 << 10
	// The document's identity and place.
	MaxPlaceField = 256
	maxPath       = 1024
	// MaxCustomMetadata bounds custom_metadata in its JSON form, and MaxMetadataDepth
	// its nesting: enough for a connector's properties, not a store for documents.
	MaxCustomMetadata = 16 << 10
	MaxMetadataDepth  = 8
)

func invalidf(format string, a ...any) error { return &InvalidError{Msg: fmt.Sprintf(format, a...)} }

// ChunkSizeFor picks the chunk size for an upload: def, or more when expected bytes
// would need more than S3's 10,000 parts (rounded up to a MiB), never under S3's 5 MiB
// minimum part. expected < 0 means unknown.
func ChunkSizeFor(expected, def, max int64) (int64, error) {
	size := max64(def, MinPartSize)
	if expected > size*MaxParts {
		// Ceiling division written so that it cannot overflow for huge sizes.
		need := expected / MaxParts
		if expected%MaxParts != 0 {
			need++
		}
		if need > max {
			return 0, invalidf("expected_size %d needs chunks of %d bytes, over this server's maximum chunk size %d: the largest upload it takes is %d bytes (10,000 chunks of that size); split the file", expected, need, max, max*MaxParts)
		}
		size = (need + (1<<20 - 1)) &^ (1<<20 - 1)
	}
	if size > max {
		return 0, invalidf("expected_size %d needs chunks of %d bytes, over this server's maximum chunk size %d", expected, size, max)
	}
	return size, nil
}

// AcceptChunkSize checks a chunk size a client proposed for an upload of expected bytes
// (expected < 0: unknown) against S3's part rules and this server's maximum max, and
// returns it, or an error that says which sizes are allowed.
func AcceptChunkSize(proposed, expected, max int64) (int64, error) {
	least := int64(MinPartSize)
	if expected > least*MaxParts {
		least = expected / MaxParts // rounded up below; written so that it cannot overflow
		if expected%MaxParts != 0 {
			least++
		}
	}
	if proposed < least || proposed > max {
		if least > max {
			return 0, invalidf("chunk_size %d is not allowed: expected_size %d needs chunks of at least %d bytes, over this server's maximum chunk size of %d", proposed, expected, least, max)
		}
		return 0, invalidf("chunk_size %d is not allowed: use %d to %d bytes (S3 parts are at least 5 MiB, this server's maximum chunk size is %d, and 10,000 chunks must hold expected_size), or 0 to let the server choose", proposed, least, max, max)
	}
	return proposed, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Validate checks a create request on its own.
func (r *CreateRequest) Validate() error {
	if r.Size < -1 {
		return invalidf("expected_size must not be negative; leave it unset when the size is unknown")
	}
	if r.ChunkSize < 0 {
		return invalidf("chunk_size must not be negative; leave it 0 to let the server choose")
	}
	if len(r.ClientNodeID) > maxClientNodeID || !Printable(r.ClientNodeID) {
		return invalidf("client_node_id must be at most %d printable characters", maxClientNodeID)
	}
	if len(r.Name) > maxNameLen || !Plain(r.Name) {
		return invalidf("name must be at most %d printable characters, without Unicode format characters such as U+202E", maxNameLen)
	}
	if len(r.ContentType) > maxContentType || !Printable(r.ContentType) {
		return invalidf("content_type must be at most %d printable characters", maxContentType)
	}
	if r.Key != "" {
		if err := ValidateKey(r.Key); err != nil {
			return err
		}
	}
	if len(r.Metadata) > MaxMetadataPairs {
		return invalidf("metadata has %d entries; at most %d are allowed", len(r.Metadata), MaxMetadataPairs)
	}
	total := 0
	for k, v := range r.Metadata {
		if k == "" || !Printable(k) || !Printable(v) {
			return invalidf("metadata keys must be non-empty and keys and values printable (key %s)", Quote(k))
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return invalidf("metadata has %d bytes; at most %d are allowed", total, maxMetadataBytes)
	}
	return validateDocumentFields(r)
}

// validateDocumentFields checks the document's identity and place.
func validateDocumentFields(r *CreateRequest) error {
	if r.NodeID != "" {
		if _, ok := ids.UUID(r.NodeID); !ok {
			if r.NodeID == "00000000-0000-0000-0000-000000000000" {
				return invalidf("node_id is the nil UUID, which names no document; give the document's own UUID, or leave node_id empty to have the server make one")
			}
			return invalidf("node_id %s is not a UUID (8-4-4-4-12 hexadecimal digits, e.g. 0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c); leave it empty to have the server make one", Quote(r.NodeID))
		}
	}
	for _, f := range []struct{ name, v string }{{"connector_id", r.ConnectorID}, {"parent_id", r.ParentID}, {"drive", r.Drive}} {
		if len(f.v) > MaxPlaceField || !Plain(f.v) {
			return invalidf("%s must be at most %d printable characters, without Unicode format characters", f.name, MaxPlaceField)
		}
	}
	if len(r.Path) > maxPath || !Plain(r.Path) {
		return invalidf("path must be at most %d printable characters, without Unicode format characters", maxPath)
	}
	if len(r.CustomMetadata) > MaxCustomMetadata {
		return invalidf("custom_metadata has %d bytes as JSON; at most %d are allowed", len(r.CustomMetadata), MaxCustomMetadata)
	}
	return nil
}

// ValidateKey checks an object key chosen by a client: relative, no "." or ".."
// segments, no empty segments, no control characters, at most 1024 bytes.
func ValidateKey(key string) error {
	if len(key) > maxKeyLen {
		return invalidf("key has %d bytes; at most %d are allowed", len(key), maxKeyLen)
	}
	if !Plain(key) {
		return invalidf("key must be valid UTF-8 without control characters or Unicode format characters (such as the U+202E right-to-left override, which can disguise a name)")
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return invalidf("key %s must not start or end with '/'", Quote(key))
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return invalidf("key %s must not contain empty, '.' or '..' segments", Quote(key))
		}
		if seg == partialDir {
			// Partial uploads' objects live there (tus concatenation): an upload must
			// not overwrite one.
			return invalidf("key %s must not contain a %q segment: it is where partial uploads are kept", Quote(key), partialDir)
		}
	}
	return nil
}

// KeyFor builds an upload's object key inside its tenant's namespace: tenant/key, where
// key is the client's (already validated by ValidateKey) or the default
// prefix/ID/name. No input can lead out of the tenant's prefix.
func KeyFor(tenant, prefix, id, clientKey, name string) string {
	key := clientKey
	if key == "" {
		key = DefaultKey(prefix, id, name)
	}
	if tenant == "" {
		return key
	}
	return tenant + "/" + key
}

// DefaultKey is the object key of an upload that did not choose one:
// prefix/{id}/{base name}, with the name reduced to a safe last path element.
func DefaultKey(prefix, id, name string) string {
	k := strings.TrimSuffix(prefix, "/") + "/" + id
	if prefix == "" {
		k = id
	}
	if base := baseName(name); base != "" {
		return k + "/" + base
	}
	return k
}

// maxQuoted is how many bytes of a caller's input an error message (or a log line)
// quotes: enough to recognize it, not enough to let a huge input swell every message.
const maxQuoted = 100

// Quote quotes caller input for a message, cut to maxQuoted bytes (on a rune boundary)
// with a note of its full length.
func Quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// Clip cuts caller input that a message names unquoted (an id) to maxQuoted bytes.
func Clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return Quote(s)
}

// Printable reports whether s is valid UTF-8 without control characters.
func Printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// Plain is Printable without Unicode format characters (category Cf: bidirectional
// overrides, zero-width joiners and the like), which can make an object key or a file
// name display as another one.
func Plain(s string) bool {
	if !Printable(s) {
		return false
	}
	for _, r := range s {
		if unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}

// ValidateChunk checks a chunk against its upload's immutable parameters, before any
// byte is staged: its number, its size, and its last-chunk flag.
func ValidateChunk(p staging.Params, n uint32, size int64, isLast bool) error {
	if n == 0 {
		return invalidf("chunk_number must be at least 1 (chunks are numbered from 1)")
	}
	if n > MaxParts {
		return &RangeError{Msg: fmt.Sprintf("chunk %d is beyond S3's limit of %d parts", n, MaxParts)}
	}
	if size > p.ChunkSize {
		return invalidf("chunk %d has %d bytes, more than the upload's chunk_size of %d", n, size, p.ChunkSize)
	}
	if p.Total > 0 {
		if n > p.Total {
			return &RangeError{Msg: fmt.Sprintf("chunk %d is beyond the upload's %d chunks (expected_size %d, chunk_size %d)", n, p.Total, p.ExpectedSize, p.ChunkSize)}
		}
		if n < p.Total {
			if isLast {
				return invalidf("chunk %d cannot be the last: the upload's expected_size makes chunk %d the last", n, p.Total)
			}
			if size != p.ChunkSize {
				return invalidf("chunk %d has %d bytes; every chunk but the last must have the upload's chunk_size of %d bytes", n, size, p.ChunkSize)
			}
			return nil
		}
		want := staging.ChunkLen(n, p.ExpectedSize, p.ChunkSize)
		if size != want {
			return invalidf("chunk %d is the last and must have %d bytes to make the expected_size of %d, not %d", n, want, p.ExpectedSize, size)
		}
		return nil
	}
	if n == MaxParts && !isLast {
		return &RangeError{Msg: fmt.Sprintf("chunk %d is S3's last possible part: mark it is_last (the upload cannot be longer)", n)}
	}
	if !isLast && size != p.ChunkSize {
		return invalidf("chunk %d has %d bytes; every chunk but the last must have the upload's chunk_size of %d bytes (mark the last chunk with is_last)", n, size, p.ChunkSize)
	}
	if isLast && size == 0 && n > 1 {
		return invalidf("chunk %d is empty: only a one-chunk upload may have an empty chunk; mark the previous chunk is_last instead", n)
	}
	return nil
}
