package staging

import (
	"fmt"
	"time"
)

// The domain types of an upload: what the stores hold and return, and what the upload
// core, the events and the completer speak of. They live here, in the vocabulary of the
// keyspace, rather than in the Redis store, so that a package that only describes
// uploads (events, completion) need not import the store.

// NewUpload describes an upload to create.
type NewUpload struct {
	ID, Bucket, Key string
	ChunkSize       int64
	// ExpectedSize is -1 when unknown.
	ExpectedSize int64
	// Total is the number of chunks when ExpectedSize is known, else 0.
	Total uint32
	// InstanceID names the process that creates it.
	InstanceID                      string
	Name, ContentType, ClientNodeID string
	CorrelationID, Tenant           string
	Metadata                        map[string]string
	// IfAbsent: the object must not replace one at its key (S3's conditional write).
	IfAbsent bool
	// Direct: the client puts the parts into S3 itself, with URLs chunkup signs, in
	// the multipart upload MultipartID (created with CRC32C checksums when
	// MultipartChecksummed); chunkup records the parts the client reports.
	Direct               bool
	MultipartID          string
	MultipartChecksummed bool
	// Partial: a part of a later upload (tus concatenation), not an upload of its own:
	// its object is only read by the final upload that concatenates it, so its
	// completion announces nothing and hands nothing off.
	Partial bool
	// Concat names, in order, the partial uploads a final upload concatenates (tus
	// concatenation); nil for any other upload.
	Concat []string
	Document
	// At is the creation time recorded; zero means the store's clock now. A caller
	// that sets it can describe the new upload (Created) without reading it back.
	At time.Time
}

// Document is an upload's document identity and place: its node id (a UUID, always
// set) and where it comes from. CustomMetadata is a JSON object ("" for none).
type Document struct {
	NodeID, ConnectorID, ParentID, Path, Drive string
	CustomMetadata                             string
}

// Created is the upload u describes, as Create stores it (for a caller that set At).
func (u NewUpload) Created() *Upload {
	at := time.UnixMilli(u.At.UnixMilli())
	return &Upload{
		ID: u.ID, Status: StatusActive, Bucket: u.Bucket, Key: u.Key, ChunkSize: u.ChunkSize,
		ExpectedSize: u.ExpectedSize, Total: u.Total, InstanceID: u.InstanceID, Name: u.Name, ContentType: u.ContentType,
		ClientNodeID: u.ClientNodeID, CorrelationID: u.CorrelationID, Tenant: u.Tenant, Metadata: u.Metadata,
		Document: u.Document, IfAbsent: u.IfAbsent, Direct: u.Direct, MultipartID: u.MultipartID,
		MultipartChecksummed: u.Direct && u.MultipartChecksummed, Partial: u.Partial, Concat: u.Concat,
		ReceivedChunks: []uint32{}, Created: at, Updated: at,
	}
}

// Params are an upload's immutable parameters.
type Params struct {
	ChunkSize    int64
	ExpectedSize int64
	// Total is the number of chunks known from ExpectedSize, else 0.
	Total uint32
	// Tenant owns the upload.
	Tenant string
	// Direct: its parts go straight into S3 (NewUpload.Direct); it takes no chunks.
	Direct bool
	// Final: a final upload of tus concatenation (NewUpload.Concat), whose bytes are
	// its partial uploads', appended by the request that creates it; it takes no other
	// chunks.
	Final bool
}

// Upload is an upload's state as stored.
type Upload struct {
	ID             string
	Status         Status
	Bucket, Key    string
	ChunkSize      int64
	ExpectedSize   int64
	Total          uint32
	ReceivedChunks []uint32
	ReceivedBytes  int64
	Uploaded       uint32
	UploadedBytes  int64
	MultipartID    string
	// InstanceID names the process that created the upload.
	InstanceID        string
	Size              int64
	ETag              string
	CRC32C            uint32
	Error             string
	Name, ContentType string
	ClientNodeID      string
	CorrelationID     string
	Tenant            string
	HandoffPending    bool
	Metadata          map[string]string
	// Tail is the first bytes of a chunk an HTTP append received without filling it
	// (see SaveTail); the zero Tail when there is none. It is current only while its
	// chunk has not been received.
	Tail Tail
	// IfAbsent: the object must not replace one at its key.
	IfAbsent bool
	// Direct: its parts go straight into S3 (NewUpload.Direct).
	Direct bool
	// MultipartChecksummed: its multipart upload takes parts only with their CRC32C.
	MultipartChecksummed bool
	// Partial and Concat: see NewUpload.
	Partial bool
	Concat  []string
	// ClaimedBy is the final upload that claimed a completed partial upload to
	// concatenate it ("" until one does; see uploads.Store.ClaimPartial).
	ClaimedBy string
	Document
	// DetectedContentType is the type found in the object's first bytes at completion,
	// when ContentType was empty or generic.
	DetectedContentType string
	// Chunks are the received chunks by number, with what the store holds for each.
	Chunks           []ChunkInfo
	Created, Updated time.Time
	// FirstChunk is when its first chunk was staged or first part recorded (zero before).
	FirstChunk time.Time
	Completed  time.Time
}

