package httpdoor

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/server"
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

// doLines sends a request whose header fields may repeat (each name, value pair is
// added, so a name twice is two lines), and reads the whole response.
func (e *env) doLines(method, path string, body []byte, kv ...string) reply {
	e.t.Helper()
	return e.do(method, path, bytes.NewReader(body), kv...)
}

// message is a refusal's text: tus's body, or the IETF problem's detail (which must
// then be a problem+json of the response's status).
func message(t *testing.T, r reply) string {
	t.Helper()
	if r.Header.Get("Content-Type") != "application/problem+json" {
		return strings.TrimSpace(string(r.body))
	}
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != r.StatusCode {
		t.Fatalf("problem %s: %v", r.body, err)
	}
	return p.Detail
}

// upState is what a refusal must leave as it was: the uploads there are, the chunks
// staged, and one upload's offset, length and state.
type upState struct {
	uploads, stages int
	offset, size    int64
	state           State
}

func (e *env) state(id string) upState {
	e.t.Helper()
	s := upState{uploads: e.core.count(), stages: e.core.stageCount()}
	if id != "" {
		up, err := e.core.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		s.offset, s.size, s.state = summarize(up).offset, up.Size, up.State
	}
	return s
}

// An Upload-Length of digits only that is larger than the server takes is 413 however
// many digits it has (it was 400 "must be a non-negative decimal integer" from 19
// digits on), with Upload-Limit (IETF) or Tus-Max-Size (tus) when the door knows its
// largest upload, and creates or changes nothing; anything else that is no
// non-negative integer stays 400 for tus.
func TestUploadLengthTooLarge(t *testing.T) {
	const C = 1 << 16
	const maxSize = 1 << 30
	digits := func(n int) string { return "1" + strings.Repeat("0", n-1) }
	tus := []string{"Tus-Resumable", "1.0.0"}
	ietf := []string{"Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0"}
	for _, tc := range []struct {
		name    string
		maxSize int64
		// patch: a PATCH to an upload of unknown length (else a creation).
		patch  bool
		kv     []string
		status int
		msg    string
		limit  string // Upload-Limit (IETF) or Tus-Max-Size (tus), "" for none
	}{
		{name: "tus 19 digits", maxSize: maxSize, kv: append(tus, "Upload-Length", digits(19)), status: 413,
			msg: "Upload-Length " + digits(19) + " is larger than this server takes (at most 1073741824 bytes); no upload was created", limit: "1073741824"},
		{name: "tus 40 digits", maxSize: maxSize, kv: append(tus, "Upload-Length", digits(40)), status: 413,
			msg: "is larger than this server takes (at most 1073741824 bytes); no upload was created", limit: "1073741824"},
		{name: "tus 11 digits over the limit", maxSize: maxSize, kv: append(tus, "Upload-Length", digits(11)), status: 413,
			msg: "is larger than this server takes (at most 1073741824 bytes)", limit: "1073741824"},
		{name: "tus 20 digits, no limit announced", kv: append(tus, "Upload-Length", digits(20)), status: 413,
			msg: "is larger than any upload can be (at most 9223372036854775807 bytes); no upload was created"},
		{name: "tus sign", maxSize: maxSize, kv: append(tus, "Upload-Length", "+5"), status: 400,
			msg: "Upload-Length must be a non-negative decimal integer, not \"+5\""},
		{name: "tus 25 characters not all digits", maxSize: maxSize, kv: append(tus, "Upload-Length", digits(24)+"x"), status: 400,
			msg: "must be a non-negative decimal integer"},
		{name: "tus PATCH 30 digits", maxSize: maxSize, patch: true,
			kv: append(tus, "Content-Type", tusCT, "Upload-Offset", "0", "Upload-Length", digits(30)), status: 413,
			msg: "is larger than this server takes (at most 1073741824 bytes); the upload was not changed", limit: "1073741824"},
		{name: "ietf 19 digits", maxSize: maxSize, kv: append(ietf, "Upload-Length", digits(19)), status: 413,
			msg: "Upload-Length " + digits(19) + " is larger than this server takes (at most 1073741824 bytes); no upload was created", limit: "max-size=1073741824"},
		{name: "ietf 16 digits, no limit announced", kv: append(ietf, "Upload-Length", digits(16)), status: 413,
			msg: "is larger than any upload can be (at most 999999999999999 bytes)"},
		{name: "ietf PATCH 20 digits", maxSize: maxSize, patch: true,
			kv:     []string{"Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0", "Content-Type", "application/partial-upload", "Upload-Offset", "0", "Upload-Length", digits(20)},
			status: 413, msg: "the upload was not changed", limit: "max-size=1073741824"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, Config{MaxSize: tc.maxSize})
			path, id := "/files/", ""
			method := "POST"
			if tc.patch {
				id = idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Defer-Length", "1"))
				path, method = "/files/"+id, "PATCH"
			}
			before := e.state(id)
			r := e.do(method, path, bytes.NewReader(nil), tc.kv...)
			expectStatus(t, r, tc.status)
			if msg := message(t, r); !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q, want %q", msg, tc.msg)
			}
			ietfReq := tc.kv[0] == "Upload-Draft-Interop-Version"
			limit := r.Header.Get("Tus-Max-Size")
			if ietfReq {
				limit = r.Header.Get("Upload-Limit")
				if p := r.Header.Get("Content-Type"); p != "application/problem+json" {
					t.Errorf("Content-Type %q, want problem+json", p)
				}
			}
			if tc.status == 413 && !strings.HasPrefix(limit, tc.limit) || tc.limit == "" && limit != "" {
				t.Errorf("limit header %q, want %q", limit, tc.limit)
			}
			if after := e.state(id); after != before {
				t.Errorf("the refusal changed %+v to %+v", before, after)
			}
			if r.Header.Get("Location") != "" {
				t.Errorf("Location %q on a refused request", r.Header.Get("Location"))
			}
		})
	}
}

