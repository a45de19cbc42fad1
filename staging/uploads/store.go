// Package uploads stores chunkup's uploads in Redis: each upload's state and metadata,
// its staged chunks and the leases workers hold on them, the parts recorded in S3, the
// completion guard, and the global indexes that let workers, completers and cleanup
// find work without scanning (pending chunks, completions, active uploads, releases).
//
// A Store has three views for the roles that work on uploads, each keeping the order
// rules of its indexes itself (an entry is written before the state it points at and
// removed after the work): Chunks for workers, Completions for completers, Ends for
// ending, expiring and recovering uploads.
package uploads

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/notify"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/chunkup/chunkup/staging/outbox"
)

// Store reads and changes uploads.
type Store struct {
	c      *rdb.Conn
	outbox *outbox.Outbox
	hub    *notify.Hub

	pending     *rdb.Index // "ID/N": staged chunks whose part is not recorded
	completions *rdb.Index // upload ids ready to be finalized or handed off
	active      *rdb.Index // upload ids by earliest expiry
	releases    *rdb.Index // ended upload ids whose S3 resources may need releasing
}

// New returns the Store on client. It records events through ob; hub (may be nil)
// hears when an upload becomes ready to complete.
func New(client redis.UniversalClient, cfg staging.Config, ob *outbox.Outbox, hub *notify.Hub) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := rdb.Open(client, cfg)
	return &Store{
		c: c, outbox: ob, hub: hub,
		pending:     rdb.NewIndex(c, rdb.PendingIndex),
		completions: rdb.NewIndex(c, rdb.CompletionsIndex),
		active:      rdb.NewIndex(c, rdb.ActiveIndex),
		releases:    rdb.NewIndex(c, rdb.ReleasesIndex),
	}, nil
}

// Chunks is the workers' view.
func (s *Store) Chunks() *Chunks { return &Chunks{s} }

// Completions is the completers' view.
func (s *Store) Completions() *Completions { return &Completions{s} }

// Ends is the view for ending, expiring and recovering uploads.
func (s *Store) Ends() *Ends { return &Ends{s} }

// Now returns the store's clock reading.
func (s *Store) Now() time.Time { return s.c.Now() }

// StateTTL is how long an upload may stay idle before it expires.
func (s *Store) StateTTL() time.Duration { return s.c.Cfg.StateTTL }

// Reserve readies a new upload id of tenant, created at at, in one round trip: it adds
// its hints (the active index and the tenant's list, which lead to nothing until the
// upload exists and are dropped when visited), and, when clientNodeID is set, binds it
// to id unless it is bound already. It returns the id clientNodeID is bound to (id when
// it was free, or when clientNodeID is empty). Callers create the upload with the
// returned id, so a retried create finds the same upload even if the first attempt died
// in between: with CreateReserved when it is id, else with Create.
func (s *Store) Reserve(ctx context.Context, tenant, clientNodeID, id string, at time.Time) (string, error) {
	var claim *redis.Cmd
	var h hints
	_, _ = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		if clientNodeID != "" {
			// NX with GET (Redis 7): the id it is bound to comes back in the same reply.
			claim = p.Do(ctx, "SET", rdb.IdemKey(tenant, clientNodeID), id, "NX", "GET", "PX", s.c.Cfg.StateTTL.Milliseconds())
		}
		h = s.hintIn(ctx, p, tenant, id, at)
		return nil
	})
	bound := id
	if claim != nil {
		switch v, err := claim.Text(); {
		case errors.Is(err, redis.Nil): // bound now
		case err != nil:
			return "", err
		default:
			// Bound before: the hints were for nothing (and the create it retries was
			// counted in the tenant's list when it was made).
			s.unhint(ctx, id)
			return v, nil
		}
	}
	if err := s.checkHints(ctx, tenant, id, at, h); err != nil {
		return "", err
	}
	return bound, nil
}

// hints are the replies to hintIn's commands.
type hints struct {
	active *redis.IntCmd
	tenant redis.Cmder
}

// hintIn queues the hints of upload id in pipeline p: the active index, and the
// tenant's list, which is also what Config.MaxActivePerTenant counts.
func (s *Store) hintIn(ctx context.Context, p redis.Pipeliner, tenant, id string, at time.Time) hints {
	h := hints{active: s.active.AddIn(ctx, p, id, id, at.Add(s.c.Cfg.StateTTL))}
	member := rdb.TenantUploadsMember(at.UnixMilli(), id)
	if s.c.Cfg.MaxActivePerTenant > 0 {
		h.tenant = tenantAddScript.Eval(ctx, s.c, p, []string{rdb.TenantUploadsKey(tenant)}, member, s.c.Cfg.MaxActivePerTenant)
	} else {
		h.tenant = p.ZAddNX(ctx, rdb.TenantUploadsKey(tenant), redis.Z{Member: member})
	}
	return h
}

