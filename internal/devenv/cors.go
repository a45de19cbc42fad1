package devenv

import "net/http"

// browserCORS lets a page of any origin use the embedded S3 with URLs chunkup signed,
// as the upload page's "direct to S3" choice does: it answers preflights itself,
// allowing the method and headers asked for, and exposes ETag (which Uppy reads from
// each part's PUT to complete the upload) on every answer to a page. gofakes3 sets
// Access-Control-Allow-Origin: * on its answers, but exposes ETag only in preflights,
// where browsers ignore it, so a page could not read a part's ETag.
//
// This is for development on loopback, without credentials: any origin. A real store
// is configured with the page's origin (docs/direct-uploads.md).
func browserCORS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Origin", origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, PUT, POST, DELETE")
			if asked := r.Header.Get("Access-Control-Request-Headers"); asked != "" {
				h.Set("Access-Control-Allow-Headers", asked)
			}
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "ETag, x-amz-request-id, x-amz-version-id")
		next.ServeHTTP(w, r)
	})
}
