package uploads

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// What the HTTP door (package httpdoor) needs beyond what gRPC does. An HTTP request
// appends a byte range, not numbered chunks, so two requests appending to one upload at
// once must be told apart, on any replica: the append lock, a lease in Redis, lets one
// request append at a time, and a fence in the scripts that write (Stage, DeclareSize)
// refuses a request whose lock was lost (its lease ran out while it stalled, and another
// request may be appending now). And tus and the IETF draft let a client say an
// upload's size only at its end, after some chunks: DeclareSize records it.

type fenceKey struct{}

type fence struct{ id, token string }

// WithAppendLock returns ctx carrying the append lock on upload id, held with token
// (see LockAppend). Stage and DeclareSize called with it for that upload check, in the
// same script that writes, that the lock still holds token, and refuse with
// staging.ErrLockLost if it does not: a request that lost its lock can never write.
func WithAppendLock(ctx context.Context, id, token string) context.Context {
	return context.WithValue(ctx, fenceKey{}, fence{id: id, token: token})
}

// fenceToken is the token of ctx's append lock on upload id, or "" (no fence).
func fenceToken(ctx context.Context, id string) string {
	if f, ok := ctx.Value(fenceKey{}).(fence); ok && f.id == id {
		return f.token
	}
	return ""
}

// lockAppendScript takes an upload's append lock.
//
//	KEYS[1] state hash
//	KEYS[2] append lock string
//	ARGV[1] token
//	ARGV[2] lease (ms)
//	ARGV[3] the caller's tenant
//
// Returns {"ok"}, {"held"} when another token holds it, or {"notfound"} when there is
// no such upload or it is another tenant's (so the lock cannot be used to probe ids,
// or to hold another tenant's upload).
var lockAppendScript = rdb.NewScript(`
local tenant = redis.call('HGET', KEYS[1], 'tenant')
if not tenant or tenant ~= ARGV[3] then return {'notfound'} end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'held'} end
return {'ok'}
`)

// renewAppendScript extends the caller's append lock.
//
//	KEYS[1] append lock string
//	ARGV[1] token
//	ARGV[2] lease (ms)
//
// Returns 1 when renewed, 0 when the lock is not the caller's.
var renewAppendScript = rdb.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// unlockAppendScript gives up the caller's append lock.
//
//	KEYS[1] append lock string
//	ARGV[1] token
//
// Returns 1 when released, 0 when it was not the caller's.
var unlockAppendScript = rdb.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// LockAppend takes upload id's append lock for tenant's request, identified by token,
// for lease. It reports false when another request holds it, and staging.ErrNotFound
// when there is no such upload or it is another tenant's.
func (s *Store) LockAppend(ctx context.Context, id, tenant, token string, lease time.Duration) (bool, error) {
	r, err := rdb.Decode("lock-append", lockAppendScript.Run(ctx, s.c, []string{rdb.StateKey(id), rdb.AppendLockKey(id)},
		token, lease.Milliseconds(), tenant))
	if err != nil {
		return false, err
	}
	switch r.Code {
	case rdb.CodeOK:
		return true, nil
	case rdb.CodeHeld:
		return false, nil
	case rdb.CodeNotFound:
		return false, staging.ErrNotFound
	}
	return false, r.Unexpected()
}

// RenewAppend extends the caller's append lock on upload id to lease from now; false
// means it is no longer the caller's.
func (s *Store) RenewAppend(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	n, err := renewAppendScript.Run(ctx, s.c, []string{rdb.AppendLockKey(id)}, token, lease.Milliseconds()).Int()
	return n == 1, err
}

// UnlockAppend gives up the caller's append lock on upload id (nothing happens if it is
// no longer the caller's).
func (s *Store) UnlockAppend(ctx context.Context, id, token string) error {
	return unlockAppendScript.Run(ctx, s.c, []string{rdb.AppendLockKey(id)}, token).Err()
}

