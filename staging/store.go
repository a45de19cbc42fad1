package staging

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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

// Config tunes the store. Zero values mean the documented defaults.
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

// Store reads and changes upload state in Redis.
type Store struct {
	rdb       redis.UniversalClient
	chunkTTL  time.Duration
	stateTTL  time.Duration
	retention time.Duration
	now       func() time.Time
	// cluster is true on a Redis Cluster: global indexes are split into shards, and
	// pub/sub is sharded (SPUBLISH, SSUBSCRIBE).
	cluster bool
	shards  int
	// minReplicas and replicaTimeout: see Config.
	minReplicas    int
	replicaTimeout time.Duration
}

// New returns a Store on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{rdb: rdb, chunkTTL: cfg.ChunkTTL, stateTTL: cfg.StateTTL, retention: cfg.Retention, now: cfg.Now}
	if s.chunkTTL == 0 {
		s.chunkTTL = time.Hour
	}
	if s.stateTTL == 0 {
		s.stateTTL = 24 * time.Hour
	}
	if s.retention == 0 {
		s.retention = 24 * time.Hour
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.minReplicas, s.replicaTimeout = cfg.MinReplicas, cfg.ReplicaTimeout
	if s.replicaTimeout == 0 {
		s.replicaTimeout = time.Second
	}
	rdb.AddHook(classifyHook{})
	_, s.cluster = rdb.(*redis.ClusterClient)
	s.shards = 1
	if s.cluster {
		s.shards = indexShards
	}
	return s, nil
}

// script is the variant of a publishing script for this Redis (see pubScript).
func (s *Store) script(p pubScript) *redis.Script {
	if s.cluster {
		return p.sharded
	}
	return p.plain
}

// keysTTL is the Redis TTL of an active upload's keys, refreshed on activity.
func (s *Store) keysTTL() int64 { return (s.stateTTL + s.retention).Milliseconds() }

// StateTTL is how long an upload may stay idle before it expires.
func (s *Store) StateTTL() time.Duration { return s.stateTTL }

// Redis returns the client, for pub/sub subscribers.
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// Now returns the store's clock reading.
func (s *Store) Now() time.Time { return s.now() }

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random upload id: 26 lowercase base32 characters.
func NewID() string { return randomToken(16) }

// NewToken returns a random lease token.
func NewToken() string { return randomToken(10) }

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux.
	return idEncoding.EncodeToString(b)
}

