package server

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/upload"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// AuthConfig says who may call the API. The zero value authenticates nobody and lets
// everyone in as the empty tenant: for development only (the process says so loudly).
type AuthConfig struct {
	// APIKeys maps the lowercase hex SHA-256 of each API key to its tenant. Only hashes
	// are configured, so a leaked configuration leaks no key.
	APIKeys map[string]string
	// JWTSecret verifies HS256 bearer tokens.
	JWTSecret []byte
	// JWTPublicKey verifies RS256 bearer tokens.
	JWTPublicKey *rsa.PublicKey
	// JWTIssuer and JWTAudience, when set, must match the token's iss and aud.
	JWTIssuer, JWTAudience string
	// TenantClaim names the token claim holding the tenant. Zero means "tenant".
	TenantClaim string
}

// Enabled reports whether any credential is configured.
func (c AuthConfig) Enabled() bool {
	return len(c.APIKeys) > 0 || len(c.JWTSecret) > 0 || c.JWTPublicKey != nil
}

var (
	tenantRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidTenant reports whether t can name a tenant: 1–63 characters of letters, digits,
// '.', '_' and '-', not starting with a punctuation mark. Tenants prefix S3 keys, so
// nothing else is allowed.
func ValidTenant(t string) bool { return tenantRE.MatchString(t) }

// Validate checks the configuration.
func (c AuthConfig) Validate() error {
	for h, t := range c.APIKeys {
		if !sha256RE.MatchString(h) {
			return fmt.Errorf("auth: API key hash %q is not 64 lowercase hex digits (a SHA-256)", h)
		}
		if !ValidTenant(t) {
			return fmt.Errorf("auth: tenant %q is not a valid tenant id", t)
		}
	}
	if len(c.JWTSecret) > 0 && len(c.JWTSecret) < 32 {
		return errors.New("auth: the JWT secret must have at least 32 bytes")
	}
	return nil
}

// HashAPIKey returns the hex SHA-256 of key, the form API keys are configured in.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Authenticator checks the credentials of each call.
type Authenticator struct {
	cfg    AuthConfig
	hashes [][]byte
	tenant []string
	parser *jwt.Parser
	// keys and tokens: API keys, JWTs are configured. accepts says what the server
	// takes, once, at the end of every refusal.
	keys, tokens bool
	accepts      string
}

// NewAuthenticator returns an Authenticator for cfg.
func NewAuthenticator(cfg AuthConfig) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TenantClaim == "" {
		cfg.TenantClaim = "tenant"
	}
	a := &Authenticator{cfg: cfg}
	for h, t := range cfg.APIKeys {
		b, _ := hex.DecodeString(h)
		a.hashes, a.tenant = append(a.hashes, b), append(a.tenant, t)
	}
	var methods []string
	if len(cfg.JWTSecret) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if cfg.JWTPublicKey != nil {
		methods = append(methods, jwt.SigningMethodRS256.Alg())
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired()}
	if cfg.JWTIssuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.JWTIssuer))
	}
	if cfg.JWTAudience != "" {
		opts = append(opts, jwt.WithAudience(cfg.JWTAudience))
	}
	a.parser = jwt.NewParser(opts...)
	a.keys, a.tokens = len(cfg.APIKeys) > 0, len(methods) > 0
	switch {
	case a.keys && a.tokens:
		a.accepts = "this server accepts an API key (x-api-key: KEY, or authorization: Bearer KEY) or a JWT (authorization: Bearer JWT)"
	case a.tokens:
		a.accepts = "this server accepts a JWT (authorization: Bearer JWT), not API keys"
	default:
		a.accepts = "this server accepts an API key (x-api-key: KEY, or authorization: Bearer KEY), not tokens"
	}
	return a, nil
}

// refuse is UNAUTHENTICATED with what is wrong and, once, what the server accepts.
func (a *Authenticator) refuse(format string, args ...any) error {
	return toStatus("", fault.New(fault.Unauthenticated, fmt.Sprintf(format, args...)+"; "+a.accepts))
}

