package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/upload"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func incoming(kv ...string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
}

func TestAuthenticate(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthenticator(AuthConfig{
		APIKeys:   map[string]string{HashAPIKey("key-a"): "acme", HashAPIKey("key-b"): "globex"},
		JWTSecret: secret, JWTPublicKey: &rsaKey.PublicKey, JWTIssuer: "issuer",
	})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		t.Helper()
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	valid := func(tenant string) jwt.MapClaims {
		return jwt.MapClaims{"tenant": tenant, "iss": "issuer", "exp": time.Now().Add(time.Hour).Unix()}
	}
	expired := valid("acme")
	expired["exp"] = time.Now().Add(-time.Minute).Unix()
	wrongIssuer := valid("acme")
	wrongIssuer["iss"] = "someone-else"
	none := sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, valid("acme"))
	otherSecret := sign(jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), valid("acme"))

	for _, tc := range []struct {
		name   string
		ctx    context.Context
		tenant string // "" means UNAUTHENTICATED
		msg    string
	}{
		{"no credentials", context.Background(), "", "missing credentials"},
		{"x-api-key", incoming("x-api-key", "key-a"), "acme", ""},
		{"api key as bearer", incoming("authorization", "Bearer key-b"), "globex", ""},
		{"unknown api key", incoming("x-api-key", "key-c"), "", "invalid API key"},
		{"basic scheme", incoming("authorization", "Basic a2V5LWE="), "", "malformed authorization"},
		{"HS256", incoming("authorization", "Bearer "+sign(jwt.SigningMethodHS256, secret, valid("acme"))), "acme", ""},
		{"RS256", incoming("authorization", "Bearer "+sign(jwt.SigningMethodRS256, rsaKey, valid("globex"))), "globex", ""},
		{"expired", incoming("authorization", "Bearer "+sign(jwt.SigningMethodHS256, secret, expired)), "", "expired"},
		{"wrong issuer", incoming("authorization", "Bearer "+sign(jwt.SigningMethodHS256, secret, wrongIssuer)), "", "invalid token"},
		{"alg none", incoming("authorization", "Bearer "+none), "", "invalid token"},
		{"other secret", incoming("authorization", "Bearer "+otherSecret), "", "invalid token"},
		{"tenant with a slash", incoming("authorization", "Bearer "+sign(jwt.SigningMethodHS256, secret, valid("../etc"))), "", "valid tenant"},
		{"no tenant claim", incoming("authorization", "Bearer "+sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"iss": "issuer", "exp": time.Now().Add(time.Hour).Unix()})), "", "valid tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, err := a.Authenticate(tc.ctx)
			if tc.tenant == "" {
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), tc.msg) {
					t.Fatalf("err = %v, want UNAUTHENTICATED saying %q", err, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := upload.TenantFrom(ctx); got != tc.tenant {
				t.Fatalf("tenant %q, want %q", got, tc.tenant)
			}
		})
	}
}

func TestAuthConfigValidate(t *testing.T) {
	for name, cfg := range map[string]AuthConfig{
		"hash not hex":     {APIKeys: map[string]string{"xyz": "acme"}},
		"bad tenant":       {APIKeys: map[string]string{HashAPIKey("k"): "a/b"}},
		"short jwt secret": {JWTSecret: []byte("short")},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, cfg)
		}
	}
}

