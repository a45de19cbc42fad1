package upload

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Concatenation (tus's extension) makes one upload of several partial ones, which a
// client sends in parallel. A partial upload is a chunkup upload of its own, completed
// into an object at a key of its own (PartialKey) that announces nothing and is handed
// to no one; the final upload is an ordinary upload whose bytes the door reads from the
// partials' objects, in order, and appends as if a client had sent them, so the final
// object is cut into chunks, staged, stored and completed like any other, checked byte
// for byte against the partials' CRC32Cs on the way. Once the final upload holds every
// byte, the partials' objects are deleted. The cost: the concatenated bytes cross
// chunkup twice (docs/http-uploads.md, "Concatenation").

// MaxConcat is how many partial uploads one final upload may concatenate.
const MaxConcat = 100

// partialDir is the folder, under the key prefix, of partial uploads' objects.
const partialDir = ".partials"

// partialKey is the object key of partial upload id (before the tenant's prefix).
func partialKey(prefix, id string) string {
	if prefix = strings.TrimSuffix(prefix, "/"); prefix != "" {
		return prefix + "/" + partialDir + "/" + id
	}
	return partialDir + "/" + id
}

// Partials checks that ids name partial uploads a final upload of the caller may
// concatenate, in that order: each the caller's, partial, COMPLETED, its object still
// there (not concatenated and deleted already), none twice. It returns them and
// their total size. Every refusal is Invalid (the request names them) and changes
// nothing.
func (c *Core) Partials(ctx context.Context, ids []string) ([]*staging.Upload, int64, error) {
	switch {
	case len(ids) == 0:
		return nil, 0, invalidf("a final upload must name the partial uploads it concatenates")
	case len(ids) > MaxConcat:
		return nil, 0, invalidf("a final upload may concatenate at most %d partial uploads; this one names %d", MaxConcat, len(ids))
	}
	if c.objects == nil {
		return nil, 0, errNoObjects
	}
	seen := make(map[string]bool, len(ids))
	ups := make([]*staging.Upload, 0, len(ids))
	var total int64
	for i, id := range ids {
		if seen[id] {
			return nil, 0, invalidf("partial upload %s is named twice; name each partial upload once, in order", Quote(id))
		}
		seen[id] = true
		up, err := c.partial(ctx, id, ids)
		if err != nil {
			return nil, 0, err
		}
		total += up.Size
		if total > c.UploadLimit() {
			return nil, 0, fault.New(fault.TooLarge, fmt.Sprintf("the first %d partial uploads have %d bytes together; this server takes at most %d in one upload", i+1, total, c.UploadLimit()))
		}
		ups = append(ups, up)
	}
	return ups, total, nil
}

// partial reads partial upload id for Partials.
func (c *Core) partial(ctx context.Context, id string, ids []string) (*staging.Upload, error) {
	if ValidID(id) != nil {
		return nil, invalidf("%s names no upload of this server; name partial uploads by the URLs their creation returned", Quote(id))
	}
	up, err := c.settled(ctx, id)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return nil, invalidf("there is no partial upload %s (it may have expired, or be another tenant's): upload that part again", id)
	case err != nil:
		return nil, Explain(id, err)
	case !up.Partial:
		return nil, invalidf("upload %s was not created as a partial upload (Upload-Concat: partial), so it cannot be concatenated", id)
	case up.Status == staging.StatusCompleting || (up.Status == staging.StatusActive && whole(up)):
		return nil, &fault.Error{Kind: fault.Unavailable, Msg: fmt.Sprintf("partial upload %s has all its bytes but is still being stored; retry in a moment", id), RetryAfter: time.Second}
	case up.Status != staging.StatusCompleted:
		return nil, invalidf("partial upload %s is %s, not complete (it has %d bytes): finish it before creating the final upload", id, up.Status, up.ReceivedBytes+up.Tail.Size)
	}
	if _, err := c.claimant(ctx, up, "", ids); err != nil {
		return nil, err
	}
	info, err := c.objects.Head(ctx, up.Bucket, up.Key)
	switch {
	case s3store.NotFound(err):
		// A final upload that completed deletes its partials' objects; so does anyone
		// who deletes the caller's objects.
		return nil, invalidf("partial upload %s no longer has its bytes (a final upload that completed concatenated them, or its object was deleted): upload that part again", id)
	case err != nil:
		return nil, err
	case info.Size != up.Size:
		return nil, fmt.Errorf("upload: partial upload %s has %d bytes in S3, but %d were recorded", id, info.Size, up.Size)
	}
	return up, nil
}