// ValidID reports whether id has the form of an id made by NewID.
func ValidID(id string) bool {
	if len(id) != 26 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// NewUpload describes an upload to create.
type NewUpload struct {
	ID, Bucket, Key string
	ChunkSize       int64
	// ExpectedSize is -1 when unknown.
	ExpectedSize int64
	// Total is the number of chunks when ExpectedSize is known, else 0.
	Total                           uint32
	NodeID                          string
	Name, ContentType, ClientNodeID string
	CorrelationID, Tenant           string
	Metadata                        map[string]string
}

// ClaimClientNodeID binds tenant's clientNodeID to id unless it is bound already, and
// returns the id it is bound to. Callers create the upload with the returned id, so a
// retried create finds the same upload even if the first attempt died in between.
func (s *Store) ClaimClientNodeID(ctx context.Context, tenant, clientNodeID, id string) (string, error) {
	key := idemKey(tenant + "/" + clientNodeID)
	ok, err := s.rdb.SetNX(ctx, key, id, s.stateTTL).Result()
	if err != nil {
		return "", err
	}
	if ok {
		return id, nil
	}
	return s.rdb.Get(ctx, key).Result()
}

// Create stores a new upload. It reports false if the id exists already.
func (s *Store) Create(ctx context.Context, u NewUpload) (bool, error) {
	now := strconv.FormatInt(s.nowMs(), 10)
	state := []any{
		"status", string(StatusActive), "bucket", u.Bucket, "key", u.Key,
		"chunk_size", u.ChunkSize, "expected_size", u.ExpectedSize, "total", u.Total,
		"max_received", 0, "received", 0, "received_bytes", 0, "uploaded", 0,
		"uploaded_bytes", 0, "s3_upload_id", "", "node_id", u.NodeID, "tenant", u.Tenant,
		"created_ms", now, "updated_ms", now,
	}
	args := []any{s.keysTTL(), len(state) / 2}
	args = append(args, state...)
	meta := []any{"name", u.Name, "content_type", u.ContentType, "client_node_id", u.ClientNodeID,
		"correlation_id", u.CorrelationID}
	if len(u.Metadata) > 0 {
		b, err := json.Marshal(u.Metadata)
		if err != nil {
			return false, err
		}
		meta = append(meta, "metadata", string(b))
	}
	args = append(args, meta...)
	// The active index is a hint added first: a crash before the script leaves an entry
	// that cleanup drops when it finds no upload behind it.
	if err := s.rdb.ZAddNX(ctx, s.ix(activeKey, u.ID), redis.Z{Score: float64(s.nowMs() + s.stateTTL.Milliseconds()), Member: u.ID}).Err(); err != nil {
		return false, err
	}
	res, err := createScript.Run(ctx, s.rdb, []string{stateKey(u.ID), metaKey(u.ID)}, args...).StringSlice()
	if err != nil {
		return false, err
	}
	return res[0] == "ok", nil
}

// Params are an upload's immutable parameters.
type Params struct {
	ChunkSize    int64
	ExpectedSize int64
	// Total is the number of chunks known from ExpectedSize, else 0.
	Total uint32
	// Tenant owns the upload.
	Tenant string
}

// Params reads an upload's immutable parameters.
func (s *Store) Params(ctx context.Context, id string) (Params, error) {
	v, err := s.rdb.HMGet(ctx, stateKey(id), "chunk_size", "expected_size", "tenant").Result()
	if err != nil {
		return Params{}, err
	}
	if v[0] == nil {
		return Params{}, ErrNotFound
	}
	var p Params
	p.ChunkSize, _ = strconv.ParseInt(v[0].(string), 10, 64)
	p.ExpectedSize, _ = strconv.ParseInt(v[1].(string), 10, 64)
	p.Tenant = toStr(v[2])
	if p.ExpectedSize >= 0 {
		p.Total = TotalChunks(p.ExpectedSize, p.ChunkSize)
	}
	return p, nil
}

// TotalChunks is the number of chunks of a file of size bytes: at least one, so that an
// empty file is one empty chunk.
func TotalChunks(size, chunkSize int64) uint32 {
	if size <= 0 {
		return 1
	}
	return uint32((size + chunkSize - 1) / chunkSize)
}

// StageResult says what staging a chunk did.
type StageResult struct {
	// Duplicate is true when the same bytes had been received before.
	Duplicate bool
	// Ready is true when the upload has all its parts and can be completed now.
	Ready bool
}

// Stage stores a chunk's bytes and records it as received, atomically, in one round
// trip. The chunk is first indexed as pending (so a sweeper finds it even if every
// wake-up is lost), its bytes are written under a fresh key, and a script then commits
// them or, for a repeat or a rejected chunk, deletes them.
func (s *Store) Stage(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (StageResult, error) {
	ref := ChunkRef{UploadID: id, N: n}
	now := s.nowMs()
	incoming := incomingKey(id, n, NewToken())
	lastArg := "0"
	if last {
		lastArg = "1"
	}
	keys := []string{stateKey(id), receivedKey(id), partsKey(id), chunkKey(id, n), incoming, leasesKey(id), metaKey(id)}
	wake := ChunksChannel
	if s.cluster {
		wake = "" // published below, on the sharded channel
	}
	args := []any{n, crc, len(data), lastArg, now, s.keysTTL(), wake, ref.String(), ProgressChannel(id)}
	var set *redis.StatusCmd
	var index *redis.IntCmd
	var eval *redis.Cmd
	var wait *redis.Cmd
	stage := func(p redis.Pipeliner) error {
		set = p.Set(ctx, incoming, data, s.chunkTTL)
		// EVAL rather than EVALSHA: a pipeline cannot fall back on NOSCRIPT, and the
		// script's text is tiny next to the chunk.
		eval = s.script(stageScript).Eval(ctx, p, keys, args...)
		if s.minReplicas > 0 {
			// The script writes even for a repeat, so WAIT also covers a first attempt
			// whose WAIT timed out.
			wait = p.Do(ctx, "WAIT", s.minReplicas, s.replicaTimeout.Milliseconds())
		}
		return nil
	}
	pending := redis.Z{Score: float64(now + graceMs), Member: ref.String()}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok && s.minReplicas > 0 {
		// WAIT counts the replicas that have this connection's writes: the chunk's
		// writes and the WAIT go to the upload's master on one connection (the
		// pending entry, in another slot, first).
		if err = s.rdb.ZAddNX(ctx, s.ix(pendingKey, id), pending).Err(); err == nil {
			var node *redis.Client
			if node, err = cc.MasterForKey(ctx, stateKey(id)); err == nil {
				_, err = node.Pipelined(ctx, stage)
			}
		}
		err = classify(err) // a node's client has no hook of its own
	} else {
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			index = p.ZAddNX(ctx, s.ix(pendingKey, id), pending)
			return stage(p)
		})
	}
	if eval == nil || eval.Err() != nil && set.Err() == nil {
		// The pipeline did not run, or the script failed on its own.
		return StageResult{}, orErr(classify(evalErr(eval)), err)
	}
	if err := set.Err(); err != nil {
		// The bytes were refused (Redis out of memory, say): the script found no
		// incoming key and changed nothing.
		return StageResult{}, classify(err)
	}
	res, err := eval.Slice()
	if err != nil {
		return StageResult{}, classify(err)
	}
	code := res[0].(string)
	if index != nil && index.Err() != nil && (code == "ok" || code == "dup") {
		// Staged, but not indexed as pending: refuse the acknowledgement, so that the
		// client sends the chunk again and its repeat adds the entry.
		return StageResult{}, classify(index.Err())
	}
	if wait != nil && (code == "ok" || code == "dup") {
		if n, err := wait.Int64(); err != nil || n < int64(s.minReplicas) {
			return StageResult{}, fmt.Errorf("%w (%d of %d replicas confirmed within %s)", ErrNotReplicated, n, s.minReplicas, s.replicaTimeout)
		}
	}
	if code == "ok" && s.cluster {
		// A wake-up lost here is found by the sweep: the chunk is pending already.
		_ = s.rdb.SPublish(ctx, chunksShard(id), ref.String()).Err()
	}
	switch code {
	case "ok", "dup":
		return StageResult{Duplicate: code == "dup", Ready: res[1].(int64) == 1}, nil
	case "notfound":
		return StageResult{}, ErrNotFound
	case "state":
		return StageResult{}, &StateError{Status: Status(res[1].(string))}
	case "beyond":
		return StageResult{}, &OutOfRangeError{N: n, Total: toU32(res[1])}
	case "last":
		return StageResult{}, &LastChunkError{N: n, Last: toU32(res[1])}
	case "lastbefore":
		return StageResult{}, &LastChunkError{N: n, Max: toU32(res[1])}
	case "recorded":
		return StageResult{}, &PartRecordedError{N: n}
	case "busy":
		return StageResult{}, ErrChunkBusy
	case "nobytes":
		return StageResult{}, fmt.Errorf("%w: chunk %d's bytes did not reach Redis", ErrUnavailable, n)
	}
	return StageResult{}, fmt.Errorf("staging: unexpected stage result %q", code)
}

