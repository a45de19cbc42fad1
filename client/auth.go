package client

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// tokenCreds sends a credential with every call.
type tokenCreds struct{ header, value string }

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{t.header: t.value}, nil
}

// RequireTransportSecurity is false so that development servers without TLS work; the
// server warns when it accepts credentials in clear text.
func (t tokenCreds) RequireTransportSecurity() bool { return false }

// APIKey returns per-call credentials that send an API key (the x-api-key header), for
// gRPC connections the SDK does not make.
func APIKey(key string) credentials.PerRPCCredentials { return tokenCreds{"x-api-key", key} }

// BearerToken returns per-call credentials that send a token such as a JWT
// ("authorization: Bearer TOKEN").
func BearerToken(token string) credentials.PerRPCCredentials {
	return tokenCreds{"authorization", "Bearer " + token}
}

// WithAPIKey authenticates every call with an API key.
func WithAPIKey(key string) Option { return WithDialOptions(grpc.WithPerRPCCredentials(APIKey(key))) }

// WithBearerToken authenticates every call with a bearer token.
func WithBearerToken(token string) Option {
	return WithDialOptions(grpc.WithPerRPCCredentials(BearerToken(token)))
}

// WithTLS connects over TLS with cfg (for mutual TLS, cfg carries the client
// certificate). Without it, Dial uses plaintext.
func WithTLS(cfg *tls.Config) Option {
	return WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
}
