package server

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
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
	maxMetadataPairs = 64
	maxMetadataBytes = 8 << 10
	// The document's identity and place.
	maxPlaceField = 256
	maxPath       = 1024
	// MaxCustomMetadata bounds custom_metadata in its JSON form, and maxMetadataDepth
	// its nesting: enough for a connector's properties, not a store for documents.
	MaxCustomMetadata = 16 << 10
	maxMetadataDepth  = 8
)

// InvalidError is a request that is wrong in itself; the message says how to fix it.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

// ConflictError is a create whose client_node_id names an upload made with other
// parameters.
type ConflictError struct {
	ClientNodeID, UploadID, Field string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("client_node_id %s already names upload %s, which was created with another %s; repeat the first request's parameters to get that upload back, or use a new client_node_id for a different upload", quote(e.ClientNodeID), e.UploadID, e.Field)
}

// ObjectExistsError is a create with if_absent for a key where an object exists.
type ObjectExistsError struct{ Key string }

func (e *ObjectExistsError) Error() string {
	return fmt.Sprintf("an object exists at key %s and if_absent was set: nothing was created; delete the object first, upload under another key, or leave if_absent unset to replace it", quote(e.Key))
}

// RangeError is a chunk number outside the upload.
type RangeError struct{ Msg string }

func (e *RangeError) Error() string { return e.Msg }

// ChecksumError is a chunk whose bytes do not match the checksum sent with it.
type ChecksumError struct {
	N         uint32
	Got, Want uint32
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("chunk %d: crc32c of the data is %08x but the request says %08x; the chunk was corrupted on the way, send it again", e.N, e.Got, e.Want)
}

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
			return 0, invalidf("expected_size %d needs chunks of %d bytes, over this server's maximum chunk size %d", expected, need, max)
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

// ValidateCreate checks a create request on its own.
func ValidateCreate(r *chunkupv1.CreateUploadRequest) error {
	if r.ExpectedSize != nil && *r.ExpectedSize < 0 {
		return invalidf("expected_size must not be negative; leave it unset when the size is unknown")
	}
	if r.ChunkSize < 0 {
		return invalidf("chunk_size must not be negative; leave it 0 to let the server choose")
	}
	if len(r.ClientNodeId) > maxClientNodeID || !printable(r.ClientNodeId) {
		return invalidf("client_node_id must be at most %d printable characters", maxClientNodeID)
	}
	if len(r.Name) > maxNameLen || !plain(r.Name) {
		return invalidf("name must be at most %d printable characters, without Unicode format characters such as U+202E", maxNameLen)
	}
	if len(r.ContentType) > maxContentType || !printable(r.ContentType) {
		return invalidf("content_type must be at most %d printable characters", maxContentType)
	}
	if r.Key != "" {
		if err := ValidateKey(r.Key); err != nil {
			return err
		}
	}
	if len(r.Metadata) > maxMetadataPairs {
		return invalidf("metadata has %d entries; at most %d are allowed", len(r.Metadata), maxMetadataPairs)
	}
	total := 0
	for k, v := range r.Metadata {
		if k == "" || !printable(k) || !printable(v) {
			return invalidf("metadata keys must be non-empty and keys and values printable (key %s)", quote(k))
		}
		total += len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return invalidf("metadata has %d bytes; at most %d are allowed", total, maxMetadataBytes)
	}
	return validateDocumentFields(r)
}

// validateDocumentFields checks the document's identity and place.
func validateDocumentFields(r *chunkupv1.CreateUploadRequest) error {
	if r.NodeId != "" {
		if _, ok := ids.UUID(r.NodeId); !ok {
			if r.NodeId == "00000000-0000-0000-0000-000000000000" {
				return invalidf("node_id is the nil UUID, which names no document; give the document's own UUID, or leave node_id empty to have the server make one")
			}
			return invalidf("node_id %s is not a UUID (8-4-4-4-12 hexadecimal digits, e.g. 0f8e3c1a-5b7d-4e2f-9a6c-1d2e3f4a5b6c); leave it empty to have the server make one", quote(r.NodeId))
		}
	}
	for _, f := range []struct{ name, v string }{{"connector_id", r.ConnectorId}, {"parent_id", r.ParentId}, {"drive", r.Drive}} {
		if len(f.v) > maxPlaceField || !plain(f.v) {
			return invalidf("%s must be at most %d printable characters, without Unicode format characters", f.name, maxPlaceField)
		}
	}
	if len(r.Path) > maxPath || !plain(r.Path) {
		return invalidf("path must be at most %d printable characters, without Unicode format characters", maxPath)
	}
	if r.CustomMetadata == nil {
		return nil
	}
	if err := validateStruct(r.CustomMetadata, "custom_metadata", 1); err != nil {
		return err
	}
	b, err := protojson.Marshal(r.CustomMetadata)
	if err != nil {
		return invalidf("custom_metadata cannot be stored as JSON: %v", err)
	}
	if len(b) > MaxCustomMetadata {
		return invalidf("custom_metadata has %d bytes as JSON; at most %d are allowed", len(b), MaxCustomMetadata)
	}
	return nil
}

// validateStruct checks a Struct's keys and nesting (at depth, from 1).
func validateStruct(st *structpb.Struct, where string, depth int) error {
	if depth > maxMetadataDepth {
		return invalidf("%s is nested more than %d levels deep", where, maxMetadataDepth)
	}
	for k, v := range st.GetFields() {
		if k == "" || len(k) > maxPlaceField || !printable(k) {
			return invalidf("%s has a key %s: keys must be 1 to %d printable characters", where, quote(k), maxPlaceField)
		}
		if err := validateValue(v, where+"."+k, depth); err != nil {
			return err
		}
	}
	return nil
}

func validateValue(v *structpb.Value, where string, depth int) error {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0) {
			return invalidf("%s is not a finite number (JSON has no NaN or infinity)", clip(where))
		}
	case *structpb.Value_StructValue:
		return validateStruct(k.StructValue, where, depth+1)
	case *structpb.Value_ListValue:
		if depth+1 > maxMetadataDepth {
			return invalidf("%s is nested more than %d levels deep", clip(where), maxMetadataDepth)
		}
		for _, e := range k.ListValue.GetValues() {
			if err := validateValue(e, where+"[]", depth+1); err != nil {
				return err
			}
		}
	case nil:
		return invalidf("%s has no value (use null_value for null)", clip(where))
	}
	return nil
}

// ValidateKey checks an object key chosen by a client: relative, no "." or ".."
// segments, no empty segments, no control characters, at most 1024 bytes.
func ValidateKey(key string) error {
	if len(key) > maxKeyLen {
		return invalidf("key has %d bytes; at most %d are allowed", len(key), maxKeyLen)
	}
	if !plain(key) {
		return invalidf("key must be valid UTF-8 without control characters or Unicode format characters (such as the U+202E right-to-left override, which can disguise a name)")
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return invalidf("key %s must not start or end with '/'", quote(key))
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return invalidf("key %s must not contain empty, '.' or '..' segments", quote(key))
		}
	}
	return nil
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

// quote quotes caller input for a message, cut to maxQuoted bytes (on a rune boundary)
// with a note of its full length.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// clip cuts caller input that a message names unquoted (an id) to maxQuoted bytes.
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return quote(s)
}

func printable(s string) bool {
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

// plain is printable without Unicode format characters (category Cf: bidirectional
// overrides, zero-width joiners and the like), which can make an object key or a file
// name display as another one.
func plain(s string) bool {
	if !printable(s) {
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
		want := p.ExpectedSize - int64(p.Total-1)*p.ChunkSize
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
