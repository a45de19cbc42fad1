package directdoor

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"mime/multipart"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/chunkup/chunkup/internal/fault"
)

// manyPairs is n query pairs metadata[kI]=v.
func manyPairs(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "&metadata%%5Bk%d%%5D=v", i)
	}
	return b.String()
}

func TestWholeMetadata(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name, query, want string
		invalid           bool
	}{
		{"name and type", "filename=a.txt&type=text/plain", "filename " + b64("a.txt") + ",filetype " + b64("text/plain"), false},
		{"no type", "filename=a.txt", "filename " + b64("a.txt") + ",filetype " + b64("application/octet-stream"), false},
		{"Uppy's own fields dropped", "filename=a&type=t&metadata%5Bname%5D=x&metadata%5Btype%5D=y&metadata%5BrelativePath%5D=z&metadata%5Bowner%5D=bob",
			"filename " + b64("a") + ",filetype " + b64("t") + ",owner " + b64("bob"), false},
		{"a key with a space", "filename=a&metadata%5Bbad+key%5D=v", "", true},
		{"an empty key", "filename=a&metadata%5B%5D=v", "", true},
		{"a key too long", "filename=a&metadata%5B" + strings.Repeat("k", maxMetadataKey+1) + "%5D=v", "", true},
		{"a value the core refuses", "filename=a&metadata%5Bnote%5D=%07", "", true},
		{"a name the core refuses", "filename=%E2%80%AEfdp.exe", "", true},
		{"too many entries", "filename=a" + manyPairs(300), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wholeMetadata(q)
			if tc.invalid {
				if !fault.Has(err, fault.Invalid) {
					t.Fatalf("wholeMetadata(%s) = %q, %v; want an error of kind Invalid", tc.query, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("wholeMetadata(%s) = %q, %v; want %q", tc.query, got, err, tc.want)
			}
		})
	}
}

func TestFormFile(t *testing.T) {
	build := func(t *testing.T, fields []string, file []byte, fileType string) (body *bytes.Buffer, ctype string) {
		t.Helper()
		body = &bytes.Buffer{}
		mw := multipart.NewWriter(body)
		for _, f := range fields {
			k, v, _ := strings.Cut(f, "=")
			if err := mw.WriteField(k, v); err != nil {
				t.Fatal(err)
			}
		}
		if file != nil {
			h := map[string][]string{"Content-Disposition": {`form-data; name="file"; filename="f.csv"`}}
			if fileType != "" {
				h["Content-Type"] = []string{fileType}
			}
			w, err := mw.CreatePart(h)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = w.Write(file)
		}
		if err := mw.Close(); err != nil {
			t.Fatal(err)
		}
		return body, mw.FormDataContentType()
	}
	data := []byte("a,b\n1,2\n")
	many := make([]string, maxFormFields+1)
	for i := range many {
		many[i] = "x=1"
	}
	for _, tc := range []struct {
		name      string
		fields    []string
		file      []byte
		fileType  string
		wantType  string
		wantError bool
	}{
		{"the file's own type", []string{"key=k"}, data, "text/csv", "text/csv", false},
		{"the Content-Type field wins", []string{"key=k", "Content-Type=text/plain"}, data, "text/csv", "text/plain", false},
		{"no file", []string{"key=k"}, nil, "", "", true},
		{"a field over the limit", []string{"key=" + strings.Repeat("x", formFieldMax+1)}, data, "", "", true},
		{"too many fields", many, data, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := build(t, tc.fields, tc.file, tc.fileType)
			r := httptest.NewRequest("POST", "/s3/put", body)
			r.Header.Set("Content-Type", ct)
			f, name, typ, err := formFile(r)
			if tc.wantError {
				if !fault.Has(err, fault.Invalid) {
					t.Fatalf("formFile: %v, want an error of kind Invalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(f)
			if err != nil || !bytes.Equal(got, data) || name != "f.csv" || typ != tc.wantType {
				t.Fatalf("formFile: %q %q %q %v; want the file, f.csv and %q", got, name, typ, err, tc.wantType)
			}
		})
	}
	r := httptest.NewRequest("POST", "/s3/put", strings.NewReader("abc"))
	r.Header.Set("Content-Type", "text/plain")
	if _, _, _, err := formFile(r); !fault.Has(err, fault.Invalid) {
		t.Fatalf("formFile of a body that is no form: %v, want an error of kind Invalid", err)
	}
}

func TestOrigin(t *testing.T) {
	for _, tc := range []struct {
		name, public string
		header       map[string]string
		want         string
	}{
		{"the request's host", "", nil, "http://chunkup.test"},
		{"configured", "https://up.example/", nil, "https://up.example"},
		{"behind a proxy ending TLS", "", map[string]string{"X-Forwarded-Proto": "https"}, "https://chunkup.test"},
		{"Forwarded", "", map[string]string{"Forwarded": `for=1.2.3.4;proto=https`}, "https://chunkup.test"},
		{"a proxy of plain HTTP", "", map[string]string{"X-Forwarded-Proto": "http"}, "http://chunkup.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(nil, Config{PublicURL: tc.public})
			r := httptest.NewRequest("GET", "http://chunkup.test/s3/params", nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			if got := h.origin(r); got != tc.want {
				t.Fatalf("origin = %q, want %q", got, tc.want)
			}
		})
	}
}