// Authenticate is a go-grpc-middleware auth.AuthFunc: it accepts an API key (header
// x-api-key, or "authorization: Bearer KEY") or a JWT ("authorization: Bearer JWT"),
// as configured, and puts the caller's tenant in the context. A call must carry one
// credential: the same key in both headers is one, but two different ones (mixed
// credentials, or either header twice with different values) are refused rather than
// resolved to whichever is read first. Each refusal says what is wrong and what the
// server accepts. AuthenticateHTTP reads an HTTP request the same way.
func (a *Authenticator) Authenticate(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	keys, authz := md.Get("x-api-key"), md.Get("authorization")
	for _, f := range []struct {
		name   string
		values []string
	}{{"x-api-key", keys}, {"authorization", authz}} {
		for _, v := range f.values[min(1, len(f.values)):] {
			if v != f.values[0] {
				return nil, a.refuse("%s is sent %d times with different values; send one credential, once", f.name, len(f.values))
			}
		}
	}
	var scheme, token string
	bearer := false
	if len(authz) > 0 {
		var ok bool
		scheme, token, ok = strings.Cut(authz[0], " ")
		token = strings.TrimSpace(token)
		bearer = ok && strings.EqualFold(scheme, "bearer") && token != ""
	}
	switch {
	case len(keys) > 0 && len(authz) > 0 && !(bearer && token == keys[0]):
		return nil, a.refuse("mixed credentials: x-api-key and authorization carry different credentials; send one of them")
	case len(keys) > 0:
		if !a.keys {
			return nil, a.refuse("an API key in x-api-key is not accepted")
		}
		return a.apiKey(ctx, keys[0])
	case len(authz) == 0:
		return nil, a.refuse("missing credentials")
	case !bearer:
		return nil, a.refuse("malformed authorization header: it must be \"Bearer \" and the credential")
	case strings.Count(token, ".") == 2:
		return a.jwt(ctx, token)
	case !a.keys:
		return nil, a.refuse("the bearer credential is not a JWT")
	}
	return a.apiKey(ctx, token)
}

func (a *Authenticator) apiKey(ctx context.Context, key string) (context.Context, error) {
	sum := sha256.Sum256([]byte(key))
	tenant, found := "", 0
	for i, h := range a.hashes {
		// Compare with every hash, in constant time, so timing says nothing.
		if subtle.ConstantTimeCompare(sum[:], h) == 1 {
			tenant, found = a.tenant[i], 1
		}
	}
	if found == 0 {
		return nil, a.refuse("invalid API key")
	}
	return upload.WithTenant(ctx, tenant), nil
}

func (a *Authenticator) jwt(ctx context.Context, raw string) (context.Context, error) {
	if !a.tokens {
		return nil, a.refuse("a JWT is not accepted")
	}
	claims := jwt.MapClaims{}
	_, err := a.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		switch t.Method.Alg() {
		case jwt.SigningMethodHS256.Alg():
			return a.cfg.JWTSecret, nil
		case jwt.SigningMethodRS256.Alg():
			return a.cfg.JWTPublicKey, nil
		}
		return nil, fmt.Errorf("unexpected signing method %s", t.Method.Alg())
	})
	if err != nil {
		return nil, a.refuse("invalid token: %v", err)
	}
	tenant, _ := claims[a.cfg.TenantClaim].(string)
	if !ValidTenant(tenant) {
		return nil, a.refuse("the token's %q claim does not name a valid tenant", a.cfg.TenantClaim)
	}
	return upload.WithTenant(ctx, tenant), nil
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
		return nil, fault.New(fault.Unauthenticated, status.Convert(err).Message())
	}
	return ctx, nil
}

// RateLimiter returns a new per-tenant limiter with g's rate and burst (zero burst:
// twice the rate, at least 1), or nil when g sets no rate. gRPC's interceptors get one,
// and another door another: its requests are counted in buckets of their own.
func (g Guard) RateLimiter() *upload.TenantRateLimiter {
	if g.RatePerTenant <= 0 {
		return nil
	}
	burst := g.RateBurst
	if burst == 0 {
		burst = max(1, int(2*g.RatePerTenant))
	}
	return upload.NewTenantRateLimiter(g.RatePerTenant, burst)
}
