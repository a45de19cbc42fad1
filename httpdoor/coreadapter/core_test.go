package coreadapter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/httpdoor/coreadapter"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/staging/uploads"
	"github.com/chunkup/chunkup/upload"
)

const chunk = 5 << 20 // the smallest chunk size S3 allows

// env is the adapter over the real upload service and store, on a real Redis and
// MinIO (no workers: chunks stay staged, which is what the adapter sees).
type env struct {
	core  *coreadapter.Core
	store *renewals
	up    *uploads.Store
}

// renewals wraps the store to count lock renewals and, on demand, to stall the
// renewals of the locks held so far (their holders believe they renewed, Redis does not
// hear of it: processes paused past their lease) or to fail every renewal (Redis
// unreachable).
type renewals struct {
	*uploads.Store
	count atomic.Int32
	fail  atomic.Bool

	mu      sync.Mutex
	seen    map[string]bool
	stalled map[string]bool
}

func (r *renewals) RenewAppend(ctx context.Context, id, token string, lease time.Duration) (bool, error) {
	r.count.Add(1)
	r.mu.Lock()
	r.seen[token] = true
	stalled := r.stalled[token]
	r.mu.Unlock()
	switch {
	case r.fail.Load():
		return false, staging.ErrUnavailable
	case stalled:
		return true, nil
	}
	return r.Store.RenewAppend(ctx, id, token, lease)
}

// stallHolders stalls the renewals of every lock renewed so far.
func (r *renewals) stallHolders() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.seen {
		r.stalled[t] = true
	}
}

// unstall lets every renewal reach Redis again.
func (r *renewals) unstall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.stalled)
}

func newEnv(t *testing.T, uc upload.Config, lease time.Duration) *env {
	t.Helper()
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "door-test")
	st := stagingtest.Open(t, r.Client(t), staging.Config{})
	ender := &cleanup.Ender{Store: st.Uploads.Ends(), S3: s3store.New(m.Client(t))}
	uc.Bucket, uc.ChunkSize, uc.LockLease = "door-test", chunk, lease
	w := &renewals{Store: st.Uploads, seen: map[string]bool{}, stalled: map[string]bool{}}
	uc2, err := upload.New(upload.Deps{Store: w, Ender: ender}, uc)
	if err != nil {
		t.Fatal(err)
	}
	core, err := coreadapter.New(uc2)
	if err != nil {
		t.Fatal(err)
	}
	return &env{core: core, store: w, up: st.Uploads}
}

func ctxT(t *testing.T) context.Context { return testenv.Context(t, time.Minute) }

func tenant(t *testing.T, name string) context.Context { return upload.WithTenant(ctxT(t), name) }

func bytesOf(n int, b byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = b + byte(i%7)
	}
	return p
}

func stage(ctx context.Context, c *coreadapter.Core, id string, n uint32, data []byte, last bool) error {
	return c.Stage(ctx, id, n, data, crc.Checksum(data), last)
}

