package httpdoor

import (
	"bytes"
	"cmp"
	"embed"
	"html/template"
	"net/http"
	"strings"
	"time"
)

// The upload page's files. page/vendor/tus.min.js is tus-js-client's built file and
// page/vendor/uppy.min.js (with uppy.min.css) the uppy package's browser bundle, each
// vendored byte for byte from npm so the page works without a network;
// TusJSClientVersion and UppyVersion name their versions and docs/http-uploads.md how
// to refresh them.
//
//go:embed page/index.html page/page.js page/vendor/tus.min.js page/vendor/tus-js-client.LICENSE
//go:embed page/vendor/uppy.min.js page/vendor/uppy.min.css page/vendor/uppy.LICENSE
var pageFiles embed.FS

// TusJSClientVersion is the vendored tus-js-client.
const TusJSClientVersion = "4.3.1"

// UppyVersion is the vendored Uppy bundle: the last release whose @uppy/aws-s3 (5.1.0)
// speaks Companion's S3 multipart routes with its endpoint option, which the direct
// door answers (Uppy 6 rewrote that plugin without them).
const UppyVersion = "5.2.4"

// PagePaths are the paths the page serves, relative to where it is mounted.
var PagePaths = []string{"/", "/page.js", "/tus.min.js", "/tus-js-client.LICENSE", "/uppy.min.js", "/uppy.min.css", "/uppy.LICENSE"}

// PageConfig configures the upload page.
type PageConfig struct {
	// Endpoint is the HTTP door's creation URL (the door's Config.Prefix). Zero means
	// "/files/".
	Endpoint string
	// Direct is the direct door's prefix (e.g. "/s3/"), for the page's "direct to S3"
	// choice with Uppy's AwsS3 plugin, which asks for Companion's routes under s3/:
	// so the prefix must end in "/s3/". Zero (or another prefix) means no such choice.
	Direct string
	// S3Origin is the origin (scheme://host[:port]) of the S3 store as browsers reach
	// it, where the direct choice PUTs parts: the page's Content-Security-Policy lets it
	// connect there. Zero with Direct set allows any https: origin.
	S3Origin string
}

// Page returns the small upload page (drag and drop files, a progress bar each, the
// upload's id, key and state) that chunkup dev serves at "/", uploading through the
// door at endpoint (the door's Config.Prefix). It is PageWith with only the endpoint.
func Page(endpoint string) http.Handler { return PageWith(PageConfig{Endpoint: endpoint}) }

// PageWith returns the upload page for cfg. It serves PagePaths, relative to where it
// is mounted.
func PageWith(cfg PageConfig) http.Handler {
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "/files/"
	}
	direct := ""
	if strings.HasSuffix(cfg.Direct, "/s3/") {
		direct = strings.TrimSuffix(cfg.Direct, "s3/")
	}
	connect := "'self'"
	if direct != "" {
		connect += " " + cmp.Or(cfg.S3Origin, "https:")
	}
	tmpl := template.Must(template.ParseFS(pageFiles, "page/index.html"))
	var index bytes.Buffer
	if err := tmpl.Execute(&index, struct{ Endpoint, Direct, TusVersion, UppyVersion string }{endpoint, direct, TusJSClientVersion, UppyVersion}); err != nil {
		panic(err) // the template and its data are fixed: covered by TestPage
	}
	file := func(name string) []byte {
		b, err := pageFiles.ReadFile(name)
		if err != nil {
			panic(err)
		}
		return b
	}
	const js, text = "text/javascript; charset=utf-8", "text/plain; charset=utf-8"
	files := map[string]struct {
		body  []byte
		ctype string
	}{
		"/":                      {index.Bytes(), "text/html; charset=utf-8"},
		"/page.js":               {file("page/page.js"), js},
		"/tus.min.js":            {file("page/vendor/tus.min.js"), js},
		"/tus-js-client.LICENSE": {file("page/vendor/tus-js-client.LICENSE"), text},
		"/uppy.min.js":           {file("page/vendor/uppy.min.js"), js},
		"/uppy.min.css":          {file("page/vendor/uppy.min.css"), "text/css; charset=utf-8"},
		"/uppy.LICENSE":          {file("page/vendor/uppy.LICENSE"), text},
	}
	csp := "default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src " + connect
	start := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", f.ctype)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", csp)
		http.ServeContent(w, r, r.URL.Path, start, bytes.NewReader(f.body))
	})
}
