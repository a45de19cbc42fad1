// Package webcors decides which web pages may call chunkup's HTTP doors from a browser,
// and answers their CORS: pages of the configured origins, and the door's own origin,
// which is told apart from a DNS-rebinding page's (whose Origin and Host both name the
// attacker's domain) by the configured public URL, or else by naming the server by an IP
// address or localhost. Every door on the HTTP address applies the same Policy, so a
// page refused by one is refused by all.
package webcors

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Policy is one door's CORS.
type Policy struct {
	// AllowedOrigins are the origins (scheme://host[:port]) whose pages may call the
	// door; "*" allows every origin.
	AllowedOrigins []string
	// AllowCredentials lets browsers send cookies and HTTP authentication.
	AllowCredentials bool
	// MaxAge is how long browsers may cache a preflight.
	MaxAge time.Duration
	// PublicOrigin is the door's origin as clients reach it ("" when not configured).
	PublicOrigin string
	// AllowMethods, AllowHeaders and ExposeHeaders are the CORS lists answered.
	AllowMethods, AllowHeaders, ExposeHeaders string
}

// Apply adds the CORS headers for a request from an allowed origin and reports whether
// the request may go on. A request without Origin (not from a browser page) or from
// the door's own origin needs no CORS; one from an origin not allowed is refused, so
// that no page of another site can drive uploads with a user's credentials.
func (p *Policy) Apply(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	hd := w.Header()
	hd.Add("Vary", "Origin")
	allowed := slices.Contains(p.AllowedOrigins, "*") || slices.Contains(p.AllowedOrigins, origin)
	if !allowed {
		// Browsers send Origin on same-origin POST, PATCH and DELETE too.
		return p.SameOrigin(r, origin)
	}
	hd.Set("Access-Control-Allow-Origin", origin)
	if p.AllowCredentials {
		hd.Set("Access-Control-Allow-Credentials", "true")
	}
	if r.Method == http.MethodOptions {
		hd.Set("Access-Control-Allow-Methods", p.AllowMethods)
		hd.Set("Access-Control-Allow-Headers", p.AllowHeaders)
		hd.Set("Access-Control-Max-Age", strconv.FormatInt(int64(p.MaxAge.Seconds()), 10))
	} else {
		hd.Set("Access-Control-Expose-Headers", p.ExposeHeaders)
	}
	return true
}

// SameOrigin reports whether origin is the door's own. The Host header alone cannot
// say so: a page of an attacker's domain that resolves to this server (DNS rebinding)
// sends its own name as both Origin and Host. So the origin must be the configured
// public URL's, or name the server by an IP address or localhost, which no other site's
// page can have, with the scheme and Host the request came with.
func (p *Policy) SameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	if p.PublicOrigin != "" {
		return strings.EqualFold(origin, p.PublicOrigin)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if !strings.EqualFold(u.Scheme, scheme) || !strings.EqualFold(u.Host, r.Host) {
		return false
	}
	host := u.Hostname()
	return strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil
}
