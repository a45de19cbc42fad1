package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// barWidth is the width of a bar's [===>   ] part.
const barWidth = 40

// progressModeOf is the display --progress asks for on stderr: auto is bars on a
// terminal and lines otherwise.
func progressModeOf(flag string, stderr io.Writer) (string, error) {
	mode := flag
	if mode == "auto" {
		mode = "lines"
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			mode = "bars"
		}
	}
	if mode != "bars" && mode != "lines" && mode != "none" {
		return "", usageError{fmt.Errorf("--progress %q: use auto, bars, lines or none", mode)}
	}
	return mode, nil
}

// progressDisplay shows uploads' progress: on a terminal a bar per file, in the order
// of the arguments, and one for all of them when there are several; for logs a plain
// line per tenth of the way; or nothing.
type progressDisplay struct {
	mode string
	out  io.Writer
	mu   sync.Mutex // lines of several uploads
	bars *mpb.Progress
	// removeDone drops a file's bar once it is done (a tree may have many files).
	removeDone bool
	total      *mpb.Bar // all files; nil for one
	totalSpeed *speed
	filesDone  atomic.Int64
}

func newProgressDisplay(mode string, out io.Writer, jobs []uploadJob, tree bool) *progressDisplay {
	d := &progressDisplay{mode: mode, out: out, removeDone: tree}
	if mode != "bars" {
		return d
	}
	// Drawn even when out is not a terminal, as bars were asked for (auto picks lines
	// there); lines are as wide as the terminal, or 80 columns.
	d.bars = mpb.New(mpb.WithOutput(barOutput(out)), mpb.WithAutoRefresh(), mpb.WithRefreshRate(150*time.Millisecond))
	if len(jobs) < 2 {
		return d
	}
	var size int64
	for _, j := range jobs {
		size += max(j.size, 0)
	}
	d.totalSpeed = newSpeed()
	files := func(decor.Statistics) string { return fmt.Sprintf("%d/%d files", d.filesDone.Load(), len(jobs)) }
	d.total = d.bars.AddBar(size, mpb.BarWidth(barWidth), mpb.BarPriority(math.MaxInt), // below the files' bars
		mpb.PrependDecorators(decor.Name("total", decor.WCSyncSpaceR), decor.CountersKibiByte("% .1f / % .1f", decor.WCSyncSpace)),
		mpb.AppendDecorators(percentage(), decor.Name(" "), d.totalSpeed.decorator(), decor.Name("  "), decor.Any(files)),
	)
	return d
}

// barOutput is where mpb draws to out: out itself, but for a terminal that reports no
// size (0 × 0, as some ptys do), in which mpb would draw nothing, out as a mere writer,
// in which mpb draws 80 columns.
func barOutput(out io.Writer) io.Writer {
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if cols, rows, err := term.GetSize(int(f.Fd())); err != nil || cols <= 0 || rows <= 0 {
			return struct{ io.Writer }{f}
		}
	}
	return out
}

