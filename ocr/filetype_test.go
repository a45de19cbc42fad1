package ocr_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/ocr"
)

func TestDetect(t *testing.T) {
	jpeg := func(marker byte) []byte { return []byte{0xFF, 0xD8, 0xFF, marker, 0x00, 0x10} }
	tests := []struct {
		name string
		data []byte
		want ocr.FileType
	}{
		{"jpeg jfif", append(jpeg(0xE0), "JFIF\x00"...), ocr.JPEG},
		{"jpeg exif", append(jpeg(0xE1), "Exif\x00\x00"...), ocr.JPEG},
		{"jpeg icc", append(jpeg(0xE2), "ICC_PROFILE"...), ocr.JPEG},
		{"jpeg spiff", append(jpeg(0xE8), "SPIFF\x00"...), ocr.JPEG},
		{"jpeg raw", jpeg(0xDB), ocr.JPEG},
		{"jpeg adobe", append(jpeg(0xEE), "Adobe"...), ocr.JPEG},
		{"jpeg bad marker", jpeg(0x00), ""},
		{"png", testdocs.PNG("A"), ocr.PNG},
		{"tiff little endian", []byte("II*\x00\x08\x00\x00\x00"), ocr.TIFF},
		{"tiff big endian", []byte("MM\x00*\x00\x00\x00\x08"), ocr.TIFF},
		{"pdf", testdocs.PDF("A"), ocr.PDF},
		{"pdf after junk", append(bytes.Repeat([]byte{' '}, 100), "%PDF-1.7"...), ocr.PDF},
		{"pdf too far in", append(bytes.Repeat([]byte{' '}, 1100), "%PDF-1.7"...), ""},
		{"gif", []byte("GIF89a"), ""},
		{"html", []byte("<html>"), ""},
		{"empty", nil, ""},
		{"truncated png", []byte("\x89PNG"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ocr.Detect(tc.data); got != tc.want {
				t.Fatalf("Detect = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name, declared string
		data           []byte
		ok             bool
	}{
		{"png as png", "image/png", testdocs.PNG("A"), true},
		{"png with params and case", "Image/PNG; charset=binary", testdocs.PNG("A"), true},
		{"jpeg as jpg alias", "image/jpg", []byte{0xFF, 0xD8, 0xFF, 0xE0}, true},
		{"tiff as tif alias", "image/tif", []byte("II*\x00"), true},
		{"pdf as pdf", "application/pdf", testdocs.PDF("A"), true},
		{"pdf as png", "image/png", testdocs.PDF("A"), false},
		{"png as pdf", "application/pdf", testdocs.PNG("A"), false},
		{"png as gif", "image/gif", testdocs.PNG("A"), false},
		{"text as jpeg", "image/jpeg", []byte("hello"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ocr.Validate(tc.declared, tc.data)
			var inv *ocr.InvalidFileError
			if tc.ok != (err == nil) || err != nil && !errors.As(err, &inv) {
				t.Fatalf("Validate(%q) = %v, want ok=%v", tc.declared, err, tc.ok)
			}
		})
	}
}

// FuzzDetect checks that detection never panics and that validation agrees with it:
// bytes validate against a declared type exactly when they are detected as that type.
func FuzzDetect(f *testing.F) {
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xE0}, "image/jpeg")
	f.Add([]byte("\x89PNG\r\n\x1a\n"), "image/png")
	f.Add([]byte("II*\x00"), "image/tiff")
	f.Add([]byte("%PDF-1.4"), "application/pdf")
	f.Fuzz(func(t *testing.T, data []byte, declared string) {
		got := ocr.Detect(data)
		typ, err := ocr.Validate(declared, data)
		want := ocr.Canonical(declared)
		if (err == nil) != (want != "" && want == got) {
			t.Fatalf("Validate(%q) = %v but Detect = %q", declared, err, got)
		}
		if err == nil && typ != got {
			t.Fatalf("Validate returned %q, Detect %q", typ, got)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error message")
		}
	})
}
