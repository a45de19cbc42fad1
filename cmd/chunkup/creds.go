package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/server"
)

// credFlags are a client command's credentials and transport security.
type credFlags struct {
	apiKey, token, tlsCA, cert, key *string
}

func (c *credFlags) tlsConfig() (*tls.Config, error) {
	if *c.tlsCA == "" && *c.cert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if *c.tlsCA != "" {
		pem, err := os.ReadFile(*c.tlsCA)
		if err != nil {
			return nil, usageError{fmt.Errorf("--tls-ca: %w", err)}
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usageError{fmt.Errorf("--tls-ca: no certificate in %s", *c.tlsCA)}
		}
	}
	if *c.cert != "" || *c.key != "" {
		cert, err := tls.LoadX509KeyPair(*c.cert, *c.key)
		if err != nil {
			return nil, usageError{fmt.Errorf("--tls-cert/--tls-key: %w", err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// connectTimeout is how long a client command waits for the server to answer before it
// says that it cannot reach it.
const connectTimeout = time.Second

// connectHelp says, in every client command's -h, what happens when the server is
// unreachable.
const connectHelp = `The server must answer within 1s, or the command fails at once (exit 1) and says
that it cannot reach it.`

// conn connects to target with the command's credentials and checks, within
// connectTimeout, that a server answers there: an unreachable server is reported at
// once, not after retries (see connectHelp).
func (fs *flagSet) conn(ctx context.Context, target string) (*grpc.ClientConn, error) {
	c := fs.creds
	target = serverTarget(target)
	transport := insecure.NewCredentials()
	cfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		transport = credentials.NewTLS(cfg)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(transport)}, client.DialDefaults()...)
	if *c.apiKey != "" && *c.token != "" {
		return nil, usageError{errors.New("use --api-key or --token, not both")}
	}
	if *c.apiKey != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(client.APIKey(*c.apiKey)))
	}
	if *c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(client.BearerToken(*c.token)))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, usageError{fmt.Errorf("--server %q: %w", target, err)}
	}
	if err := reach(ctx, conn, target); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// defaultPort is chunkup's gRPC port: --server HOST means HOST:defaultPort. (A
// variable for the tests.)
var defaultPort = "7070"

// serverTarget is the gRPC target for --server s: HOST (a name, an IPv4 address, an
// IPv6 address with or without brackets) gets chunkup's port, where gRPC would take
// 443; HOST:PORT and gRPC target URLs (dns:///HOST:PORT, unix:PATH, …) are kept, but
// for dns:///HOST, which gets the port too.
func serverTarget(s string) string {
	if rest, ok := strings.CutPrefix(s, "dns:"); ok {
		// dns:HOST, dns:///HOST, dns://RESOLVER/HOST
		authority, host := "", rest
		if r, ok := strings.CutPrefix(rest, "//"); ok {
			authority, host, _ = strings.Cut(r, "/")
			authority = "//" + authority + "/"
		}
		return "dns:" + authority + serverTarget(host)
	}
	if s == "" || strings.Contains(s, "/") || strings.HasPrefix(s, "unix:") || strings.HasPrefix(s, "unix-abstract:") ||
		strings.HasPrefix(s, "passthrough:") || strings.HasPrefix(s, "xds:") {
		return s // empty (gRPC says what is wrong), a URL or another resolver's target
	}
	host, port, err := net.SplitHostPort(s)
	switch {
	case err == nil && port != "":
		return s
	case err == nil: // "HOST:"
		return net.JoinHostPort(host, defaultPort)
	}
	// No port: HOST, [IPV6] or a bare IPv6 address.
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), defaultPort)
}

// reach asks the server's health service (which needs no credentials) whether anyone
// answers at target. Any answer will do: the command's own call reports what else is
// wrong.
func reach(ctx context.Context, conn *grpc.ClientConn, target string) error {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
	switch {
	case status.Code(err) == codes.Unavailable:
		return err
	case status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil:
		return status.Errorf(codes.Unavailable, "no answer from %s within %v", target, connectTimeout)
	}
	return nil
}

// serverClient is the SDK on a connection the command owns.
type serverClient struct {
	*client.Client
	conn *grpc.ClientConn
}

func (c serverClient) Close() error { return c.conn.Close() }

// dial connects the SDK to server with the command's credentials (see conn).
func (fs *flagSet) dial(ctx context.Context, server string, opts ...client.Option) (serverClient, error) {
	conn, err := fs.conn(ctx, server)
	if err != nil {
		return serverClient{}, err
	}
	return serverClient{Client: client.New(conn, append(slices.Clone(sdkDefaults), opts...)...), conn: conn}, nil
}

// sdkDefaults come before a command's own options to the SDK. (A variable for the
// tests: their server may go away for good, and the SDK's retries would take half a
// minute to say so.)
var sdkDefaults []client.Option

// apikey prints a new random API key for tenant and the configuration entry that
// accepts it (only the key's SHA-256 goes into the configuration).
func apikey(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("apikey", "apikey TENANT")
	fs.SetOutput(stderr)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 || !server.ValidTenant(fs.Arg(0)) {
		return usageError{errors.New("apikey needs one TENANT (letters, digits, '.', '_', '-'; up to 63)")}
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	key := "ck_" + base64.RawURLEncoding.EncodeToString(b)
	fmt.Fprintf(stdout, "API key (give it to the tenant; it is not stored): %s\n", key)
	fmt.Fprintf(stdout, "Server configuration entry:   --api-keys %s:%s  (or CHUNKUP_API_KEYS, comma-separated)\n",
		fs.Arg(0), server.HashAPIKey(key))
	return nil
}

// authConfig builds the server's authentication from its flags.
func authConfig(apiKeys, jwtSecret, jwtKeyFile, issuer, audience, claim string) (server.AuthConfig, error) {
	cfg := server.AuthConfig{JWTIssuer: issuer, JWTAudience: audience, TenantClaim: claim}
	for entry := range strings.SplitSeq(apiKeys, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		tenant, hash, ok := strings.Cut(entry, ":")
		if !ok {
			return cfg, fmt.Errorf("--api-keys entry %q: want TENANT:SHA256HEX", entry)
		}
		if cfg.APIKeys == nil {
			cfg.APIKeys = map[string]string{}
		}
		cfg.APIKeys[strings.ToLower(hash)] = tenant
	}
	if jwtSecret != "" {
		cfg.JWTSecret = []byte(jwtSecret)
	}
	if jwtKeyFile != "" {
		pem, err := os.ReadFile(jwtKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("--jwt-public-key: %w", err)
		}
		if cfg.JWTPublicKey, err = jwt.ParseRSAPublicKeyFromPEM(pem); err != nil {
			return cfg, fmt.Errorf("--jwt-public-key: %w", err)
		}
	}
	return cfg, cfg.Validate()
}