func evalErr(c *redis.Cmd) error {
	if c == nil {
		return nil
	}
	return c.Err()
}

// orErr returns the first error that is not nil.
func orErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// graceMs is how long after staging a chunk the sweeper leaves it to the pub/sub
// wake-up before offering it itself.
const graceMs = 2000

func toU32(v any) uint32 {
	switch x := v.(type) {
	case int64:
		return uint32(x)
	case string:
		n, _ := strconv.ParseUint(x, 10, 32)
		return uint32(n)
	}
	return 0
}

func toI64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func toStr(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// Upload is an upload's state as stored.
type Upload struct {
	ID                string
	Status            Status
	Bucket, Key       string
	ChunkSize         int64
	ExpectedSize      int64
	Total             uint32
	ReceivedChunks    []uint32
	ReceivedBytes     int64
	Uploaded          uint32
	UploadedBytes     int64
	MultipartID       string
	NodeID            string
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
	// Chunks are the received chunks by number, with what the server holds for each.
	Chunks           []ChunkInfo
	Created, Updated time.Time
	Completed        time.Time
}

// ChunkInfo is what the store holds for one received chunk.
type ChunkInfo struct {
	N      uint32
	Size   int64
	CRC32C uint32
	// Stored: the chunk's part (or object) is in S3.
	Stored bool
}

// Get reads an upload in one round trip.
func (s *Store) Get(ctx context.Context, id string) (*Upload, error) {
	var st, meta, rec *redis.MapStringStringCmd
	var parts *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		st = p.HGetAll(ctx, stateKey(id))
		meta = p.HGetAll(ctx, metaKey(id))
		rec = p.HGetAll(ctx, receivedKey(id))
		parts = p.HKeys(ctx, partsKey(id))
		return nil
	})
	if err != nil {
		return nil, err
	}
	h := st.Val()
	if len(h) == 0 {
		return nil, ErrNotFound
	}
	m := meta.Val()
	u := &Upload{
		ID: id, Status: Status(h["status"]), Bucket: h["bucket"], Key: h["key"],
		ChunkSize: toI64(h["chunk_size"]), ExpectedSize: toI64(h["expected_size"]),
		Total: toU32(h["total"]), ReceivedBytes: toI64(h["received_bytes"]),
		Uploaded: toU32(h["uploaded"]), UploadedBytes: toI64(h["uploaded_bytes"]),
		MultipartID: h["s3_upload_id"], NodeID: h["node_id"], Size: toI64(h["size"]),
		ETag: h["etag"], CRC32C: toU32(h["crc32c"]), Error: h["error"],
		Name: m["name"], ContentType: m["content_type"], ClientNodeID: m["client_node_id"],
		CorrelationID: m["correlation_id"], Tenant: h["tenant"], HandoffPending: h["handoff"] == "pending",
		Created: msTime(h["created_ms"]), Updated: msTime(h["updated_ms"]),
		Completed: msTime(h["completed_ms"]),
	}
	if md := m["metadata"]; md != "" {
		if err := json.Unmarshal([]byte(md), &u.Metadata); err != nil {
			return nil, fmt.Errorf("staging: upload %s metadata: %w", id, err)
		}
	}
	stored := make(map[string]bool, len(parts.Val()))
	for _, k := range parts.Val() {
		stored[k] = true
	}
	for k, v := range rec.Val() {
		c := ChunkInfo{N: toU32(k), Stored: stored[k]}
		c.CRC32C, c.Size, _ = parseCRCSize(v)
		u.Chunks = append(u.Chunks, c)
	}
	slices.SortFunc(u.Chunks, func(a, b ChunkInfo) int { return cmp.Compare(a.N, b.N) })
	u.ReceivedChunks = make([]uint32, len(u.Chunks))
	for i, c := range u.Chunks {
		u.ReceivedChunks[i] = c.N
	}
	return u, nil
}

func msTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	return time.UnixMilli(toI64(s))
}

// EndRequest asks to end an upload other than by completing it.
type EndRequest struct {
	ID     string
	Status Status // FAILED, ABORTED or EXPIRED
	Reason string
	// Completer, a completer's guard token, allows it while the upload is COMPLETING,
	// but only if that completer still holds the guard (or the guard has expired): a
	// completer giving up must not end an upload another one is completing.
	Completer string
	// Event is recorded in the outbox in the same atomic step.
	Event OutboxEvent
	// IdleSince, when set, ends the upload only if its last activity is not after it
	// (expiry); otherwise End returns an *ActiveError.
	IdleSince time.Time
}

// ActiveError means an upload that was to expire has been active since.
type ActiveError struct{ LastActivity time.Time }

func (e *ActiveError) Error() string { return "upload active since " + e.LastActivity.String() }

// End moves an upload to FAILED, ABORTED or EXPIRED and records its event, atomically.
// It returns the upload's S3 coordinates so the caller can abort the multipart upload.
func (s *Store) End(ctx context.Context, r EndRequest) (EndResult, error) {
	from := r.Completer
	idle := int64(0)
	if !r.IdleSince.IsZero() {
		idle = r.IdleSince.UnixMilli()
	}
	if err := s.rdb.ZAddNX(ctx, s.ix(outboxIndexKey, r.ID), redis.Z{Score: float64(s.nowMs()), Member: r.ID}).Err(); err != nil {
		return EndResult{}, err
	}
	res, err := s.script(endScript).Run(ctx, s.rdb, s.terminalKeys(r.ID),
		string(r.Status), r.Reason, s.nowMs(), from, r.Event.ID, r.Event.record(),
		s.retention.Milliseconds(), ProgressChannel(r.ID), idle).Slice()
	if err != nil {
		return EndResult{}, err
	}
	switch res[0].(string) {
	case "ok":
		s.rdb.ZRem(ctx, s.ix(activeKey, r.ID), r.ID) // a hint; a stale entry is dropped when visited
		return EndResult{MultipartID: toStr(res[1]), Bucket: toStr(res[2]), Key: toStr(res[3]),
			ObjectWritten: toI64(res[4]) == 1}, s.indexOutbox(ctx, r.ID)
	case "already":
		return EndResult{}, &StateError{Status: Status(toStr(res[1]))}
	case "completing":
		return EndResult{}, ErrCompleting
	case "active":
		return EndResult{}, &ActiveError{LastActivity: time.UnixMilli(toI64(res[1]))}
	default:
		return EndResult{}, ErrNotFound
	}
}

