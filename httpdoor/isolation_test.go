package httpdoor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tenantAuth authenticates X-Api-Key "key-T" as tenant T.
func tenantAuth(r *http.Request) (context.Context, error) {
	t, ok := strings.CutPrefix(r.Header.Get("X-Api-Key"), "key-")
	if !ok {
		return nil, errors.New("unknown API key")
	}
	return context.WithValue(r.Context(), tenantKey{}, t), nil
}

func tenantOf(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s }

// trickle sends an append whose body delivers first, then one byte every
// interval until ctx ends, and returns its reply (the client's error if it got none).
func (e *env) trickle(ctx context.Context, id, key string, length int64, first []byte, interval time.Duration) (reply, error) {
	return e.trickleTo(ctx, "PATCH", "/files/"+id, length, first, interval, "Upload-Offset", "0", "X-Api-Key", key)
}

// trickleTo is trickle with any method and path, and the header fields kv besides
// the tus ones.
func (e *env) trickleTo(ctx context.Context, method, path string, length int64, first []byte, interval time.Duration, kv ...string) (reply, error) {
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write(first); err != nil {
			return
		}
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			case <-tick.C:
				if _, err := pw.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, pr)
	if err != nil {
		return reply{}, err
	}
	req.ContentLength = length
	kv = append([]string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT}, kv...)
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{Response: res, body: b}, nil
}

// One tenant's slow requests cannot take the buffer memory another tenant needs: a
// request holds about what it received, not a whole chunk before its first byte, and a
// tenant holds at most its share.
func TestTricklingTenantLeavesRoom(t *testing.T) {
	const chunk = 16 << 20
	e := newEnv(t, chunk, Config{
		Authenticate: tenantAuth, Tenant: tenantOf,
		BufferBudget: 64 << 20, TenantBufferBudget: 40 << 20, MaxChecksumBody: 16 << 20,
		BufferWait: time.Second, MinBodyRate: -1,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hostile, stop := context.WithCancel(ctx)
	defer stop()

	// Tenant a: 12 appends announcing 100 MB, each trickling after 1.5 MiB, which a
	// chunk buffer reserved up front (16 MiB each) would hold three times over.
	const trickles = 12
	done := make(chan error, trickles)
	for i := range trickles {
		id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "100000000", "X-Api-Key", "key-a"))
		go func() {
			_, err := e.trickle(hostile, id, "key-a", 100000000, randomBytes(3<<19, uint64(i)), 200*time.Millisecond)
			done <- err // the client's cancellation, in the end
		}()
	}
	waitFor(t, "tenant a's requests to hold their buffers", func() bool { return e.door.bufs.tenantInUse("a") >= trickles*(1<<20) })
	if a := e.door.bufs.tenantInUse("a"); a > 40<<20 {
		t.Fatalf("tenant a holds %d bytes, more than its share", a)
	}

	// Tenant b's 40 MB upload goes through at once, exact.
	data := randomBytes(40_000_000, 99)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data)), "X-Api-Key", "key-b"))
	r := e.do("PATCH", "/files/"+id, bytes.NewReader(data), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", "0", "X-Api-Key", "key-b")
	expectStatus(t, r, http.StatusNoContent)
	checkObject(t, e.core, id, data)

	stop()
	for range trickles {
		<-done
	}
	waitFor(t, "every buffer to come back", func() bool { return e.door.bufs.inUse() == 0 })
}

