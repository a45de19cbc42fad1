package ocr

import (
	"encoding/hex"
	"mime"
	"strings"

	"github.com/chunkup/chunkup/internal/sniff"
)

// FileType is a file type OCR handles, named by its canonical content type.
type FileType string

// The file types OCR handles.
const (
	JPEG FileType = sniff.JPEG
	PNG  FileType = sniff.PNG
	TIFF FileType = sniff.TIFF
	PDF  FileType = sniff.PDF
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

// Detect returns the file type b's magic bytes say, or "" if none OCR handles.
func Detect(b []byte) FileType { return FileType(sniff.Document(b)) }

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
