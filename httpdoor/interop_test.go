package httpdoor

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What differs between the accepted interop versions, each answered with its own
// semantics: the content type of an append (6), Upload-Complete required on an append
// (7), and since 9 (draft -12) Upload-Complete in responses saying whose semantics
// apply (?0 on every error of the protocol) and GET answered as HEAD.
func TestInteropDifferences(t *testing.T) {
	const C = 1 << 16
	partial := "application/partial-upload"
	for n := minInterop; n <= maxInterop; n++ {
		v := strconv.Itoa(n)
		t.Run("interop "+v, func(t *testing.T) {
			e := newEnv(t, C, Config{})
			ietf := func(kv ...string) []string { return append([]string{"Upload-Draft-Interop-Version", v}, kv...) }
			data := randomBytes(2*C+7, uint64(n))

			// OPTIONS: Upload-Limit always (min-size=0 without limits, as -12 requires),
			// and Accept-Patch (required by -09 to -11).
			r := e.do("OPTIONS", "/files/", nil, ietf()...)
			expectStatus(t, r, http.StatusOK)
			if r.Header.Get("Upload-Limit") != "min-size=0" || !strings.Contains(r.Header.Get("Accept-Patch"), partial) {
				t.Fatalf("OPTIONS %v", r.Header)
			}

			r = e.do("POST", "/files/", bytes.NewReader(nil), ietf("Upload-Complete", "?0", "Upload-Length", strconv.Itoa(len(data)))...)
			expectStatus(t, r, http.StatusCreated)
			id := idOf(t, r)

			// An append of another content type: any type up to 5, 415 from 6.
			r = e.do("PATCH", "/files/"+id, bytes.NewReader(data[:C]), ietf("Content-Type", "application/octet-stream", "Upload-Offset", "0", "Upload-Complete", "?0")...)
			if n < interopPartialUpload {
				expectStatus(t, r, http.StatusNoContent)
			} else {
				expectStatus(t, r, http.StatusUnsupportedMediaType)
				if r.Header.Get("Upload-Complete") != "?0" || r.offset(t) != 0 {
					t.Fatalf("415 %v", r.Header)
				}
				r = e.do("PATCH", "/files/"+id, bytes.NewReader(data[:C]), ietf("Content-Type", partial, "Upload-Offset", "0", "Upload-Complete", "?0")...)
				expectStatus(t, r, http.StatusNoContent)
			}
			if r.offset(t) != C || r.Header.Get("Upload-Complete") != "?0" {
				t.Fatalf("append %v", r.Header)
			}

			// An append without Upload-Complete: the last one up to 6, 400 from 7.
			rest := ietf("Content-Type", partial, "Upload-Offset", strconv.Itoa(C))
			r = e.do("PATCH", "/files/"+id, bytes.NewReader(data[C:]), rest...)
			if n >= interopCompleteRequired {
				expectStatus(t, r, http.StatusBadRequest)
				r = e.do("PATCH", "/files/"+id, bytes.NewReader(data[C:]), append(rest, "Upload-Complete", "?1")...)
			}
			expectStatus(t, r, http.StatusOK)
			if r.Header.Get("Upload-Complete") != "?1" || r.offset(t) != int64(len(data)) {
				t.Fatalf("completing append %v", r.Header)
			}
			checkObject(t, e.core, id, data)

			// A mismatching offset on the completed upload: 409 with the problem type;
			// Upload-Complete says the upload is complete up to 8, and that the
			// protocol's semantics apply (?0) since 9.
			targetSemantics := n >= interopTargetSemantics
			r = e.do("PATCH", "/files/"+id, bytes.NewReader([]byte("x")), ietf("Content-Type", partial, "Upload-Offset", "0", "Upload-Complete", "?1")...)
			expectStatus(t, r, http.StatusConflict)
			if want := sfBool(!targetSemantics); r.Header.Get("Upload-Complete") != want || r.offset(t) != int64(len(data)) {
				t.Fatalf("409 %v, want Upload-Complete %s", r.Header, want)
			}
			var p problem
			if err := json.Unmarshal(r.body, &p); err != nil || p.Type != problemMismatchingOffset || *p.ExpectedOffset != int64(len(data)) || *p.ProvidedOffset != 0 {
				t.Fatalf("problem %s: %v", r.body, err)
			}

			// GET on the upload: the state as JSON up to 8; since 9 an offset retrieval
			// like HEAD (204, no content, the offset and completeness).
			r = e.do("GET", "/files/"+id, nil, ietf()...)
			if targetSemantics {
				expectStatus(t, r, http.StatusNoContent)
				if len(r.body) != 0 || r.Header.Get("Upload-Complete") != "?1" || r.offset(t) != int64(len(data)) ||
					r.Header.Get("Cache-Control") != "no-store" || r.Header.Get("Upload-Length") != strconv.Itoa(len(data)) || r.Header.Get("Upload-Limit") == "" {
					t.Fatalf("GET %v %q", r.Header, r.body)
				}
			} else {
				expectStatus(t, r, http.StatusOK)
				var j uploadJSON
				if err := json.Unmarshal(r.body, &j); err != nil || j.ID != id || !j.Complete || j.State != StateCompleted {
					t.Fatalf("GET %s: %v", r.body, err)
				}
			}

			// GET of an upload that ended: its state up to 8; 410 like HEAD since 9.
			gone := idOf(t, e.do("POST", "/files/", bytes.NewReader(nil), ietf("Upload-Complete", "?0")...))
			expectStatus(t, e.do("DELETE", "/files/"+gone, nil, ietf()...), http.StatusNoContent)
			r = e.do("GET", "/files/"+gone, nil, ietf()...)
			if targetSemantics {
				expectStatus(t, r, http.StatusGone)
				if r.Header.Get("Upload-Complete") != "?0" {
					t.Fatalf("410 %v", r.Header)
				}
			} else {
				expectStatus(t, r, http.StatusOK)
				if !bytes.Contains(r.body, []byte(`"ABORTED"`)) {
					t.Fatalf("GET %s", r.body)
				}
			}
			// A tus or version-less GET is the page's JSON whatever the version.
			expectStatus(t, e.do("GET", "/files/"+gone, nil), http.StatusOK)
		})
	}
}