// Upload-Length, Upload-Offset and Upload-Checksum sent twice (two lines, or a
// comma-separated list) are refused with 400 naming the field, rather than resolved to
// the first value; nothing is created, staged or changed.
func TestDuplicateFields(t *testing.T) {
	const C = 1 << 16
	data := randomBytes(C, 31)
	sum := sha1.Sum(data)
	sha := "sha1 " + base64.StdEncoding.EncodeToString(sum[:])
	tus := []string{"Tus-Resumable", "1.0.0"}
	tusData := []string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT}
	ietf := []string{"Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0"}
	ietfData := []string{"Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0", "Content-Type", "application/partial-upload"}
	size := strconv.Itoa(2 * C)
	for _, tc := range []struct {
		name  string
		patch bool // a PATCH at offset 0 of an upload of 2 chunks (else a creation)
		kv    []string
		field string
	}{
		{"tus create Upload-Length twice", false, append(tus, "Upload-Length", "5", "Upload-Length", "5"), "Upload-Length"},
		{"tus create Upload-Length list", false, append(tus, "Upload-Length", "5, 6"), "Upload-Length"},
		{"tus create Upload-Checksum twice", false, append(tusData, "Upload-Length", size, "Upload-Checksum", sha, "Upload-Checksum", sha), "Upload-Checksum"},
		{"tus PATCH Upload-Offset twice", true, append(tusData, "Upload-Offset", "0", "Upload-Offset", "0"), "Upload-Offset"},
		{"tus PATCH Upload-Offset list", true, append(tusData, "Upload-Offset", "0,65536"), "Upload-Offset"},
		{"tus PATCH Upload-Length twice", true, append(tusData, "Upload-Offset", "0", "Upload-Length", size, "Upload-Length", size), "Upload-Length"},
		{"tus PATCH Upload-Checksum list", true, append(tusData, "Upload-Offset", "0", "Upload-Checksum", sha+","+sha), "Upload-Checksum"},
		{"ietf create Upload-Length twice", false, append(ietf, "Upload-Length", size, "Upload-Length", "7"), "Upload-Length"},
		{"ietf create Upload-Length list", false, append(ietf, "Upload-Length", size+", "+size), "Upload-Length"},
		{"ietf PATCH Upload-Offset twice", true, append(ietfData, "Upload-Offset", "0", "Upload-Offset", "0"), "Upload-Offset"},
		{"ietf PATCH Upload-Length twice", true, append(ietfData, "Upload-Offset", "0", "Upload-Length", size, "Upload-Length", size), "Upload-Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, Config{})
			path, method, id := "/files/", "POST", ""
			if tc.patch {
				id = idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", size))
				path, method = "/files/"+id, "PATCH"
			}
			before := e.state(id)
			r := e.doLines(method, path, data, tc.kv...)
			expectStatus(t, r, http.StatusBadRequest)
			want := tc.field + " is sent more than once"
			if msg := message(t, r); !strings.HasPrefix(msg, "invalid request: "+want) || !strings.Contains(msg, "send it once, with one value") {
				t.Errorf("message %q, want %q", msg, want)
			}
			if after := e.state(id); after != before {
				t.Errorf("the refusal changed %+v to %+v", before, after)
			}
			if tc.patch && r.offset(t) != 0 {
				t.Errorf("Upload-Offset %d, want 0", r.offset(t))
			}
		})
	}
}

