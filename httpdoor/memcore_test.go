package httpdoor

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"strconv"
	"sync"
	"time"
)

// memCore stands in for chunkup's store, to test the protocol layer only. It keeps
// chunkup's rules: chunks numbered from 1, every chunk but the last exactly ChunkSize,
// only a one-chunk upload may have an empty chunk, a repeated chunk with the same bytes
// is acknowledged, the size once known cannot change, and an upload whose chunks are
// all in is complete.
type memCore struct {
	chunkSize int64

	mu      sync.Mutex
	ups     map[string]*memUpload
	seq     int
	locks   map[string]context.CancelFunc
	stages  int // successful Stage calls
	tenants map[string]string
	// beforeStage, when set, runs before each Stage (outside the mutex).
	beforeStage func(id string, n uint32)
}

type memUpload struct {
	up     Upload
	data   map[uint32][]byte
	tail   []byte
	tenant string
}

type tenantKey struct{}

func newMemCore(chunkSize int64) *memCore {
	return &memCore{chunkSize: chunkSize, ups: map[string]*memUpload{}, locks: map[string]context.CancelFunc{}}
}

func (c *memCore) Create(ctx context.Context, req CreateRequest) (Upload, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Size < -1 {
		return Upload{}, fmt.Errorf("%w: negative size", ErrInvalid)
	}
	c.seq++
	id := "up" + strconv.Itoa(c.seq)
	tenant, _ := ctx.Value(tenantKey{}).(string)
	u := &memUpload{
		up: Upload{
			ID: id, State: StateActive, ChunkSize: c.chunkSize, Size: req.Size,
			Expires: time.Now().Add(24 * time.Hour).Truncate(time.Second), Key: "uploads/" + id + "/" + req.Name,
			Name: req.Name, ContentType: req.ContentType, Metadata: req.Metadata, Partial: req.Partial, Concat: req.Concat,
		},
		data: map[uint32][]byte{}, tenant: tenant,
	}
	c.ups[id] = u
	return c.snapshot(u), nil
}

func (c *memCore) find(ctx context.Context, id string) (*memUpload, error) {
	u, ok := c.ups[id]
	tenant, _ := ctx.Value(tenantKey{}).(string)
	if !ok || u.tenant != tenant {
		return nil, fmt.Errorf("%w: upload %s", ErrNotFound, id)
	}
	return u, nil
}

func (c *memCore) snapshot(u *memUpload) Upload {
	up := u.up
	up.Chunks = nil
	for n, d := range u.data {
		up.Chunks = append(up.Chunks, Chunk{N: n, Size: int64(len(d)), CRC32C: crc32.Checksum(d, castagnoli)})
	}
	up.Metadata = maps.Clone(u.up.Metadata)
	return up
}

func (c *memCore) Get(ctx context.Context, id string) (Upload, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.find(ctx, id)
	if err != nil {
		return Upload{}, err
	}
	return c.snapshot(u), nil
}

func (c *memCore) total(u *memUpload) uint32 { return totalChunks(u.up.Size, u.up.ChunkSize) }

// settle completes an upload whose chunks are all in.
func (c *memCore) settle(u *memUpload) {
	if u.up.Size < 0 {
		return
	}
	for n := uint32(1); n <= c.total(u); n++ {
		if _, ok := u.data[n]; !ok {
			return
		}
	}
	u.up.State = StateCompleted
}

func (c *memCore) DeclareSize(ctx context.Context, id string, size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.find(ctx, id)
	if err != nil {
		return err
	}
	if u.up.State.Ended() {
		return fmt.Errorf("%w: upload is %s", ErrGone, u.up.State)
	}
	if u.up.Size >= 0 {
		if u.up.Size != size {
			return fmt.Errorf("%w: the size is %d already", ErrConflict, u.up.Size)
		}
		return nil
	}
	total := totalChunks(size, u.up.ChunkSize)
	for n, d := range u.data {
		want := u.up.ChunkSize
		if n == total {
			want = size - int64(total-1)*u.up.ChunkSize
		}
		if n > total || int64(len(d)) != want {
			return fmt.Errorf("%w: chunk %d does not fit a size of %d", ErrConflict, n, size)
		}
	}
	u.up.Size = size
	c.settle(u)
	return nil
}

