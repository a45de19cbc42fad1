package main

import (
	"errors"
	"strings"
	"time"

	"github.com/chunkup/chunkup/app"
)

// doorFlags defines serve's flags for the HTTP door (tus and the IETF resumable-upload
// draft on --http-addr) and returns what applies them to a configuration. The largest
// upload it announces is the one the server enforces: --max-upload-size, or 10,000
// chunks of --max-chunk-size when that is 0.
func doorFlags(fs *flagSet) func(*app.Config) error {
	prefix := fs.String("http-prefix", "CHUNKUP_HTTP_PREFIX", "/files/", "path of HTTP uploads (tus 1.0, IETF resumable uploads) on --http-addr; off disables them")
	publicURL := fs.String("http-public-url", "CHUNKUP_HTTP_PUBLIC_URL", "", "scheme://host[:port] clients reach --http-addr at, for absolute Location headers (empty: relative ones)")
	origins := fs.String("http-cors-origins", "CHUNKUP_HTTP_CORS_ORIGINS", "", "web page origins (scheme://host[:port], comma-separated, or *) allowed to upload from a browser (empty: only pages served by chunkup itself)")
	expose := fs.String("http-cors-expose-headers", "CHUNKUP_HTTP_CORS_EXPOSE_HEADERS", "", "response headers pages may read besides the tus and draft ones, comma-separated")
	allow := fs.String("http-cors-allow-headers", "CHUNKUP_HTTP_CORS_ALLOW_HEADERS", "", "request headers pages may send besides the tus and draft ones, comma-separated")
	receive := fs.Size("http-receive-memory", "CHUNKUP_HTTP_RECEIVE_MEMORY", 512<<20, "cap on the bytes HTTP upload requests hold in chunk buffers; a request holds about what it received of its current chunk (plus one chunk of read-ahead while its body flows)")
	receiveTenant := fs.Size("http-receive-memory-per-tenant", "CHUNKUP_HTTP_RECEIVE_MEMORY_PER_TENANT", 0, "what one tenant's HTTP requests may hold of --http-receive-memory (0: all of it but 64MiB, at least half)")
	minRate := fs.Size("http-min-body-rate", "CHUNKUP_HTTP_MIN_BODY_RATE", 16<<10, "bytes per second below which a request body is ended with 408 (averaged over --http-min-body-rate-window; whole chunks are kept; 0: no minimum)")
	minRateWindow := fs.Duration("http-min-body-rate-window", "CHUNKUP_HTTP_MIN_BODY_RATE_WINDOW", 30*time.Second, "the window --http-min-body-rate is measured over")
	idle := fs.Duration("http-idle-timeout", "CHUNKUP_HTTP_IDLE_TIMEOUT", 30*time.Second, "close a keep-alive connection on --http-addr idle for this long")
	maxHeader := fs.Size("http-max-header-bytes", "CHUNKUP_HTTP_MAX_HEADER_BYTES", 64<<10, "largest request header on --http-addr")
	maxConns := fs.Int("http-max-conns", "CHUNKUP_HTTP_MAX_CONNS", 4096, "open connections on --http-addr; more wait to be accepted (negative: no bound)")
	maxConnsIP := fs.Int("http-max-conns-per-ip", "CHUNKUP_HTTP_MAX_CONNS_PER_IP", 256, "open connections on --http-addr from one client address; more are closed at once (negative: no bound)")
	directPrefix := fs.String("direct-prefix", "CHUNKUP_DIRECT_PREFIX", "/s3/", "path of direct uploads to S3 (Uppy Companion's S3 multipart contract) on --http-addr; off turns direct uploads off on every door (gRPC's CreateUpload with direct, and the CLI's --direct, are refused too)")
	directTTL := fs.Duration("direct-url-ttl", "CHUNKUP_DIRECT_URL_TTL", 15*time.Minute, "how long a direct upload's signed part URL is valid (at most 7 days; at most 11h45m when a role signs them, --s3-sign-role)")
	directAbove := fs.Size("direct-above", "CHUNKUP_DIRECT_ABOVE", 0, "offer a direct upload to S3 to clients that take one (chunkup upload does unless --through-server) for files of at least this size: for clients that can reach the store (--s3-public-endpoint); at least 5MiB, 0: never")
	signRole := fs.String("s3-sign-role", "CHUNKUP_S3_SIGN_ROLE", "auto", "sign direct uploads' URLs with this role's credentials (an ARN), assumed through STS with a policy allowing only s3:PutObject in the bucket, so that no signed URL can copy another object into an upload (MinIO takes an unsigned x-amz-copy-source header on a signed part URL, and any ARN here); auto: such a role where the store lets chunkup assume one (MinIO), else chunkup's own credentials; off: chunkup's own (docs/direct-uploads.md)")
	s3Public := fs.String("s3-public-endpoint", "CHUNKUP_S3_PUBLIC_ENDPOINT", "", "the S3 endpoint URL as direct uploads' clients reach it, when it is not --s3-endpoint (empty: --s3-endpoint)")
	return func(cfg *app.Config) error {
		if *signRole == "" {
			// The configuration's "" is chunkup's own credentials, which the flag names off.
			return usageError{errors.New("--s3-sign-role ($CHUNKUP_S3_SIGN_ROLE) is empty: give a role's ARN, auto, or off")}
		}
		if *directTTL == 0 {
			return usageError{errors.New("--direct-url-ttl ($CHUNKUP_DIRECT_URL_TTL) 0: give how long a signed URL is valid, from 1s to 7 days (15m when left out)")}
		}
		if *directPrefix == "off" {
			cfg.DirectDoor.Off = true
		} else {
			cfg.DirectDoor.Prefix = *directPrefix
		}
		cfg.Upload.DirectURLTTL = *directTTL
		cfg.Upload.DirectAbove = *directAbove
		cfg.S3.PublicEndpoint = *s3Public
		if *signRole != "off" {
			cfg.S3.SignRole = *signRole
		}
		cfg.HTTPDoor.Door.BufferBudget, cfg.HTTPDoor.Door.TenantBufferBudget = *receive, *receiveTenant
		cfg.HTTPDoor.Door.MinBodyRate, cfg.HTTPDoor.Door.MinBodyRateWindow = *minRate, *minRateWindow
		if *minRate == 0 {
			cfg.HTTPDoor.Door.MinBodyRate = -1 // the flag's 0 is no minimum; the config's is the default
		}
		cfg.HTTPServer = app.HTTPServerConfig{IdleTimeout: *idle, MaxHeaderBytes: int(*maxHeader), MaxConns: *maxConns, MaxConnsPerIP: *maxConnsIP}
		if *prefix == "off" {
			cfg.HTTPDoor.Off = true
		} else {
			cfg.HTTPDoor.Door.Prefix = *prefix
		}
		cfg.HTTPDoor.Door.PublicURL = *publicURL
		cfg.HTTPDoor.Door.CORS.AllowedOrigins = commaList(*origins)
		cfg.HTTPDoor.Door.CORS.ExposeHeaders = commaList(*expose)
		cfg.HTTPDoor.Door.CORS.AllowHeaders = commaList(*allow)
		return nil
	}
}

// commaList splits a comma-separated flag value, dropping empty items.
func commaList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
