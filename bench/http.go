package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// The HTTP row: the large upload through the HTTP door as a tus client sends it by
// default (tus-js-client's chunkSize is the whole file): one creation request, then one
// PATCH carrying the whole body. Like the SDK's upload, it counts as done when the
// upload is COMPLETED, which it learns from WatchUpload.

// httpClient is the bench's HTTP client: one keep-alive connection, and write buffers
// large enough that a 1 GiB body is not sent 4 KiB at a time (net/http's default),
// which would cost the client CPU the gRPC SDK does not spend.
func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 2, WriteBufferSize: 256 << 10, ReadBufferSize: 64 << 10, DisableCompression: true,
	}}
}

// viaHTTP uploads n bytes through the HTTP door, in one PATCH or (patch > 0) in
// PATCHes of patch bytes, and returns the elapsed time and costs.
func (b *bench) viaHTTP(ct *contender, n, patch int64) (time.Duration, cost) {
	ctx, cancel := b.ctx()
	defer cancel()
	start := b.next()
	m := b.startMeter(ct)
	id, err := b.tusUpload(ctx, "http://"+ct.httpAddr+"/files/", b.src.reader(start, n), n, patch)
	if err == nil {
		var last *chunkupv1.UploadProgress
		if last, err = ct.cl.Watch(ctx, id, nil); err == nil && last.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
			err = fmt.Errorf("upload %s ended %s: %s", id, last.State, last.Error)
		}
	}
	took, c := m.stop(n)
	if err != nil {
		b.tb.Fatalf("bench: HTTP upload of %s: %v", human(n), err)
	}
	up, err := ct.cl.Get(ctx, id)
	if err != nil {
		b.tb.Fatalf("bench: %v", err)
	}
	if up.Size != n {
		b.tb.Fatalf("bench: HTTP upload %s has %d bytes, want %d", id, up.Size, n)
	}
	b.verifyAndDelete([]object{{up.Key, start, n}})
	return took, c
}

// tusUpload creates a tus upload of n bytes at endpoint (a tus server's creation URL)
// and sends body in one PATCH, or (patch > 0) in PATCHes of patch bytes as tus clients
// with a chunkSize do; it returns the upload's id once the server has taken the whole
// body.
func (b *bench) tusUpload(ctx context.Context, endpoint string, body io.Reader, n, patch int64) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	req.Header.Set("Upload-Length", strconv.FormatInt(n, 10))
	req.Header.Set("Upload-Metadata", "filename "+base64.StdEncoding.EncodeToString([]byte("large.bin")))
	res, err := b.http.Do(req)
	if err != nil {
		return "", err
	}
	drain(res)
	loc, err := location(endpoint, res)
	if err != nil {
		return "", err
	}
	if patch <= 0 {
		patch = n
	}
	for off := int64(0); off < n; {
		size := min(patch, n-off)
		req, err = http.NewRequestWithContext(ctx, http.MethodPatch, loc.String(), io.LimitReader(body, size))
		if err != nil {
			return "", err
		}
		req.ContentLength = size
		req.Header.Set("Tus-Resumable", "1.0.0")
		req.Header.Set("Content-Type", "application/offset+octet-stream")
		req.Header.Set("Upload-Offset", strconv.FormatInt(off, 10))
		if res, err = b.http.Do(req); err != nil {
			return "", err
		}
		msg := drain(res)
		off += size
		if res.StatusCode != http.StatusNoContent || res.Header.Get("Upload-Offset") != strconv.FormatInt(off, 10) {
			return "", fmt.Errorf("PATCH: %s, Upload-Offset %s (want %d): %s", res.Status, res.Header.Get("Upload-Offset"), off, msg)
		}
	}
	return path.Base(loc.Path), nil
}

// tusCreateWithUpload sends data in the request that creates its tus upload
// (creation-with-upload), as tus clients do for a small file; it returns the upload's
// id once the server has taken it all.
func (b *bench) tusCreateWithUpload(ctx context.Context, endpoint string, data []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	req.Header.Set("Upload-Length", strconv.Itoa(len(data)))
	req.Header.Set("Content-Type", "application/offset+octet-stream")
	res, err := b.http.Do(req)
	if err != nil {
		return "", err
	}
	msg := drain(res)
	if res.Header.Get("Upload-Offset") != strconv.Itoa(len(data)) {
		return "", fmt.Errorf("create with upload: %s, Upload-Offset %q: %s", res.Status, res.Header.Get("Upload-Offset"), msg)
	}
	loc, err := location(endpoint, res)
	if err != nil {
		return "", err
	}
	return path.Base(loc.Path), nil
}

// location is a creation's upload URL: its Location resolved against endpoint.
func location(endpoint string, res *http.Response) (*url.URL, error) {
	base, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	loc, err := base.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusCreated || err != nil || !strings.HasPrefix(loc.Path, base.Path) {
		return nil, fmt.Errorf("create: %s, Location %q", res.Status, res.Header.Get("Location"))
	}
	return loc, nil
}

// drain reads and closes a response's body (so its connection is reused), and returns
// its start for messages.
func drain(res *http.Response) string {
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	_, _ = io.Copy(io.Discard, res.Body)
	return strings.TrimSpace(string(b))
}
