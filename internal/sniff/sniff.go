// Package sniff recognizes a file's type from its first bytes, for uploads whose
// declared content type is empty or generic: the completer reads the first HeadSize
// bytes of the object and records what Detect finds, so that a PNG uploaded with no
// type still reaches OCR (docs/ocr.md), and the OCR worker checks a file's bytes
// against its type with the same rules.
package sniff

import (
	"bytes"
	"mime"
	"net/http"
	"strings"
)

// HeadSize is how many leading bytes Detect looks at: enough for a PDF header after
// the junk readers tolerate, and for the ftyp box of ISO media files.
const HeadSize = 4096

// The types Detect names, by their canonical content types.
const (
	JPEG = "image/jpeg"
	PNG  = "image/png"
	TIFF = "image/tiff"
	PDF  = "application/pdf"
	GIF  = "image/gif"
	WEBP = "image/webp"
	BMP  = "image/bmp"
	HEIC = "image/heic"
	HEIF = "image/heif"
	AVIF = "image/avif"
	MP4  = "video/mp4"
	MOV  = "video/quicktime"
	ZIP  = "application/zip"
	GZIP = "application/gzip"
)

// generic are the content types that say nothing about a file: a client that sends one
// (or none) does not know the type, so the server looks.
var generic = map[string]bool{
	"": true, "application/octet-stream": true, "binary/octet-stream": true, "application/binary": true,
	"application/x-binary": true, "application/unknown": true, "application/x-unknown": true,
	"unknown/unknown": true, "application/force-download": true, "application/x-download": true,
}

// Generic reports whether a declared content type is empty or says nothing about the
// file (application/octet-stream and its kin). Parameters and case are ignored.
func Generic(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(contentType))
	}
	return generic[mt]
}

var (
	pngSig    = []byte("\x89PNG\r\n\x1a\n")
	tiffLE    = []byte("II\x2a\x00")
	tiffBE    = []byte("MM\x00\x2a")
	pdfSig    = []byte("%PDF-")
	jpegStart = []byte{0xFF, 0xD8, 0xFF}
)

// jpegMarker reports whether m may follow a JPEG's start-of-image: an APPn segment
// (E0 JFIF, E1 EXIF, E2 ICC profile, E8 SPIFF, EE Adobe, and the other APPn that
// cameras write), or, for "raw" JPEGs without an application segment, a quantization
// table (DB), a Huffman table (C4), a start of frame (C0, C1, C2), a restart interval
// (DD) or a comment (FE).
func jpegMarker(m byte) bool {
	return m >= 0xE0 && m <= 0xEF || m == 0xDB || m == 0xC4 || m == 0xC0 || m == 0xC1 || m == 0xC2 ||
		m == 0xDD || m == 0xFE
}

// PDFWindow is how far into a file a PDF header may start: readers accept up to 1024
// bytes of leading junk, so real files sometimes have some.
const PDFWindow = 1024

// Document returns the type of an image or PDF OCR can read (JPEG, PNG, TIFF, PDF) that
// b's magic bytes say, or "".
func Document(b []byte) string {
	switch {
	case len(b) >= 4 && bytes.HasPrefix(b, jpegStart) && jpegMarker(b[3]):
		return JPEG
	case bytes.HasPrefix(b, pngSig):
		return PNG
	case bytes.HasPrefix(b, tiffLE), bytes.HasPrefix(b, tiffBE):
		return TIFF
	case bytes.Contains(b[:min(len(b), PDFWindow)], pdfSig):
		return PDF
	}
	return ""
}

// ftypBrands maps the major brand of an ISO base media file (its ftyp box) to a type.
var ftypBrands = map[string]string{
	"heic": HEIC, "heix": HEIC, "heim": HEIC, "heis": HEIC, "mif1": HEIF, "msf1": HEIF,
	"avif": AVIF, "avis": AVIF, "qt  ": MOV,
	"isom": MP4, "iso2": MP4, "mp41": MP4, "mp42": MP4, "avc1": MP4, "dash": MP4, "M4V ": MP4,
}

// Detect returns the content type b (a file's first bytes, HeadSize of them or the
// whole file when shorter) shows: the document types first, then other common
// images, media and archives, then what net/http's sniffer recognizes (HTML, XML, plain
// text, audio …). It returns "" when nothing specific is recognized.
func Detect(b []byte) string {
	if len(b) == 0 {
		return "" // an empty file is of no type (net/http would say text/plain)
	}
	if t := Document(b); t != "" {
		return t
	}
	switch {
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return GIF
	case len(b) >= 12 && bytes.HasPrefix(b, []byte("RIFF")) && string(b[8:12]) == "WEBP":
		return WEBP
	case bytes.HasPrefix(b, []byte("BM")) && len(b) >= 14 && b[6] == 0 && b[7] == 0 && b[8] == 0 && b[9] == 0:
		return BMP
	case len(b) >= 12 && string(b[4:8]) == "ftyp":
		if t, ok := ftypBrands[string(b[8:12])]; ok {
			return t
		}
	case bytes.HasPrefix(b, []byte("PK\x03\x04")), bytes.HasPrefix(b, []byte("PK\x05\x06")):
		return ZIP
	case bytes.HasPrefix(b, []byte{0x1F, 0x8B, 0x08}):
		return GZIP
	}
	switch t := http.DetectContentType(b); t {
	case "application/octet-stream", JPEG, PNG, PDF:
		// net/http's sniffer is looser about the document types than Document is (a
		// JPEG start without a valid marker): what Document rejects is no document.
		return ""
	default:
		return t
	}
}
