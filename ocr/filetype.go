package ocr

import (
	"bytes"
	"encoding/hex"
	"mime"
	"strings"
)

// FileType is a file type OCR handles, named by its canonical content type.
type FileType string

// The file types OCR handles.
const (
	JPEG FileType = "image/jpeg"
	PNG  FileType = "image/png"
	TIFF FileType = "image/tiff"
	PDF  FileType = "application/pdf"
)

// aliases maps content types seen in the wild to the canonical ones.
var aliases = map[string]FileType{
	"image/jpeg": JPEG, "image/jpg": JPEG, "image/pjpeg": JPEG,
	"image/png": PNG, "image/x-png": PNG,
	"image/tiff": TIFF, "image/tif": TIFF, "image/x-tiff": TIFF,
	"application/pdf": PDF, "application/x-pdf": PDF,
}

// Canonical returns the file type a declared content type names ("" if none OCR
// handles). Parameters and case are ignored.
func Canonical(contentType string) FileType {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(contentType))
	}
	return aliases[mt]
}

// Supported reports whether OCR handles uploads of contentType.
func Supported(contentType string) bool { return Canonical(contentType) != "" }

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

// pdfWindow is how far into a file a PDF header may start: readers accept up to 1024
// bytes of leading junk, so real files sometimes have some.
const pdfWindow = 1024

// Detect returns the file type b's magic bytes say, or "" if none OCR handles.
func Detect(b []byte) FileType {
	switch {
	case len(b) >= 4 && bytes.HasPrefix(b, jpegStart) && jpegMarker(b[3]):
		return JPEG
	case bytes.HasPrefix(b, pngSig):
		return PNG
	case bytes.HasPrefix(b, tiffLE), bytes.HasPrefix(b, tiffBE):
		return TIFF
	case bytes.Contains(b[:min(len(b), pdfWindow)], pdfSig):
		return PDF
	}
	return ""
}

// Validate checks b against its declared content type and returns its type, or an
// *InvalidFileError saying what the bytes are instead.
func Validate(declared string, b []byte) (FileType, error) {
	want, got := Canonical(declared), Detect(b)
	if want != "" && want == got {
		return got, nil
	}
	e := &InvalidFileError{Declared: declared, Detected: got}
	if got == "" {
		e.Head = hex.EncodeToString(b[:min(len(b), 8)])
		if e.Head == "" {
			e.Head = "nothing: the file is empty"
		}
	}
	return "", e
}
