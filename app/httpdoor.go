package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/httpdoor/coreadapter"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/metrics"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/upload"
)

// HTTPDoorConfig configures the HTTP door: tus 1.0 and the IETF resumable-upload draft
// on the HTTP address, onto the same uploads as gRPC (docs/http-uploads.md). The zero
// value serves it at /files/ whenever the process runs the api role and has an HTTP
// address.
type HTTPDoorConfig struct {
	// Off turns the door off. Zero means on.
	Off bool
	// Door configures the protocol layer: prefix (zero: /files/), public URL, CORS,
	// buffers and timeouts. Its zero MaxSize means the upload core's limit
	// (Upload.MaxUploadSize, or when that is zero S3's 10,000 parts of
	// Upload.MaxChunkSize), and a larger one is lowered to it, so that the door announces
	// what the service enforces; its Authenticate and Logger are the App's (the same
	// credentials as gRPC), so leave them nil.
	Door httpdoor.Config
	// Page serves the upload page (httpdoor.Page) at "/", beside /healthz, /readyz and
	// /metrics. Zero means no page; chunkup dev turns it on.
	Page bool
}

// Validate checks the configuration.
func (c HTTPDoorConfig) Validate() error {
	var errs []error
	if c.Door.Prefix == "/" {
		errs = append(errs, errors.New("http door: the prefix must not be /: the door needs a path of its own beside /healthz, /readyz and /metrics (e.g. /files/)"))
	}
	if c.Door.Authenticate != nil {
		errs = append(errs, errors.New("http door: leave Authenticate nil: the door takes the process's credentials (Auth)"))
	}
	return errors.Join(append(errs, c.Door.Validate())...)
}

// setupDoor builds the HTTP door over the API's upload service, with the same
// credentials (and a rate limit of its own, as gRPC's), and mounts it (and, when asked,
// the upload page) on mux.
func (a *App) setupDoor(mux *http.ServeMux, guard server.Guard) (err error) {
	cfg := a.cfg.HTTPDoor
	core, err := coreadapter.New(a.core)
	if err != nil {
		return err
	}
	dc := cfg.Door
	// The service always has a limit (S3's part count bounds it when --max-upload-size
	// does not): announce it (Tus-Max-Size, Upload-Limit: max-size), so that a client
	// learns it before it sends anything rather than from a 413.
	if limit := a.core.UploadLimit(); dc.MaxSize == 0 || dc.MaxSize > limit {
		dc.MaxSize = limit
	}
	dc.Logger = a.log.With("role", "httpdoor")
	dc.Tenant = upload.TenantFrom
	authenticate := httpAuthenticate(guard)
	dc.Authenticate = func(r *http.Request) (context.Context, error) {
		ctx, err := authenticate(r)
		if fault.Has(err, fault.Exhausted) {
			return nil, fmt.Errorf("%w: %v", httpdoor.ErrRateLimited, err)
		}
		return ctx, err
	}
	door, err := httpdoor.New(core, dc)
	if err != nil {
		return err
	}
	series, err := a.metrics.HTTPDoor()
	if err != nil && !errors.Is(err, metrics.ErrRegistered) {
		return err
	}
	prefix := dc.Prefix
	if prefix == "" {
		prefix = "/files/"
	}
	h := a.observeDoor(door, series)
	defer func() {
		// ServeMux panics on a pattern that conflicts with one registered already.
		if p := recover(); p != nil {
			err = fmt.Errorf("http door: prefix %s: %v", prefix, p)
		}
	}()
	mux.Handle(prefix, h)
	// The creation URL without its slash is the door's too (ServeMux would redirect a
	// POST to it, which clients do not follow).
	mux.Handle(strings.TrimSuffix(prefix, "/"), h)
	if cfg.Page {
		page := httpdoor.PageWith(a.pageConfig(prefix))
		for _, p := range httpdoor.PagePaths {
			if p == "/" {
				p = "/{$}"
			}
			mux.Handle("GET "+p, page)
		}
	}
	a.door, a.doorHTTP = door, h
	return nil
}

// pageConfig is the upload page's: the HTTP door at prefix and, when direct uploads
// are on, the direct door with the S3 origin the signed URLs point at (the page's CSP
// lets it connect there).
func (a *App) pageConfig(prefix string) httpdoor.PageConfig {
	pc := httpdoor.PageConfig{Endpoint: prefix}
	if a.cfg.DirectDoor.Off {
		return pc
	}
	pc.Direct = cmp.Or(a.cfg.DirectDoor.Prefix, "/s3/")
	if u, err := url.Parse(cmp.Or(a.cfg.S3.PublicEndpoint, a.cfg.S3.Endpoint)); err == nil && u.Host != "" {
		pc.S3Origin = u.Scheme + "://" + u.Host
	}
	return pc
}

// observeDoor records the door's metrics and makes a span for each request (continuing
// the caller's trace context), and settles its correlation id as gRPC does: the
// caller's X-Correlation-Id, or a new one, sent back in the response.
func (a *App) observeDoor(door http.Handler, series *metrics.HTTPDoor) http.Handler {
	tp := a.observability.TracerProvider
	prop := a.observability.Propagator
	if prop == nil {
		prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	var tracer trace.Tracer
	if tp != nil {
		tracer = tp.Tracer("github.com/chunkup/chunkup/httpdoor")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := series.Started(r.Method)
		// The caller's id if usable (the rules gRPC's are held to), else a new one;
		// put back into the request, so that an upload it creates stores this id.
		corr := server.CorrelationID(server.HTTPContext(r))
		r.Header.Set(server.CorrelationIDHeader, corr)
		w.Header().Set(server.CorrelationIDHeader, corr)
		r = r.WithContext(upload.WithCorrelationID(r.Context(), corr))
		var span trace.Span
		if tracer != nil {
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span = tracer.Start(ctx, "httpdoor "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
					attribute.String(server.CorrelationIDAttribute, corr)))
			r = r.WithContext(ctx)
		}
		sw := &statusWriter{ResponseWriter: w}
		door.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		protocol := metrics.ProtocolNone
		switch {
		case r.Header.Get("Upload-Draft-Interop-Version") != "":
			protocol = metrics.ProtocolIETF
		case r.Header.Get("Tus-Resumable") != "":
			protocol = metrics.ProtocolTus
		}
		done(protocol, code)
		if span != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", code), attribute.String("chunkup.http.protocol", protocol))
			span.End()
		}
	})
}

// statusWriter remembers a response's final status code. It unwraps to the writer it
// wraps, so http.ResponseController (the door's deadlines, its 1xx responses' flush)
// reaches the connection.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if code >= 200 && w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpAuthenticate checks an HTTP request's credentials as gRPC's are checked, and the
// tenant's call rate, for the doors on the HTTP address; its context carries the tenant.
func httpAuthenticate(guard server.Guard) func(r *http.Request) (context.Context, error) {
	limiter := guard.RateLimiter()
	authenticate := func(r *http.Request) (context.Context, error) { return server.HTTPContext(r), nil }
	if guard.Auth != nil {
		authenticate = guard.Auth.AuthenticateHTTP
	}
	return func(r *http.Request) (context.Context, error) {
		ctx, err := authenticate(r)
		if err != nil {
			return nil, err
		}
		if limiter != nil {
			if err := limiter.Limit(ctx); err != nil {
				return nil, err
			}
		}
		return ctx, nil
	}
}
