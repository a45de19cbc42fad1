package server

import (
	"context"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

func TestCorrelationInterceptor(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	for _, tc := range []struct {
		name, sent string
		keep       bool
	}{
		{"caller's id", "req-42", true},
		{"none", "", false},
		{"too long", strings.Repeat("x", 129), false},
		{"unprintable", "a\x00b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.sent != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(CorrelationIDHeader, tc.sent))
			}
			ctx, span := tp.Tracer("t").Start(ctx, "rpc")
			var seen, stored string
			var fields []any
			_, err := correlationUnary(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
				seen, stored, fields = CorrelationIDFromContext(ctx), CorrelationID(ctx), logFields(ctx)
				return nil, nil
			})
			span.End()
			if err != nil {
				t.Fatal(err)
			}
			if tc.keep && seen != tc.sent || !tc.keep && (seen == "" || seen == tc.sent) {
				t.Fatalf("correlation id %q for %q sent", seen, tc.sent)
			}
			if stored != seen {
				t.Fatalf("the handler would store %q but logs show %q", stored, seen)
			}
			if len(fields) != 6 || fields[0] != "correlation_id" || fields[1] != seen || fields[2] != "trace_id" {
				t.Fatalf("log fields %v", fields)
			}
			spans := rec.Ended()
			attrs := spans[len(spans)-1].Attributes()
			if !contains(attrs, attribute.String(CorrelationIDAttribute, seen)) {
				t.Fatalf("span attributes %v lack %s=%q", attrs, CorrelationIDAttribute, seen)
			}
		})
	}
}

func contains(attrs []attribute.KeyValue, kv attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == kv {
			return true
		}
	}
	return false
}

func TestNoObservabilityStillCorrelates(t *testing.T) {
	opts := Observability{}.serverOptions()
	if len(opts) != 2 { // the unary and stream correlation chains, no stats handler
		t.Fatalf("%d server options without metrics and tracing, want 2", len(opts))
	}
}

// TestCodeToLevel: what a client did wrong is not the server's error. A chunk damaged
// on its way (DATA_LOSS) is a warning; the server's own failures stay errors.
func TestCodeToLevel(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		want logging.Level
	}{
		{codes.DataLoss, logging.LevelWarn},
		{codes.InvalidArgument, logging.LevelInfo},
		{codes.FailedPrecondition, logging.LevelWarn},
		{codes.Internal, logging.LevelError},
		{codes.Unknown, logging.LevelError},
	} {
		if got := codeToLevel(tc.code); got != tc.want {
			t.Errorf("%v is logged at %v, want %v", tc.code, got, tc.want)
		}
	}
}