// A body slower than the minimum rate is ended with 408; the whole chunks that arrived
// before are kept.
func TestMinBodyRate(t *testing.T) {
	const chunk = 1 << 16
	e := newEnv(t, chunk, Config{MinBodyRate: 64 << 10, MinBodyRateWindow: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "1000000"))
	first := randomBytes(2*chunk+100, 5)
	start := time.Now()
	r, err := e.trickle(ctx, id, "", 1000000, first, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, r, http.StatusRequestTimeout)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the slow body was ended after %s", took)
	}
	if !strings.Contains(string(r.body), "bytes per second") {
		t.Errorf("the 408 does not say why: %s", r.body)
	}
	// Every byte that arrived is kept: the first ones and the trickle of x's.
	got := e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0").offset(t)
	if got < int64(len(first)) || got != r.offset(t) {
		t.Fatalf("offset %d after the slow body (its 408 said %d), want at least the %d bytes sent at once", got, r.offset(t), len(first))
	}
	sent := append(first, bytes.Repeat([]byte{'x'}, int(got)-len(first))...)
	// The client resumes from there, at an ordinary rate.
	rest := randomBytes(1000000-int(got), 6)
	expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader(rest), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.FormatInt(got, 10)), http.StatusNoContent)
	checkObject(t, e.core, id, append(sent, rest...))
}

// A tus creation whose body becomes too slow after its upload exists is answered 201
// with the offset of what it kept, as the creation-with-upload extension answers a
// creation: a tus client takes a failed creation for none and would create another.
// The client goes on from that offset with PATCH; nothing else was created.
func TestSlowCreationBodyIsACreation(t *testing.T) {
	const chunk = 1 << 16
	e := newEnv(t, chunk, Config{MinBodyRate: 64 << 10, MinBodyRateWindow: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := randomBytes(2*chunk+100, 8)
	r, err := e.trickleTo(ctx, "POST", "/files/", 1000000, first, 100*time.Millisecond, "Upload-Length", "1000000")
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, r, http.StatusCreated)
	id := idOf(t, r)
	got := r.offset(t)
	if got < int64(len(first)) || got >= 1000000 {
		t.Fatalf("the creation's 201 says offset %d, want at least the %d bytes sent at once and less than the whole", got, len(first))
	}
	if head := e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0").offset(t); head != got {
		t.Fatalf("HEAD says offset %d, the creation's 201 %d", head, got)
	}
	if n := e.core.count(); n != 1 {
		t.Fatalf("%d uploads, want the one created", n)
	}
	sent := append(first, bytes.Repeat([]byte{'x'}, int(got)-len(first))...)
	rest := randomBytes(1000000-int(got), 9)
	expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader(rest), "Tus-Resumable", "1.0.0", "Content-Type", tusCT, "Upload-Offset", strconv.FormatInt(got, 10)), http.StatusNoContent)
	checkObject(t, e.core, id, append(sent, rest...))
}

// With no CORS origins configured, only the door's own origin passes, and the Host
// header alone cannot make an origin the door's own (DNS rebinding).
func TestOriginCannotBeForged(t *testing.T) {
	tests := []struct {
		name, publicURL, origin, host string
		want                          int
	}{
		{name: "no origin", want: http.StatusCreated},
		{name: "rebinding: a domain as Origin and Host", origin: "http://rebind.attacker.example:8080", host: "rebind.attacker.example:8080", want: http.StatusForbidden},
		{name: "localhost page", origin: "http://localhost:8080", host: "localhost:8080", want: http.StatusCreated},
		{name: "IP page", origin: "http://127.0.0.1:8080", host: "127.0.0.1:8080", want: http.StatusCreated},
		{name: "IP origin for another host", origin: "http://127.0.0.1:8080", host: "localhost:8080", want: http.StatusForbidden},
		{name: "other scheme", origin: "https://localhost:8080", host: "localhost:8080", want: http.StatusForbidden},
		{name: "public URL", publicURL: "https://up.example.com", origin: "https://up.example.com", host: "up.example.com", want: http.StatusCreated},
		{name: "not the public URL", publicURL: "https://up.example.com", origin: "http://localhost:8080", host: "localhost:8080", want: http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1<<16, Config{PublicURL: tc.publicURL})
			req, err := http.NewRequest("POST", e.srv.URL+"/files/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Tus-Resumable", "1.0.0")
			req.Header.Set("Upload-Length", "5")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			res, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.want)
			}
			if want := 0; tc.want != http.StatusCreated && e.core.count() != want {
				t.Fatalf("a refused request created %d uploads", e.core.count())
			}
		})
	}
}
