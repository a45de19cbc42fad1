package upload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Appending doors. A door whose requests append bytes to an upload (the HTTP door:
// tus PATCH, IETF append) holds the upload's append lock while it does, so that two
// requests cannot interleave their bytes; keeps the bytes of a chunk a request ended
// inside as the upload's tail; and may learn the upload's size only at its end.

// errLockReleased ends a lock's context when its request is done with it.
var errLockReleased = errors.New("append lock released")

// Lock takes upload id's append lock with a Redis lease (see uploads.Store.LockAppend)
// that a goroutine renews every third of Config.LockLease, and returns a context
// derived from ctx that carries the lock's fence, so that Stage, SaveTail and
// DeclareSize refuse, in Redis, to write for a request that lost it, and that is
// cancelled when the lock is lost (a renewal finds another token, or cannot reach
// Redis in time to renew before the lease runs out); unlock releases it. Each lock
// also counts as one of the tenant's streams (Config.MaxStreamsPerTenant). Another
// request holding the lock is a Locked error at once.
func (c *Core) Lock(ctx context.Context, id string) (held context.Context, unlock func(), err error) {
	if err := ValidID(id); err != nil {
		return nil, nil, Explain(id, err)
	}
	release, err := c.OpenStream(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c.LockOpened(ctx, id, release)
}

// LockOpened is Lock for a request whose stream OpenStream counted already (a request
// that creates its upload counts its stream before the upload exists, so that a tenant
// at its cap is refused with nothing created); release, that stream's, is called when
// the lock is released, or at once when it cannot be taken.
func (c *Core) LockOpened(ctx context.Context, id string, release func()) (held context.Context, unlock func(), err error) {
	if err := ValidID(id); err != nil {
		release()
		return nil, nil, Explain(id, err)
	}
	token := ids.NewToken()
	lease := c.cfg.LockLease
	ok, err := c.store.LockAppend(ctx, id, TenantFrom(ctx), token, lease)
	if err != nil || !ok {
		release()
		if err == nil {
			return nil, nil, fault.Errorf(fault.Locked, "another request is appending to upload %s; retry when it is done", id)
		}
		return nil, nil, Explain(id, err)
	}
	taken := time.Now()
	h, cancel := context.WithCancelCause(uploads.WithAppendLock(ctx, id, token))
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		c.keep(h, cancel, id, token, taken)
	}()
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			cancel(errLockReleased)
			<-renewed
			uctx, done := context.WithTimeout(context.WithoutCancel(ctx), lease/3)
			defer done()
			// A release that fails leaves the lease to run out: the upload waits at most
			// LockLease for its next request.
			if err := c.store.UnlockAppend(uctx, id, token); err != nil {
				c.cfg.Logger.Warn("release an upload's append lock", "upload", id, "err", err)
			}
			release()
		})
	}
	return h, unlock, nil
}

// keep renews the lock every third of its lease until held ends, and cancels held when
// the lock is lost.
func (c *Core) keep(held context.Context, cancel context.CancelCauseFunc, id, token string, since time.Time) {
	lease := c.cfg.LockLease
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	for {
		select {
		case <-held.Done():
			return
		case <-t.C:
		}
		at := time.Now()
		rctx, done := context.WithTimeout(held, lease/3)
		ok, err := c.store.RenewAppend(rctx, id, token, lease)
		done()
		switch {
		case held.Err() != nil:
			return
		case err == nil && ok:
			since = at
		case err == nil:
			cancel(fmt.Errorf("%w: another request holds it now", staging.ErrLockLost))
			return
		case time.Since(since)+lease/3 >= lease:
			// The next renewal would come after the lease ran out: another request may
			// take the lock before it, so this one stops now.
			c.cfg.Logger.Warn("an append gives up the upload's lock it cannot renew", "upload", id, "err", err)
			cancel(fmt.Errorf("%w: it could not be renewed: %v", staging.ErrLockLost, err))
			return
		}
	}
}

// lockLost is err, or staging.ErrLockLost when ctx (a held lock's) was cancelled
// because the lock was lost: whatever the call says, the request must stop.
func (c *Core) lockLost(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), staging.ErrLockLost) {
		return staging.ErrLockLost
	}
	return err
}

// DeclareSize records the size of an upload created without one, under its append
// lock (ctx from Lock): declaring the size it has is a no-op; another size, or one the
// chunks received contradict, is a Conflict; one over the limit, or one that needs
// more than S3's parts in the upload's chunk size, is TooLarge.
func (c *Core) DeclareSize(ctx context.Context, id string, size int64) error {
	up, err := c.Get(ctx, id)
	if err != nil {
		return Explain(id, c.lockLost(ctx, err))
	}
	if limit := c.UploadLimit(); size > limit {
		return Explain(id, &TooLargeError{Msg: fmt.Sprintf("the upload has %d bytes; this server takes at most %d", size, limit)})
	}
	if n := staging.TotalChunks(size, up.ChunkSize); n > MaxParts {
		return Explain(id, &TooLargeError{Msg: fmt.Sprintf("%d bytes in chunks of %d make %d chunks; S3 takes at most %d parts (create the upload with its size, so that its chunk size fits)",
			size, up.ChunkSize, n, MaxParts)})
	}
	err = c.store.DeclareSize(ctx, id, TenantFrom(ctx), size)
	return Explain(id, c.lockLost(ctx, err))
}

// SaveTail durably keeps data as the first bytes of chunk n of upload id (its tail),
// under its append lock (ctx from Lock), within the staged-bytes budget; empty data
// drops it. A chunk n received since is a Conflict.
func (c *Core) SaveTail(ctx context.Context, id string, n uint32, data []byte) error {
	if err := ValidID(id); err != nil {
		return Explain(id, err)
	}
	// A tail is staged bytes like a chunk, and stays until the next append or expiry (no
	// worker drains it): it waits for the staged-bytes budget as a chunk does.
	var cost int64 // dropping a tail (empty data) reserves nothing
	if len(data) > 0 {
		cost = RedisCost(int64(len(data)))
	}
	if err := c.budget.reserve(ctx, cost); err != nil {
		return Explain(id, c.lockLost(ctx, err))
	}
	err := c.lockLost(ctx, c.store.SaveTail(ctx, id, n, data))
	if err != nil {
		c.budget.settle(cost, 0)
	} else {
		c.budget.settle(cost, cost)
	}
	if errors.Is(err, staging.ErrChunkBusy) {
		return fault.Wrap(err, fault.Conflict, fmt.Sprintf("upload %s: %v", id, err))
	}
	return Explain(id, err)
}

// ReadTail returns the bytes of upload id's tail t (as Get reported it). A tail
// replaced or dropped since is a Conflict.
func (c *Core) ReadTail(ctx context.Context, id string, t staging.Tail) ([]byte, error) {
	if err := ValidID(id); err != nil {
		return nil, Explain(id, err)
	}
	data, err := c.store.ReadTail(ctx, id, t)
	if errors.Is(err, staging.ErrChunkMissing) {
		return nil, fault.Wrap(err, fault.Conflict, fmt.Sprintf("upload %s: its bytes after the last whole chunk changed since this request read the offset; send HEAD and resume", id))
	}
	return data, Explain(id, err)
}
