package httpdoor

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPageDirect: with the direct door's prefix, the page offers "direct to S3" (Uppy's
// AwsS3 endpoint is the prefix less its s3/), serves the vendored Uppy bundle, and lets
// the page connect to the S3 origin; without it (or with a prefix Uppy cannot use),
// no such choice and no connection beyond the page's origin.
func TestPageDirect(t *testing.T) {
	get := func(t *testing.T, h http.Handler, path string) (*http.Response, string) {
		t.Helper()
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return pageGet(t, srv, path)
	}
	on := PageWith(PageConfig{Endpoint: "/files/", Direct: "/api/s3/", S3Origin: "http://127.0.0.1:9000"})
	res, body := get(t, on, "/")
	if !strings.Contains(body, `data-direct="/api/"`) || !strings.Contains(body, `value="direct"`) || !strings.Contains(body, UppyVersion) ||
		res.Header.Get("Content-Security-Policy") != "default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self' http://127.0.0.1:9000" {
		t.Fatalf("page with the direct door: %v\n%s", res.Header, body)
	}
	for _, p := range PagePaths {
		if res, body := get(t, on, p); res.StatusCode != 200 || len(body) < 100 {
			t.Fatalf("%s: %d, %d bytes", p, res.StatusCode, len(body))
		}
	}
	if _, body := get(t, on, "/uppy.min.js"); !strings.Contains(body, `s3/multipart`) || !strings.Contains(body, `"AwsS3Multipart"`) {
		t.Fatal("uppy.min.js is not the vendored Uppy bundle with Companion's S3 multipart routes")
	}
	for _, cfg := range []PageConfig{{}, {Direct: "/direct/"}} {
		res, body := get(t, PageWith(cfg), "/")
		if strings.Contains(body, `value="direct"`) || !strings.Contains(body, `data-direct=""`) ||
			!strings.HasSuffix(res.Header.Get("Content-Security-Policy"), "connect-src 'self'") {
			t.Fatalf("page %+v: %v\n%s", cfg, res.Header, body)
		}
	}
}

// pageGet GETs path from srv and returns the response with its whole body.
func pageGet(t *testing.T, srv *httptest.Server, path string) (*http.Response, string) {
	t.Helper()
	res, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}
