// Package testdocs renders small documents with known words for OCR tests: a PNG drawn
// with the Go font and a one-page PDF with Helvetica text, written by hand,
// so tests need no fixtures and know exactly what OCR should find.
package testdocs

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// PNG renders lines of text, black on white, as a PNG: Go Regular at 48 px, large and
// antialiased enough for Tesseract to read without doubt.
func PNG(lines ...string) []byte {
	f, err := opentype.Parse(goregular.TTF)
	if err != nil {
		panic(err) // the embedded font parses
	}
	face, err := opentype.NewFace(f, &opentype.FaceOptions{Size: 48, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		panic(err)
	}
	defer face.Close()
	width := 0
	for _, l := range lines {
		width = max(width, font.MeasureString(face, l).Ceil())
	}
	const lineH, margin = 72, 40
	img := image.NewGray(image.Rect(0, 0, width+2*margin, lineH*len(lines)+2*margin))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	d := &font.Drawer{Dst: img, Src: image.NewUniform(color.Black), Face: face}
	for i, l := range lines {
		d.Dot = fixed.P(margin, margin+48+i*lineH)
		d.DrawString(l)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		panic(err) // encoding an in-memory image does not fail
	}
	return buf.Bytes()
}

// PDF writes a one-page US-letter PDF showing lines of text in 36 pt Helvetica.
func PDF(lines ...string) []byte {
	var content strings.Builder
	content.WriteString("BT /F1 36 Tf 72 700 Td 44 TL\n")
	for _, l := range lines {
		r := strings.NewReplacer(`\`, `\\`, `(`, `\(`, `)`, `\)`)
		fmt.Fprintf(&content, "(%s) Tj T*\n", r.Replace(l))
	}
	content.WriteString("ET\n")
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%sendstream", content.Len(), content.String()),
	}
	var buf bytes.Buffer
	buf.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = buf.Len()
		fmt.Fprintf(&buf, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := buf.Len()
	fmt.Fprintf(&buf, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&buf, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&buf, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return buf.Bytes()
}
