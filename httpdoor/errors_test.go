package httpdoor

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Header fields of the two protocols' appends, for the tests below.
var (
	tusPatch  = []string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT}
	ietfPatch = []string{"Upload-Draft-Interop-Version", "8", "Content-Type", "application/partial-upload"}
)

// A creation request that can be refused before its upload exists creates nothing. One
// that fails after its upload was created answers with the upload's Location and
// offset, and says so, so that the client resumes there (or deletes it) instead of
// leaving an upload behind and creating another.
func TestFailedCreation(t *testing.T) {
	const C = 1 << 16
	data := randomBytes(2*C+5, 20)
	wrong := bytes.Clone(data)
	wrong[C+5] ^= 1
	sha := sha1.Sum(data)
	sha1Of := base64.StdEncoding.EncodeToString(sha[:])
	whole := crc32.Checksum(data, castagnoli)
	size := strconv.Itoa(len(data))
	tus := []string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT}
	ietf := []string{"Upload-Draft-Interop-Version", "8"}
	tests := []struct {
		name   string
		cfg    Config
		body   io.Reader
		kv     []string
		status int
		// created: the upload exists after the failure, at this offset.
		created bool
		offset  int64
	}{
		{name: "tus body longer than Upload-Length", body: bytes.NewReader(make([]byte, 12)),
			kv: append(tus, "Upload-Length", "5"), status: http.StatusRequestEntityTooLarge},
		{name: "ietf body longer than Upload-Length", body: bytes.NewReader(make([]byte, 12)),
			kv: append(ietf, "Upload-Complete", "?0", "Upload-Length", "5"), status: http.StatusBadRequest},
		{name: "tus checksummed body over the limit", cfg: Config{MaxChecksumBody: C}, body: bytes.NewReader(data[:2*C]),
			kv: append(tus, "Upload-Length", size, "Upload-Checksum", "sha1 "+sha1Of), status: http.StatusRequestEntityTooLarge},

		{name: "tus checksum mismatch", body: bytes.NewReader(wrong),
			kv: append(tus, "Upload-Length", size, "Upload-Checksum", "sha1 "+sha1Of), status: 460, created: true},
		{name: "tus chunked body past Upload-Length", body: io.MultiReader(bytes.NewReader(append(bytes.Clone(data), 'x'))),
			kv: append(tus, "Upload-Length", size), status: http.StatusRequestEntityTooLarge, created: true, offset: 2 * C},
		{name: "ietf Repr-Digest mismatch", body: bytes.NewReader(data),
			kv: append(ietf, "Upload-Complete", "?1", "Repr-Digest", formatReprCRC32C(whole+1)), status: http.StatusBadRequest, created: true, offset: 2 * C},
		{name: "ietf Content-Digest mismatch", body: bytes.NewReader(wrong),
			kv: append(ietf, "Upload-Complete", "?1", "Content-Digest", "sha=:"+sha1Of+":"), status: http.StatusBadRequest, created: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, tc.cfg)
			r := e.do("POST", "/files/", tc.body, tc.kv...)
			expectStatus(t, r, tc.status)
			if !tc.created {
				if n := e.core.count(); n != 0 || r.Header.Get("Location") != "" {
					t.Fatalf("a refused creation made %d uploads (Location %q)", n, r.Header.Get("Location"))
				}
				return
			}
			id := e.core.only()
			if id == "" {
				t.Fatalf("%d uploads, want the one this request created", e.core.count())
			}
			loc := "/files/" + id
			if got := r.Header.Get("Location"); got != loc {
				t.Fatalf("Location %q, want %q: the client cannot reach the upload it made", got, loc)
			}
			if got := r.offset(t); got != tc.offset {
				t.Fatalf("Upload-Offset %d, want %d", got, tc.offset)
			}
			// The message tells the truth: where the upload is and how far it got.
			if msg := string(r.body); !strings.Contains(msg, loc) || !strings.Contains(msg, "offset "+strconv.FormatInt(tc.offset, 10)) {
				t.Fatalf("message %q does not name the upload's URL and offset", msg)
			}
			// The client resumes there.
			patch := tusPatch
			if r.Header.Get("Tus-Resumable") == "" {
				patch = append(ietfPatch, "Upload-Complete", "?1")
			}
			off := strconv.FormatInt(tc.offset, 10)
			p := e.do("PATCH", loc, bytes.NewReader(data[tc.offset:]), append(patch, "Upload-Offset", off)...)
			if p.StatusCode/100 != 2 {
				t.Fatalf("resume at Location: %d %s", p.StatusCode, p.body)
			}
			checkObject(t, e.core, id, data)
		})
	}
}

// A Repr-Digest mismatch on the request that completes an upload keeps the whole
// chunks before the last one, and the response says so: the offset, and where to go on.
func TestReprDigestMismatch(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(2*C+5, 21)
	r := e.do("POST", "/files/", bytes.NewReader(nil), "Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0", "Upload-Length", strconv.Itoa(len(data)))
	expectStatus(t, r, http.StatusCreated)
	loc := r.Header.Get("Location")
	r = e.do("PATCH", loc, bytes.NewReader(data[:C]), append(ietfPatch, "Upload-Offset", "0", "Upload-Complete", "?0")...)
	expectStatus(t, r, http.StatusNoContent)

	whole := crc32.Checksum(data, castagnoli)
	r = e.do("PATCH", loc, bytes.NewReader(data[C:]), append(ietfPatch, "Upload-Offset", strconv.Itoa(C), "Upload-Complete", "?1",
		"Repr-Digest", formatReprCRC32C(whole^1))...)
	expectStatus(t, r, http.StatusBadRequest)
	if got := r.offset(t); got != 2*C {
		t.Fatalf("Upload-Offset %d, want %d (chunk 2 is staged)", got, 2*C)
	}
	if got, _ := e.core.object(strings.TrimPrefix(loc, "/files/")); !bytes.Equal(got, data[:2*C]) {
		t.Fatalf("%d bytes staged, want the first two chunks", len(got))
	}
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Detail, "nothing was stored") || !strings.Contains(p.Detail, "offset "+strconv.Itoa(2*C)) {
		t.Fatalf("detail %q: want what was kept and the offset to resume from", p.Detail)
	}
	// The client resumes from the offset with a correct digest.
	r = e.do("PATCH", loc, bytes.NewReader(data[2*C:]), append(ietfPatch, "Upload-Offset", strconv.Itoa(2*C), "Upload-Complete", "?1",
		"Repr-Digest", formatReprCRC32C(whole))...)
	expectStatus(t, r, http.StatusOK)
}

