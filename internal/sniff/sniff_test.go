package sniff

import (
	"testing"
)

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name string
		head string
		want string
	}{
		{"jpeg jfif", "\xff\xd8\xff\xe0\x00\x10JFIF", JPEG},
		{"jpeg exif", "\xff\xd8\xff\xe1\x00\x10Exif", JPEG},
		{"png", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", PNG},
		{"tiff little endian", "II*\x00\x08\x00\x00\x00", TIFF},
		{"tiff big endian", "MM\x00*\x00\x00\x00\x08", TIFF},
		{"pdf", "%PDF-1.7\n", PDF},
		{"pdf after junk", "\x00\x00garbage%PDF-1.4", PDF},
		{"gif", "GIF89a\x01\x00", GIF},
		{"webp", "RIFF\x24\x00\x00\x00WEBPVP8 ", WEBP},
		{"bmp", "BM\x36\x00\x0c\x00\x00\x00\x00\x00\x36\x00\x00\x00", BMP},
		{"heic", "\x00\x00\x00\x18ftypheic\x00\x00\x00\x00", HEIC},
		{"avif", "\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", AVIF},
		{"mp4", "\x00\x00\x00\x20ftypisom\x00\x00\x02\x00", MP4},
		{"quicktime", "\x00\x00\x00\x14ftypqt  \x00\x00\x00\x00", MOV},
		{"zip", "PK\x03\x04\x14\x00", ZIP},
		{"gzip", "\x1f\x8b\x08\x00", GZIP},
		{"html", "<!DOCTYPE html><html>", "text/html; charset=utf-8"},
		{"text", "hello, world\n", "text/plain; charset=utf-8"},
		{"unknown ftyp brand", "\x00\x00\x00\x18ftypzzzz\x00\x00\x00\x00", ""},
		{"binary", "\x00\x01\x02\x03\x04\x05\x06", ""},
		{"empty", "", ""},
		{"a jpeg start without a marker", "\xff\xd8\xff\x00", ""},
	} {
		if got := Detect([]byte(tc.head)); got != tc.want {
			t.Errorf("%s: Detect = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestGeneric(t *testing.T) {
	for ct, want := range map[string]bool{
		"": true, "application/octet-stream": true, "Application/Octet-Stream; name=x": true, "binary/octet-stream": true,
		"image/png": false, "application/pdf": false, "text/plain": false, "garbage;;": false,
	} {
		if got := Generic(ct); got != want {
			t.Errorf("Generic(%q) = %v, want %v", ct, got, want)
		}
	}
}

func FuzzDetect(f *testing.F) {
	f.Add([]byte("%PDF-1.4"))
	f.Add([]byte("\x00\x00\x00\x18ftypheic"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := Detect(b)
		if doc := Document(b); doc != "" && got != doc {
			t.Fatalf("Detect = %q but Document = %q", got, doc)
		}
		if len(b) == 0 && got != "" {
			t.Fatalf("an empty file detected as %q", got)
		}
	})
}
