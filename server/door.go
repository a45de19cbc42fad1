package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/staging"
)

// Other doors onto the same uploads. The HTTP door (package httpdoor, through its
// adapter httpdoor/coreadapter) creates, reads, stages into and aborts uploads through
// these methods, which are the upload service's own paths (validation, limits, tenancy,
// the staged-bytes budget, the in-process worker's fast path) with domain errors
// instead of gRPC statuses; Message gives the words a gRPC client would read.

// Create creates an upload as CreateUpload does and returns it as stored.
func (s *UploadService) Create(ctx context.Context, req *chunkupv1.CreateUploadRequest) (*staging.Upload, error) {
	up, err := s.create(ctx, req)
	if err != nil {
		return nil, err
	}
	return s.get(ctx, up.UploadId)
}

// Lookup reads an upload as GetUpload does: another tenant's is staging.ErrNotFound.
func (s *UploadService) Lookup(ctx context.Context, id string) (*staging.Upload, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	return s.get(ctx, id)
}

// OpenStream counts a stream of chunks for the caller's tenant against
// MaxStreamsPerTenant, as UploadChunk does for each stream; release ends it. Another door
// opens one for each request that carries chunks. Over the limit it is a *LimitError.
func (s *UploadService) OpenStream(ctx context.Context) (release func(), err error) {
	return s.streams.acquire(TenantFrom(ctx))
}

// StageChunk stages chunk n of upload id as UploadChunk stages one chunk of a stream:
// it waits while Redis is over the staged-bytes budget (as a stream stops reading),
// checks the chunk against the upload (number, size, last, MaxUploadSize, crc32c),
// stages it, and returns once it is durable. The caller may reuse data as soon as it
// returns: the in-process worker's fast path is handed a copy. A door's chunks are
// always staged, never written through: the append lock that fences a door's request
// is checked by the stage script.
func (s *UploadService) StageChunk(ctx context.Context, id string, n uint32, data []byte, crc uint32, last bool) (duplicate bool, err error) {
	began := time.Now()
	if err := validID(id); err != nil {
		return false, err
	}
	p, err := s.store.Params(ctx, id)
	if err != nil {
		return false, err
	}
	if p.Tenant != TenantFrom(ctx) {
		return false, staging.ErrNotFound
	}
	if s.local != nil {
		// The fast path keeps the bytes until the worker has uploaded them, after this
		// returns; a gRPC message is the stream's to give away, a door's buffer is not.
		data = bytes.Clone(data)
	}
	cost := redisCost(int64(len(data)))
	if err := s.budget.reserve(ctx, cost); err != nil {
		return false, err
	}
	r, err := s.takeChunk(ctx, p, &chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: n, Data: data, Crc32C: &crc, IsLast: last}, false)
	s.budget.settle(cost, r.redisCost)
	if err != nil {
		return false, err
	}
	s.cfg.Observe.chunkAcked(time.Since(began), int64(len(data)), r.resp.Duplicate)
	return r.resp.Duplicate, nil
}

// Abort ends an upload ABORTED with reason, as AbortUpload does, and returns the
// ender's error as it is: a *staging.StateError when it had ended already (ABORTED
// included), staging.ErrCompleting while it is being completed.
func (s *UploadService) Abort(ctx context.Context, id, reason string) error {
	if err := validID(id); err != nil {
		return err
	}
	if _, err := s.get(ctx, id); err != nil {
		return err
	}
	return s.ender.End(ctx, id, staging.StatusAborted, reason, "")
}

// UploadLimit is the largest upload the service accepts: MaxUploadSize, or else S3's
// 10,000 parts of the largest chunk size.
func (s *UploadService) UploadLimit() int64 {
	if s.cfg.MaxUploadSize > 0 {
		return s.cfg.MaxUploadSize
	}
	return MaxParts * s.cfg.MaxChunkSize
}

// Message is what a gRPC client would read for err about upload id (the message of the
// status toStatus makes), for another door to tell its clients the same.
func Message(id string, err error) string {
	return status.Convert(toStatus(id, err)).Message()
}

// HTTPContext returns r's context with r's credentials (Authorization, X-Api-Key) and
// correlation id (X-Correlation-Id) as gRPC incoming metadata, so that Authenticate
// and CorrelationID read an HTTP request as they read a call.
func HTTPContext(r *http.Request) context.Context {
	md := metadata.MD{}
	for _, h := range []string{"authorization", "x-api-key", CorrelationIDHeader} {
		if vs := r.Header.Values(h); len(vs) > 0 {
			md[h] = vs
		}
	}
	return metadata.NewIncomingContext(r.Context(), md)
}

// AuthenticateHTTP checks an HTTP request's credentials as Authenticate checks a
// call's (an API key in X-Api-Key or Authorization: Bearer, or a bearer JWT) and
// returns HTTPContext(r) with the caller's tenant. Its error says what is wrong, as
// the gRPC status would.
func (a *Authenticator) AuthenticateHTTP(r *http.Request) (context.Context, error) {
	ctx, err := a.Authenticate(HTTPContext(r))
	if err != nil {
		return nil, errors.New(status.Convert(err).Message())
	}
	return ctx, nil
}

// RateLimiter returns a new per-tenant limiter with g's rate and burst (zero burst:
// twice the rate, at least 1), or nil when g sets no rate. gRPC's interceptors get one,
// and another door another: its requests are counted in buckets of their own.
func (g Guard) RateLimiter() *TenantRateLimiter {
	if g.RatePerTenant <= 0 {
		return nil
	}
	burst := g.RateBurst
	if burst == 0 {
		burst = max(1, int(2*g.RatePerTenant))
	}
	return NewTenantRateLimiter(g.RatePerTenant, burst)
}
