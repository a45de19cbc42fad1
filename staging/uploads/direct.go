package uploads

import (
	"context"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// Direct uploads: the client puts the parts into S3 itself, with URLs chunkup signs, so
// chunkup sees no bytes while it works. Its parts are recorded as written-through chunks
// are (BeginThrough, RecordDirect) once the client reports them; what is left here is the
// activity that keeps such an upload alive meanwhile.

// touchScript records activity on an active direct upload (a part signed), so that an
// upload whose client is busy putting parts is not expired as idle.
//
//	KEYS[1] state hash
//	KEYS[2] meta hash
//	KEYS[3] received hash
//	KEYS[4] parts hash
//	ARGV[1] now (unix ms)
//	ARGV[2] keys TTL (ms)
//
// Returns {"ok"}; {"notfound"}; or {"state", status} when it is not ACTIVE.
var touchScript = rdb.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'notfound'} end
if st ~= 'ACTIVE' then return {'state', st} end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[1])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return {'ok'}
`)

// Touch records activity on active upload id now (its idle expiry starts again).
func (s *Store) Touch(ctx context.Context, id string) error {
	keys := []string{rdb.StateKey(id), rdb.MetaKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id)}
	res, err := rdb.Decode("touch", touchScript.Run(ctx, s.c, keys, s.c.NowMs(), s.c.KeysTTL()))
	if err != nil {
		return err
	}
	switch res.Code {
	case rdb.CodeOK:
		return nil
	case rdb.CodeNotFound:
		return staging.ErrNotFound
	case rdb.CodeState:
		return &staging.StateError{Status: staging.Status(res.Str(0))}
	}
	return res.Unexpected()
}
