package rdb

import (
	"fmt"
	"hash/crc32"
	"strconv"
)

// Every key chunkup writes starts with Prefix. This file is the whole keyspace.
const Prefix = "chunkup:"

// Per-upload keys: chunkup:up:{ID}:suffix. The hash tag puts one upload's keys in one
// Redis Cluster slot, so that one script can change them together.
func upKey(id, suffix string) string { return Prefix + "up:{" + id + "}:" + suffix }

// StateKey is an upload's state hash: status, bucket, key, chunk_size, expected_size
// (-1 unknown), total (0 until known), max_received, received, received_bytes,
// uploaded, uploaded_bytes, s3_upload_id, mpu_crc32c ("1": the multipart upload is
// CRC32C FULL_OBJECT), mpu_attempts, instance_id (the process that created it; records
// made before the document fields have it as node_id), tenant, created_ms, first_ms
// (first chunk staged or part recorded), updated_ms, completed_ms, etag, size, crc32c,
// detected_ct (content type found in the object's first bytes), if_absent ("1": the
// object must not replace one at its key), error, handoff, direct, partial, concat,
// claimed_by (the final upload that concatenates a partial one), tail.
func StateKey(id string) string { return upKey(id, "state") }

// MetaKey is an upload's metadata hash: name, content_type, client_node_id,
// correlation_id, metadata (JSON), and the document's identity and place: node_id,
// connector_id, parent_id, path, drive, custom_metadata (JSON object).
func MetaKey(id string) string { return upKey(id, "meta") }

// ReceivedKey is an upload's received hash: N → "crc:size" of the staged bytes.
func ReceivedKey(id string) string { return upKey(id, "received") }

// PartsKey is an upload's parts hash: N → "etag|crc|size" once the part is in S3.
func PartsKey(id string) string { return upKey(id, "parts") }

// LeasesKey is an upload's leases hash: N → "token|expiry_ms" of the worker uploading it.
func LeasesKey(id string) string { return upKey(id, "leases") }

// GuardKey is an upload's completion guard: "token|expiry_ms" of the completer holding
// it; it does not exist until a completer takes it.
func GuardKey(id string) string { return upKey(id, "completer") }

// OutboxKey is an upload's outbox hash: event id → event record (see outbox.Record).
// Document events go to their upload's outbox too.
func OutboxKey(id string) string { return upKey(id, "outbox") }

// DocKey is a document's hash (the document of a completed upload; same slot).
func DocKey(id string) string { return upKey(id, "doc") }

// AppendLockKey is an upload's append lock for the HTTP door: the token of the one
// request appending to it, with a lease (PX) its holder renews. Stage and DeclareSize
// under the lock check it in their scripts (a fence), so a request that lost it cannot
// write.
func AppendLockKey(id string) string { return upKey(id, "httplock") }

// TailKey holds the bytes an HTTP append received of an upload's next chunk without
// filling it (its tail): kept as durably as a staged chunk, so that a client whose
// requests are smaller than a chunk moves its offset by every byte it sent. The state
// hash's tail field says which chunk it begins ("N|size|crc32c").
func TailKey(id string) string { return upKey(id, "tail") }

// ChunkKey holds chunk N's staged bytes until its part is recorded.
func ChunkKey(id string, n uint32) string {
	return upKey(id, "chunk:"+strconv.FormatUint(uint64(n), 10))
}

// IncomingKey holds a chunk's bytes as sent, before the stage script commits them
// (renames them onto ChunkKey) or drops them; token makes each attempt's key its own.
func IncomingKey(id string, n uint32, token string) string {
	return upKey(id, "incoming:"+strconv.FormatUint(uint64(n), 10)+":"+token)
}

// ProgressChannel carries every upload's progress notices, "ID STATUS" (STATUS is
// "received", "uploaded", or the status an upload ended in), and its document's, "ID
// doc:STATUS" (STATUS the document's new status). One channel for all
// uploads, so that one subscription per process serves every watcher; on a cluster it
// is classic pub/sub (broadcast over the cluster bus), which progress's low rate
// affords, so that scripts can publish it from any slot.
const ProgressChannel = Prefix + "progress"

// IdemKey binds a tenant's client_node_id to an upload id.
func IdemKey(tenant, clientNodeID string) string {
	return Prefix + "idem:" + tenant + "/" + clientNodeID
}

// TenantUploadsKey is a tenant's uploads in progress: a sorted set whose members,
// all scored 0, are "CREATED_MS|ID" with CREATED_MS zero-padded, so that their
// lexicographic order is their creation order and a member is a stable page cursor.
// Added before the upload is created, removed after it ends; a member whose upload is
// gone is dropped when listed.
func TenantUploadsKey(tenant string) string { return Prefix + "tenant:{" + tenant + "}:uploads" }

// TenantUploadsMember is upload id's member of its tenant's uploads, created at ms.
func TenantUploadsMember(createdMs int64, id string) string {
	return fmt.Sprintf("%015d|%s", createdMs, id)
}

