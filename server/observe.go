package server

import (
	"context"
	"sync"
	"time"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// Metrics is what the API records (implemented by *metrics.Set, see internal/metrics).
type Metrics interface {
	// ChunkAcked records a chunk of size bytes acknowledged d after it was received.
	// (What became of it, staged or written through, the upload core records.)
	ChunkAcked(d time.Duration, size int64, duplicate bool)
	// GRPCServerInterceptors record the grpc_server_* series.
	GRPCServerInterceptors() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor)
}

// Observability is how the API is observed. The zero value records no metrics and
// makes no spans; the correlation id reaches logs either way.
type Observability struct {
	// Metrics, when set, records gRPC and chunk metrics.
	Metrics Metrics
	// TracerProvider, when set, traces every RPC (but health checks) with otelgrpc,
	// continuing the caller's trace context read with Propagator (zero: W3C trace
	// context and baggage).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

// CorrelationIDAttribute is the span attribute holding a request's correlation id.
const CorrelationIDAttribute = "chunkup.correlation_id"

// serverOptions are the stats handler and interceptors that observe RPCs. They come
// before the server's other interceptors, so the metrics see every call's final status
// (recovered panics and refused credentials included), and the logging interceptor
// sees the correlation id.
func (o Observability) serverOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if o.TracerProvider != nil {
		prop := o.Propagator
		if prop == nil {
			prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		}
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(o.TracerProvider), otelgrpc.WithPropagators(prop),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		)))
	}
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if o.Metrics != nil {
		u, s := o.Metrics.GRPCServerInterceptors()
		unary, stream = append(unary, u), append(stream, s, ackTimer(o.Metrics))
	}
	unary = append(unary, correlationUnary)
	stream = append(stream, correlationStream)
	return append(opts, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
}

// uploadChunkMethod is the full name of the chunk stream.
var uploadChunkMethod = "/" + chunkupv1.UploadService_ServiceDesc.ServiceName + "/UploadChunk"

// ackTimer times each chunk of an UploadChunk stream from the moment its message is
// received to the moment its acknowledgement is sent, outside the service's own code:
// the stream's messages are matched by (upload id, chunk number). A message that
// created the upload carries no upload id, nor do the chunks after it; their
// acknowledgements do, so those fall back to the chunk number alone.
func ackTimer(m Metrics) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != uploadChunkMethod {
			return handler(srv, ss)
		}
		return handler(srv, &timedStream{ServerStream: ss, m: m, received: map[chunkKey]receipt{}})
	}
}

type chunkKey struct {
	upload string
	n      uint32
}

type receipt struct {
	at   time.Time
	size int64
}

// timedStream remembers when each chunk arrived. The service reads a message while it
// stages the one before, so receive and send run on two goroutines.
type timedStream struct {
	grpc.ServerStream
	m        Metrics
	mu       sync.Mutex
	received map[chunkKey]receipt
}

func (t *timedStream) RecvMsg(msg any) error {
	err := t.ServerStream.RecvMsg(msg)
	if req, ok := msg.(*chunkupv1.UploadChunkRequest); err == nil && ok && req.ChunkNumber > 0 {
		t.mu.Lock()
		if len(t.received) < 1024 { // bounded whatever the client does
			t.received[chunkKey{req.UploadId, req.ChunkNumber}] = receipt{at: time.Now(), size: int64(len(req.Data))}
		}
		t.mu.Unlock()
	}
	return err
}

func (t *timedStream) SendMsg(msg any) error {
	if resp, ok := msg.(*chunkupv1.UploadChunkResponse); ok && resp.ChunkNumber > 0 {
		t.mu.Lock()
		k := chunkKey{resp.UploadId, resp.ChunkNumber}
		r, found := t.received[k]
		if !found {
			k.upload = ""
			r, found = t.received[k]
		}
		delete(t.received, k)
		t.mu.Unlock()
		if found {
			t.m.ChunkAcked(time.Since(r.at), r.size, resp.Duplicate)
		}
	}
	return t.ServerStream.SendMsg(msg)
}

type correlationKey struct{}

// withCorrelation settles the request's correlation id: the caller's x-correlation-id
// when it is usable, else a new one, which is then put into the incoming metadata so
// that everything downstream (CreateUpload stores CorrelationID(ctx)) sees the same id
// as the logs and the span. The id is also sent back as a response header.
func withCorrelation(ctx context.Context) (context.Context, string) {
	id := CorrelationID(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(CorrelationIDHeader); len(v) == 0 || v[0] != id {
		md = md.Copy()
		md.Set(CorrelationIDHeader, id)
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String(CorrelationIDAttribute, id))
	}
	return context.WithValue(ctx, correlationKey{}, id), id
}

func correlationUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, id := withCorrelation(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs(CorrelationIDHeader, id))
	return handler(ctx, req)
}

func correlationStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, id := withCorrelation(ss.Context())
	_ = ss.SetHeader(metadata.Pairs(CorrelationIDHeader, id))
	w := middleware.WrapServerStream(ss)
	w.WrappedContext = ctx
	return handler(srv, w)
}

// CorrelationIDFromContext is the correlation id of the request ctx belongs to, as the
// API's interceptors settled it, or "" outside a request.
func CorrelationIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}

// logFields are the fields the logging interceptor adds to a request's log lines: its
// correlation id and, when traced, its trace and span ids.
func logFields(ctx context.Context) logging.Fields {
	var f logging.Fields
	if id := CorrelationIDFromContext(ctx); id != "" {
		f = append(f, "correlation_id", id)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		f = append(f, "trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	}
	return f
}