// checkHints returns the first error of hintIn's replies. Over the tenant's bound it
// drops the tenant's entries that lead to no upload in progress (a crash's leftovers,
// a create that failed), and tries once more before it gives ErrTooManyUploads.
func (s *Store) checkHints(ctx context.Context, tenant, id string, at time.Time, h hints) error {
	if err := h.active.Err(); err != nil {
		return err
	}
	if err := h.tenant.Err(); err != nil {
		return err
	}
	c, ok := h.tenant.(*redis.Cmd)
	if !ok {
		return nil
	}
	if code, err := c.Int(); err != nil || code == tenantAdded {
		return err
	}
	if _, err := s.Get(ctx, id); err == nil {
		return nil // a create retried: the upload exists, and is counted
	}
	if dropped, err := s.pruneTenant(ctx, tenant, 64); err != nil || dropped == 0 {
		s.unhint(ctx, id)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w (%d)", staging.ErrTooManyUploads, s.c.Cfg.MaxActivePerTenant)
	}
	code, err := tenantAddScript.Run(ctx, s.c, []string{rdb.TenantUploadsKey(tenant)}, rdb.TenantUploadsMember(at.UnixMilli(), id), s.c.Cfg.MaxActivePerTenant).Int()
	if err == nil && code != tenantAdded {
		s.unhint(ctx, id)
		return fmt.Errorf("%w (%d)", staging.ErrTooManyUploads, s.c.Cfg.MaxActivePerTenant)
	}
	return err
}

// unhint drops the active index hint of an upload that will not be created (a hint:
// one left behind is dropped when visited).
func (s *Store) unhint(ctx context.Context, id string) {
	_ = s.active.Done(ctx, id, id)
}