// terminalKeys are the keys a terminal transition touches: state, guard, outbox, and
// the keys whose TTL becomes the retention.
func (s *Store) terminalKeys(id string) []string {
	return []string{stateKey(id), guardKey(id), outboxKey(id), metaKey(id), receivedKey(id), partsKey(id), leasesKey(id)}
}

// EndResult carries what the caller needs to release an ended upload's S3 resources.
type EndResult struct {
	MultipartID, Bucket, Key string
	// ObjectWritten: a one-chunk upload's object was already put at Key (its single
	// PutObject happened before the upload ended), so it must be deleted.
	ObjectWritten bool
}

// DropChunks deletes the staged bytes and leases of an upload that has ended.
func (s *Store) DropChunks(ctx context.Context, id string) error {
	nums, err := s.rdb.HKeys(ctx, receivedKey(id)).Result()
	if err != nil {
		return err
	}
	keys := []string{leasesKey(id)}
	for _, k := range nums {
		keys = append(keys, chunkKey(id, toU32(k)))
	}
	return s.rdb.Del(ctx, keys...).Err()
}

// parseCRCSize parses a received-hash value "crc:size".
func parseCRCSize(v string) (crc uint32, size int64, ok bool) {
	c, sz, found := strings.Cut(v, ":")
	if !found {
		return 0, 0, false
	}
	cn, err1 := strconv.ParseUint(c, 10, 32)
	sn, err2 := strconv.ParseInt(sz, 10, 64)
	return uint32(cn), sn, err1 == nil && err2 == nil
}