func (c *memCore) Stage(ctx context.Context, id string, n uint32, data []byte, sum uint32, last bool) error {
	if c.beforeStage != nil {
		c.beforeStage(id, n)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.find(ctx, id)
	if err != nil {
		return err
	}
	if old, ok := u.data[n]; ok && bytes.Equal(old, data) {
		return nil // a repeat: acknowledged again
	}
	if u.up.State != StateActive {
		return fmt.Errorf("%w: upload is %s", ErrGone, u.up.State)
	}
	if n == 0 || crc32.Checksum(data, castagnoli) != sum {
		return fmt.Errorf("%w: chunk %d: bad number or checksum", ErrInvalid, n)
	}
	C := u.up.ChunkSize
	if u.up.Size >= 0 {
		total := c.total(u)
		want := C
		if n == total {
			want = u.up.Size - int64(total-1)*C
		}
		if n > total || int64(len(data)) != want || last != (n == total) {
			return fmt.Errorf("%w: chunk %d (%d bytes, last %v) does not fit the upload's %d bytes", ErrInvalid, n, len(data), last, u.up.Size)
		}
	} else if last {
		if int64(len(data)) > C || len(data) == 0 && n != 1 {
			return fmt.Errorf("%w: last chunk %d has %d bytes", ErrInvalid, n, len(data))
		}
		for m := range u.data {
			if m > n {
				return fmt.Errorf("%w: chunk %d cannot be the last: chunk %d was received", ErrInvalid, n, m)
			}
		}
		u.up.Size = int64(n-1)*C + int64(len(data))
	} else if int64(len(data)) != C {
		return fmt.Errorf("%w: chunk %d has %d bytes, not %d", ErrInvalid, n, len(data), C)
	}
	u.data[n] = bytes.Clone(data)
	c.stages++
	c.settle(u)
	return nil
}

func (c *memCore) Abort(ctx context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.find(ctx, id)
	if err != nil {
		return err
	}
	switch u.up.State {
	case StateAborted:
		return nil
	case StateActive:
		u.up.State = StateAborted
		return nil
	case StateFailed, StateExpired:
		// As chunkup's core: the message is about chunks, for the door to replace.
		return fmt.Errorf("%w: upload %s is %s and accepts no more chunks", ErrGone, id, u.up.State)
	}
	return fmt.Errorf("%w: upload is %s", ErrConflict, u.up.State)
}

func (c *memCore) Lock(ctx context.Context, id string) (context.Context, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, held := c.locks[id]; held {
		return nil, nil, fmt.Errorf("%w: upload %s", ErrLocked, id)
	}
	held, cancel := context.WithCancel(ctx)
	c.locks[id] = cancel
	var once sync.Once
	return held, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			cancel()
			delete(c.locks, id)
		})
	}, nil
}

func (c *memCore) OpenStream(context.Context) (func(), error) { return func() {}, nil }

func (c *memCore) LockOpened(ctx context.Context, id string, release func()) (context.Context, func(), error) {
	held, unlock, err := c.Lock(ctx, id)
	if err != nil {
		release()
		return nil, nil, err
	}
	var once sync.Once
	return held, func() { once.Do(func() { unlock(); release() }) }, nil
}

func (c *memCore) SaveTail(ctx context.Context, id string, n uint32, data []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: the lock was lost", ErrLocked)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.find(ctx, id)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		u.tail, u.up.Tail = nil, Tail{}
		return nil
	}
	if u.up.State != StateActive {
		return fmt.Errorf("%w: upload is %s", ErrGone, u.up.State)
	}
	if _, ok := u.data[n]; ok {
		return fmt.Errorf("%w: chunk %d was received since", ErrConflict, n)
	}
	u.tail = bytes.Clone(data)
	u.up.Tail = Tail{N: n, Size: int64(len(data)), CRC32C: crc32.Checksum(data, castagnoli)}
	return nil
}

func (c *memCore) ReadTail(ctx context.Context, id string, t Tail) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.find(ctx, id)
	if err != nil {
		return nil, err
	}
	if u.up.Tail != t {
		return nil, fmt.Errorf("%w: the tail changed", ErrConflict)
	}
	return bytes.Clone(u.tail), nil
}

// loseLock cancels the holder's context, as an adapter does when a lease is lost.
func (c *memCore) loseLock(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cancel, ok := c.locks[id]; ok {
		cancel()
	}
}

func (c *memCore) locked(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.locks[id]
	return ok
}

// object returns the upload's bytes, chunk after chunk, and whether it is complete.
func (c *memCore) object(id string) ([]byte, State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.ups[id]
	var b []byte
	for n := uint32(1); ; n++ {
		d, ok := u.data[n]
		if !ok {
			break
		}
		b = append(b, d...)
	}
	return b, u.up.State
}

func (c *memCore) stageCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stages
}

// count is the number of uploads ever created.
func (c *memCore) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ups)
}

// only returns the id of the one upload created, or "" when there is not exactly one.
func (c *memCore) only() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ups) != 1 {
		return ""
	}
	for id := range c.ups {
		return id
	}
	return ""
}

// end ends an upload as chunkup would (a failure, an expiry), with a reason.
func (c *memCore) end(id string, state State, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ups[id].up.State, c.ups[id].up.Reason = state, reason
	c.ups[id].up.Ended = time.Now()
}

// Concat implements Core with the partials' chunks, as the real core reads their
// objects.
func (c *memCore) Concat(ctx context.Context, ids []string) (Partials, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var data []byte
	for _, id := range ids {
		u, ok := c.ups[id]
		tenant, _ := ctx.Value(tenantKey{}).(string)
		switch {
		case !ok || u.tenant != tenant:
			return nil, fmt.Errorf("%w: there is no partial upload %s", ErrInvalid, id)
		case !u.up.Partial:
			return nil, fmt.Errorf("%w: upload %s is not partial", ErrInvalid, id)
		case u.up.State != StateCompleted:
			return nil, fmt.Errorf("%w: partial upload %s is not complete", ErrInvalid, id)
		}
		for n := uint32(1); n <= c.total(u); n++ {
			data = append(data, u.data[n]...)
		}
	}
	return memPartials(data), nil
}

type memPartials []byte

func (p memPartials) Size() int64                         { return int64(len(p)) }
func (p memPartials) Open(context.Context) io.ReadCloser  { return io.NopCloser(bytes.NewReader(p)) }
func (p memPartials) Claim(context.Context, string) error { return nil }
func (p memPartials) Done()                               {}
