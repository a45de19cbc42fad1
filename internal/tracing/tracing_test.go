package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/chunkup/chunkup/internal/tracing"
)

func env(m map[string]string) tracing.Getenv { return func(k string) string { return m[k] } }

func TestNoEndpointNoExporter(t *testing.T) {
	p, err := tracing.New(context.Background(), env(nil), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	if p.Exporting != "" {
		t.Fatalf("exporting %q without an endpoint", p.Exporting)
	}
	if _, ok := p.TracerProvider.(*sdktrace.TracerProvider); !ok {
		t.Fatalf("provider %T: spans must still be made (trace ids for logs)", p.TracerProvider)
	}
	_, span := p.TracerProvider.Tracer("t").Start(context.Background(), "op")
	defer span.End()
	if !span.SpanContext().IsValid() || !span.SpanContext().IsSampled() {
		t.Fatal("span has no valid, sampled context")
	}
}

func TestEndpointChoosesExporter(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, "otlp/http/protobuf"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, "otlp/http/protobuf"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "otlp/grpc"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"}, ""},
	} {
		p, err := tracing.New(context.Background(), env(tc.env), "")
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if p.Exporting != tc.want {
			t.Errorf("%v: exporting %q, want %q", tc.env, p.Exporting, tc.want)
		}
		_ = p.Shutdown(context.Background()) // nothing recorded: nothing to send
	}
	if _, err := tracing.New(context.Background(), env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
	}), ""); err == nil {
		t.Error("an unsupported protocol was accepted")
	}
}

func TestSDKDisabled(t *testing.T) {
	p, err := tracing.New(context.Background(), env(map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}), "")
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider.Tracer("t").Start(context.Background(), "op")
	if span.IsRecording() || p.Exporting != "" {
		t.Fatal("OTEL_SDK_DISABLED=true must make no spans and export nothing")
	}
}
