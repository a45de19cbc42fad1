package uploads

import (
	"context"
	"errors"
	"fmt"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
)

// Direct uploads: the client puts the parts into S3 itself, with URLs chunkup signs, so
// chunkup sees no bytes while it works. Its parts are recorded as written-through chunks
// are (BeginThrough, RecordDirect) once the client reports them; what is left here is the
// activity that keeps such an upload alive meanwhile.

// touchScript records activity on an active direct upload of the caller's tenant (a
// part signed), so that an upload whose client is busy putting parts is not expired as
// idle, and returns what signing its parts needs, in the same round trip.
//
//	KEYS[1] state hash
//	KEYS[2] meta hash
//	KEYS[3] received hash
//	KEYS[4] parts hash
//	ARGV[1] now (unix ms)
//	ARGV[2] keys TTL (ms)
//	ARGV[3] the caller's tenant
//	ARGV[4] the largest part number to sign
//	ARGV[5] "1" when a part to sign has no CRC32C
//
// Returns {"ok", direct, bucket, key, s3_upload_id, mpu_crc32c, total, chunk_size,
// expected_size} (when direct is not "1" nothing was touched); {"notfound"} for no such
// upload of the tenant; {"state", status} when it is not ACTIVE; {"beyond", total} for
// a part beyond the upload's; {"missing"} for a part without the CRC32C its multipart
// upload requires. Nothing is touched unless it returns "ok".
var touchScript = rdb.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'direct', 'bucket', 'key', 's3_upload_id', 'mpu_crc32c',
  'total', 'chunk_size', 'expected_size')
if not f[1] or (f[2] or '') ~= ARGV[3] then return {'notfound'} end
if f[3] ~= '1' then return {'ok', '0'} end
if f[1] ~= 'ACTIVE' then return {'state', f[1]} end
local total = tonumber(f[8] or '0')
if total > 0 and tonumber(ARGV[4]) > total then return {'beyond', total} end
if f[7] == '1' and ARGV[5] == '1' then return {'missing'} end
redis.call('HSET', KEYS[1], 'updated_ms', ARGV[1])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return {'ok', '1', f[4], f[5], f[6] or '', f[7] or '0', f[8] or '0', f[9], f[10]}
`)

// DirectTarget is what signing a direct upload's parts needs to know of it.
type DirectTarget struct {
	// Direct: it is a direct upload (nothing else is set, and it was not touched, when
	// it is not).
	Direct              bool
	Bucket, Key         string
	MultipartID         string
	Checksummed         bool
	Total               uint32
	ChunkSize, Expected int64
}

// TouchDirect records activity on active direct upload id of tenant now (its idle
// expiry starts again) and returns what signing its parts needs, when parts up to
// maxN (some without their CRC32C: noCRC) may be signed for it: a part beyond the
// upload's is a *staging.BeyondError, a part without the CRC32C its multipart upload
// requires ErrCRCRequired, and neither touches it.
func (s *Store) TouchDirect(ctx context.Context, id, tenant string, maxN uint32, noCRC bool) (DirectTarget, error) {
	keys := []string{rdb.StateKey(id), rdb.MetaKey(id), rdb.ReceivedKey(id), rdb.PartsKey(id)}
	res, err := rdb.Decode("touch", touchScript.Run(ctx, s.c, keys, s.c.NowMs(), s.c.KeysTTL(), tenant, maxN, flag(noCRC)))
	if err != nil {
		return DirectTarget{}, err
	}
	switch res.Code {
	case rdb.CodeOK:
		if !res.Flag(0) {
			return DirectTarget{}, nil
		}
		return DirectTarget{Direct: true, Bucket: res.Str(1), Key: res.Str(2), MultipartID: res.Str(3), Checksummed: res.Flag(4),
			Total: res.U32(5), ChunkSize: res.I64(6), Expected: res.I64(7)}, nil
	case rdb.CodeNotFound:
		return DirectTarget{}, staging.ErrNotFound
	case rdb.CodeState:
		return DirectTarget{}, &staging.StateError{Status: staging.Status(res.Str(0))}
	case rdb.CodeBeyond:
		return DirectTarget{}, &BeyondError{Total: res.U32(0)}
	case rdb.CodeMissing:
		return DirectTarget{}, ErrCRCRequired
	}
	return DirectTarget{}, res.Unexpected()
}

// BeyondError: a part to sign is beyond the upload's Total parts.
type BeyondError struct{ Total uint32 }

func (e *BeyondError) Error() string {
	return fmt.Sprintf("the upload has %d parts", e.Total)
}

// ErrCRCRequired: a part to sign has no CRC32C, which its multipart upload requires.
var ErrCRCRequired = errors.New("the upload's multipart upload takes parts only with their CRC32C")
