package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/retry"
)

// directHTTP sends parts to S3. Its own transport, so that many parts in flight to one
// store reuse connections (the default keeps 2 idle per host).
var directHTTP = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.WriteBufferSize, t.ReadBufferSize = 256<<10, 64<<10
	return t
}()}

// UploadDirect uploads the size bytes of r as a direct upload (docs/direct-uploads.md):
// the bytes go straight to S3, as the parts of a multipart upload the server creates,
// each PUT to a URL the server signs with the part's size and CRC32C bound in, so that S3
// itself refuses other bytes; the server then checks what S3 holds against the parts
// and completes the upload. Parts go parallel × window at a time (WithParallel,
// WithWindow: 4 by default); the input is read twice, once ahead for the parts' CRC32Cs
// (so that up to 32 parts' URLs are signed in one call) and once into a buffer per part
// in flight: it holds parallel × window + 2 chunks in memory. A part whose bytes changed
// between the two reads fails the upload.
// WithResume resumes a direct upload: parts S3 holds with the input's size and CRC32C
// are not put again. It returns the completed upload; one that ends otherwise is an
// *EndedError.
func (c *Client) UploadDirect(ctx context.Context, r io.ReaderAt, size int64, opts ...UploadOption) (*chunkupv1.Upload, error) {
	var cfg uploadConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.correlationID != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, CorrelationIDHeader, cfg.correlationID)
	}
	cfg.create.Direct, cfg.create.DirectChecksums, cfg.create.ExpectedSize = true, true, proto.Int64(size)
	// An upload this call creates under a node id of its own can hold no part yet: no
	// one else knows its id.
	fresh := cfg.resume == "" && cfg.create.ClientNodeId == ""
	up, err := c.start(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	if !up.Direct && cfg.resume != "" {
		return nil, fmt.Errorf("chunkup: upload %s is not a direct upload: resume it with Upload", up.UploadId)
	}
	if !up.Direct {
		// A server from before direct uploads ignores the request's direct field.
		_, _ = c.api.AbortUpload(ctx, &chunkupv1.AbortUploadRequest{UploadId: up.UploadId, Reason: "the server does not know direct uploads"})
		return nil, fmt.Errorf("chunkup: the server does not know direct uploads (it is older than this client): upload without direct")
	}
	return c.goOnDirect(ctx, &cfg, up, r, size, fresh)
}

// goOnDirect puts the parts of direct upload up, just created or found (fresh: created
// by this call under a node id of its own), and completes it.
func (c *Client) goOnDirect(ctx context.Context, cfg *uploadConfig, up *chunkupv1.Upload, r io.ReaderAt, size int64, fresh bool) (*chunkupv1.Upload, error) {
	var err error
	if up.ExpectedSize >= 0 && up.ExpectedSize != size {
		return nil, &MismatchError{UploadID: up.UploadId, Reason: fmt.Sprintf("the input has %d bytes, the upload %d", size, up.ExpectedSize)}
	}
	if cfg.onStart != nil {
		cfg.onStart(proto.CloneOf(up))
	}
	if up.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETING {
		// Its parts are all reported already: wait for it.
		if up, err = newUploader(c, up, nil).wait(ctx); err != nil {
			return up, err
		}
	}
	if up.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		return up, verifyCompleted(up, io.NewSectionReader(r, 0, size))
	}
	if done, err := ended(up); done {
		return up, err
	}
	d := &directUpload{c: c, up: up, r: r, size: size, progress: cfg.progress}
	return d.run(ctx, fresh)
}

// directUpload is one UploadDirect at work.
type directUpload struct {
	c        *Client
	up       *chunkupv1.Upload
	r        io.ReaderAt
	size     int64
	progress func(Progress)
	acked    atomic.Int64
	mu       sync.Mutex // progress calls
}