// claimant tells whether final upload final (its id; "" for one not created yet),
// concatenating partial uploads ids, may claim partial upload p: it returns the final
// upload to take p's claim from ("" when there is none, or it is final itself), one
// that ended without holding every byte. Otherwise the error says why not:
//   - a final upload of the same partials, in the same order, that has every byte is
//     a *FinalExistsError (the creation was repeated, its answer lost); one still
//     being assembled is Locked (retry in a moment);
//   - another final upload that may still complete with p's bytes is a Conflict, and
//     one that completed with them Invalid.
func (c *Core) claimant(ctx context.Context, p *staging.Upload, final string, ids []string) (string, error) {
	by := p.ClaimedBy
	if by == "" || by == final {
		return "", nil
	}
	// The lock before the status: a final upload is assembled by the request that
	// creates it, which holds its append lock from before its claims until after its
	// last byte, so one found unlocked and then short of bytes has lost that request
	// and will never have more. (Read the other way round, a request that ended
	// between the two reads would look dead.)
	locked, err := c.store.AppendLocked(ctx, by)
	if err != nil {
		return "", err
	}
	x, err := c.get(ctx, by)
	switch {
	case errors.Is(err, staging.ErrNotFound):
		return by, nil // expired and gone
	case err != nil:
		return "", err
	}
	same := slices.Equal(x.Concat, ids)
	switch x.Status {
	case staging.StatusAborted, staging.StatusFailed, staging.StatusExpired:
		return by, nil
	case staging.StatusCompleted:
		if same {
			return "", &FinalExistsError{ID: by}
		}
		return "", invalidf("partial upload %s was concatenated into final upload %s already, which completed: a partial upload is concatenated once, so upload that part again to make another final upload of it", p.ID, by)
	}
	full := x.Status == staging.StatusCompleting || whole(x)
	switch {
	case full && same:
		return "", &FinalExistsError{ID: by}
	case full:
		return "", fault.New(fault.Conflict, fmt.Sprintf("partial upload %s is in final upload %s, which has every byte and is being stored: a partial upload is concatenated once, so upload that part again to make another final upload of it", p.ID, by))
	case !locked:
		return by, nil
	case same:
		return "", &fault.Error{Kind: fault.Locked, Msg: fmt.Sprintf("final upload %s of the same partial uploads is being assembled by another request: retry in a moment to get it", by), RetryAfter: time.Second}
	}
	return "", fault.New(fault.Conflict, fmt.Sprintf("partial upload %s is being concatenated into final upload %s by another request: a partial upload is concatenated once; wait for that request's answer, or delete final upload %s and create this one again", p.ID, by, by))
}

// FinalExistsError: a final upload of the same partial uploads, in the same order,
// exists already and has every byte (a creation repeated after its answer was lost).
type FinalExistsError struct{ ID string }

func (e *FinalExistsError) Error() string {
	return "final upload " + e.ID + " of the same partial uploads exists already"
}