// TestAuthenticateRefusals: a call with two different credentials (x-api-key beside
// another authorization, or either header twice with different values) is refused
// rather than resolved to the first, and every refusal says what is wrong and, once,
// what this server accepts as configured (a JWT-only server asks for no API key). Over
// HTTP (AuthenticateHTTP, the door's) the message is the same.
func TestAuthenticateRefusals(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	token := func(t *testing.T) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	keys := map[string]string{HashAPIKey("key-a"): "acme", HashAPIKey("key-b"): "globex"}
	const (
		both     = "this server accepts an API key (x-api-key: KEY, or authorization: Bearer KEY) or a JWT (authorization: Bearer JWT)"
		jwtOnly  = "this server accepts a JWT (authorization: Bearer JWT), not API keys"
		keysOnly = "this server accepts an API key (x-api-key: KEY, or authorization: Bearer KEY), not tokens"
	)
	for _, tc := range []struct {
		name    string
		cfg     AuthConfig
		md      func(t *testing.T) []string // header name, value pairs
		tenant  string                      // "" means UNAUTHENTICATED
		msg     string                      // what is wrong
		accepts string
	}{
		{name: "same key in both headers", cfg: AuthConfig{APIKeys: keys},
			md: func(*testing.T) []string { return []string{"x-api-key", "key-a", "authorization", "Bearer key-a"} }, tenant: "acme"},
		{name: "x-api-key beside another key", cfg: AuthConfig{APIKeys: keys},
			md:  func(*testing.T) []string { return []string{"x-api-key", "key-a", "authorization", "Bearer key-b"} },
			msg: "mixed credentials: x-api-key and authorization carry different credentials; send one of them", accepts: keysOnly},
		{name: "x-api-key beside a JWT", cfg: AuthConfig{APIKeys: keys, JWTSecret: secret},
			md: func(t *testing.T) []string {
				return []string{"x-api-key", "key-a", "authorization", "Bearer " + token(t)}
			},
			msg: "mixed credentials: x-api-key and authorization carry different credentials; send one of them", accepts: both},
		{name: "x-api-key beside basic auth", cfg: AuthConfig{APIKeys: keys},
			md:  func(*testing.T) []string { return []string{"x-api-key", "key-a", "authorization", "Basic a2V5LWE="} },
			msg: "mixed credentials", accepts: keysOnly},
		{name: "x-api-key twice", cfg: AuthConfig{APIKeys: keys},
			md:  func(*testing.T) []string { return []string{"x-api-key", "key-a", "x-api-key", "key-b"} },
			msg: "x-api-key is sent 2 times with different values; send one credential, once", accepts: keysOnly},
		{name: "authorization twice", cfg: AuthConfig{APIKeys: keys},
			md: func(*testing.T) []string {
				return []string{"authorization", "Bearer key-b", "authorization", "Bearer key-a"}
			},
			msg: "authorization is sent 2 times with different values", accepts: keysOnly},
		{name: "jwt-only: no credentials", cfg: AuthConfig{JWTSecret: secret},
			md: func(*testing.T) []string { return nil }, msg: "missing credentials", accepts: jwtOnly},
		{name: "jwt-only: x-api-key", cfg: AuthConfig{JWTSecret: secret},
			md:  func(*testing.T) []string { return []string{"x-api-key", "key-a"} },
			msg: "an API key in x-api-key is not accepted", accepts: jwtOnly},
		{name: "jwt-only: bearer key", cfg: AuthConfig{JWTSecret: secret},
			md:  func(*testing.T) []string { return []string{"authorization", "Bearer key-a"} },
			msg: "the bearer credential is not a JWT", accepts: jwtOnly},
		{name: "jwt-only: token", cfg: AuthConfig{JWTSecret: secret},
			md: func(t *testing.T) []string { return []string{"authorization", "Bearer " + token(t)} }, tenant: "acme"},
		{name: "keys-only: token", cfg: AuthConfig{APIKeys: keys},
			md:  func(t *testing.T) []string { return []string{"authorization", "Bearer " + token(t)} },
			msg: "a JWT is not accepted", accepts: keysOnly},
		{name: "both: no credentials", cfg: AuthConfig{APIKeys: keys, JWTSecret: secret},
			md: func(*testing.T) []string { return nil }, msg: "missing credentials", accepts: both},
		{name: "both: basic", cfg: AuthConfig{APIKeys: keys, JWTSecret: secret},
			md:  func(*testing.T) []string { return []string{"authorization", "Basic a2V5LWE="} },
			msg: "malformed authorization header", accepts: both},
		{name: "both: unknown key", cfg: AuthConfig{APIKeys: keys, JWTSecret: secret},
			md:  func(*testing.T) []string { return []string{"x-api-key", "key-c"} },
			msg: "invalid API key", accepts: both},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAuthenticator(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			kv := tc.md(t)
			r := httptest.NewRequest("POST", "/files/", nil)
			for i := 0; i+1 < len(kv); i += 2 {
				r.Header.Add(kv[i], kv[i+1])
			}
			for door, call := range map[string]func() (context.Context, error){
				"grpc": func() (context.Context, error) { return a.Authenticate(incoming(kv...)) },
				"http": func() (context.Context, error) { return a.AuthenticateHTTP(r) },
			} {
				ctx, err := call()
				if tc.tenant != "" {
					if err != nil || upload.TenantFrom(ctx) != tc.tenant {
						t.Fatalf("%s: tenant %q, %v; want %q", door, upload.TenantFrom(ctx), err, tc.tenant)
					}
					continue
				}
				msg := ""
				if err != nil {
					msg = err.Error()
				}
				if door == "grpc" {
					if status.Code(err) != codes.Unauthenticated {
						t.Fatalf("grpc: %v, want UNAUTHENTICATED", err)
					}
					msg = status.Convert(err).Message()
				}
				if !strings.HasPrefix(msg, tc.msg) || !strings.HasSuffix(msg, "; "+tc.accepts) {
					t.Errorf("%s: %q, want %q … %q", door, msg, tc.msg, tc.accepts)
				}
				if n := strings.Count(msg, "this server accepts"); n != 1 {
					t.Errorf("%s: %q says what the server accepts %d times, want once", door, msg, n)
				}
			}
		})
	}
}