// EffectiveContentType is the type the upload is taken to be: the one detected in its
// first bytes when the declared one was empty or generic, else the declared one.
func (u *Upload) EffectiveContentType() string {
	if u.DetectedContentType != "" {
		return u.DetectedContentType
	}
	return u.ContentType
}

// ChunkInfo is what the store holds for one received chunk.
type ChunkInfo struct {
	N      uint32
	Size   int64
	CRC32C uint32
	// Stored: the chunk's part (or object) is in S3.
	Stored bool
}

// Tail describes an upload's tail: N is the chunk it begins, Size its bytes, CRC32C
// their checksum. The zero Tail is none.
type Tail struct {
	N      uint32
	Size   int64
	CRC32C uint32
}

func (t Tail) String() string {
	return fmt.Sprintf("%d|%d|%d", t.N, t.Size, t.CRC32C)
}

// StageResult says what staging a chunk did.
type StageResult struct {
	// Duplicate is true when the same bytes had been received before.
	Duplicate bool
	// Stored is true for a Duplicate whose part is in S3 already.
	Stored bool
	// Ready is true when the upload has all its parts and can be completed now (the
	// last chunk arrived after every part was already in S3, e.g. is_last on a
	// repeat); its completion is then indexed already.
	Ready bool
}

// What the completer works with (see uploads.Completions).

// BeginOutcome says what taking the completion guard found.
type BeginOutcome int

// Begin outcomes.
const (
	// Begun: the caller holds the guard and must finalize the object.
	Begun BeginOutcome = iota + 1
	// Finished: the upload is COMPLETED already. If HandoffPending, the caller hands it
	// off and calls HandedOff; otherwise it has left the completion index.
	Finished
	// NotReady: some part is missing, or the last chunk is unknown; the upload has left
	// the completion index (the last part's record puts it back).
	NotReady
	// Guarded: another completer holds the guard until Until; the upload is due again
	// then.
	Guarded
	// NotActive: the upload ended otherwise (Status); it has left the completion index.
	NotActive
)

// Begin is the result of Completions.Begin.
type Begin struct {
	Outcome     BeginOutcome
	Total       uint32
	MultipartID string
	// MultipartAttempts counts the attempts to create a multipart upload for it. More
	// than the recorded ids (one, or none for a one-chunk upload) means one may have
	// been left behind by a worker that died.
	MultipartAttempts int
	// MultipartChecksummed: the multipart upload is CRC32C FULL_OBJECT; its completion
	// carries the parts' and the whole object's CRC32C.
	MultipartChecksummed bool
	Bucket, Key          string
	// IfAbsent: the object must not replace one at its key.
	IfAbsent bool
	Until    time.Time
	Status   Status
	// For Finished: the upload still has to be handed off.
	HandoffPending bool
}

// Part is one recorded part.
type Part struct {
	N      uint32
	ETag   string
	CRC32C uint32
	Size   int64
	// NoCRC: the part's CRC32C is not known (a direct upload's part from a client that
	// gave none); CRC32C is 0.
	NoCRC bool
}

// Final describes a completed object.
type Final struct {
	ETag   string
	Size   int64
	CRC32C uint32
	// DetectedContentType is the type found in its first bytes, when the declared one
	// was empty or generic ("" otherwise, or when nothing was recognized).
	DetectedContentType string
	// Completed is when the upload completed, as its event says (Redis keeps
	// milliseconds, so it should be a whole millisecond); zero: the store's clock now.
	Completed time.Time
}