// Every 401 says once what is wrong and what this server accepts, as chunkup's
// authenticator (server.Authenticator.AuthenticateHTTP, the door's in chunkup) says it
// for what is configured: the door adds no hint of its own (it repeated one, and told a
// JWT-only server's clients to send an API key). Mixed credentials are refused. Nothing
// is created, and an IETF 401 carries no Upload-Complete.
func TestUnauthorizedSaysOnce(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	keys := map[string]string{server.HashAPIKey("key-a"): "acme"}
	for _, tc := range []struct {
		name string
		cfg  server.AuthConfig
		kv   []string
		want string
	}{
		{"jwt-only, no credentials", server.AuthConfig{JWTSecret: secret}, nil,
			"missing credentials; this server accepts a JWT (authorization: Bearer JWT), not API keys"},
		{"jwt-only, an API key", server.AuthConfig{JWTSecret: secret}, []string{"X-Api-Key", "key-a"},
			"an API key in x-api-key is not accepted; this server accepts a JWT (authorization: Bearer JWT), not API keys"},
		{"keys-only, no credentials", server.AuthConfig{APIKeys: keys}, nil,
			"missing credentials; this server accepts an API key (x-api-key: KEY, or authorization: Bearer KEY), not tokens"},
		{"keys and jwt, unknown key", server.AuthConfig{APIKeys: keys, JWTSecret: secret}, []string{"X-Api-Key", "key-x"},
			"invalid API key; this server accepts an API key (x-api-key: KEY, or authorization: Bearer KEY) or a JWT (authorization: Bearer JWT)"},
		{"mixed credentials", server.AuthConfig{APIKeys: keys}, []string{"X-Api-Key", "key-a", "Authorization", "Bearer key-b"},
			"mixed credentials: x-api-key and authorization carry different credentials; send one of them; this server accepts an API key (x-api-key: KEY, or authorization: Bearer KEY), not tokens"},
	} {
		for _, proto := range [][]string{
			{"Tus-Resumable", "1.0.0", "Upload-Length", "5"},
			{"Upload-Draft-Interop-Version", "8", "Upload-Complete", "?0", "Upload-Length", "5"},
		} {
			t.Run(tc.name+"/"+proto[0], func(t *testing.T) {
				a, err := server.NewAuthenticator(tc.cfg)
				if err != nil {
					t.Fatal(err)
				}
				e := newEnv(t, 1<<16, Config{Authenticate: a.AuthenticateHTTP})
				r := e.doLines("POST", "/files/", nil, append(slices.Clone(proto), tc.kv...)...)
				expectStatus(t, r, http.StatusUnauthorized)
				if msg := message(t, r); msg != tc.want {
					t.Errorf("message %q, want %q", msg, tc.want)
				}
				if r.Header.Get("WWW-Authenticate") == "" || r.Header.Get("Upload-Complete") != "" || e.core.count() != 0 {
					t.Errorf("WWW-Authenticate %q, Upload-Complete %q, %d uploads; want a challenge, no Upload-Complete, none created",
						r.Header.Get("WWW-Authenticate"), r.Header.Get("Upload-Complete"), e.core.count())
				}
			})
		}
	}
}

