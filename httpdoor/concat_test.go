package httpdoor

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestConcatenation: partial uploads sent apart (sizes that are no multiple of the
// chunk size, one of them empty) make one final upload whose object is their bytes in
// the order the final upload names them; what tus says of HEAD and PATCH on them; and
// the final uploads that are refused with nothing created.
func TestConcatenation(t *testing.T) {
	const chunk = 1 << 16
	e := newEnv(t, chunk, Config{})
	tus := func(kv ...string) []string { return append([]string{"Tus-Resumable", "1.0.0"}, kv...) }
	data := randomBytes(3*chunk+1234, 7)
	cuts := []int{0, chunk + 17, chunk + 17, 2*chunk + 5, len(data)} // the second partial is empty
	var urls []string
	var parts [][]byte
	for i := range len(cuts) - 1 {
		part := data[cuts[i]:cuts[i+1]]
		parts = append(parts, part)
		r := e.do("POST", "/files/", bytes.NewReader(part), tus("Upload-Concat", "partial",
			"Upload-Length", strconv.Itoa(len(part)), "Content-Type", tusCT)...)
		expectStatus(t, r, http.StatusCreated)
		urls = append(urls, r.Header.Get("Location"))
	}
	h := e.do("HEAD", urls[0], nil, tus()...)
	if got := h.Header.Get("Upload-Concat"); got != "partial" {
		t.Fatalf("HEAD of a partial upload: Upload-Concat %q, want partial", got)
	}

	// The partials in another order than they were sent in.
	var order []string
	var want []byte
	for _, i := range []int{2, 0, 1, 3} {
		order = append(order, urls[i])
		want = append(want, parts[i]...)
	}
	final := "final;" + e.srv.URL + order[0] + " " + strings.Join(order[1:], " ")
	r := e.do("POST", "/files/", nil, tus("Upload-Concat", final, "Upload-Metadata", "filename "+b64("whole.bin"))...)
	expectStatus(t, r, http.StatusCreated)
	if r.offset(t) != int64(len(want)) {
		t.Fatalf("final upload's offset %d, want %d", r.offset(t), len(want))
	}
	id := idOf(t, r)
	checkObject(t, e.core, id, want)

	h = e.do("HEAD", "/files/"+id, nil, tus()...)
	if got, wantH := h.Header.Get("Upload-Concat"), "final;"+strings.Join(order, " "); got != wantH {
		t.Fatalf("HEAD of the final upload: Upload-Concat %q, want %q", got, wantH)
	}
	if got := h.Header.Get("Upload-Length"); got != strconv.Itoa(len(want)) {
		t.Fatalf("HEAD of the final upload: Upload-Length %q, want %d", got, len(want))
	}
	expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader([]byte("x")),
		tus("Upload-Offset", strconv.Itoa(len(want)), "Content-Type", tusCT)...), http.StatusForbidden)
	// Also while its lock is held, as it is while the partials' bytes are appended.
	_, unlock, err := e.core.Lock(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader([]byte("x")),
		tus("Upload-Offset", "0", "Content-Type", tusCT)...), http.StatusForbidden)
	unlock()

	unfinished := e.do("POST", "/files/", nil, tus("Upload-Concat", "partial", "Upload-Length", "10")...)
	expectStatus(t, unfinished, http.StatusCreated)
	before := len(e.core.ups)
	for _, tc := range []struct {
		name   string
		kv     []string
		status int
	}{
		{"an unfinished partial", tus("Upload-Concat", "final;"+urls[0]+" "+unfinished.Header.Get("Location")), http.StatusBadRequest},
		{"a length other than the partials'", tus("Upload-Concat", "final;"+urls[0], "Upload-Length", "1"), http.StatusBadRequest},
		{"data in the final's creation", tus("Upload-Concat", "final;"+urls[0], "Content-Type", tusCT), http.StatusForbidden},
		{"a deferred length", tus("Upload-Concat", "final;"+urls[0], "Upload-Defer-Length", "1"), http.StatusBadRequest},
		{"a missing partial", tus("Upload-Concat", "final;/files/nosuchupload"), http.StatusBadRequest},
		// Read as one URL, each would name its last upload alone.
		{"URLs separated by commas", tus("Upload-Concat", "final;"+urls[0]+","+urls[1]), http.StatusBadRequest},
		{"URLs separated by semicolons", tus("Upload-Concat", "final;"+urls[0]+";"+urls[1]), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/files/", bytes.NewReader(nil), tc.kv...)
			expectStatus(t, r, tc.status)
			if n := len(e.core.ups); n != before {
				t.Fatalf("%d uploads after a refused final upload, want %d", n, before)
			}
		})
	}
}
