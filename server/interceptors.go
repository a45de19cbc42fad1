package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Guard configures who may call chunkup's services and how often.
type Guard struct {
	// Auth is the credentials check; nil lets every caller in as the empty tenant.
	Auth *Authenticator
	// RatePerTenant limits each tenant's calls per second; zero means no limit.
	RatePerTenant float64
	// RateBurst is the bucket size. Zero means twice the rate (at least 1).
	RateBurst int
}

// openService reports whether a call needs no credentials: health checks and server
// reflection stay open, so probes and grpcurl's discovery work.
func openService(_ context.Context, c interceptors.CallMeta) bool {
	return c.Service == healthpb.Health_ServiceDesc.ServiceName ||
		c.Service == "grpc.reflection.v1.ServerReflection" ||
		c.Service == "grpc.reflection.v1alpha.ServerReflection"
}

func guarded(ctx context.Context, c interceptors.CallMeta) bool { return !openService(ctx, c) }

// ServerOptions returns the interceptors that enforce g: authentication first (so the
// rate limit knows the tenant), then the per-tenant rate limit.
func (g Guard) ServerOptions() []grpc.ServerOption {
	var unary []grpc.UnaryServerInterceptor
	var stream []grpc.StreamServerInterceptor
	if g.Auth != nil {
		match := selector.MatchFunc(guarded)
		unary = append(unary, selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(g.Auth.Authenticate), match))
		stream = append(stream, selector.StreamServerInterceptor(auth.StreamServerInterceptor(g.Auth.Authenticate), match))
	}
	if l := g.RateLimiter(); l != nil {
		match := selector.MatchFunc(guarded)
		unary = append(unary, selector.UnaryServerInterceptor(ratelimit.UnaryServerInterceptor(l), match))
		stream = append(stream, selector.StreamServerInterceptor(ratelimit.StreamServerInterceptor(l), match))
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...)}
}

// TLSConfig is the server's TLS: a certificate and key, and for mutual TLS the CA that
// client certificates must chain to.
type TLSConfig struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, requires and verifies client certificates (mTLS).
	ClientCAFile string
}

// Enabled reports whether TLS is configured.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" }

// Validate checks the configuration.
func (c TLSConfig) Validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("tls: set both the certificate and the key")
	}
	if c.ClientCAFile != "" && c.CertFile == "" {
		return errors.New("tls: a client CA (mTLS) needs a server certificate too")
	}
	return nil
}

// ServerOption returns the gRPC transport credentials for c.
func (c TLSConfig) ServerOption() (grpc.ServerOption, error) {
	cfg, err := c.Config()
	if err != nil {
		return nil, err
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}

// Config returns the server's TLS configuration for c (TLS 1.2 or later).
func (c TLSConfig) Config() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: no certificate in %s", c.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
