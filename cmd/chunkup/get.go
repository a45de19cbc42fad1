package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
)

// get downloads a completed object through the server (ReadObject) into a file, or
// standard output, checking every message's CRC32C and the object's.
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("get", "get [flags] UPLOAD_ID|KEY [FILE|-] (FILE defaults to the key's last element) | get -r PREFIX [DIR]")
	fs.SetOutput(stderr)
	server, _ := clientFlags(fs)
	asKey := fs.Bool("key", "", false, "take the argument as an object key even if it looks like an upload id")
	offset := fs.Size("offset", "", 0, "first byte to read")
	length := fs.Size("length", "", 0, "bytes to read (0: to the end); a range is checked message by message only")
	recursive := fs.Bool("recursive", "", false, "download every object whose key begins with PREFIX into DIR (default .), keeping the keys' paths below the prefix; files already there with the same bytes are skipped")
	fs.BoolVar(recursive, "r", false, "short for --recursive")
	jobs := fs.Int("jobs", "", 4, "objects downloaded at once (with -r)")
	progressMode := fs.String("progress", "", "auto", "progress display with -r: auto (bars on a terminal, lines otherwise), bars, lines, none")
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if *recursive {
		if fs.NArg() < 1 || fs.NArg() > 2 || *offset != 0 || *length != 0 {
			return usageError{errors.New("get -r needs a PREFIX and at most one DIR, and takes no --offset or --length")}
		}
		c, err := fs.dial(ctx, *server)
		if err != nil {
			return err
		}
		defer c.Close()
		mode, err := progressModeOf(*progressMode, stderr)
		if err != nil {
			return err
		}
		return getTree(ctx, c.Client, fs.Arg(0), cmp.Or(fs.Arg(1), "."), *jobs, mode, stderr)
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return usageError{errors.New("get needs an UPLOAD_ID or KEY, and at most one FILE")}
	}
	req := &chunkupv1.ReadObjectRequest{Offset: *offset, Limit: *length}
	if ids.Valid(fs.Arg(0)) && !*asKey {
		req.UploadId = fs.Arg(0)
	} else {
		req.Key = fs.Arg(0)
	}
	c, err := fs.dial(ctx, *server)
	if err != nil {
		return err
	}
	defer c.Close()
	dest := fs.Arg(1)
	if dest == "-" {
		if _, err := c.ReadObject(ctx, req, stdout); err != nil {
			return fmt.Errorf("get: %w (what was written before this error is not to be trusted)", err)
		}
		return nil
	}
	n, dest, err := download(ctx, c.Client, req, dest, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s: %d bytes\n", dest, n)
	return nil
}

// download reads req's object (or range) into dest, or, when dest is "", into the key's
// last element in the working directory; it returns the bytes written and the file.
// The bytes go to a temporary file beside the destination, renamed into place once
// every check passed: a failed download leaves nothing behind.
func download(ctx context.Context, c *client.Client, req *chunkupv1.ReadObjectRequest, dest string, progress func(written int64)) (int64, string, error) {
	dir := "."
	if dest != "" {
		dir = filepath.Dir(dest)
	}
	tmp, err := createTemp(dir, ".chunkup-get-")
	if err != nil {
		return 0, "", err
	}
	defer os.Remove(tmp.Name())
	var w io.Writer = tmp
	if progress != nil {
		w = &countingWriter{w: tmp, fn: progress}
	}
	first, err := c.ReadObject(ctx, req, w)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, "", describeRead(err)
	}
	if dest == "" {
		key := req.Key
		if first.Upload != nil {
			key = first.Upload.Key
		}
		if dest = path.Base(key); dest == "." || dest == "/" {
			dest = "object"
		}
	}
	if fi, err := os.Stat(dest); err == nil && fi.Mode().IsRegular() {
		// A file replaced keeps its mode, as cp leaves it.
		if err := os.Chmod(tmp.Name(), fi.Mode().Perm()); err != nil {
			return 0, "", err
		}
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return 0, "", err
	}
	n := first.ObjectSize - req.Offset
	if req.Limit > 0 {
		n = min(n, req.Limit)
	}
	return n, dest, nil
}

// createTemp creates a new file in dir named prefix and random letters, with mode
// 0666 less the umask, as cp and aws s3 cp create files (os.CreateTemp's 0600 would
// stay on the file once it is renamed into place).
func createTemp(dir, prefix string) (*os.File, error) {
	for {
		name := filepath.Join(dir, prefix+rand.Text()[:10])
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

func describeRead(err error) error {
	if errors.Is(err, client.ErrCorrupt) {
		return fmt.Errorf("get: %w (nothing was written)", err)
	}
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	return nil
}

// countingWriter passes writes on to w and the running total of bytes written to fn.
type countingWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.fn(c.n)
	return n, err
}