// NodeKey is the node index of a tenant's document node_id: "created_ms|upload id" of
// the latest upload that carries it, so a document can be named by node_id. It lives
// in a slot of its own (the upload id is what it leads to), and is written after the
// upload exists and again when the document is created, with the document's TTL.
func NodeKey(tenant, nodeID string) string {
	return Prefix + "node:" + tenant + "/" + nodeID
}

// Global indexes: sorted sets scored by when someone should look at a member (unix ms).
const (
	// PendingIndex holds "ID/N" members: staged chunks whose part is not yet recorded.
	PendingIndex = Prefix + "pending"
	// CompletionsIndex holds upload ids ready to be finalized (or handed off).
	CompletionsIndex = Prefix + "completions"
	// OutboxIndex holds upload ids whose outbox may hold events.
	OutboxIndex = Prefix + "outbox"
	// ActiveIndex holds upload ids scored by the earliest time they may expire (last
	// activity + StateTTL): a lower bound, checked against the state before expiring.
	ActiveIndex = Prefix + "active"
	// ReleasesIndex holds ended upload ids whose S3 resources may still need releasing.
	ReleasesIndex = Prefix + "releases"
)

// ChunksChannel carries "ID/N" wake-ups for workers when a chunk is staged. On a Redis
// Cluster it is split into chunkWakeShards sharded channels (ChunksShard).
const ChunksChannel = Prefix + "chunks"

// On a Redis Cluster each global index is split into indexShards sorted sets, each in
// its own slot (chunkup:pending:{pending-7}), so that no one node carries every
// chunk's index traffic; a member's shard follows from its upload id, so one upload's
// entries stay together. On a single Redis there is one shard under the plain name.
const (
	indexShards     = 16
	chunkWakeShards = 8
)

// shardOf picks upload id's shard among n.
func shardOf(id string, n int) int { return int(crc32.ChecksumIEEE([]byte(id)) % uint32(n)) }

// shardKey is shard k of a sharded global index or channel named base.
func shardKey(base string, k int) string {
	name := base[len(Prefix):]
	return base + ":{" + name + "-" + strconv.Itoa(k) + "}"
}

// ChunksShard is the sharded wake-up channel for upload id's chunks.
func ChunksShard(id string) string { return shardKey(ChunksChannel, shardOf(id, chunkWakeShards)) }

// ChunksShards are every sharded wake-up channel.
func ChunksShards() []string {
	chs := make([]string, chunkWakeShards)
	for k := range chs {
		chs[k] = shardKey(ChunksChannel, k)
	}
	return chs
}

// The OCR job queue (asynq's model: a pending list, an active list, a lease sorted
// set, a delayed sorted set, a dead-letter sorted set). Every key carries the hash tag
// {ocr}, so the queue lives in one slot and each script touches one slot.
const (
	ocrPrefix = Prefix + "{ocr}:"
	// OCRPending is a list of job ids ready to run: pushed on the left, fetched from the
	// right with BLMOVE into OCRActive (a reclaimed job is pushed on the right, to run
	// next).
	OCRPending = ocrPrefix + "pending"
	// OCRActive is a list of job ids being worked on.
	OCRActive = ocrPrefix + "active"
	// OCRLease is a sorted set of active job ids scored by lease expiry (unix ms).
	OCRLease = ocrPrefix + "lease"
	// OCRDelayed is a sorted set of job ids waiting for a retry, scored by due time.
	OCRDelayed = ocrPrefix + "delayed"
	// OCRDead is a sorted set of dead-lettered job ids scored by when they died. Jobs
	// leave it only when requeued (or deleted by hand).
	OCRDead = ocrPrefix + "dead"
	// OCRFence is the counter fencing tokens are taken from: every lease gets a larger
	// token than any before, so a stale worker's writes can be refused.
	OCRFence = ocrPrefix + "fence"
	// OCRProcessing is a sorted set of document ids whose status may be processing,
	// scored by when they entered it, for start-up recovery: added before the
	// transition, removed after the document leaves processing.
	OCRProcessing = ocrPrefix + "processing"
	// OCRWorkers is a hash of the processes running OCR workers: instance id → their
	// last report (JSON: engine, health, jobs running), rewritten every few seconds
	// and dropped at a clean stop; readers skip stale reports.
	OCRWorkers = ocrPrefix + "workers"
)

// OCRJobKey is a job's hash: doc, corr, bucket, key, ct, tenant, force, attempts
// (failed attempts), reclaims (times taken back from a worker that died), enqueued_ms,
// token, started_ms, reason, dead_ms.
func OCRJobKey(id string) string { return ocrPrefix + "job:" + id }

// OCRJobErrorsKey is a job's error history: "unix_ms|attempt|message" entries.
func OCRJobErrorsKey(id string) string { return ocrPrefix + "job:" + id + ":errors" }

// OCRDedupeKey holds the id of a document's job: one job per document unless forced.
func OCRDedupeKey(docID string) string { return ocrPrefix + "doc:" + docID }
