// Package stagingtest opens every store of the staging tree on one Redis, for tests of
// the packages built on them.
package stagingtest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/notify"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
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
