// Package staging owns chunkup's Redis keyspace: key names, the Lua scripts that move an
// upload from one state to the next, and the small global indexes that let workers,
// completers and sweepers find work without scanning. No other package knows a key name.
//
// Every per-upload key carries the upload id as a hash tag ({ID}), so one upload's keys
// share a Redis Cluster slot and one script can change them atomically. Global indexes
// live in other slots; they are hints kept idempotently (added before the state change
// they point at, removed after the work is done), so a crash leaves at worst an entry
// that leads to nothing and is dropped when visited.
package staging

import (
	"hash/crc32"
	"strconv"
)

const prefix = "chunkup:"

// Global keys and channels.
const (
	// pendingKey is a sorted set of "ID/N" members (staged chunks whose part is not yet
	// recorded) scored by the unix-ms time at which a sweeper should (re-)offer them.
	pendingKey = prefix + "pending"
	// completionsKey is a sorted set of upload ids ready to be finalized, scored like
	// pendingKey.
	completionsKey = prefix + "completions"
	// outboxIndexKey is a sorted set of upload ids whose outbox may hold events, scored
	// by when a publisher should look.
	outboxIndexKey = prefix + "outbox"
	// activeKey is a sorted set of upload ids scored by the earliest time they may
	// expire (last activity + StateTTL). A lower bound: cleanup checks the real last
	// activity before expiring.
	activeKey = prefix + "active"
	// releaseKey is a sorted set of ended upload ids whose S3 resources (a multipart
	// upload, a one-chunk object) may still need releasing, scored by the next attempt.
	releaseKey = prefix + "releases"
	// ChunksChannel carries "ID/N" wake-ups for workers when a chunk is staged. On a
	// Redis Cluster it is split into chunkWakeShards sharded channels (chunksShard).
	ChunksChannel = prefix + "chunks"
)

// On a Redis Cluster each global index is split into indexShards sorted sets, each in
// its own slot (chunkup:pending:{pending-7}), so that no one slot, and so no one node,
// carries every chunk's index traffic; a member's shard follows from its upload id, so
// one upload's entries stay together. Sweeps read every shard. On a single Redis there
// is one shard under the plain name (chunkup:pending), as before clusters were
// supported. Chunk wake-ups go out on chunkWakeShards sharded channels; each worker
// process subscribes to all of them (one connection each).
const (
	indexShards     = 16
	chunkWakeShards = 8
)

// shardOf picks upload id's shard among n.
func shardOf(id string, n int) int { return int(crc32.ChecksumIEEE([]byte(id)) % uint32(n)) }

// shardKey is shard k of a sharded global index or channel named base.
func shardKey(base string, k int) string {
	name := base[len(prefix):]
	return base + ":{" + name + "-" + strconv.Itoa(k) + "}"
}

// chunksShard is the sharded wake-up channel for upload id's chunks.
func chunksShard(id string) string { return shardKey(ChunksChannel, shardOf(id, chunkWakeShards)) }

// chunksShards are every sharded wake-up channel.
func chunksShards() []string {
	chs := make([]string, chunkWakeShards)
	for k := range chs {
		chs[k] = shardKey(ChunksChannel, k)
	}
	return chs
}

func idemKey(clientNodeID string) string { return prefix + "idem:" + clientNodeID }

// upKey builds per-upload keys: chunkup:up:{ID}:suffix.
func upKey(id, suffix string) string { return prefix + "up:{" + id + "}:" + suffix }

func stateKey(id string) string    { return upKey(id, "state") }
func metaKey(id string) string     { return upKey(id, "meta") }
func receivedKey(id string) string { return upKey(id, "received") }
func partsKey(id string) string    { return upKey(id, "parts") }
func leasesKey(id string) string   { return upKey(id, "leases") }
func guardKey(id string) string    { return upKey(id, "completer") }
func outboxKey(id string) string   { return upKey(id, "outbox") }
func chunkKey(id string, n uint32) string {
	return upKey(id, "chunk:"+strconv.FormatUint(uint64(n), 10))
}
func incomingKey(id string, n uint32, token string) string {
	return upKey(id, "incoming:"+strconv.FormatUint(uint64(n), 10)+":"+token)
}

// ProgressChannel is the pub/sub channel on which an upload's progress is announced.
func ProgressChannel(id string) string { return upKey(id, "progress") }

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