// An unknown interop version is 412 naming every version the door speaks and the draft
// revisions of each; nothing is created and no 104 is sent.
func TestInteropRefused(t *testing.T) {
	e := newEnv(t, 1<<16, Config{})
	for _, v := range []string{"3", "4", strconv.Itoa(maxInterop + 1), "99", "0", "-5", "8.0", "x", "6, 8"} {
		t.Run(v, func(t *testing.T) {
			r := e.do("POST", "/files/", bytes.NewReader([]byte("hello")), "Upload-Draft-Interop-Version", v, "Upload-Complete", "?1")
			expectStatus(t, r, http.StatusPreconditionFailed)
			if len(r.interim) != 0 || r.Header.Get("Upload-Complete") != "" || r.Header.Get("Location") != "" || r.Header.Get("Tus-Version") != tusVersion {
				t.Fatalf("412 %v, interim %v", r.Header, r.interim)
			}
			var p problem
			if err := json.Unmarshal(r.body, &p); err != nil {
				t.Fatalf("%s: %v", r.body, err)
			}
			for _, want := range []string{
				"interop versions 5 to 12", "5: drafts -03", "6: drafts -04, -05", "7: drafts -06 to -08",
				"8: drafts -09 to -11", "9: drafts -12", "10: drafts -13", "11: drafts -14 or -15", "12: drafts -15", "tus 1.0.0",
			} {
				if !strings.Contains(p.Detail, want) {
					t.Errorf("detail %q lacks %q", p.Detail, want)
				}
			}
		})
	}
	if n := e.core.count(); n != 0 {
		t.Fatalf("%d uploads created", n)
	}
	// A request that names no protocol is told the newest interop version whose text was read.
	r := e.do("POST", "/files/", bytes.NewReader(nil))
	expectStatus(t, r, http.StatusPreconditionFailed)
	if !bytes.Contains(r.body, []byte("Upload-Draft-Interop-Version: "+strconv.Itoa(newestReadInterop))) {
		t.Fatalf("%s", r.body)
	}
}

// OPTIONS carries Upload-Limit, the configured limit or min-size=0 without one, for
// every version (and for preflights, which name none).
func TestOptionsUploadLimit(t *testing.T) {
	for _, tc := range []struct {
		max  int64
		want string
	}{{0, "min-size=0"}, {1 << 30, "max-size=1073741824"}} {
		e := newEnv(t, 1<<16, Config{MaxSize: tc.max})
		for _, kv := range [][]string{nil, {"Tus-Resumable", "1.0.0"}, {"Upload-Draft-Interop-Version", "6"}, {"Upload-Draft-Interop-Version", strconv.Itoa(newestReadInterop)}} {
			for _, path := range []string{"/files/", "/files/X"} {
				r := e.do("OPTIONS", path, nil, kv...)
				expectStatus(t, r, http.StatusOK)
				if got := r.Header.Get("Upload-Limit"); got != tc.want {
					t.Errorf("max %d, %v, %s: Upload-Limit %q, want %q", tc.max, kv, path, got, tc.want)
				}
			}
		}
	}
}

// max-age counts down between responses, but the end of the upload's life it implies
// does not move earlier (draft -12: "the end of the upload resource's lifetime as
// implied by max-age SHOULD NOT decrease").
func TestMaxAgeCountsDown(t *testing.T) {
	e := newEnv(t, 1<<16, Config{})
	v := strconv.Itoa(newestReadInterop)
	r := e.do("POST", "/files/", bytes.NewReader(nil), "Upload-Draft-Interop-Version", v, "Upload-Complete", "?0", "Upload-Length", "10")
	expectStatus(t, r, http.StatusCreated)
	id := idOf(t, r)
	up, err := e.core.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	maxAge := func() (int64, time.Time) {
		h := e.do("HEAD", "/files/"+id, nil, "Upload-Draft-Interop-Version", v)
		at := time.Now()
		for _, part := range strings.Split(h.Header.Get("Upload-Limit"), ",") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(part), "max-age="); ok {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n, at
			}
		}
		t.Fatalf("no max-age in %v", h.Header)
		return 0, at
	}
	a1, t1 := maxAge()
	time.Sleep(1100 * time.Millisecond)
	a2, t2 := maxAge()
	if a2 >= a1 {
		t.Fatalf("max-age %d then %d: it does not count down", a1, a2)
	}
	for _, end := range []time.Time{t1.Add(time.Duration(a1) * time.Second), t2.Add(time.Duration(a2) * time.Second)} {
		// The implied end is the upload's expiry, to the second, and never after it.
		if end.After(up.Expires.Add(time.Second)) || end.Before(up.Expires.Add(-2*time.Second)) {
			t.Fatalf("max-age implies the end at %v; the upload expires at %v", end, up.Expires)
		}
	}
}
