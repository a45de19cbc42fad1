// Package stagingtest opens every store of the staging tree on one Redis, for tests of
// the packages built on them.
package stagingtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/notify"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Stores are the stores of one Redis, as a process opens them.
type Stores struct {
	Hub     *notify.Hub
	Outbox  *outbox.Outbox
	Uploads *uploads.Store
	Docs    *documents.Store
	Jobs    *ocrqueue.Queue
}

// Open opens every store on client with cfg, sharing one notify.Hub.
func Open(t testing.TB, client redis.UniversalClient, cfg staging.Config) *Stores {
	t.Helper()
	s := &Stores{Hub: notify.NewHub()}
	var err error
	if s.Outbox, err = outbox.New(client, cfg, s.Hub); err != nil {
		t.Fatal(err)
	}
	if s.Uploads, err = uploads.New(client, cfg, s.Outbox, s.Hub); err != nil {
		t.Fatal(err)
	}
	if s.Docs, err = documents.New(client, cfg, s.Outbox); err != nil {
		t.Fatal(err)
	}
	if s.Jobs, err = ocrqueue.New(client, cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// The Lose functions put Redis in a state a failover can leave behind: a master that
// dies takes with it the writes its replica had not received yet, while the writes of
// the same moment on other masters (other slots: the global indexes) survive. Tests use
// them to check that every such state converges.

// LosePending drops chunk ref's pending-index entry (written on another master than the
// chunk, and lost there).
func LosePending(t testing.TB, client redis.UniversalClient, ref staging.ChunkRef) {
	t.Helper()
	c := rdb.Open(client, staging.Config{})
	if err := rdb.NewIndex(c, rdb.PendingIndex).Done(testenv.Context(t, 10*time.Second), ref.UploadID, ref.String()); err != nil {
		t.Fatal(err)
	}
}

// LoseRecord undoes the record of chunk ref's part, as when the upload's master died
// before its replica got the record: the part is not recorded, the staged bytes (data)
// and the lease are back, while the chunk's removal from the pending index (on another
// master) survived.
func LoseRecord(t testing.TB, client redis.UniversalClient, ref staging.ChunkRef, data []byte, leaseToken string) {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	id, n := ref.UploadID, strconv.FormatUint(uint64(ref.N), 10)
	_, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, rdb.PartsKey(id), n)
		p.HIncrBy(ctx, rdb.StateKey(id), "uploaded", -1)
		p.HIncrBy(ctx, rdb.StateKey(id), "uploaded_bytes", -int64(len(data)))
		p.Set(ctx, rdb.ChunkKey(id, ref.N), data, time.Hour)
		p.HSet(ctx, rdb.LeasesKey(id), n, leaseToken+"|"+strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	LosePending(t, client, ref)
}