// pruneTenant visits up to limit of tenant's oldest list entries and drops those that
// lead to no upload in progress; it returns how many it dropped.
func (s *Store) pruneTenant(ctx context.Context, tenant string, limit int64) (int, error) {
	key := rdb.TenantUploadsKey(tenant)
	members, err := s.c.Client.ZRangeByLex(ctx, key, &redis.ZRangeBy{Min: "-", Max: "+", Count: limit}).Result()
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, m := range members {
		_, id, _ := strings.Cut(m, "|")
		u, err := s.Get(ctx, id)
		if errors.Is(err, staging.ErrNotFound) || err == nil && (u.Status.Terminal() || u.Tenant != tenant) {
			if err := s.c.Client.ZRem(ctx, key, m).Err(); err != nil {
				return dropped, err
			}
			dropped++
			continue
		}
		if err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

// tenantAddScript adds an upload to its tenant's list unless the list holds its bound.
//
//	KEYS[1] the tenant's list of uploads in progress (sorted set, members createdMs|id)
//	ARGV[1] the upload's member
//	ARGV[2] the most members the list may have
//
// Returns tenantAdded (also when the member was there already) or tenantFull.
var tenantAddScript = rdb.NewScript(`
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], 0, ARGV[1])
return 1
`)

// tenantAddScript's replies.
const (
	tenantFull  = 0
	tenantAdded = 1
)

// createScript creates an upload unless it exists.
//
//	KEYS[1] state hash
//	KEYS[2] meta hash
//	ARGV[1] state TTL (ms)
//	ARGV[2] number of state field/value pairs that follow, then the pairs,
//	        then meta field/value pairs to the end
//
// Returns {"ok"} or {"exists"}.
var createScript = rdb.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
local n = tonumber(ARGV[2])
local st = {}
for i = 3, 2 + 2*n do st[#st+1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(st))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if #ARGV > 2 + 2*n then
  local meta = {}
  for i = 3 + 2*n, #ARGV do meta[#meta+1] = ARGV[i] end
  redis.call('HSET', KEYS[2], unpack(meta))
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return {'ok'}
`)

// Create stores a new upload. It reports false if the id exists already.
func (s *Store) Create(ctx context.Context, u staging.NewUpload) (bool, error) {
	if u.At.IsZero() {
		u.At = s.c.Now()
	}
	keys, args, err := s.createArgs(u)
	if err != nil {
		return false, err
	}
	// The active index and the tenant's list are hints added first: a crash before the
	// script leaves entries that lead to no upload, dropped when they are visited.
	// Both go in one round trip.
	var h hints
	_, _ = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = s.hintIn(ctx, p, u.Tenant, u.ID, u.At)
		return nil
	})
	if err := s.checkHints(ctx, u.Tenant, u.ID, u.At, h); err != nil {
		return false, err
	}
	r, err := rdb.Decode("create", createScript.Run(ctx, s.c, keys, args...))
	if err != nil {
		return false, err
	}
	return r.Code == rdb.CodeOK, nil
}

// CreateReserved stores new upload u, whose id Reserve readied (with u.At as its time,
// and bound to its client_node_id if it has one), and points its node id at it (see
// IndexNode): in one round trip on a single Redis, where the node index write follows
// the script on the same connection (after it, so that a reader that finds the index
// finds the upload; a script refused for memory finds the write after it refused too);
// in two on a cluster, where the node index is on another node. It reports false if the
// id exists already (then the node index is as it was).
func (s *Store) CreateReserved(ctx context.Context, u staging.NewUpload) (bool, error) {
	keys, args, err := s.createArgs(u)
	if err != nil {
		return false, err
	}
	if s.c.Cluster || u.NodeID == "" {
		r, err := rdb.Decode("create", createScript.Run(ctx, s.c, keys, args...))
		if err != nil || r.Code != rdb.CodeOK {
			return false, err
		}
		return true, s.IndexNode(ctx, u.Tenant, u.NodeID, u.ID, u.At, s.NodeTTL())
	}
	var create, node *redis.Cmd
	_, _ = s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		create = createScript.Eval(ctx, s.c, p, keys, args...)
		node = nodeIndexScript.Eval(ctx, s.c, p, []string{rdb.NodeKey(u.Tenant, u.NodeID)}, u.At.UnixMilli(), u.ID, s.NodeTTL().Milliseconds())
		return nil
	})
	r, err := rdb.Decode("create", create)
	if err != nil {
		return false, rdb.Classify(err)
	}
	if r.Code != rdb.CodeOK {
		// A fresh id exists only if ids collide; the node index may point at the
		// upload that has it, which is as if it had been created again now.
		return false, nil
	}
	if err := node.Err(); err != nil {
		// Refused while the script was not: write it again.
		return true, s.IndexNode(ctx, u.Tenant, u.NodeID, u.ID, u.At, s.NodeTTL())
	}
	return true, nil
}

// createArgs are the keys and arguments of createScript for u (u.At set).
func (s *Store) createArgs(u staging.NewUpload) ([]string, []any, error) {
	nowMs := u.At.UnixMilli()
	now := strconv.FormatInt(nowMs, 10)
	state := []any{
		"status", string(staging.StatusActive), "bucket", u.Bucket, "key", u.Key,
		"chunk_size", u.ChunkSize, "expected_size", u.ExpectedSize, "total", u.Total,
		"max_received", 0, "received", 0, "received_bytes", 0, "uploaded", 0,
		"uploaded_bytes", 0, "s3_upload_id", u.MultipartID, "instance_id", u.InstanceID, "tenant", u.Tenant,
		"created_ms", now, "updated_ms", now,
	}
	if u.IfAbsent {
		state = append(state, "if_absent", "1")
	}
	if u.Direct {
		state = append(state, "direct", "1", "mpu_crc32c", flag(u.MultipartChecksummed))
	}
	if u.Partial {
		state = append(state, "partial", "1")
	}
	if len(u.Concat) > 0 {
		state = append(state, "concat", strings.Join(u.Concat, " "))
	}
	args := []any{s.c.KeysTTL(), len(state) / 2}
	args = append(args, state...)
	meta := []any{"name", u.Name, "content_type", u.ContentType, "client_node_id", u.ClientNodeID,
		"correlation_id", u.CorrelationID, "node_id", u.NodeID}
	for _, f := range []struct{ name, v string }{{"connector_id", u.ConnectorID}, {"parent_id", u.ParentID},
		{"path", u.Path}, {"drive", u.Drive}, {"custom_metadata", u.CustomMetadata}} {
		if f.v != "" { // most uploads have none of these: store only what is there
			meta = append(meta, f.name, f.v)
		}
	}
	if len(u.Metadata) > 0 {
		b, err := json.Marshal(u.Metadata)
		if err != nil {
			return nil, nil, err
		}
		meta = append(meta, "metadata", string(b))
	}
	args = append(args, meta...)
	return []string{rdb.StateKey(u.ID), rdb.MetaKey(u.ID)}, args, nil
}

// Params reads an upload's immutable parameters.
func (s *Store) Params(ctx context.Context, id string) (staging.Params, error) {
	v, err := s.c.Client.HMGet(ctx, rdb.StateKey(id), "chunk_size", "expected_size", "tenant", "direct", "concat").Result()
	if err != nil {
		return staging.Params{}, err
	}
	if v[0] == nil {
		return staging.Params{}, staging.ErrNotFound
	}
	var p staging.Params
	p.ChunkSize = rdb.I64(v[0])
	p.ExpectedSize = rdb.I64(v[1])
	p.Tenant = rdb.Str(v[2])
	p.Direct = rdb.Str(v[3]) == "1"
	p.Final = rdb.Str(v[4]) != ""
	if p.ExpectedSize >= 0 {
		p.Total = staging.TotalChunks(p.ExpectedSize, p.ChunkSize)
	}
	return p, nil
}

// Get reads an upload in one round trip.
func (s *Store) Get(ctx context.Context, id string) (*staging.Upload, error) {
	u, _, err := s.get(ctx, id, false)
	return u, err
}

// get reads an upload in one round trip, and with withParts its parts hash (N →
// "etag|crc|size") too.
func (s *Store) get(ctx context.Context, id string, withParts bool) (*staging.Upload, map[string]string, error) {
	var read func() (*staging.Upload, map[string]string, error)
	if _, err := s.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		read = s.getIn(ctx, p, id, withParts)
		return nil
	}); err != nil {
		return nil, nil, err
	}
	return read()
}

// getIn queues get's reads in pipeline p; the function it returns reads their replies
// once p has run.
func (s *Store) getIn(ctx context.Context, p redis.Pipeliner, id string, withParts bool) func() (*staging.Upload, map[string]string, error) {
	var partsAll *redis.MapStringStringCmd
	var partKeys *redis.StringSliceCmd
	st := p.HGetAll(ctx, rdb.StateKey(id))
	meta := p.HGetAll(ctx, rdb.MetaKey(id))
	rec := p.HGetAll(ctx, rdb.ReceivedKey(id))
	if withParts {
		partsAll = p.HGetAll(ctx, rdb.PartsKey(id))
	} else {
		partKeys = p.HKeys(ctx, rdb.PartsKey(id))
	}
	cmds := []redis.Cmder{st, meta, rec}
	if withParts {
		cmds = append(cmds, partsAll)
	} else {
		cmds = append(cmds, partKeys)
	}
	return func() (*staging.Upload, map[string]string, error) {
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return nil, nil, err
			}
		}
		return parseUpload(id, st.Val(), meta.Val(), rec.Val(), partsAll, partKeys)
	}
}

// parseUpload builds an upload from its hashes (state, meta, received) and its parts
// hash (whole, or its keys).
func parseUpload(id string, h, m, received map[string]string, partsAll *redis.MapStringStringCmd, partKeys *redis.StringSliceCmd) (*staging.Upload, map[string]string, error) {
	withParts := partsAll != nil
	var parts []string
	var partsHash map[string]string
	if withParts {
		partsHash = partsAll.Val()
		for k := range partsHash {
			parts = append(parts, k)
		}
	} else {
		parts = partKeys.Val()
	}
	if len(h) == 0 {
		return nil, nil, staging.ErrNotFound
	}
	u := &staging.Upload{
		ID: id, Status: staging.Status(h["status"]), Bucket: h["bucket"], Key: h["key"],
		ChunkSize: rdb.I64(h["chunk_size"]), ExpectedSize: rdb.I64(h["expected_size"]),
		Total: rdb.U32(h["total"]), ReceivedBytes: rdb.I64(h["received_bytes"]),
		Uploaded: rdb.U32(h["uploaded"]), UploadedBytes: rdb.I64(h["uploaded_bytes"]),
		MultipartID: h["s3_upload_id"], InstanceID: cmp.Or(h["instance_id"], h["node_id"]), Size: rdb.I64(h["size"]),
		ETag: h["etag"], CRC32C: rdb.U32(h["crc32c"]), Error: h["error"],
		Name: m["name"], ContentType: m["content_type"], ClientNodeID: m["client_node_id"],
		CorrelationID: m["correlation_id"], Tenant: h["tenant"], HandoffPending: h["handoff"] == "pending",
		Created: rdb.MsTime(h["created_ms"]), Updated: rdb.MsTime(h["updated_ms"]),
		FirstChunk: rdb.MsTime(h["first_ms"]), Completed: rdb.MsTime(h["completed_ms"]),
		DetectedContentType: h["detected_ct"], IfAbsent: h["if_absent"] == "1", Tail: parseTail(h["tail"]),
		Direct: h["direct"] == "1", MultipartChecksummed: h["mpu_crc32c"] == "1", Partial: h["partial"] == "1",
		ClaimedBy: h["claimed_by"],
		Document: staging.Document{NodeID: m["node_id"], ConnectorID: m["connector_id"], ParentID: m["parent_id"],
			Path: m["path"], Drive: m["drive"], CustomMetadata: m["custom_metadata"]},
	}
	if c := h["concat"]; c != "" {
		u.Concat = strings.Fields(c)
	}
	if md := m["metadata"]; md != "" {
		if err := json.Unmarshal([]byte(md), &u.Metadata); err != nil {
			return nil, nil, fmt.Errorf("staging: upload %s metadata: %w", id, err)
		}
	}
	stored := make(map[string]bool, len(parts))
	for _, k := range parts {
		stored[k] = true
	}
	for k, v := range received {
		c := staging.ChunkInfo{N: rdb.U32(k), Stored: stored[k]}
		c.CRC32C, c.Size, _ = rdb.ParseCRCSize(v)
		u.Chunks = append(u.Chunks, c)
	}
	slices.SortFunc(u.Chunks, func(a, b staging.ChunkInfo) int { return cmp.Compare(a.N, b.N) })
	u.ReceivedChunks = make([]uint32, len(u.Chunks))
	for i, c := range u.Chunks {
		u.ReceivedChunks[i] = c.N
	}
	return u, partsHash, nil
}

// StagedBytes returns Redis' used_memory: an upper bound of the bytes staged there
// (staged chunks are most of it, and nothing else chunkup keeps is large). It is what
// the staged-bytes budget limits, so the budget also protects Redis itself. On a
// cluster it is the fullest master's: that one runs out of memory first.
func (s *Store) StagedBytes(ctx context.Context) (int64, error) {
	cc, ok := s.c.Client.(*redis.ClusterClient)
	if !ok {
		return usedMemory(ctx, s.c.Client)
	}
	var mu sync.Mutex
	var most int64
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := usedMemory(ctx, node)
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		return err
	})
	return most, rdb.Classify(err) // a node's client has no hook of its own
}

func usedMemory(ctx context.Context, client redis.Cmdable) (int64, error) {
	info, err := client.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("staging: INFO memory has no used_memory")
}

// Leases returns the chunks of upload id that a worker holds, with their lease expiry.
func (s *Store) Leases(ctx context.Context, id string) (map[uint32]time.Time, error) {
	h, err := s.c.Client.HGetAll(ctx, rdb.LeasesKey(id)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]time.Time, len(h))
	for k, v := range h {
		_, exp, _ := strings.Cut(v, "|")
		out[rdb.U32(k)] = time.UnixMilli(rdb.I64(exp))
	}
	return out, nil
}

// Active is the number of uploads in the active index: uploads not yet completed or
// ended (an upper bound: an entry whose upload is gone is dropped when visited).
func (s *Store) Active(ctx context.Context) (int64, error) { return s.active.Len(ctx) }

// nodeIndexScript points a tenant's node id at an upload, unless it points at a newer
// one already (several uploads may carry one node id: it names the latest), and keeps
// the longer of the two TTLs.
//
//	KEYS[1] node index string ("created_ms|upload id")
//	ARGV[1] the upload's creation time (unix ms)
//	ARGV[2] upload id
//	ARGV[3] TTL (ms)
//
// Returns the upload id the node id names afterwards.
var nodeIndexScript = rdb.NewScript(`
local cur = redis.call('GET', KEYS[1])
local ttl = tonumber(ARGV[3])
if cur then
  local ms, id = string.match(cur, '^(%d+)|(.*)$')
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > ttl then ttl = pttl end
  if ms and id ~= ARGV[2] and (tonumber(ms) > tonumber(ARGV[1]) or (tonumber(ms) == tonumber(ARGV[1]) and id > ARGV[2])) then
    redis.call('PEXPIRE', KEYS[1], ttl)
    return id
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', ttl)
return ARGV[2]
`)

// IndexNode makes tenant's nodeID name upload id (created at created), for at least
// ttl, unless it names a newer upload. Writers call it after the upload exists; the
// document's creation calls it again with the document's TTL.
func (s *Store) IndexNode(ctx context.Context, tenant, nodeID, id string, created time.Time, ttl time.Duration) error {
	if nodeID == "" {
		return nil
	}
	return nodeIndexScript.Run(ctx, s.c, []string{rdb.NodeKey(tenant, nodeID)}, created.UnixMilli(), id, ttl.Milliseconds()).Err()
}

// NodeTTL is how long an upload's node index entry lives at first: as long as its keys.
func (s *Store) NodeTTL() time.Duration { return time.Duration(s.c.KeysTTL()) * time.Millisecond }

// UploadForNode returns the id of the latest upload of tenant that carries nodeID, or
// staging.ErrNotFound.
func (s *Store) UploadForNode(ctx context.Context, tenant, nodeID string) (string, error) {
	v, err := s.c.Client.Get(ctx, rdb.NodeKey(tenant, nodeID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", staging.ErrNotFound
	}
	if err != nil {
		return "", err
	}
	_, id, ok := strings.Cut(v, "|")
	if !ok || id == "" {
		return "", staging.ErrNotFound
	}
	return id, nil
}

// readyToComplete indexes upload id as ready to be finalized, then tells the
// in-process completer (a hint: the index is what completers sweep).
func (s *Store) readyToComplete(ctx context.Context, id string) error {
	if err := s.completions.Add(ctx, id, id, s.c.Now()); err != nil {
		return err
	}
	s.hub.UploadReady(id)
	return nil
}

// InProgress lists up to limit of tenant's uploads in progress (ACTIVE or COMPLETING),
// oldest first, after cursor (a next cursor of a previous call; "" for the first
// page). It returns the next cursor, "" after the last page. Entries whose upload has
// ended or is gone are dropped on the way.
func (s *Store) InProgress(ctx context.Context, tenant, cursor string, limit int) ([]*staging.Upload, string, error) {
	key := rdb.TenantUploadsKey(tenant)
	after := "-"
	if cursor != "" {
		after = "(" + cursor
	}
	var out []*staging.Upload
	for len(out) < limit {
		want := limit - len(out)
		members, err := s.c.Client.ZRangeByLex(ctx, key, &redis.ZRangeBy{Min: after, Max: "+", Count: int64(want)}).Result()
		if err != nil {
			return nil, "", err
		}
		for _, m := range members {
			after = "(" + m
			_, id, _ := strings.Cut(m, "|")
			u, err := s.Get(ctx, id)
			if errors.Is(err, staging.ErrNotFound) || err == nil && u.Status.Terminal() {
				_ = s.c.Client.ZRem(ctx, key, m).Err() // ended: a hint left behind
				continue
			}
			if err != nil {
				return nil, "", err
			}
			if u.Tenant == tenant {
				out = append(out, u)
			}
		}
		if len(members) < want {
			return out, "", nil // the end of the list
		}
	}
	return out, after[1:], nil
}

// forget drops an ended upload from its tenant's list (a hint: listing drops it too).
func (s *Store) forget(ctx context.Context, id, tenant string, createdMs int64) {
	_ = s.c.Client.ZRem(ctx, rdb.TenantUploadsKey(tenant), rdb.TenantUploadsMember(createdMs, id)).Err()
}

// waitIn queues in p, when writes must reach Config.MinReplicas before they are
// acknowledged, a WAIT for the writes queued before it; nil when they need not.
func (s *Store) waitIn(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	if s.c.Cfg.MinReplicas <= 0 {
		return nil
	}
	return p.Do(ctx, "WAIT", s.c.Cfg.MinReplicas, s.c.Cfg.ReplicaTimeout.Milliseconds())
}

// replicated is nil when wait (waitIn's; nil for none) confirmed MinReplicas, else
// staging.ErrNotReplicated saying how many replicas confirmed what (a phrase with a
// trailing space, or "").
func (s *Store) replicated(wait *redis.Cmd, what string) error {
	if wait == nil {
		return nil
	}
	if n, err := wait.Int64(); err != nil || n < int64(s.c.Cfg.MinReplicas) {
		return fmt.Errorf("%w (%d of %d replicas confirmed %swithin %s)", staging.ErrNotReplicated, n, s.c.Cfg.MinReplicas, what, s.c.Cfg.ReplicaTimeout)
	}
	return nil
}
