package httpdoor

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"time"
)

// The upload page's files. page/vendor/tus.min.js is tus-js-client's built file,
// vendored byte for byte from npm so the page works without a network;
// TusJSClientVersion names its version and docs/http-uploads.md how to refresh it.
//
//go:embed page/index.html page/page.js page/vendor/tus.min.js page/vendor/tus-js-client.LICENSE
var pageFiles embed.FS

// TusJSClientVersion is the vendored tus-js-client.
const TusJSClientVersion = "4.3.1"

// Page returns the small upload page (drag and drop files, a progress bar each, the
// upload's id, key and state) that chunkup dev serves at "/". It uploads through the
// door at endpoint (the door's Config.Prefix) and serves, relative to where it is
// mounted: "/" (the page), "/page.js", "/tus.min.js" and "/tus-js-client.LICENSE".
func Page(endpoint string) http.Handler {
	if endpoint == "" {
		endpoint = "/files/"
	}
	tmpl := template.Must(template.ParseFS(pageFiles, "page/index.html"))
	var index bytes.Buffer
	if err := tmpl.Execute(&index, struct{ Endpoint, TusVersion string }{endpoint, TusJSClientVersion}); err != nil {
		panic(err) // the template and its data are fixed: covered by TestPage
	}
	file := func(name string) []byte {
		b, err := pageFiles.ReadFile(name)
		if err != nil {
			panic(err)
		}
		return b
	}
	files := map[string]struct {
		body  []byte
		ctype string
	}{
		"/":                      {index.Bytes(), "text/html; charset=utf-8"},
		"/page.js":               {file("page/page.js"), "text/javascript; charset=utf-8"},
		"/tus.min.js":            {file("page/vendor/tus.min.js"), "text/javascript; charset=utf-8"},
		"/tus-js-client.LICENSE": {file("page/vendor/tus-js-client.LICENSE"), "text/plain; charset=utf-8"},
	}
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
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
		http.ServeContent(w, r, r.URL.Path, start, bytes.NewReader(f.body))
	})
}
