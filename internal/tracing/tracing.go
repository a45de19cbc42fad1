// Package tracing builds chunkup's OpenTelemetry TracerProvider from the standard
// OTEL_* environment. Spans are always created (so trace ids reach logs and metric
// exemplars, and a caller's trace context is continued), but they leave the process
// only when an OTLP endpoint is configured: without OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) there is no exporter and no network traffic.
//
// Honoured variables: OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER (otlp or none),
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL
// (http/protobuf, the default, or grpc), and, read by the SDK and exporters
// themselves, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER[_ARG],
// OTEL_BSP_*, OTEL_EXPORTER_OTLP_[TRACES_]{HEADERS,TIMEOUT,INSECURE,CERTIFICATE,...}.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Provider is a process's tracing setup.
type Provider struct {
	// TracerProvider makes spans.
	TracerProvider trace.TracerProvider
	// Propagator reads and writes trace context in request metadata (W3C trace context
	// and baggage).
	Propagator propagation.TextMapPropagator
	// Exporting names the exporter ("otlp/grpc", "otlp/http/protobuf"), or "" when spans
	// stay in the process.
	Exporting string
	shutdown  func(context.Context) error
}

// Shutdown flushes spans not yet exported and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// Getenv reads the environment; tests pass their own.
type Getenv func(string) string

// FromEnv builds a Provider from the process environment. serviceInstance names this
// process (service.instance.id) unless OTEL_RESOURCE_ATTRIBUTES does.
func FromEnv(ctx context.Context, serviceInstance string) (*Provider, error) {
	return New(ctx, os.Getenv, serviceInstance)
}

// New builds a Provider from getenv.
func New(ctx context.Context, getenv Getenv, serviceInstance string) (*Provider, error) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return &Provider{TracerProvider: noop.NewTracerProvider(), Propagator: prop}, nil
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "chunkup")}
	if serviceInstance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", serviceInstance))
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the
	// defaults above.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	p := &Provider{Propagator: prop}

	endpoint := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	if endpoint != "" && (exporter == "" || exporter == "otlp") {
		protocol := strings.ToLower(firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"))
		var exp sdktrace.SpanExporter
		switch protocol {
		case "", "http/protobuf":
			p.Exporting = "otlp/http/protobuf"
			exp, err = otlptracehttp.New(ctx) // reads its endpoint, headers, TLS from the environment
		case "grpc":
			p.Exporting = "otlp/grpc"
			exp, err = otlptracegrpc.New(ctx)
		default:
			return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported (http/protobuf or grpc)", protocol)
		}
		if err != nil {
			return nil, fmt.Errorf("tracing: %s exporter: %w", p.Exporting, err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...) // the sampler comes from OTEL_TRACES_SAMPLER
	p.TracerProvider, p.shutdown = tp, tp.Shutdown
	return p, nil
}

func firstSet(getenv Getenv, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}
