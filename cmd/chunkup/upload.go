package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

func upload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("upload", "upload [flags] FILE... (- for standard input)")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	contentType := fs.String("content-type", "", "", "content type of the object(s)")
	key := fs.String("key", "", "", "object key (one file only; default uploads/ID/NAME)")
	resume := fs.String("resume", "", "", "continue upload ID with FILE (one file only); chunks the server has are not sent again")
	parallel := fs.Int("parallel", "CHUNKUP_PARALLEL", 1, "streams per upload")
	window := fs.Int("window", "CHUNKUP_WINDOW", 4, "unacknowledged chunks per stream (memory: parallel × window × chunk size)")
	jobs := fs.Int("jobs", "", 2, "files uploaded at once")
	progressMode := fs.String("progress", "", "auto", "progress display: auto (bars on a terminal, lines otherwise), bars, lines, none")
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	files := fs.Args()
	switch {
	case len(files) == 0:
		return usageError{errors.New("upload needs at least one FILE")}
	case *key != "" && len(files) > 1:
		return usageError{errors.New("--key applies to one file only")}
	case *resume != "" && len(files) > 1:
		return usageError{errors.New("--resume applies to one file only")}
	case *parallel < 1 || *window < 1 || *jobs < 1:
		return usageError{errors.New("--parallel, --window and --jobs must be at least 1")}
	}
	mode := *progressMode
	if mode == "auto" {
		mode = "lines"
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			mode = "bars"
		}
	}
	if mode != "bars" && mode != "lines" && mode != "none" {
		return usageError{fmt.Errorf("--progress %q: use auto, bars, lines or none", mode)}
	}
	c, err := fs.dial(*server, client.WithParallel(*parallel), client.WithWindow(*window))
	if err != nil {
		return err
	}
	defer c.Close()

	display := newProgressDisplay(mode, stderr)
	type result struct {
		up  *chunkupv1.Upload
		err error
	}
	results := make([]result, len(files))
	var wg sync.WaitGroup
	sem := make(chan struct{}, *jobs)
	for i, path := range files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			up, err := uploadOne(ctx, c, path, display, *contentType, *key, *resume)
			results[i] = result{up, err}
		})
	}
	wg.Wait()
	display.wait() // results are printed after the bars stop redrawing the terminal
	var failed []string
	for i, r := range results {
		if r.err == nil {
			r.err = printUpload(stdout, r.up, *asJSON)
		}
		if r.err != nil {
			failed = append(failed, files[i])
			fmt.Fprintf(stderr, "chunkup: %s: %s\n", files[i], describe(r.err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d uploads failed", len(failed), len(files))
	}
	return nil
}

func uploadOne(ctx context.Context, c *client.Client, path string, display *progressDisplay, contentType, key, resume string) (*chunkupv1.Upload, error) {
	name := filepath.Base(path)
	if path == "-" {
		name = "stdin"
	}
	track := display.track(name)
	opts := []client.UploadOption{client.WithProgress(track.update)}
	if contentType != "" {
		opts = append(opts, client.WithContentType(contentType))
	}
	if key != "" {
		opts = append(opts, client.WithKey(key))
	}
	if resume != "" {
		opts = append(opts, client.WithResume(resume))
	}
	var up *chunkupv1.Upload
	var err error
	if path == "-" {
		up, err = c.Upload(ctx, os.Stdin, append(opts, client.WithName(name))...) // size unknown until it ends
	} else {
		up, err = c.UploadFile(ctx, path, opts...)
	}
	track.done(err == nil)
	return up, err
}

// progressDisplay shows uploads' progress: a bar per file on a terminal, or a plain
// line per tenth of the way (for logs), or nothing.
type progressDisplay struct {
	mode string
	out  io.Writer
	bars *mpb.Progress
	mu   sync.Mutex
}

func newProgressDisplay(mode string, out io.Writer) *progressDisplay {
	d := &progressDisplay{mode: mode, out: out}
	if mode == "bars" {
		d.bars = mpb.New(mpb.WithOutput(out), mpb.WithRefreshRate(150*time.Millisecond), mpb.WithWidth(40))
	}
	return d
}

func (d *progressDisplay) wait() {
	if d.bars != nil {
		d.bars.Wait()
	}
}

type tracker struct {
	d      *progressDisplay
	name   string
	bar    *mpb.Bar
	tenths int64
}

func (d *progressDisplay) track(name string) *tracker {
	t := &tracker{d: d, name: name, tenths: -1}
	if d.bars != nil {
		t.bar = d.bars.AddBar(0,
			mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR), decor.CountersKibiByte("% .1f / % .1f", decor.WCSyncSpace)),
			mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Name(" "), decor.AverageSpeed(decor.SizeB1024(0), "% .1f", decor.WCSyncSpace)),
		)
	}
	return t
}

// update takes the SDK's progress (which knows the size once the upload is created):
// the bar follows acknowledged bytes (durably staged), not merely sent ones.
func (t *tracker) update(p client.Progress) {
	switch {
	case t.bar != nil:
		if p.Size >= 0 {
			t.bar.SetTotal(p.Size, false)
		} else {
			t.bar.SetTotal(p.BytesAcked+1, false)
		}
		t.bar.SetCurrent(p.BytesAcked)
	case t.d.mode == "lines":
		if p.Size <= 0 {
			return
		}
		tenth := 10 * p.BytesAcked / p.Size
		if tenth > t.tenths {
			t.tenths = tenth
			t.d.mu.Lock()
			fmt.Fprintf(t.d.out, "%s: %3d%% (%d of %d bytes acknowledged; %d chunks in S3)\n",
				t.name, 100*p.BytesAcked/p.Size, p.BytesAcked, p.Size, p.ChunksUploaded)
			t.d.mu.Unlock()
		}
	}
}

func (t *tracker) done(ok bool) {
	if t.bar == nil {
		return
	}
	if ok {
		t.bar.SetTotal(-1, true)
	} else {
		t.bar.Abort(false)
	}
}
