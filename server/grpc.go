package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/bufpool"
	"github.com/chunkup/chunkup/internal/protosource"
)

// MaxHeaderListSize is the most request metadata (HTTP/2 header list, as HPACK counts
// it) a call may carry; a call with more is refused before it reaches chunkup.
const MaxHeaderListSize = 64 << 10

// codeToLevel is the level a finished call is logged at: the middleware's default, but
// DATA_LOSS, which chunkup answers only to a chunk whose bytes do not match the checksum
// its client sent (the client's bytes were damaged on the way, nothing of the server's
// was lost), is a warning, so that a broken or hostile client cannot fill the error log.
func codeToLevel(code codes.Code) logging.Level {
	if code == codes.DataLoss {
		return logging.LevelWarn
	}
	return logging.DefaultServerCodeToLevel(code)
}

// streamWorkers is the size of the gRPC server's pool of call goroutines.
const streamWorkers = 32

// frameBuffers pools the buffers gRPC reads HTTP/2 frames into (16 KiB at most).
var frameBuffers = bufpool.New(8, 16).Pointers()

// NewGRPCServer returns a gRPC server serving svc, the standard health service (which
// the caller flips with the returned *health.Server) and server reflection (so grpcurl
// works without the proto files).
func NewGRPCServer(svc *UploadService, logger *slog.Logger, extra ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	logFn := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		logger.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithFieldsFromContext(logFields),
		logging.WithLevels(codeToLevel)}
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		logger.ErrorContext(ctx, "panic in gRPC handler", "panic", p)
		return status.Error(codes.Internal, "internal error")
	})
	opts := append([]grpc.ServerOption{
		// A message is taken in whole once its length is read, so nothing larger than a
		// chunk of the largest size an upload may have is accepted (see memoryGate).
		grpc.MaxRecvMsgSize(svc.cfg.MaxMessageSize()),
		// A chunk message being decoded is held twice (frames and copy): the copies made
		// at once are capped at decodeReserve, beyond --max-receive-memory.
		grpc.ForceServerCodecV2(newChunkCodec(newDecodeGate(decodeReserve(svc.cfg)), svc.cfg.MaxMessageSize())),
		// Request metadata stays in memory for the whole call, and gRPC accepts 16 MiB of
		// it by default: a few held streams (watches, reads, idle uploads) with large
		// headers would escape every other bound (docs/limits.md). Credentials and
		// correlation ids need a few KiB.
		grpc.MaxHeaderListSize(MaxHeaderListSize),
		// Fixed flow-control windows (which turns off gRPC's BDP estimation, whose
		// windows grow to 16 MiB per stream): what a stream that is not being read can
		// hold is then its window, so the streams a client keeps waiting under the
		// limits cost the server at most streamWindow each. Reading a message opens the
		// window for the whole message at once, so a chunk still flows in one go.
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Calls run on a pool of goroutines whose stacks have grown already, rather than
		// each on a new one that grows its stack through the interceptors, the AWS SDK's
		// middleware and go-redis again: for short calls made by the hundred (a direct
		// upload signs each part apart) that growth was the largest single cost of the
		// call (docs/performance.md, run I). A call that finds every worker busy gets
		// its own goroutine, as without the pool.
		grpc.NumStreamWorkers(streamWorkers),
		// The frames of a chunk are read into buffers that gRPC's own pools clear before
		// lending (a twentieth of the server's CPU per chunk); these are not cleared, and
		// gRPC fills each whole before reading it (bufpool.Pointers).
		experimental.BufferPool(frameBuffers),
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(recoverOpt),
			logging.UnaryServerInterceptor(logFn, logOpts...),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(recoverOpt),
			logging.StreamServerInterceptor(logFn, logOpts...),
		),
	}, extra...)
	opts = append(svc.cfg.Observe.serverOptions(), opts...) // outermost: see observe.go
	gs := grpc.NewServer(opts...)
	chunkupv1.RegisterUploadServiceServer(gs, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	registerReflection(gs, logger)
	return gs, hs
}

// registerReflection serves reflection (v1 and v1alpha, as reflection.Register does)
// from the descriptors with the proto files' comments, so that grpcurl's describe shows
// the API's documentation; the generated code's descriptors carry none.
func registerReflection(gs *grpc.Server, logger *slog.Logger) {
	opts := reflection.ServerOptions{Services: gs}
	if r, err := protosource.New(); err == nil {
		opts.DescriptorResolver = r
	} else { // a corrupt embed, which check-generate and its test rule out
		logger.Warn("gRPC reflection serves the API without its comments", "err", err)
	}
	v1 := reflection.NewServerV1(opts)
	reflectionv1.RegisterServerReflectionServer(gs, v1)
	reflectionv1alpha.RegisterServerReflectionServer(gs, reflection.NewServer(opts))
}

// Flow-control windows of the gRPC server (see NewGRPCServer).
const (
	streamWindow = 1 << 20
	connWindow   = 16 << 20
)

// Pinger checks a dependency for readiness.
type Pinger func(ctx context.Context) error

// NewHTTPHandler serves /healthz (the process is up) and /readyz (every dependency in
// ready answers).
func NewHTTPHandler(ready map[string]Pinger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		code, body := http.StatusOK, ""
		for name, ping := range ready {
			if err := ping(ctx); err != nil {
				code = http.StatusServiceUnavailable
				body += name + ": " + err.Error() + "\n"
			} else {
				body += name + ": ok\n"
			}
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	})
	return mux
}
