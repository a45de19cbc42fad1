package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// openPTY opens a pseudo-terminal of cols × rows and returns its two ends: the program
// writes to tty, the test reads from pty.
func openPTY(t *testing.T, cols, rows uint16) (pty, tty *os.File) {
	t.Helper()
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal (/dev/ptmx): %v; the terminal tests need one", err)
	}
	t.Cleanup(func() { pty.Close() })
	ioctl := func(f *os.File, req uintptr, arg unsafe.Pointer) {
		t.Helper()
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, uintptr(arg)); errno != 0 {
			t.Fatalf("ioctl %#x: %v", req, errno)
		}
	}
	var unlock int32
	ioctl(pty, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
	var n uint32
	ioctl(pty, syscall.TIOCGPTN, unsafe.Pointer(&n))
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	ws := struct{ rows, cols, x, y uint16 }{rows, cols, 0, 0}
	ioctl(tty, syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
	return pty, tty
}

// TestBarsOnTerminalWithoutSize: on a terminal that reports 0 × 0 the bars are drawn
// (80 columns wide), not left out.
func TestBarsOnTerminalWithoutSize(t *testing.T) {
	pty, tty := openPTY(t, 0, 0)
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&screen, pty) // until the tty is closed
	}()
	jobs := []uploadJob{{name: "one.bin", size: 10 << 20}}
	d := newProgressDisplay("bars", tty, jobs, false)
	track := d.track(0, jobs[0])
	track.start(&chunkupv1.Upload{ExpectedSize: 10 << 20})
	track.update(client.Progress{BytesAcked: 10 << 20, Size: 10 << 20})
	track.done(true)
	d.finish()
	tty.Close()
	<-read
	if !strings.Contains(screen.String(), "one.bin") || !strings.Contains(screen.String(), "100 %") {
		t.Fatalf("no bar at 100 %% on the terminal without a size: %q", screen.String())
	}
}