// HEAD, PATCH and DELETE of an upload that ended get 410 with a text that fits the
// request: what became of the upload, when and why, and what to do (a DELETE of an
// expired upload was told it "accepts no more chunks"). Nothing changes; DELETE of an
// upload cancelled already is a 204 no-op.
func TestEndedUploadMessages(t *testing.T) {
	const C = 1 << 16
	data := randomBytes(2*C, 32)
	type end struct {
		state  State
		reason string
	}
	for _, tc := range []struct {
		name, method string
		end          end
		status       int
		want         []string // in the message, in order
	}{
		{"DELETE expired", "DELETE", end{StateExpired, "idle for more than 24h0m0s"}, 410,
			[]string{"upload ID expired at ", " (idle for more than 24h0m0s); its data was discarded when it ended, so it holds nothing to delete: to send the file, create a new upload"}},
		{"DELETE failed", "DELETE", end{StateFailed, "chunk 1 could not be stored"}, 410,
			[]string{"upload ID failed at ", " (chunk 1 could not be stored); its data was discarded when it ended, so it holds nothing to delete"}},
		{"DELETE cancelled", "DELETE", end{StateAborted, "terminated over HTTP (DELETE)"}, 204, nil},
		{"HEAD expired", "HEAD", end{StateExpired, "idle for more than 24h0m0s"}, 410, nil},
		{"overridden HEAD expired", "POST:HEAD", end{StateExpired, "idle"}, 410,
			[]string{"upload ID expired at ", " (idle); it cannot be resumed: create a new upload and send the file from its start"}},
		{"PATCH expired", "PATCH", end{StateExpired, "idle for more than 24h0m0s"}, 410,
			[]string{"upload ID expired at ", " (idle for more than 24h0m0s); it takes no more data: create a new upload and send the file from its start"}},
		{"PATCH cancelled", "PATCH", end{StateAborted, "terminated over HTTP (DELETE)"}, 410,
			[]string{"upload ID was cancelled at ", " (terminated over HTTP (DELETE)); it takes no more data: create a new upload"}},
		{"PATCH failed", "PATCH", end{StateFailed, "S3 refused part 1"}, 410,
			[]string{"upload ID failed at ", " (S3 refused part 1); it takes no more data"}},
		{"POST-overridden PATCH failed", "POST:PATCH", end{StateFailed, "S3 refused part 1"}, 410,
			[]string{"upload ID failed at ", " (S3 refused part 1); it takes no more data"}},
		{"overridden DELETE expired", "POST:DELETE", end{StateExpired, "idle"}, 410,
			[]string{"upload ID expired at ", " (idle); its data was discarded when it ended, so it holds nothing to delete"}},
	} {
		for _, proto := range []string{"tus", "ietf"} {
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				e := newEnv(t, C, Config{})
				id := idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.Itoa(len(data))))
				expectStatus(t, e.do("PATCH", "/files/"+id, bytes.NewReader(data[:C]), append(tusPatch, "Upload-Offset", "0")...), http.StatusNoContent)
				e.core.end(id, tc.end.state, tc.end.reason)
				before := e.state(id)

				kv := []string{"Tus-Resumable", "1.0.0", "Content-Type", tusCT}
				if proto == "ietf" {
					kv = []string{"Upload-Draft-Interop-Version", "8", "Upload-Complete", "?1", "Content-Type", "application/partial-upload"}
				}
				kv = append(kv, "Upload-Offset", strconv.Itoa(C))
				method, override, _ := strings.Cut(tc.method, ":")
				if override != "" {
					kv = append(kv, "X-HTTP-Method-Override", override)
				}
				var body []byte
				if tc.method == "PATCH" || override == "PATCH" {
					body = data[C:]
				}
				r := e.doLines(method, "/files/"+id, body, kv...)
				expectStatus(t, r, tc.status)
				if after := e.state(id); after != before {
					t.Errorf("the request changed %+v to %+v", before, after)
				}
				// tus: a HEAD answered 410 goes without Upload-Offset (the spec's SHOULD).
				if head := method == "HEAD" || override == "HEAD"; head && proto == "tus" {
					if got := r.Header.Get("Upload-Offset"); got != "" {
						t.Errorf("Upload-Offset %q on a tus HEAD's 410, want none", got)
					}
				} else if tc.status == http.StatusGone && r.offset(t) != C {
					t.Errorf("Upload-Offset %d, want %d", r.offset(t), C)
				}
				if len(tc.want) == 0 {
					return
				}
				up, _ := e.core.Get(context.Background(), id)
				want := strings.ReplaceAll(tc.want[0], "ID", id) + up.Ended.UTC().Format(time.RFC3339) + tc.want[1]
				if msg := message(t, r); !strings.HasPrefix(msg, want) || strings.Contains(msg, "chunks") {
					t.Errorf("message %q, want it to start %q", msg, want)
				}
			})
		}
	}
}

