package main

import (
	"strings"

	"github.com/chunkup/chunkup/app"
)

// doorFlags defines serve's flags for the HTTP door (tus and the IETF resumable-upload
// draft on --http-addr) and returns what applies them to a configuration. The largest
// upload it announces is the one the server enforces: --max-upload-size, or 10,000
// chunks of --max-chunk-size when that is 0.
func doorFlags(fs *flagSet) func(*app.Config) {
	prefix := fs.String("http-prefix", "CHUNKUP_HTTP_PREFIX", "/files/", "path of HTTP uploads (tus 1.0, IETF resumable uploads) on --http-addr; off disables them")
	publicURL := fs.String("http-public-url", "CHUNKUP_HTTP_PUBLIC_URL", "", "scheme://host[:port] clients reach --http-addr at, for absolute Location headers (empty: relative ones)")
	origins := fs.String("http-cors-origins", "CHUNKUP_HTTP_CORS_ORIGINS", "", "web page origins (scheme://host[:port], comma-separated, or *) allowed to upload from a browser (empty: only pages served by chunkup itself)")
	expose := fs.String("http-cors-expose-headers", "CHUNKUP_HTTP_CORS_EXPOSE_HEADERS", "", "response headers pages may read besides the tus and draft ones, comma-separated")
	allow := fs.String("http-cors-allow-headers", "CHUNKUP_HTTP_CORS_ALLOW_HEADERS", "", "request headers pages may send besides the tus and draft ones, comma-separated")
	return func(cfg *app.Config) {
		if *prefix == "off" {
			cfg.HTTPDoor.Off = true
		} else {
			cfg.HTTPDoor.Door.Prefix = *prefix
		}
		cfg.HTTPDoor.Door.PublicURL = *publicURL
		cfg.HTTPDoor.Door.CORS.AllowedOrigins = commaList(*origins)
		cfg.HTTPDoor.Door.CORS.ExposeHeaders = commaList(*expose)
		cfg.HTTPDoor.Door.CORS.AllowHeaders = commaList(*allow)
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
