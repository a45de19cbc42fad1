package uploads

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// Concatenation (tus): a completed partial upload feeds one final upload, which claims
// it before it reads its bytes, so that one set of partial uploads cannot be assembled
// into any number of final uploads at once (each assembly reads and writes every byte
// again, on the tenant's share of the servers). A final upload that ended without
// completing (aborted, failed, expired, or its creating request gone) gives its
// partials up to the next one; one that completed has deleted their objects.

// claimPartialScript makes a completed partial upload the final upload's.
//
//	KEYS[1] the partial upload's state hash
//	ARGV[1] the caller's tenant
//	ARGV[2] the final upload's id
//	ARGV[3] the final upload the claim may be taken from ("" for none): one the caller
//	        found ended without completing
//
// Returns {"ok"} when the partial upload is the final upload's now (or was already);
// {"notfound"} for no such upload of the tenant; {"state", status} when it is not a
// COMPLETED partial upload; {"held", final} when another final upload claims it.
// Nothing changes unless it returns "ok".
var claimPartialScript = rdb.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'partial', 'claimed_by')
if not f[1] or (f[2] or '') ~= ARGV[1] then return {'notfound'} end
if f[3] ~= '1' or f[1] ~= 'COMPLETED' then return {'state', f[1]} end
local by = f[4] or ''
if by ~= '' and by ~= ARGV[2] and by ~= ARGV[3] then return {'held', by} end
redis.call('HSET', KEYS[1], 'claimed_by', ARGV[2])
return {'ok'}
`)

// ClaimPartial makes completed partial upload id of tenant final upload final's,
// unless another final upload than from claims it: then it returns a *ClaimedError
// naming that one. It is staging.ErrNotFound for no such upload of the tenant, and a
// *staging.StateError for one that is not a completed partial upload. With replicas
// required, it is staging.ErrNotReplicated when they did not confirm the claim in time:
// the claim is written on the master all the same.
func (s *Store) ClaimPartial(ctx context.Context, id, tenant, final, from string) error {
	var eval *redis.Cmd
	wait, err := s.pipelineReplicated(ctx, id, func(p redis.Pipeliner) {
		eval = claimPartialScript.Eval(ctx, s.c, p, []string{rdb.StateKey(id)}, tenant, final, from)
	})
	if eval == nil {
		return err
	}
	r, err := rdb.Decode("claim-partial", eval)
	if err != nil {
		return rdb.Classify(err)
	}
	switch r.Code {
	case rdb.CodeOK:
		// With replicas required, the claim counts only once they have it: a claim a
		// failover lost would let another final upload assemble the partial too.
		return s.replicated(wait, "the claim ")
	case rdb.CodeNotFound:
		return staging.ErrNotFound
	case rdb.CodeState:
		return &staging.StateError{Status: staging.Status(r.Str(0))}
	case rdb.CodeHeld:
		return &ClaimedError{Final: r.Str(0)}
	}
	return r.Unexpected()
}

// ClaimedError: a partial upload is claimed by another final upload.
type ClaimedError struct{ Final string }

func (e *ClaimedError) Error() string {
	return "the partial upload is claimed by final upload " + e.Final
}

// AppendLocked tells whether a request holds upload id's append lock now.
func (s *Store) AppendLocked(ctx context.Context, id string) (bool, error) {
	n, err := s.c.Client.Exists(ctx, rdb.AppendLockKey(id)).Result()
	return n == 1, err
}