// A 412 (no protocol version this server speaks) concerns no upload: an IETF one
// carries no Upload-Complete (it carried ?0), but Tus-Version; nothing is created or
// changed. Nor do other responses about no upload (404, 401).
func TestNoUploadCompleteWithoutUpload(t *testing.T) {
	const C = 1 << 16
	for _, tc := range []struct {
		name, method string
		onUpload     bool
		kv           []string
		status       int
	}{
		{"POST interop 3", "POST", false, []string{"Upload-Draft-Interop-Version", "3", "Upload-Complete", "?1"}, 412},
		{"POST interop 99", "POST", false, []string{"Upload-Draft-Interop-Version", "99", "Upload-Complete", "?0"}, 412},
		{"PATCH interop 4", "PATCH", true, []string{"Upload-Draft-Interop-Version", "4", "Upload-Offset", "0", "Upload-Complete", "?0"}, 412},
		{"HEAD interop 2", "HEAD", true, []string{"Upload-Draft-Interop-Version", "2"}, 412},
		{"DELETE interop x", "DELETE", true, []string{"Upload-Draft-Interop-Version", "x"}, 412},
		{"HEAD no such upload", "HEAD", false, []string{"Upload-Draft-Interop-Version", "8"}, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, Config{})
			path, id := "/files/", ""
			if tc.onUpload {
				id = idOf(t, e.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "5"))
				path += id
			} else if tc.method != "POST" {
				path += "nosuch"
			}
			before := e.state(id)
			r := e.doLines(tc.method, path, nil, tc.kv...)
			expectStatus(t, r, tc.status)
			if v, ok := r.Header["Upload-Complete"]; ok {
				t.Errorf("Upload-Complete %q on a %d", v, tc.status)
			}
			if tc.status == 412 && r.Header.Get("Tus-Version") != "1.0.0" {
				t.Errorf("Tus-Version %q", r.Header.Get("Tus-Version"))
			}
			if after := e.state(id); after != before {
				t.Errorf("the request changed %+v to %+v", before, after)
			}
		})
	}
}

// An upload of unknown size takes no byte past the server's maximum size, not even into
// its tail (it took them, answered 204, and then could neither go on nor finish): the
// request that crosses it is 413 and keeps only the whole chunks before; one that stops
// at the maximum is taken, and the upload can then be finished.
func TestDeferredLengthStopsAtMaxSize(t *testing.T) {
	const C = 1 << 16
	const maxSize = 3*C + C/2
	data := randomBytes(maxSize+1, 29)
	tus := []string{"Tus-Resumable", "1.0.0"}
	patch := func(e *env, id string, off int64, body []byte, kv ...string) reply {
		t.Helper()
		return e.do("PATCH", "/files/"+id, bytes.NewReader(body),
			append(append([]string{}, tus...), append([]string{"Content-Type", tusCT, "Upload-Offset", strconv.FormatInt(off, 10)}, kv...)...)...)
	}
	for _, tc := range []struct {
		name       string
		body       int   // bytes of the first PATCH
		status     int   // its answer
		offset     int64 // the offset after it
		finishWith int   // bytes of the PATCH that then declares the length and ends it
	}{
		{"one byte past the maximum", maxSize + 1, 413, 3 * C, C / 2},
		{"up to the maximum", maxSize, 204, maxSize, 0},
		{"within the last chunk", 3*C + 10, 204, 3*C + 10, C/2 - 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, C, Config{MaxSize: maxSize})
			id := idOf(t, e.do("POST", "/files/", nil, append(tus, "Upload-Defer-Length", "1")...))
			r := patch(e, id, 0, data[:tc.body])
			expectStatus(t, r, tc.status)
			if tc.status == 413 && !strings.Contains(message(t, r), "past this server's maximum upload size of 229376 bytes") {
				t.Errorf("message %q", message(t, r))
			}
			if got := e.state(id).offset; got != tc.offset {
				t.Fatalf("offset %d after the PATCH, want %d", got, tc.offset)
			}
			// Not one byte more, wherever the upload stands.
			expectStatus(t, patch(e, id, tc.offset, data[tc.offset:tc.offset+int64(tc.finishWith)+1]), 413)
			if got := e.state(id).offset; got != tc.offset {
				t.Fatalf("offset %d after a refused PATCH, want %d", got, tc.offset)
			}
			r = patch(e, id, tc.offset, data[tc.offset:maxSize], "Upload-Length", strconv.Itoa(maxSize))
			expectStatus(t, r, 204)
			checkObject(t, e.core, id, data[:maxSize])
		})
	}
	t.Run("ietf", func(t *testing.T) {
		e := newEnv(t, C, Config{MaxSize: maxSize})
		ietf := []string{"Upload-Draft-Interop-Version", "8", "Content-Type", "application/partial-upload"}
		r := e.do("POST", "/files/", bytes.NewReader(data), append(ietf, "Upload-Complete", "?1")...)
		expectStatus(t, r, 413)
		if r.Header.Get("Upload-Limit") != "max-size=229376" {
			t.Errorf("Upload-Limit %q", r.Header.Get("Upload-Limit"))
		}
		r = e.do("POST", "/files/", bytes.NewReader(data[:maxSize]), append(ietf, "Upload-Complete", "?1")...)
		expectStatus(t, r, 201)
		checkObject(t, e.core, idOf(t, r), data[:maxSize])
	})
}
