package ocr

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TesseractConfig configures the Tesseract engine. Zero values mean the documented
// defaults.
type TesseractConfig struct {
	// Path is the tesseract binary. Zero means "tesseract" on PATH.
	Path string
	// Lang is the language(s) passed with -l. Zero means "eng".
	Lang string
	// PdftoppmPath renders PDF pages to images. Zero means "pdftoppm" on PATH.
	PdftoppmPath string
	// DPI is the resolution PDF pages are rendered at. Zero means 150.
	DPI int
	// MaxPages bounds the PDF pages recognized. Zero means 50.
	MaxPages int
	// Timeout bounds one document's recognition (every page). Zero means 2 min.
	Timeout time.Duration
}

// Validate checks the configuration.
func (c TesseractConfig) Validate() error {
	if c.DPI < 0 || c.MaxPages < 0 || c.Timeout < 0 {
		return errors.New("ocr: tesseract settings must not be negative")
	}
	if strings.ContainsAny(c.Lang, " \t\n") {
		return fmt.Errorf("ocr: tesseract language %q: use tesseract's form, e.g. eng or eng+deu", c.Lang)
	}
	return nil
}

// Tesseract runs the tesseract CLI (tsv output, per-word confidence) as a subprocess,
// killed when the job's context ends. PDFs are first rendered to PNG pages with
// pdftoppm (poppler-utils).
type Tesseract struct{ cfg TesseractConfig }

// NewTesseract returns a Tesseract engine.
func NewTesseract(cfg TesseractConfig) (*Tesseract, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Path == "" {
		cfg.Path = "tesseract"
	}
	if cfg.Lang == "" {
		cfg.Lang = "eng"
	}
	if cfg.PdftoppmPath == "" {
		cfg.PdftoppmPath = "pdftoppm"
	}
	if cfg.DPI == 0 {
		cfg.DPI = 150
	}
	if cfg.MaxPages == 0 {
		cfg.MaxPages = 50
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	return &Tesseract{cfg: cfg}, nil
}

// Name implements Engine.
func (t *Tesseract) Name() string { return "tesseract" }

// Health implements Engine: tesseract must be installed. (pdftoppm is needed for PDFs
// only: its absence fails PDF jobs, not the engine.)
func (t *Tesseract) Health(context.Context) error {
	if _, err := exec.LookPath(t.cfg.Path); err != nil {
		return fmt.Errorf("tesseract not found (install tesseract-ocr and tesseract-ocr-%s): %w", strings.SplitN(t.cfg.Lang, "+", 2)[0], err)
	}
	return nil
}

// Recognize implements Engine.
func (t *Tesseract) Recognize(ctx context.Context, file []byte, typ FileType) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "chunkup-ocr-")
	if err != nil {
		return nil, outage(err)
	}
	defer os.RemoveAll(dir)
	ext := map[FileType]string{JPEG: ".jpg", PNG: ".png", TIFF: ".tif", PDF: ".pdf"}[typ]
	in := filepath.Join(dir, "in"+ext)
	if err := os.WriteFile(in, file, 0o600); err != nil {
		return nil, outage(err)
	}
	images := []string{in}
	if typ == PDF {
		if images, err = t.renderPDF(ctx, in, dir); err != nil {
			return nil, err
		}
	}
	res := &Result{Engine: t.Name()}
	for i, img := range images {
		out, err := t.run(ctx, t.cfg.Path, img, "stdout", "-l", t.cfg.Lang, "tsv")
		if err != nil {
			return nil, err
		}
		pages, err := ParseTSV(out)
		if err != nil {
			return nil, fmt.Errorf("tesseract output: %w", err)
		}
		if typ == PDF {
			// One image per PDF page: number pages by the image, not tesseract's count.
			p := mergePages(pages)
			p.Number = i + 1
			res.Pages = append(res.Pages, p)
		} else {
			res.Pages = append(res.Pages, pages...)
		}
	}
	return res, nil
}

func (t *Tesseract) renderPDF(ctx context.Context, pdf, dir string) ([]string, error) {
	prefix := filepath.Join(dir, "page")
	if _, err := t.run(ctx, t.cfg.PdftoppmPath, "-r", strconv.Itoa(t.cfg.DPI), "-png",
		"-l", strconv.Itoa(t.cfg.MaxPages), pdf, prefix); err != nil {
		return nil, err
	}
	pages, _ := filepath.Glob(prefix + "-*.png")
	if len(pages) == 0 {
		return nil, Permanent(errors.New("pdftoppm rendered no pages: the PDF has none or is unreadable"))
	}
	// pdftoppm names pages page-1.png or page-01.png (zero-padded to the page count).
	num := func(p string) int {
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "page-"), ".png"))
		return n
	}
	sort.Slice(pages, func(i, j int) bool { return num(pages[i]) < num(pages[j]) })
	return pages, nil
}

// run runs a command under ctx, killing it (and waiting at most a second for its
// pipes) when ctx ends.
func (t *Tesseract) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(name), context.Cause(ctx))
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[len(msg)-500:]
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			// Not installed: this worker cannot take the job, which is no failure of
			// the document.
			return nil, &UnavailableError{Engine: "tesseract", Err: fmt.Errorf("%s: %w", name, err)}
		}
		return nil, fmt.Errorf("%s: %w: %s", filepath.Base(name), err, msg)
	}
	return stdout.Bytes(), nil
}

// ParseTSV parses tesseract's tsv output into pages: words (level 5 rows with a
// confidence) joined by spaces within a line, lines by newlines, paragraphs and blocks
// by blank lines.
func ParseTSV(tsv []byte) ([]Page, error) {
	sc := bufio.NewScanner(bytes.NewReader(tsv))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var pages []Page
	type pageAcc struct {
		text              strings.Builder
		words             int
		conf              float64
		lastLine, lastPar string
	}
	acc := map[int]*pageAcc{}
	var order []int
	header := true
	for sc.Scan() {
		line := sc.Text()
		if header {
			header = false
			if !strings.HasPrefix(line, "level\t") {
				return nil, fmt.Errorf("no tsv header: %q", line)
			}
			continue
		}
		f := strings.SplitN(line, "\t", 12)
		if len(f) < 11 {
			continue
		}
		level, _ := strconv.Atoi(f[0])
		page, _ := strconv.Atoi(f[1])
		if _, ok := acc[page]; !ok {
			acc[page] = &pageAcc{}
			order = append(order, page)
		}
		if level != 5 || len(f) < 12 {
			continue
		}
		conf, err := strconv.ParseFloat(f[10], 64)
		text := strings.TrimSpace(f[11])
		if err != nil || conf < 0 || text == "" {
			continue
		}
		a := acc[page]
		par := f[2] + "." + f[3]
		lineID := par + "." + f[4]
		switch {
		case a.words == 0:
		case par != a.lastPar:
			a.text.WriteString("\n\n")
		case lineID != a.lastLine:
			a.text.WriteString("\n")
		default:
			a.text.WriteString(" ")
		}
		a.text.WriteString(text)
		a.lastPar, a.lastLine = par, lineID
		a.words++
		a.conf += conf
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if header {
		return nil, errors.New("empty output")
	}
	sort.Ints(order)
	for _, n := range order {
		a := acc[n]
		p := Page{Number: n, Text: a.text.String(), Words: a.words}
		if a.words > 0 {
			p.Confidence = a.conf / float64(a.words)
		}
		pages = append(pages, p)
	}
	return pages, nil
}

func mergePages(pages []Page) Page {
	r := Result{Pages: pages}
	return Page{Text: r.Text(), Words: r.Words(), Confidence: r.MeanConfidence()}
}