// declareSizeScript records the size of an upload created without one.
//
//	KEYS[1] state hash
//	KEYS[2] received hash
//	KEYS[3] append lock string
//	KEYS[4] meta hash, KEYS[5] parts hash, KEYS[6] leases hash (TTL refresh only)
//	ARGV[1] size
//	ARGV[2] the caller's tenant
//	ARGV[3] now (unix ms)
//	ARGV[4] keys TTL (ms)
//	ARGV[5] progress channel
//	ARGV[6] the append lock's token ("": no fence)
//	ARGV[7] upload id (progress notices are "ID STATUS")
//
// Returns {"ok", ready} when the size was recorded (ready is 1 when every part is in S3
// already, so the upload can be completed now), {"same", ready} when the upload has
// that size already (recorded, or known from its last chunk), or {"fenced"}, {"notfound"},
// {"state", status}, {"size", known}, {"beyond", n, size}, {"short", n, size},
// {"lastsize", n, size}.
var declareSizeScript = rdb.NewScript(`
if ARGV[6] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[6] then return {'fenced'} end
local st = redis.call('HMGET', KEYS[1], 'status', 'chunk_size', 'expected_size', 'total', 'uploaded', 'tenant')
if not st[1] or st[6] ~= ARGV[2] then return {'notfound'} end
local size = tonumber(ARGV[1])
local c = tonumber(st[2])
local known = tonumber(st[3])
local total = tonumber(st[4])
if known < 0 and total > 0 then
  -- The last chunk arrived marked last: the chunks say the size.
  local last = redis.call('HGET', KEYS[2], tostring(total))
  known = (total - 1) * c + (tonumber(string.match(last or '', ':(%d+)$')) or 0)
end
if known >= 0 then
  if known ~= size then return {'size', known} end
  if st[1] ~= 'ACTIVE' then return {'same', 0} end
  -- A retry. The write lets a WAIT that follows cover the first attempt's write too
  -- (replication is in order), as Stage does for a repeated chunk; and ready is
  -- reported again, in case the first attempt failed before indexing the completion.
  redis.call('HSET', KEYS[1], 'updated_ms', ARGV[3])
  local ready = 0
  if total > 0 and tonumber(st[5]) == total then ready = 1 end
  return {'same', ready}
end
if st[1] ~= 'ACTIVE' then return {'state', st[1]} end
local ntotal = 1
if size > 0 then ntotal = math.floor((size + c - 1) / c) end
local lastsize = size - (ntotal - 1) * c
local rec = redis.call('HGETALL', KEYS[2])
for i = 1, #rec, 2 do
  local n = tonumber(rec[i])
  local sz = tonumber(string.match(rec[i+1], ':(%d+)$'))
  if n > ntotal then return {'beyond', n, sz} end
  if n < ntotal and sz ~= c then return {'short', n, sz} end
  if n == ntotal and sz ~= lastsize then return {'lastsize', n, sz} end
end
redis.call('HSET', KEYS[1], 'expected_size', size, 'total', ntotal, 'updated_ms', ARGV[3])
for i = 1, 2 do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
for i = 4, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
redis.call('PUBLISH', ARGV[5], ARGV[7] .. ' received')
local ready = 0
if tonumber(st[5]) == ntotal then ready = 1 end
return {'ok', ready}
`)

// DeclareSize records size as the size of upload id, created without one, for tenant's
// request. The chunks received so far must fit it: none beyond the last chunk, every
// chunk before the last of the chunk size, the last (if received) of the rest. If
// they are all there and already in S3, the upload is ready to complete and indexed as
// such, as when Stage receives its last chunk; otherwise the worker that records the
// last part completes it, as for any upload. Declaring the size the upload has already
// is a no-op (a retried request); another size, or one the chunks contradict, is a
// *staging.SizeError; an upload that ended is a *staging.StateError. Like Stage it is as
// durable as the configured replicas make it (WAIT), and it is fenced by ctx's append
// lock (see WithAppendLock).
func (s *Store) DeclareSize(ctx context.Context, id, tenant string, size int64) error {
	keys := []string{rdb.StateKey(id), rdb.ReceivedKey(id), rdb.AppendLockKey(id), rdb.MetaKey(id), rdb.PartsKey(id), rdb.LeasesKey(id)}
	args := []any{size, tenant, s.c.NowMs(), s.c.KeysTTL(), rdb.ProgressChannel, fenceToken(ctx, id), id}
	var eval *redis.Cmd
	wait, err := s.pipelineReplicated(ctx, id, func(p redis.Pipeliner) {
		eval = declareSizeScript.Eval(ctx, s.c, p, keys, args...)
	})
	if eval == nil {
		return err
	}
	r, evalErr := rdb.Decode("declare-size", eval)
	if evalErr != nil {
		return rdb.Classify(evalErr)
	}
	switch r.Code {
	case rdb.CodeOK, rdb.CodeSame:
		if r.I64(0) == 1 {
			// No worker will record another part, so the completion starts here (even
			// if the WAIT below fails: a completer that finds the size lost in a
			// failover only drops the entry).
			if err := s.readyToComplete(ctx, id); err != nil {
				return err
			}
		}
		if err := s.replicated(wait, "the size "); err != nil {
			return err
		}
		return nil
	case rdb.CodeFenced:
		return staging.ErrLockLost
	case rdb.CodeNotFound:
		return staging.ErrNotFound
	case rdb.CodeState:
		return &staging.StateError{Status: staging.Status(r.Str(0))}
	case rdb.CodeSize:
		return &staging.SizeError{Declared: size, Known: r.I64(0)}
	case rdb.CodeBeyond, rdb.CodeShort, rdb.CodeLastSize:
		return &staging.SizeError{Declared: size, Known: -1, N: r.U32(0), Size: r.I64(1)}
	}
	return r.Unexpected()
}

// pipelineReplicated sends what queue queues in one pipeline to upload id's master,
// followed by a WAIT for the configured replicas when there are any, on the same
// connection, since WAIT counts the replicas that have that connection's writes. It
// returns the WAIT's reply (nil without replicas) and the pipeline's error.
func (s *Store) pipelineReplicated(ctx context.Context, id string, queue func(p redis.Pipeliner)) (*redis.Cmd, error) {
	var wait *redis.Cmd
	run := func(p redis.Pipeliner) error {
		queue(p)
		wait = s.waitIn(ctx, p)
		return nil
	}
	var err error
	if cc, ok := s.c.Client.(*redis.ClusterClient); ok && s.c.Cfg.MinReplicas > 0 {
		var node *redis.Client
		if node, err = cc.MasterForKey(ctx, rdb.StateKey(id)); err == nil {
			_, err = node.Pipelined(ctx, run)
		}
		err = rdb.Classify(err) // a node's client has no hook of its own
	} else {
		_, err = s.c.Client.Pipelined(ctx, run)
	}
	return wait, err
}