// ClaimPartials makes partial uploads ups (as Partials returned them for ids) final
// upload final's, in order, so that no other final upload concatenates them
// meanwhile: a final upload whose creating request ended before it held every byte
// gives them up, and is aborted. It is called by the request that created final,
// holding its append lock, before it reads their bytes; an error is claimant's
// (another final upload claimed one since), and leaves the ones claimed before it to
// final, which the caller aborts.
func (c *Core) ClaimPartials(ctx context.Context, final string, ids []string, ups []*staging.Upload) error {
	tenant := TenantFrom(ctx)
	for _, p := range ups {
		claimed := false
		for try := 0; !claimed; try++ {
			from, err := c.claimant(ctx, p, final, ids)
			if err != nil {
				return err
			}
			if try == 3 {
				return fault.New(fault.Conflict, fmt.Sprintf("partial upload %s is being claimed by other final uploads at the same time (a partial upload is concatenated once): create this final upload again when they are done", p.ID))
			}
			err = c.store.ClaimPartial(ctx, p.ID, tenant, final, from)
			var ce *uploads.ClaimedError
			var se *staging.StateError
			switch {
			case errors.As(err, &ce):
				// Claimed since it was read: judge the new claimant.
				p = &staging.Upload{ID: p.ID, ClaimedBy: ce.Final}
			case errors.Is(err, staging.ErrNotFound):
				return invalidf("there is no partial upload %s any more (it expired): upload that part again", p.ID)
			case errors.As(err, &se):
				return invalidf("partial upload %s is %s now, not complete: upload that part again", p.ID, se.Status)
			case errors.Is(err, staging.ErrNotReplicated):
				// The claim is written (on the master), so the final upload it was taken
				// from is done with, as below.
				if from != "" {
					c.dropAbandoned(ctx, from, final)
				}
				return fault.Wrap(err, fault.Unavailable, fmt.Sprintf("the claim of partial upload %s was not confirmed by enough Redis replicas in time: create this final upload again", p.ID))
			case err != nil:
				return err
			default:
				claimed = true
				if from != "" {
					c.dropAbandoned(ctx, from, final)
				}
			}
		}
	}
	return nil
}

// AssemblySlot waits, up to assemblyWait, for one of the caller's tenant's places to
// assemble a final upload (Config.AssembliesPerTenant) and returns its release. A
// tenant whose places stay taken is refused as busy (Unavailable, with a delay), with
// nothing created; a tenant cannot keep the servers reading and writing bytes it sent
// once (a final upload deleted while it is assembled frees its partials for the next)
// more than that many at a time.
func (c *Core) AssemblySlot(ctx context.Context) (func(), error) {
	if c.assemblies == nil {
		return func() {}, nil
	}
	tenant := TenantFrom(ctx)
	wctx, cancel := context.WithTimeout(ctx, assemblyWait)
	defer cancel()
	release, err := c.assemblies.take(wctx, tenant)
	switch {
	case err == nil:
		return release, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, &fault.Error{Kind: fault.Unavailable, RetryAfter: 2 * time.Second, Msg: fmt.Sprintf(
		"tenant %s is assembling %d final uploads at once on this server, the most it allows; nothing was created: retry in a moment", Quote(tenant), c.assemblies.per)}
}

// assemblyWait is how long a final upload's creation waits for its tenant's place.
const assemblyWait = 10 * time.Second

// assemblies counts each tenant's final uploads being assembled: a semaphore of per
// places for each tenant assembling or waiting to, dropped when none is (so that the
// map holds the tenants at work, not every tenant that ever was).
type assemblies struct {
	mu   sync.Mutex
	per  int
	held map[string]*places
}

// places are one tenant's: users counts those holding a place or waiting for one.
type places struct {
	sem   chan struct{}
	users int
}

func newAssemblies(per int) *assemblies {
	return &assemblies{per: per, held: map[string]*places{}}
}

func (a *assemblies) take(ctx context.Context, tenant string) (func(), error) {
	a.mu.Lock()
	p := a.held[tenant]
	if p == nil {
		p = &places{sem: make(chan struct{}, a.per)}
		a.held[tenant] = p
	}
	p.users++
	a.mu.Unlock()
	select {
	case p.sem <- struct{}{}:
		var once sync.Once
		return func() {
			once.Do(func() {
				<-p.sem
				a.leave(tenant, p)
			})
		}, nil
	case <-ctx.Done():
		a.leave(tenant, p)
		return nil, ctx.Err()
	}
}

func (a *assemblies) leave(tenant string, p *places) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.users--; p.users == 0 {
		delete(a.held, tenant)
	}
}