// println writes a line above the bars, or among the progress lines.
func (d *progressDisplay) println(line string) {
	if d.bars != nil {
		_, _ = fmt.Fprintln(d.bars, line)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(d.out, line)
}

// finish completes the total and waits for the bars to draw their last state.
func (d *progressDisplay) finish() {
	if d.total != nil {
		d.total.SetTotal(-1, true)
	}
	if d.bars != nil {
		d.bars.Wait()
	}
}

// tracker follows one file.
type tracker struct {
	d     *progressDisplay
	name  string
	sized bool // its size is known (not standard input), so it counts in the total
	empty bool // its size is known to be 0: its bar is one step, taken when done
	bar   *mpb.Bar
	speed *speed
	// base is what the server held when the upload started (a resume), and shown the
	// bytes shown as acknowledged so far: the bar never goes back.
	base, shown int64
	tenths      int64
}

// track makes the i-th file's tracker; its bar is placed by i, so bars keep the order of
// the arguments whatever order the files start in.
func (d *progressDisplay) track(i int, j uploadJob) *tracker {
	t := &tracker{d: d, name: j.name, sized: j.size >= 0, empty: j.size == 0, tenths: -1, speed: newSpeed()}
	if d.bars != nil {
		counters, total := decor.CountersKibiByte("% .1f / % .1f", decor.WCSyncSpace), max(j.size, 0)
		if t.empty {
			// mpb leaves a bar of no bytes empty even when complete, so an empty file's
			// bar counts one step, taken when it is done, under its true counters. (A
			// filler of our own would not shrink with the terminal: a line wider than
			// the terminal wraps and leaves its old frames behind.)
			counters, total = decor.Name("0.0 b / 0.0 b", decor.WCSyncSpace), 1
		}
		opts := []mpb.BarOption{mpb.BarWidth(barWidth), mpb.BarPriority(i),
			mpb.PrependDecorators(decor.Name(j.name, decor.WCSyncSpaceR), counters),
			mpb.AppendDecorators(percentage(), decor.Name(" "), t.speed.decorator()),
		}
		if d.removeDone {
			opts = append(opts, mpb.BarRemoveOnComplete())
		}
		t.bar = d.bars.AddBar(total, opts...)
	}
	return t
}

// start is called once the upload exists: a resumed upload's bar starts where the
// server is (drawn as a refill), and its speed counts only what is sent now.
func (t *tracker) start(up *chunkupv1.Upload) {
	t.base = up.ReceivedBytes
	t.speed.begin(t.base)
	if t.d.totalSpeed != nil && t.sized {
		t.d.totalSpeed.base.Add(t.base)
	}
	if t.bar != nil && up.ExpectedSize >= 0 && !t.empty {
		t.bar.SetTotal(up.ExpectedSize, false)
	}
	t.advance(t.base)
	if t.bar != nil && t.base > 0 {
		t.bar.SetRefill(t.base)
	}
}

// update takes the SDK's progress (which knows the size once the upload is created):
// the bar follows acknowledged bytes (durably staged), not merely sent ones.
func (t *tracker) update(p client.Progress) {
	if t.bar != nil && !t.empty {
		if p.Size >= 0 {
			t.bar.SetTotal(p.Size, false)
		} else {
			t.bar.SetTotal(max(p.BytesAcked, t.shown)+1, false)
		}
	}
	t.advance(max(p.BytesAcked, t.base))
	if t.d.mode != "lines" || p.Size <= 0 {
		return
	}
	if tenth := 10 * t.shown / p.Size; tenth > t.tenths {
		t.tenths = tenth
		line := fmt.Sprintf("%s: %3d%% (%d of %d bytes acknowledged", t.name, 100*t.shown/p.Size, t.shown, p.Size)
		if p.ChunksUploaded > 0 { // a small file is in S3 only once its upload completes
			line += "; " + plural(int64(p.ChunksUploaded), "chunk") + " in S3"
		}
		t.d.println(line + ")")
	}
}

// advance shows acked bytes acknowledged, if that is more than shown so far.
func (t *tracker) advance(acked int64) {
	if acked <= t.shown {
		return
	}
	if t.d.total != nil && t.sized {
		t.d.total.IncrInt64(acked - t.shown)
	}
	t.shown = acked
	if t.bar != nil && !t.empty {
		t.bar.SetCurrent(acked)
	}
}

func (t *tracker) done(ok bool) {
	t.d.filesDone.Add(1)
	if t.bar == nil {
		return
	}
	if ok && t.empty {
		t.bar.SetCurrent(1)
	} else if ok {
		t.bar.SetTotal(-1, true)
	} else {
		t.bar.Abort(t.d.removeDone)
	}
}

// speed is a bar's average rate since its upload started, leaving out the bytes the
// server held before (base): mpb's average speed would count a resume's head start.
type speed struct {
	base  atomic.Int64
	start atomic.Int64 // unix nanoseconds
}

func newSpeed() *speed {
	s := &speed{}
	s.start.Store(time.Now().UnixNano())
	return s
}

func (s *speed) begin(base int64) {
	s.base.Store(base)
	s.start.Store(time.Now().UnixNano())
}

func (s *speed) decorator() decor.Decorator {
	var last string // kept once the bar completes, as mpb's own speed decorators do
	return decor.Any(func(st decor.Statistics) string {
		if !st.Completed {
			secs := time.Since(time.Unix(0, s.start.Load())).Seconds()
			last = sizeString(int64(float64(st.Current-s.base.Load())/max(secs, 1e-3))) + "/s"
		}
		return last
	}, decor.WCSyncSpace)
}

// percentage is mpb's percentage ("42 %"), but 100 % for a bar completed at 0 bytes
// (an empty file), which mpb shows as 0 %.
func percentage() decor.Decorator {
	return decor.Any(func(st decor.Statistics) string {
		p := int64(100)
		if st.Total > 0 {
			p = min(100*st.Current/st.Total, 100)
		} else if !st.Completed {
			p = 0
		}
		return fmt.Sprintf("%d %%", p)
	}, decor.WCSyncSpace)
}

// plural is n and noun, plural unless n is 1: "1 chunk", "2 chunks".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// sizeString formats n bytes as mpb does ("1.5 MiB").
func sizeString(n int64) string { return fmt.Sprintf("% .1f", decor.SizeB1024(n)) }