// run puts the parts S3 does not hold (none, when fresh: not asked) and completes the
// upload.
func (d *directUpload) run(ctx context.Context, fresh bool) (*chunkupv1.Upload, error) {
	chunk := d.up.ChunkSize
	total := max(1, uint32((d.size+chunk-1)/chunk))
	held := map[uint32]*chunkupv1.DirectPart{}
	err := d.c.retrying(ctx, func() error {
		if fresh {
			return nil
		}
		resp, err := d.c.api.ListDirectParts(ctx, &chunkupv1.ListDirectPartsRequest{UploadId: d.up.UploadId})
		if err != nil {
			return err
		}
		for _, p := range resp.Parts {
			held[p.PartNumber] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chunkup: list the parts S3 holds: %w", err)
	}
	parts := make([]*chunkupv1.DirectPart, total)
	// A pipeline: a summer reads the input ahead for each part's CRC32C, a signer has
	// the URLs of up to signBatch parts signed in one call, a reader reads each signed
	// part into a buffer (and checks its CRC32C again), putters PUT them. The summer
	// reads the input twice, but signing no longer waits for buffers: one call for a
	// few parts was most of the server's work for a direct upload
	// (docs/performance.md, runs I and J), and memory stays a buffer per putter.
	workers := max(1, min(d.c.opts.parallel*d.c.opts.window, int(total)))
	// Buffers are made as they are first needed, no more than the parts.
	nbuf := min(workers+2, int(total))
	bufs := make(chan []byte, nbuf)
	made := 0
	summed := make(chan *directPiece, signBatch)
	// signed holds few parts: what is signed ahead of the putters is a batch and this,
	// and the further ahead a URL is signed, the likelier it expires on a slow link.
	signed := make(chan *directPiece, signedAhead)
	ready := make(chan *directPiece, workers)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(summed)
		scratch := make([]byte, max(1, min(1<<20, chunk, d.size)))
		for n := uint32(1); n <= total; n++ {
			off := int64(n-1) * chunk
			size := min(chunk, d.size-off)
			sum, err := d.checksum(scratch, off, size)
			if err != nil {
				return fmt.Errorf("chunkup: read part %d of the input: %w", n, err)
			}
			p := &chunkupv1.DirectPart{PartNumber: n, Size: size, Crc32C: sum, HasCrc32C: true}
			if h := held[n]; h != nil && h.Size == p.Size && h.HasCrc32C && h.Crc32C == sum {
				p.Etag = h.Etag // put before this resume, with these very bytes
				parts[n-1] = p
				d.note(size)
				continue
			}
			select {
			case summed <- &directPiece{part: p}:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	g.Go(func() error {
		defer close(signed)
		// want is the least a batch waits for while the putters have signed parts to
		// take: the first part goes alone, so the first PUT starts at once, and each
		// batch after may wait for twice as many as the one before (the summer reads
		// ahead much faster than S3 takes parts).
		want := 1
		for {
			p, ok := <-summed
			if !ok {
				return nil
			}
			// While more parts are signed and waiting than the putters take at once, or
			// some are and the batch has fewer than want, the batch waits for the
			// summer's next part; else it goes with what is summed already, so that the
			// putters never wait for a batch to fill (an input slower to read than S3
			// takes it would keep them idle).
			batch := []*directPiece{p}
		more:
			for len(batch) < signBatch {
				if len(signed) > workers || len(batch) < want && len(signed) > 0 {
					if p, ok = <-summed; !ok {
						break more
					}
					batch = append(batch, p)
					continue
				}
				select {
				case p, ok := <-summed:
					if !ok {
						break more
					}
					batch = append(batch, p)
				default:
					break more
				}
			}
			if err := d.sign(gctx, batch); err != nil {
				return err
			}
			want = min(signBatch, 2*want)
			for _, p := range batch {
				select {
				case signed <- p:
				case <-gctx.Done():
					return nil
				}
			}
		}
	})
	g.Go(func() error {
		defer close(ready)
		for p := range signed {
			var buf []byte
			if made < nbuf {
				buf, made = make([]byte, min(chunk, d.size)), made+1
			} else {
				select {
				case buf = <-bufs:
				case <-gctx.Done():
					return nil
				}
			}
			n := p.part.PartNumber
			b := buf[:p.part.Size]
			if _, err := d.r.ReadAt(b, int64(n-1)*chunk); err != nil && !(errors.Is(err, io.EOF) && len(b) == 0) {
				return fmt.Errorf("chunkup: read part %d of the input: %w", n, err)
			}
			if sum := crc.Checksum(b); sum != p.part.Crc32C {
				return fmt.Errorf("chunkup: part %d of the input changed while it was uploaded (CRC32C %08x, then %08x): upload it again once it no longer changes", n, p.part.Crc32C, sum)
			}
			p.b, p.buf = b, buf
			select {
			case ready <- p:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	for range workers {
		g.Go(func() error {
			for {
				p, ok := <-ready
				if !ok {
					return nil
				}
				etag, err := d.put(gctx, p)
				if err != nil {
					return err
				}
				p.part.Etag = etag
				parts[p.part.PartNumber-1] = p.part
				bufs <- p.buf
				d.note(p.part.Size)
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // the pipeline stopped early, without an error of its own
	}
	var up *chunkupv1.Upload
	err = d.c.retrying(ctx, func() error {
		resp, err := d.c.api.CompleteDirect(ctx, &chunkupv1.CompleteDirectRequest{UploadId: d.up.UploadId, Parts: parts})
		if err != nil {
			return err
		}
		up = resp.Upload
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chunkup: complete upload %s: %w", d.up.UploadId, err)
	}
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		u := newUploader(d.c, up, nil)
		if up, err = u.wait(ctx); err != nil {
			return up, err
		}
	}
	var whole uint32
	for _, p := range parts {
		whole = crc.Combine(whole, p.Crc32C, p.Size)
	}
	if up.Size != d.size || up.Crc32C != whole {
		return up, &MismatchError{UploadID: up.UploadId, Reason: fmt.Sprintf(
			"the object has %d bytes with CRC32C %08x, the input %d bytes with CRC32C %08x", up.Size, up.Crc32C, d.size, whole)}
	}
	return up, nil
}

// directPiece is one part on its way: once signed, its URL; once read, its bytes (in
// buf).
type directPiece struct {
	part     *chunkupv1.DirectPart
	b, buf   []byte
	signed   *chunkupv1.SignedPart
	signedAt time.Time
}

// checksum is the CRC32C of the size bytes of the input at off, read through scratch.
func (d *directUpload) checksum(scratch []byte, off, size int64) (uint32, error) {
	h := crc.New()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(d.r, off, size), scratch); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

// signBatch is the most parts signed in one call. Each call costs the server a round
// trip to Redis and its gRPC handling whatever its size; at 32, 1 GiB in 8 MiB parts
// is signed in about seven calls (docs/performance.md, run N), and the URLs signed
// ahead of the putters stay within a batch and signedAhead.
const signBatch = 32

// signedAhead is the most signed parts waiting for the reader.
const signedAhead = 16

// resignWithin is how close to its expiry a URL signed ahead is signed again before
// its PUT instead of being sent (or a quarter of its life, when that is shorter): a
// part may wait long after its batch was signed (on a link of a few Mbit/s, the parts
// signed and read ahead can take longer than --direct-url-ttl's default 15 minutes to
// send), and S3 refuses an expired URL only once the part's bytes are on their way.
const resignWithin = time.Minute

// stale says whether part sp, signed at signedAt, should be signed again at now (both
// on this machine's clock, so that its age does not depend on the server's).
func stale(sp *chunkupv1.SignedPart, signedAt, now time.Time) bool {
	if sp.ExpireTime == nil {
		return false
	}
	life := sp.ExpireTime.AsTime().Sub(signedAt)
	return now.Sub(signedAt) > life-min(resignWithin, life/4)
}

// sign has the URLs of the pieces' parts signed, in one call.
func (d *directUpload) sign(ctx context.Context, ps []*directPiece) error {
	req := &chunkupv1.SignPartsRequest{UploadId: d.up.UploadId}
	for _, p := range ps {
		req.Parts = append(req.Parts, &chunkupv1.PartToSign{PartNumber: p.part.PartNumber, Size: p.part.Size, Crc32C: proto.Uint32(p.part.Crc32C)})
	}
	err := d.c.retrying(ctx, func() error {
		resp, err := d.c.api.SignParts(ctx, req)
		if err != nil {
			return err
		}
		if len(resp.Parts) != len(ps) {
			return &retry.PermanentError{Err: fmt.Errorf("the server signed %d parts for %d", len(resp.Parts), len(ps))}
		}
		for i, sp := range resp.Parts {
			if sp.PartNumber != ps[i].part.PartNumber {
				return &retry.PermanentError{Err: fmt.Errorf("the server signed part %d for part %d", sp.PartNumber, ps[i].part.PartNumber)}
			}
			ps[i].signed, ps[i].signedAt = sp, time.Now()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("chunkup: sign parts: %w", err)
	}
	return nil
}

// put PUTs piece p to S3 with its signed URL, retrying what may pass (with a URL
// signed anew: the one it had may have expired meanwhile); it returns the ETag S3
// answered.
func (d *directUpload) put(ctx context.Context, p *directPiece) (string, error) {
	var etag string
	n := p.part.PartNumber
	if p.signed != nil && stale(p.signed, p.signedAt, time.Now()) {
		p.signed = nil
	}
	err := d.c.retrying(ctx, func() error {
		if p.signed == nil {
			if err := d.sign(ctx, []*directPiece{p}); err != nil {
				return &retry.PermanentError{Err: err}
			}
		}
		sp := p.signed
		p.signed = nil // a retry signs again
		req, err := http.NewRequestWithContext(ctx, sp.Method, sp.Url, bytes.NewReader(p.b))
		if err != nil {
			return &retry.PermanentError{Err: err}
		}
		req.ContentLength = int64(len(p.b))
		for k, v := range sp.Headers {
			req.Header.Set(k, v)
		}
		res, err := directHTTP.Do(req)
		if err != nil {
			return &retry.TransientError{Err: fmt.Errorf("put part %d to S3: %w", n, err)}
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		switch {
		case res.StatusCode == http.StatusOK:
			etag = res.Header.Get("ETag")
			return nil
		case res.StatusCode >= 500 || res.StatusCode == http.StatusForbidden:
			// 403: the URL expired while the part waited; a new one is signed.
			return &retry.TransientError{Err: fmt.Errorf("put part %d to S3: %s: %s", n, res.Status, bytes.TrimSpace(body))}
		}
		return &retry.PermanentError{Err: fmt.Errorf("put part %d to S3: %s: %s", n, res.Status, bytes.TrimSpace(body))}
	})
	if err != nil {
		return "", fmt.Errorf("chunkup: %w", err)
	}
	return etag, nil
}

func (d *directUpload) note(n int64) {
	acked := d.acked.Add(n)
	if d.progress == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.progress(Progress{UploadID: d.up.UploadId, BytesSent: acked, BytesAcked: acked, Size: d.size})
}