// dropAbandoned aborts final upload id, whose partial uploads final took over because
// its creating request ended before it held every byte, so that what it holds goes
// now rather than at its expiry. One that ended already is left as it is.
func (c *Core) dropAbandoned(ctx context.Context, id, final string) {
	_, err := c.Abort(ctx, id, fmt.Sprintf("its creating request ended before it held every byte, and final upload %s took its partial uploads over", final))
	if err != nil && !fault.Has(err, fault.Ended) && !fault.Has(err, fault.NotFound) {
		c.cfg.Logger.Warn("abort a final upload whose partial uploads another one took over", "upload_id", id, "taken_by", final, "err", err)
	}
}

// settled reads upload id once it has settled: a partial upload whose bytes have all
// arrived is completed by the completer a moment later (its client was answered when
// they were durable, not stored), and a final upload created at once must wait for
// that, as long as ctx allows.
func (c *Core) settled(ctx context.Context, id string) (*staging.Upload, error) {
	wait := 10 * time.Millisecond
	for {
		up, err := c.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if !up.Partial || !(up.Status == staging.StatusCompleting || (up.Status == staging.StatusActive && whole(up))) {
			return up, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return up, nil
		case <-t.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// whole: every chunk of active upload up has arrived (it is about to be completed).
func whole(up *staging.Upload) bool {
	return up.ExpectedSize >= 0 && uint32(len(up.ReceivedChunks)) == up.Total
}

// OpenPartials returns the bytes of partial uploads ups (as Partials returned them),
// one after another. Each partial's bytes are checked against the CRC32C recorded at its
// completion as they are read: a partial that comes back different ends the read with
// an error before its last byte, so a final upload never holds bytes its partials did
// not.
func (c *Core) OpenPartials(ctx context.Context, ups []*staging.Upload) io.ReadCloser {
	ctx, cancel := context.WithCancel(ctx)
	return &partialsReader{ctx: ctx, cancel: cancel, c: c, ups: ups}
}

// partialsReader reads partial uploads' objects in turn, opening each when the one
// before has ended.
type partialsReader struct {
	ctx    context.Context
	cancel context.CancelFunc // Close: a read under way stops
	c      *Core
	ups    []*staging.Upload
	cur    io.ReadCloser
	up     *staging.Upload
	sum    hash.Hash32
	read   int64
}

func (r *partialsReader) Read(p []byte) (int, error) {
	for {
		if r.cur == nil {
			if len(r.ups) == 0 {
				return 0, io.EOF
			}
			r.up, r.ups = r.ups[0], r.ups[1:]
			body, _, err := r.c.objects.Open(r.ctx, r.up.Bucket, r.up.Key)
			if err != nil {
				return 0, fmt.Errorf("reading partial upload %s: %w", r.up.ID, err)
			}
			r.cur, r.sum, r.read = body, crc32.New(crc32.MakeTable(crc32.Castagnoli)), 0
		}
		n, err := r.cur.Read(p)
		if err != nil && err != io.EOF || r.ctx.Err() != nil {
			_ = r.cur.Close()
			r.cur = nil
			if err == nil || err == io.EOF {
				err = r.ctx.Err()
			}
			return 0, fmt.Errorf("reading partial upload %s: %w", r.up.ID, err)
		}
		r.sum.Write(p[:n])
		r.read += int64(n)
		if r.read > r.up.Size {
			return 0, fault.New(fault.DataLoss, fmt.Sprintf("partial upload %s has more than its %d bytes in S3: upload that part again", r.up.ID, r.up.Size))
		}
		if err == io.EOF {
			_ = r.cur.Close()
			r.cur = nil
			if r.read != r.up.Size || r.sum.Sum32() != r.up.CRC32C {
				return 0, fault.New(fault.DataLoss, fmt.Sprintf("partial upload %s came back from S3 with %d bytes of CRC32C %08x, not the %d bytes of %08x it was stored with: upload that part again", r.up.ID, r.read, r.sum.Sum32(), r.up.Size, r.up.CRC32C))
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		if n > 0 {
			return n, nil
		}
	}
}

// Close stops the read; it may be called while a Read is under way (the reader's
// own goroutine closes the object it reads).
func (r *partialsReader) Close() error {
	r.cancel()
	return nil
}
