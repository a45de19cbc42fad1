package httpdoor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/chunkup/chunkup/internal/webcors"
)

// Config configures the door. The zero value is usable: every field says what its zero
// means.
type Config struct {
	// Prefix is the path the door is mounted at, as clients see it: the creation URL, and
	// the parent of every upload's URL. Zero means "/files/". It must start and end
	// with "/".
	Prefix string

	// PublicURL, when set, makes Location headers absolute: scheme and host (and no path)
	// as clients reach the door, e.g. "https://uploads.example.com". Zero means
	// Location is an absolute path (e.g. /files/ID), which both protocols allow and
	// which survives proxies that rewrite the host.
	PublicURL string

	// MaxSize is the largest upload the door announces (Tus-Max-Size, Upload-Limit
	// max-size) and accepts at creation. Zero announces no limit and leaves the check to
	// the core, which applies its own limit anyway.
	MaxSize int64

	// MaxChecksumBody bounds a request body that carries a checksum (tus
	// Upload-Checksum, RFC 9530 Content-Digest). Such a body is held in memory until it
	// has arrived whole and its checksum matched, because a failed checksum must stage
	// nothing; a larger one is refused with 413 before anything is staged. Zero means
	// 32 MiB. A checksummed request must carry at least one chunk to make progress, so
	// this should be at least the chunk size (8 MiB by default).
	MaxChecksumBody int64

	// BufferBudget bounds the memory the door's chunk buffers hold at once, across
	// requests: each request body holds one chunk (more while a checksummed body is
	// verified). A request that cannot get a buffer within BufferWait gets 503 with
	// Retry-After. Zero means 512 MiB.
	BufferBudget int64

	// TenantBufferBudget bounds what one tenant's requests may hold of BufferBudget, so
	// that one tenant's requests, however many and however slow, leave room for
	// another's. Zero means BufferBudget less 64 MiB (the largest chunk), or half of
	// BufferBudget if that is more.
	TenantBufferBudget int64

	// BufferWait is how long a request waits for buffer memory. Zero means 10 s.
	BufferWait time.Duration

	// MinBodyRate is the slowest a request body may arrive, in bytes per second,
	// averaged over MinBodyRateWindow: a body slower than that is ended with 408 (what
	// arrived in whole chunks is kept; the client resumes from Upload-Offset), so that a
	// trickling client cannot hold its upload's lock, its connection and its buffer
	// for ever. Zero means 16 KiB/s; negative means no minimum (IdleTimeout still
	// applies).
	MinBodyRate int64

	// MinBodyRateWindow is the window MinBodyRate is measured over: a body may pause
	// for up to this long after sending at the rate. Zero means 30 s.
	MinBodyRateWindow time.Duration

	// Tenant names the tenant of the context Authenticate returned, for the tenants'
	// shares of the buffer budget. Nil puts every request in one tenant.
	Tenant func(ctx context.Context) string

	// IdleTimeout is how long a request body may send nothing before the door gives up
	// on it, stages what it has and answers; and how long a response may take to
	// write. A dead client holds its upload's lock until then. Zero means 30 s.
	IdleTimeout time.Duration

	// CoreTimeout bounds each call to the core (staging a chunk waits out
	// backpressure within it). Zero means 60 s.
	CoreTimeout time.Duration

	// CORS says which web origins may use the door from a browser.
	CORS CORS

	// Authenticate checks a request's credentials (the same API keys and bearer tokens
	// as gRPC, in Authorization or x-api-key) and returns the context the core is called
	// with, carrying the tenant. An error is answered 401. Nil lets every request in
	// with its own context: for development only. Preflight (OPTIONS) requests are not
	// authenticated, since browsers send no credentials with them.
	Authenticate func(r *http.Request) (context.Context, error)

	// Logger receives one line per failed request that was the server's fault. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// CORS configures cross-origin access. The zero value allows same-origin pages only
// (a page served by the same host, such as the dev upload page).
type CORS struct {
	// AllowedOrigins are the origins (scheme://host[:port]) whose pages may call the
	// door; "*" allows every origin. A request with another Origin is refused with 403.
	AllowedOrigins []string
	// AllowCredentials lets browsers send cookies and HTTP authentication; API keys
	// and bearer tokens in headers need no credentials mode.
	AllowCredentials bool
	// MaxAge is how long browsers may cache a preflight. Zero means 24 h.
	MaxAge time.Duration
	// AllowHeaders are request header fields pages may send besides the door's own
	// list (tusd's, the checksum and digest fields, X-Api-Key), e.g. a proxy's
	// authentication header. Zero means the door's list only.
	AllowHeaders []string
	// ExposeHeaders are response header fields pages may read besides the door's own
	// list (the tus and draft fields), e.g. a proxy's request id. Zero means the door's
	// list only.
	ExposeHeaders []string
}

// Policy is the CORS policy of a door at publicURL (see Config.PublicURL) answering
// methods, with allow and expose as its own header lists before the configured
// additions.
func (c CORS) Policy(publicURL, methods, allow, expose string) *webcors.Policy {
	maxAge := c.MaxAge
	if maxAge == 0 {
		maxAge = 24 * time.Hour
	}
	return &webcors.Policy{AllowedOrigins: c.AllowedOrigins, AllowCredentials: c.AllowCredentials, MaxAge: maxAge,
		PublicOrigin: strings.TrimSuffix(publicURL, "/"), AllowMethods: methods,
		AllowHeaders: withExtra(allow, c.AllowHeaders), ExposeHeaders: withExtra(expose, c.ExposeHeaders)}
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "/files/"
	}
	if c.MaxChecksumBody == 0 {
		c.MaxChecksumBody = 32 << 20
	}
	if c.BufferBudget == 0 {
		c.BufferBudget = 512 << 20
	}
	if c.TenantBufferBudget == 0 {
		c.TenantBufferBudget = max(c.BufferBudget-64<<20, c.BufferBudget/2)
	}
	if c.BufferWait == 0 {
		c.BufferWait = 10 * time.Second
	}
	if c.MinBodyRate == 0 {
		c.MinBodyRate = 16 << 10
	}
	if c.MinBodyRateWindow == 0 {
		c.MinBodyRateWindow = 30 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.CoreTimeout == 0 {
		c.CoreTimeout = 60 * time.Second
	}
	if c.CORS.MaxAge == 0 {
		c.CORS.MaxAge = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Prefix != "" && (!strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") || strings.ContainsAny(c.Prefix, "?#")) {
		errs = append(errs, fmt.Errorf("httpdoor: prefix %q must start and end with / (e.g. /files/)", c.Prefix))
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("httpdoor: public URL %q must be http(s)://host[:port] without a path", c.PublicURL))
		}
	}
	for name, v := range map[string]int64{"max size": c.MaxSize, "max checksum body": c.MaxChecksumBody, "buffer budget": c.BufferBudget, "tenant buffer budget": c.TenantBufferBudget} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("httpdoor: %s must not be negative", name))
		}
	}
	for name, v := range map[string]time.Duration{"buffer wait": c.BufferWait, "idle timeout": c.IdleTimeout, "core timeout": c.CoreTimeout, "CORS max age": c.CORS.MaxAge, "minimum body rate window": c.MinBodyRateWindow} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("httpdoor: %s must not be negative", name))
		}
	}
	d := c.withDefaults()
	if d.BufferBudget < d.MaxChecksumBody {
		errs = append(errs, fmt.Errorf("httpdoor: the buffer budget (%d bytes) must hold at least one checksummed body (%d bytes)", d.BufferBudget, d.MaxChecksumBody))
	}
	for _, h := range append(slices.Clone(c.CORS.AllowHeaders), c.CORS.ExposeHeaders...) {
		if h == "" || strings.ContainsFunc(h, func(r rune) bool { return !isTokenChar(r) }) {
			errs = append(errs, fmt.Errorf("httpdoor: CORS header %q is not a header field name", h))
		}
	}
	for _, o := range c.CORS.AllowedOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			errs = append(errs, fmt.Errorf("httpdoor: CORS origin %q must be scheme://host[:port] (or *)", o))
		}
	}
	return errors.Join(errs...)
}

// isTokenChar reports whether r may appear in a header field name (RFC 9110 token).
func isTokenChar(r rune) bool {
	return r < 127 && r > 32 && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
}