// An upload of unknown size: chunks staged under the lock, then its size declared;
// the door's view follows (size, chunks, expiry, metadata).
func TestUnknownSizeThenDeclared(t *testing.T) {
	e := newEnv(t, upload.Config{}, 0)
	ctx := tenant(t, "acme")
	up, err := e.core.Create(ctx, httpdoor.CreateRequest{Size: -1, Name: "a.bin", ContentType: "application/x-a", Metadata: map[string]string{"filename": "a.bin", "k": ""}})
	if err != nil {
		t.Fatal(err)
	}
	if up.Size != -1 || up.ChunkSize != chunk || up.State != httpdoor.StateActive || up.Key != "acme/uploads/"+up.ID+"/a.bin" ||
		up.Metadata["k"] != "" || len(up.Metadata) != 2 || up.Expires.IsZero() {
		t.Fatalf("created %+v", up)
	}
	held, unlock, err := e.core.Lock(ctx, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	one := bytesOf(chunk, 1)
	if err := stage(held, e.core, up.ID, 1, one, false); err != nil {
		t.Fatal(err)
	}
	if err := e.core.DeclareSize(held, up.ID, chunk+3); err != nil {
		t.Fatal(err)
	}
	if err := e.core.DeclareSize(held, up.ID, chunk+3); err != nil {
		t.Fatalf("the same size again: %v", err)
	}
	if err := e.core.DeclareSize(held, up.ID, chunk+4); !sameStatus(err, httpdoor.ErrConflict) {
		t.Fatalf("another size: %v, want ErrConflict", err)
	}
	if err := stage(held, e.core, up.ID, 2, []byte("xyz"), true); err != nil {
		t.Fatal(err)
	}
	got, err := e.core.Get(ctx, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != chunk+3 || len(got.Chunks) != 2 || got.Chunks[0].CRC32C != crc.Checksum(one) || got.Chunks[1].Size != 3 {
		t.Fatalf("after staging: %+v", got)
	}

	// Without a declared size, a chunk marked last makes it known.
	up2, err := e.core.Create(ctx, httpdoor.CreateRequest{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := stage(ctx, e.core, up2.ID, 1, []byte("tiny"), true); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.core.Get(ctx, up2.ID); got.Size != 4 {
		t.Fatalf("size after the last chunk: %d, want 4", got.Size)
	}
}

// Every error is the door's sentinel, and another tenant's upload does not exist.
func TestErrors(t *testing.T) {
	e := newEnv(t, upload.Config{MaxUploadSize: 3 * chunk, MaxStreamsPerTenant: 1}, 0)
	ctx := tenant(t, "acme")
	other := tenant(t, "other")
	for name, tc := range map[string]struct {
		req  httpdoor.CreateRequest
		want error
	}{
		"too large":      {httpdoor.CreateRequest{Size: 3*chunk + 1}, httpdoor.ErrTooLarge},
		"bad name":       {httpdoor.CreateRequest{Size: 1, Name: "a\x00b"}, httpdoor.ErrInvalid},
		"bad metadata":   {httpdoor.CreateRequest{Size: 1, Metadata: map[string]string{"k": "line\nbreak"}}, httpdoor.ErrInvalid},
		"format in name": {httpdoor.CreateRequest{Size: 1, Name: "evil\u202egpj.exe"}, httpdoor.ErrInvalid},
	} {
		if _, err := e.core.Create(ctx, tc.req); !sameStatus(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	up, err := e.core.Create(ctx, httpdoor.CreateRequest{Size: 2 * chunk})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"get":   func() error { _, err := e.core.Get(other, up.ID); return err }(),
		"lock":  func() error { _, _, err := e.core.Lock(other, up.ID); return err }(),
		"stage": stage(other, e.core, up.ID, 1, bytesOf(chunk, 2), false),
		"abort": e.core.Abort(other, up.ID),
		"size":  e.core.DeclareSize(other, up.ID, 2*chunk),
	} {
		if !sameStatus(err, httpdoor.ErrNotFound) {
			t.Errorf("another tenant's %s: %v, want ErrNotFound", name, err)
		}
	}
	if _, err := e.core.Get(ctx, "not-an-upload-id"); !sameStatus(err, httpdoor.ErrNotFound) {
		t.Errorf("a malformed id: %v, want ErrNotFound", err)
	}
	if err := stage(ctx, e.core, up.ID, 1, bytesOf(chunk-1, 2), false); !sameStatus(err, httpdoor.ErrInvalid) {
		t.Errorf("a short chunk: %v, want ErrInvalid", err)
	}
	if err := e.core.DeclareSize(ctx, up.ID, 2*chunk+1); !sameStatus(err, httpdoor.ErrConflict) {
		t.Errorf("another size: %v, want ErrConflict", err)
	}
	un, err := e.core.Create(ctx, httpdoor.CreateRequest{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.core.DeclareSize(ctx, un.ID, 3*chunk+1); !sameStatus(err, httpdoor.ErrTooLarge) {
		t.Errorf("a size over the limit: %v, want ErrTooLarge", err)
	}
	for n := uint32(1); n <= 3; n++ {
		if err := stage(ctx, e.core, un.ID, n, bytesOf(chunk, byte(n)), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := stage(ctx, e.core, un.ID, 4, []byte("x"), true); !sameStatus(err, httpdoor.ErrTooLarge) {
		t.Errorf("a chunk past the limit: %v, want ErrTooLarge", err)
	}
	// One stream per tenant: a second request appending at once is told to come back.
	_, unlock, err := e.core.Lock(ctx, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.core.Lock(ctx, un.ID); !sameStatus(err, httpdoor.ErrUnavailable) {
		t.Errorf("a second stream: %v, want ErrUnavailable", err)
	}
	unlock()
	if err := e.core.Abort(ctx, up.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.core.Abort(ctx, up.ID); err != nil {
		t.Errorf("abort again: %v, want nil", err)
	}
	if err := stage(ctx, e.core, up.ID, 1, bytesOf(chunk, 2), false); !sameStatus(err, httpdoor.ErrGone) {
		t.Errorf("stage after abort: %v, want ErrGone", err)
	}
	// An upload that ended tells when (the door's 410 says so), and no longer expires.
	if got, err := e.core.Get(ctx, up.ID); err != nil || got.State != httpdoor.StateAborted || got.Reason == "" ||
		got.Ended.IsZero() || time.Since(got.Ended) > time.Minute || !got.Expires.IsZero() {
		t.Errorf("after abort: %+v %v", got, err)
	}
	if got, err := e.core.Get(ctx, un.ID); err != nil || !got.Ended.IsZero() || got.Expires.IsZero() {
		t.Errorf("an active upload: Ended %v, Expires %v (%v); want no end, an expiry", got.Ended, got.Expires, err)
	}
}

// The lock is held across renewals; a request that stalls past its lease loses it to
// another, which then appends, while the stalled one's writes are refused by the
// fence; and a holder that cannot reach Redis gives the lock up before the lease ends.
func TestLock(t *testing.T) {
	const lease = 300 * time.Millisecond
	e := newEnv(t, upload.Config{}, lease)
	ctx := tenant(t, "acme")
	up, err := e.core.Create(ctx, httpdoor.CreateRequest{Size: 2 * chunk})
	if err != nil {
		t.Fatal(err)
	}
	held, unlock, err := e.core.Lock(ctx, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three renewals", func() bool { return e.store.count.Load() >= 3 })
	if held.Err() != nil {
		t.Fatalf("the lock was lost while renewed: %v", context.Cause(held))
	}
	if _, _, err := e.core.Lock(ctx, up.ID); !sameStatus(err, httpdoor.ErrLocked) {
		t.Fatalf("a second lock: %v, want ErrLocked", err)
	} else if msg := err.Error(); strings.Count(msg, "another request") != 1 || !strings.Contains(msg, "retry") {
		// The client reads this message: it says once what is wrong, and what to do.
		t.Fatalf("a second lock: %q, want the conflict said once and what to do", msg)
	}

	// The holder stalls: its lease runs out in Redis, and another request gets the lock.
	e.store.stallHolders()
	var held2 context.Context
	var unlock2 func()
	waitFor(t, "another request takes the lock", func() bool {
		var err error
		held2, unlock2, err = e.core.Lock(ctx, up.ID)
		return err == nil
	})
	// The stalled request still believes it holds the lock: Redis refuses its writes.
	a, b := bytesOf(chunk, 3), bytesOf(chunk, 4)
	if held.Err() != nil {
		t.Fatal("the stalled request noticed it lost the lock; the fence is not tested")
	}
	if err := stage(held, e.core, up.ID, 1, a, false); !sameStatus(err, httpdoor.ErrLocked) {
		t.Fatalf("stage by the request that lost the lock: %v, want ErrLocked", err)
	}
	if err := e.core.DeclareSize(held, up.ID, 2*chunk); !sameStatus(err, httpdoor.ErrLocked) {
		t.Fatalf("declare size by the request that lost the lock: %v, want ErrLocked", err)
	}
	// Its next real renewal finds the other's token: its context ends.
	e.store.unstall()
	<-held.Done()
	if err := stage(held, e.core, up.ID, 1, a, false); !sameStatus(err, httpdoor.ErrLocked) {
		t.Fatalf("stage after the lock was found lost: %v, want ErrLocked", err)
	}
	if err := stage(held2, e.core, up.ID, 1, b, false); err != nil {
		t.Fatalf("stage by the new holder: %v", err)
	}
	got, _ := e.core.Get(ctx, up.ID)
	if len(got.Chunks) != 1 || got.Chunks[0].CRC32C != crc.Checksum(b) {
		t.Fatalf("chunks %+v: want only the new holder's chunk 1", got.Chunks)
	}
	unlock()
	if _, _, err := e.core.Lock(ctx, up.ID); !sameStatus(err, httpdoor.ErrLocked) {
		t.Fatalf("the stale holder's unlock released the new holder's lock: %v", err)
	}
	unlock2()

	// Redis cannot be reached: the holder gives up before its lease could run out.
	held3, unlock3, err := e.core.Lock(ctx, up.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock3()
	e.store.fail.Store(true)
	<-held3.Done()
	if !errors.Is(context.Cause(held3), staging.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", context.Cause(held3))
	}
}

// waitFor polls cond until it holds, for at most 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameStatus reports whether err gets the same HTTP status as the door's sentinel want:
// what a client of the door sees.
func sameStatus(err, want error) bool {
	return err != nil && httpdoor.StatusOf(fault.KindOf(err)) == httpdoor.StatusOf(fault.KindOf(want))
}

// TestTailsWithinTheBudget: the bytes of appends that end inside a chunk are staged in
// Redis as tails, which no worker drains; they count against the staged-bytes budget
// like chunks. Ten tails of 7 MiB against a budget of 40 MiB: those past the budget are
// refused after its wait with a retryable status (503) and nothing kept, and Redis
// holds no more than the budget and one tail.
func TestTailsWithinTheBudget(t *testing.T) {
	const budget = 40 << 20
	e := newEnv(t, upload.Config{StagedBytesBudget: budget, BudgetWait: 300 * time.Millisecond}, 0)
	ctx := tenant(t, "acme")
	data := bytesOf(7<<20, 5)
	kept, refused := 0, 0
	for range 10 {
		up, err := e.core.Create(ctx, httpdoor.CreateRequest{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		held, unlock, err := e.core.Lock(ctx, up.ID)
		if err != nil {
			t.Fatal(err)
		}
		err = e.core.SaveTail(held, up.ID, 1, data)
		unlock()
		switch {
		case err == nil:
			kept++
		case httpdoor.StatusOf(fault.KindOf(err)) == 503:
			refused++
			if got, gerr := e.core.Get(ctx, up.ID); gerr != nil || got.Tail.Size != 0 {
				t.Errorf("a refused tail: upload %+v, %v; want no tail", got.Tail, gerr)
			}
		default:
			t.Fatalf("a tail: %v (%v)", err, fault.KindOf(err))
		}
	}
	used, err := e.up.StagedBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kept == 0 || refused == 0 || used > budget+upload.RedisCost(int64(len(data))) {
		t.Fatalf("%d tails kept, %d refused, Redis at %d bytes; want some of each and at most the budget (%d) and one tail", kept, refused, used, budget)
	}
}
