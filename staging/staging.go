// Package staging is the vocabulary of chunkup's Redis keyspace: the states an upload
// goes through, the names of its chunks, the errors the stores return, and the
// settings they share. The stores themselves live in its subpackages, one per part of
// the keyspace:
//
//   - staging/uploads: an upload's state, its staged chunks and their leases, the parts
//     recorded, the completion guard, and the indexes that find work (pending chunks,
//     completions, active uploads, releases);
//   - staging/outbox: the events waiting to be published, and the progress channels
//     watchers follow;
//   - staging/documents: the OCR status of completed images and PDFs;
//   - staging/ocrqueue: the OCR job queue.
//
// Key names, the shard layout, the script runner and the classification of Redis'
// errors are in staging/internal/rdb, which only this tree can import: no other package
// knows a key name. Every per-upload key carries the upload id as a hash tag ({ID}), so
// one upload's keys share a Redis Cluster slot and one script can change them
// atomically. Global indexes are hints kept idempotently (written before the state
// they point at, removed after the work is done); the stores keep that order
// themselves, so callers do not.
package staging

import (
	"errors"
	"strconv"
	"time"
)

// Status is an upload's state as stored.
type Status string

// The upload states.
const (
	StatusActive     Status = "ACTIVE"
	StatusCompleting Status = "COMPLETING"
	StatusCompleted  Status = "COMPLETED"
	StatusFailed     Status = "FAILED"
	StatusAborted    Status = "ABORTED"
	StatusExpired    Status = "EXPIRED"
)

// Terminal reports whether no further change can happen.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusAborted || s == StatusExpired
}

// ChunkRef names one chunk of one upload.
type ChunkRef struct {
	UploadID string
	N        uint32
}

func (c ChunkRef) String() string { return c.UploadID + "/" + strconv.FormatUint(uint64(c.N), 10) }

// ParseChunkRef parses the "ID/N" form used in indexes and wake-ups.
func ParseChunkRef(s string) (ChunkRef, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			n, err := strconv.ParseUint(s[i+1:], 10, 32)
			if err != nil || n == 0 || i == 0 {
				return ChunkRef{}, false
			}
			return ChunkRef{UploadID: s[:i], N: uint32(n)}, true
		}
	}
	return ChunkRef{}, false
}

// TotalChunks is the number of chunks of a file of size bytes: at least one, so that an
// empty file is one empty chunk.
func TotalChunks(size, chunkSize int64) uint32 {
	if size <= 0 {
		return 1
	}
	return uint32((size + chunkSize - 1) / chunkSize)
}

// ChunkLen is the length of chunk n of an upload of size bytes (size >= 0) in chunks of
// chunkSize: chunkSize for every chunk but the last, which holds the rest.
func ChunkLen(n uint32, size, chunkSize int64) int64 {
	if n < TotalChunks(size, chunkSize) {
		return chunkSize
	}
	return size - int64(n-1)*chunkSize
}

// Config tunes the stores. Zero values mean the documented defaults.
type Config struct {
	// ChunkTTL bounds how long staged bytes live in Redis. Zero means 1 h.
	ChunkTTL time.Duration
	// StateTTL is how long an upload may stay idle (no chunk received or uploaded)
	// before cleanup expires it. Zero means 24 h.
	StateTTL time.Duration
	// Retention is how long an ended upload's state stays readable (GetUpload reports
	// COMPLETED, FAILED, ABORTED or EXPIRED) before Redis drops its keys. Zero means 24 h.
	// Active uploads' keys carry StateTTL+Retention as a safety net should cleanup never run.
	Retention time.Duration
	// MinReplicas, when above zero, is how many Redis replicas must confirm a staged
	// chunk (WAIT) before it is acknowledged, so that a failover cannot lose an
	// acknowledged chunk. Zero means none: Redis replicates asynchronously, and a master
	// that dies may take its last writes with it (docs/scale-out.md).
	MinReplicas int
	// ReplicaTimeout bounds that wait; a chunk not confirmed in time is refused with
	// ErrNotReplicated. Zero means 1 s.
	ReplicaTimeout time.Duration
	// MaxActivePerTenant bounds the uploads one tenant may have in progress (ACTIVE or
	// COMPLETING) on the whole deployment, counted in the tenant's list of uploads;
	// creating one more is ErrTooManyUploads. Zero or negative means no bound (chunkup
	// serve and dev set upload.DefaultMaxActivePerTenant unless told otherwise).
	MaxActivePerTenant int
	// Now is the clock. Nil means time.Now. Leases and due times use it, so tests can
	// move time without sleeping.
	Now func() time.Time
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.MinReplicas < 0 || c.ReplicaTimeout < 0 {
		return errors.New("staging: replica settings must not be negative")
	}
	if c.ChunkTTL < 0 || c.StateTTL < 0 || c.Retention < 0 {
		return errors.New("staging: TTLs must not be negative")
	}
	if c.ChunkTTL > 0 && c.ChunkTTL < time.Second || c.StateTTL > 0 && c.StateTTL < time.Second ||
		c.Retention > 0 && c.Retention < time.Second {
		return errors.New("staging: TTLs must be at least 1s")
	}
	return nil
}

// WithDefaults returns c with its zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	if c.ChunkTTL == 0 {
		c.ChunkTTL = time.Hour
	}
	if c.StateTTL == 0 {
		c.StateTTL = 24 * time.Hour
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// OutboxEvent is an event waiting in an upload's outbox to be published. Its ID stays
// the same however often it is published, so consumers can deduplicate.
type OutboxEvent struct {
	ID            string
	Type          string // e.g. chunkup.v1.UploadCompleted
	CorrelationID string
	UploadID      string
	Payload       []byte
	// Created is when the event was recorded (from the record, for outbox age).
	Created time.Time
}

// Subscription delivers the payloads of pub/sub notices on C until Close. A notice is
// a wake-up, never the only record of anything: a lost one costs latency.
type Subscription struct {
	C     <-chan string
	close func() error
}

// NewSubscription returns a Subscription reading c, ended by closeFn.
func NewSubscription(c <-chan string, closeFn func() error) *Subscription {
	return &Subscription{C: c, close: closeFn}
}

// Close ends the subscription; C is closed once its last notices are delivered or
// dropped.
func (s *Subscription) Close() error { return s.close() }
