package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
			if got := TenantFrom(ctx); got != tc.tenant {
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

func TestKeyForStaysInTheTenant(t *testing.T) {
	id := "abcdefghijklmnopqrstuvwxyz"
	for _, tc := range []struct{ name, key, want string }{
		{"../../etc/passwd", "", "acme/uploads/" + id + "/passwd"},
		{"..", "", "acme/uploads/" + id},
		{`..\..\windows\system.ini`, "", "acme/uploads/" + id + "/system.ini"},
		{"report.pdf", "docs/2026/report.pdf", "acme/docs/2026/report.pdf"},
	} {
		if got := KeyFor("acme", "uploads", id, tc.key, tc.name); got != tc.want {
			t.Errorf("KeyFor(name %q, key %q) = %q, want %q", tc.name, tc.key, got, tc.want)
		}
	}
}

// FuzzKeyFor: whatever a client sends as name and key, a key that passes validation
// lands inside its tenant's prefix and is itself a valid key.
func FuzzKeyFor(f *testing.F) {
	f.Add("../../etc/passwd", "")
	f.Add("a", "../x")
	f.Add("", "/abs")
	f.Add("n", "a/./b")
	f.Fuzz(func(t *testing.T, name, key string) {
		if key != "" && ValidateKey(key) != nil {
			return
		}
		if !utf8.ValidString(name) || !printable(name) {
			return
		}
		got := KeyFor("acme", "uploads", "abcdefghijklmnopqrstuvwxyz", key, name)
		if !strings.HasPrefix(got, "acme/") {
			t.Fatalf("key %q escapes the tenant prefix", got)
		}
		if err := ValidateKey(got); err != nil && len(got) <= maxKeyLen {
			t.Fatalf("built key %q is invalid: %v", got, err)
		}
	})
}