// Every error response about an existing upload carries its durable offset (and, for
// the draft, Upload-Complete), whatever the request got wrong; a response about no
// upload carries none.
func TestErrorsCarryOffset(t *testing.T) {
	const C = 1 << 16
	e := newEnv(t, C, Config{})
	data := randomBytes(3*C, 22)
	id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
	expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader(data[:C]), append(tusPatch, "Upload-Offset", "0")...), http.StatusNoContent)
	done := idOf(t, e.do("POST", "/files/", bytes.NewReader([]byte("abc")), "Tus-Resumable", "1.0.0", "Upload-Length", "3", "Content-Type", tusCT))
	tests := []struct {
		name, method, path string
		kv                 []string
		status             int
		offset             string // "" for none
	}{
		{"tus PATCH content type", "PATCH", id, []string{"Tus-Resumable", "1.0.0", "Upload-Offset", strconv.Itoa(C), "Content-Type", "application/octet-stream"}, 415, strconv.Itoa(C)},
		{"ietf PATCH content type", "PATCH", id, []string{"Upload-Draft-Interop-Version", "8", "Upload-Offset", strconv.Itoa(C), "Upload-Complete", "?0", "Content-Type", tusCT}, 415, strconv.Itoa(C)},
		{"tus PATCH without Upload-Offset", "PATCH", id, tusPatch, 400, strconv.Itoa(C)},
		{"tus PATCH with a signed Upload-Length", "PATCH", id, append(tusPatch, "Upload-Offset", strconv.Itoa(C), "Upload-Length", "+5"), 400, strconv.Itoa(C)},
		{"ietf PATCH without Upload-Complete", "PATCH", id, append(ietfPatch, "Upload-Offset", strconv.Itoa(C)), 400, strconv.Itoa(C)},
		{"ietf PATCH without Upload-Offset", "PATCH", id, append(ietfPatch, "Upload-Complete", "?0"), 400, strconv.Itoa(C)},
		{"DELETE a completed upload", "DELETE", done, []string{"Tus-Resumable", "1.0.0"}, 409, "3"},
		{"no such upload", "PATCH", "nosuch", append(tusPatch, "Upload-Offset", "0"), 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, "/files/"+tc.path, bytes.NewReader(nil), tc.kv...)
			expectStatus(t, r, tc.status)
			if got := r.Header.Get("Upload-Offset"); got != tc.offset {
				t.Fatalf("Upload-Offset %q, want %q", got, tc.offset)
			}
			if tc.kv[0] == "Upload-Draft-Interop-Version" && r.Header.Get("Upload-Complete") != "?0" {
				t.Fatalf("Upload-Complete %q, want ?0", r.Header.Get("Upload-Complete"))
			}
		})
	}
}

// GET shows an upload that ended (aborted, failed) as JSON with its state and reason,
// as it shows any other: the upload page polls it to tell why. HEAD and PATCH, which
// the protocols define, still get 410.
func TestGetEndedUpload(t *testing.T) {
	const C = 1 << 16
	for _, tc := range []struct {
		name   string
		end    func(t *testing.T, e *env, id string)
		state  State
		reason string
	}{
		{"aborted", func(t *testing.T, e *env, id string) {
			expectStatus(t, e.do("DELETE", "/files/"+id, nil, "Tus-Resumable", "1.0.0"), http.StatusNoContent)
		}, StateAborted, ""},
		{"failed", func(_ *testing.T, e *env, id string) {
			e.core.end(id, StateFailed, "chunk 1 could not be uploaded to S3")
		}, StateFailed, "chunk 1 could not be uploaded to S3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, Config{})
			data := randomBytes(2*C, 23)
			id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
			expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader(data[:C]), append(tusPatch, "Upload-Offset", "0")...), http.StatusNoContent)
			tc.end(t, e, id)

			r := e.do("GET", "/files/"+id, nil)
			expectStatus(t, r, http.StatusOK)
			var j uploadJSON
			if err := json.Unmarshal(r.body, &j); err != nil || r.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("GET: %s %q: %v", r.body, r.Header.Get("Content-Type"), err)
			}
			if j.ID != id || j.State != tc.state || j.Reason != tc.reason || j.Offset != C || r.offset(t) != C {
				t.Fatalf("GET: %s", r.body)
			}
			expectStatus(t, e.do("HEAD", "/files/"+id, nil, "Tus-Resumable", "1.0.0"), http.StatusGone)
			expectStatus(t, e.do("HEAD", "/files/"+id, nil, "Upload-Draft-Interop-Version", "8"), http.StatusGone)
			expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader(data[C:]), append(tusPatch, "Upload-Offset", strconv.Itoa(C))...), http.StatusGone)
		})
	}
}
