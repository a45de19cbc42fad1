package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
)

// printObject prints one object as `aws s3 ls` does (time, size, key), or as JSON.
func printObject(w io.Writer, o *chunkupv1.Object, asJSON bool) error {
	if asJSON {
		return printProto(w, o)
	}
	_, err := fmt.Fprintf(w, "%s %12d %s\n", o.LastModified.AsTime().Local().Format(time.DateTime), o.Size, o.Key)
	return err
}

// lsObjects prints the caller's objects under prefix, saying on stderr when there are
// none.
func lsObjects(ctx context.Context, c *client.Client, prefix string, asJSON bool, stdout, stderr io.Writer) error {
	n := 0
	for o, err := range c.Objects(ctx, prefix) {
		if err != nil {
			return fmt.Errorf("ls: %w", err)
		}
		if err := printObject(stdout, o, asJSON); err != nil {
			return err
		}
		n++
	}
	if n == 0 && !asJSON {
		if prefix == "" {
			fmt.Fprintln(stderr, "chunkup: no objects")
		} else {
			fmt.Fprintf(stderr, "chunkup: no objects under %q\n", prefix)
		}
	}
	return nil
}

// stat prints what is known of one object.
func statCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stat", "stat [flags] KEY")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("stat needs one KEY")}
	}
	c, err := fs.dial(ctx, *server)
	if err != nil {
		return err
	}
	defer c.Close()
	o, err := c.Stat(ctx, fs.Arg(0))
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if *asJSON {
		return printObject(stdout, o, true)
	}
	crc32c := "not recorded"
	if o.HasCrc32C {
		crc32c = fmt.Sprintf("%08x", o.Crc32C)
	}
	rows := [][2]string{{"key", o.Key}, {"size", fmt.Sprint(o.Size)}, {"etag", o.Etag},
		{"last modified", o.LastModified.AsTime().Local().Format(time.RFC3339)}, {"content type", o.ContentType},
		{"crc32c", crc32c}, {"upload", o.UploadId}}
	for _, r := range rows {
		if r[1] != "" {
			fmt.Fprintf(stdout, "%-14s %s\n", r[0]+":", r[1])
		}
	}
	return nil
}

// rmCmd deletes objects: each KEY, or with -r every object under each PREFIX.
func rmCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rm", "rm [flags] KEY... | rm -r PREFIX...")
	fs.SetOutput(stderr)
	server, _ := clientFlags(fs)
	recursive := fs.Bool("recursive", "", false, "delete every object whose key begins with each PREFIX")
	fs.BoolVar(recursive, "r", false, "short for --recursive")
	ifMatch := fs.String("if-match", "", "", "delete KEY only while it has this ETag (one KEY only)")
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	switch {
	case fs.NArg() == 0:
		return usageError{errors.New("rm needs a KEY (or, with -r, a PREFIX)")}
	case *ifMatch != "" && (*recursive || fs.NArg() != 1):
		return usageError{errors.New("--if-match takes one KEY, without -r")}
	}
	c, err := fs.dial(ctx, *server)
	if err != nil {
		return err
	}
	defer c.Close()
	if !*recursive {
		for _, key := range fs.Args() {
			if err := c.Delete(ctx, key, *ifMatch); err != nil {
				return fmt.Errorf("rm %s: %w", key, err)
			}
			fmt.Fprintf(stdout, "deleted %s\n", key)
		}
		return nil
	}
	for _, prefix := range fs.Args() {
		if prefix == "" {
			return usageError{errors.New("rm -r needs a PREFIX that is not empty")}
		}
		// Listed first, deleted after: deleting while a listing pages through could
		// skip keys.
		var keys []string
		for o, err := range c.Objects(ctx, prefix) {
			if err != nil {
				return fmt.Errorf("rm -r %s: %w", prefix, err)
			}
			keys = append(keys, o.Key)
		}
		if len(keys) == 0 {
			fmt.Fprintf(stderr, "chunkup: no objects under %q\n", prefix)
		}
		for _, key := range keys {
			if err := c.Delete(ctx, key, ""); err != nil {
				return fmt.Errorf("rm -r %s: %s: %w", prefix, key, err)
			}
			fmt.Fprintf(stdout, "deleted %s\n", key)
		}
	}
	return nil
}

// getTree downloads every object under prefix into dir, keeping the keys' paths below
// the prefix, jobs at a time. A file already there with the object's size and CRC32C
// is skipped, so running it again after an interruption fetches only what is missing.
func getTree(ctx context.Context, c *client.Client, prefix, dir string, jobs int, mode string, stderr io.Writer) error {
	var objs []*chunkupv1.Object
	for o, err := range c.Objects(ctx, prefix) {
		if err != nil {
			return fmt.Errorf("get -r: %w", err)
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		return fmt.Errorf("get -r: no objects under %q", prefix)
	}
	// Keys that name no file of their own are told and left out before the bars are
	// drawn, so that the total counts only what is fetched.
	var safe []*chunkupv1.Object
	for _, o := range objs {
		rel := treePath(prefix, o.Key)
		if !filepath.IsLocal(rel) || rel != filepath.Clean(rel) || strings.HasSuffix(o.Key, "/") {
			// Outside dir, or a name that cleans to another key's file (a/./b, a//b), or
			// a folder marker: no file of its own to write.
			fmt.Fprintf(stderr, "chunkup: %s: skipped: its key does not name a file of its own inside %s\n", o.Key, dir)
			continue
		}
		safe = append(safe, o)
	}
	unsafe := len(objs) - len(safe)
	// The files' bars (or lines) as an upload of a tree shows them; the display's
	// lines go above the bars.
	// (named by their paths below DIR: a bar wider than the terminal would wrap and
	// leave its old frames behind).
	files := make([]uploadJob, len(safe))
	for i, o := range safe {
		files[i] = uploadJob{name: treePath(prefix, o.Key), size: o.Size}
	}
	display := newProgressDisplay(mode, stderr, files, true)
	var (
		mu                    sync.Mutex
		fetched, kept, failed int
		say                   = func(format string, a ...any) { display.println(strings.TrimSuffix(fmt.Sprintf(format, a...), "\n")) }
		g, gctx               = errgroup.WithContext(ctx)
		stop                  = func() bool { return ctx.Err() != nil }
		count                 = func(n *int) { mu.Lock(); *n++; mu.Unlock() }
	)
	g.SetLimit(max(1, jobs))
	for i, o := range safe {
		dest := filepath.Join(dir, files[i].name)
		track := display.track(i, files[i])
		g.Go(func() error {
			ok := false
			defer func() { track.done(ok) }()
			if stop() {
				return nil
			}
			if same, err := sameFile(gctx, c, o, dest); err == nil && same {
				track.advance(o.Size)
				ok = true
				count(&kept)
				return nil
			}
			if err := os.MkdirAll(filepath.Dir(dest), 0o777); err != nil {
				say("chunkup: %s: %v\n", o.Key, err)
				count(&failed)
				return nil
			}
			var progress func(int64)
			if mode == "bars" { // lines: one per file once it is written, below
				progress = func(written int64) { track.update(client.Progress{Size: o.Size, BytesAcked: written}) }
			}
			n, _, err := download(gctx, c, &chunkupv1.ReadObjectRequest{Key: o.Key}, dest, progress)
			if err != nil {
				say("chunkup: %s: %v\n", o.Key, err)
				count(&failed)
				return nil
			}
			if mode == "lines" {
				say("%s: %d bytes\n", dest, n)
			}
			ok = true
			count(&fetched)
			return nil
		})
	}
	_ = g.Wait()
	display.finish()
	if err := ctx.Err(); err != nil {
		return err
	}
	// The bars are gone: what is left to say goes to stderr itself.
	if kept > 0 {
		fmt.Fprintf(stderr, "chunkup: %d of %d files were already there with the same bytes\n", kept, len(objs))
	}
	if unsafe > 0 {
		fmt.Fprintf(stderr, "chunkup: %d of %d objects were skipped: their keys name no file of their own below the prefix\n", unsafe, len(objs))
	}
	if failed > 0 {
		return fmt.Errorf("get -r: %d of %d objects were not downloaded; run the same command again to fetch them", failed, len(objs))
	}
	return nil
}

// treePath is where object key goes below the directory of a get -r of prefix: its
// path after the prefix (after the prefix's last "/" when the prefix ends inside a
// name, as `aws s3 cp --recursive` does), or its last element when the key is the
// prefix itself.
func treePath(prefix, key string) string {
	base := prefix
	if !strings.HasSuffix(base, "/") {
		base = base[:strings.LastIndex(base, "/")+1]
	}
	rel := strings.TrimPrefix(key, base)
	if rel == "" {
		rel = path.Base(key)
	}
	return filepath.FromSlash(rel)
}

// sameFile reports whether the file at dest has object o's bytes: its size, and its
// CRC32C when the store keeps the object's.
func sameFile(ctx context.Context, c *client.Client, o *chunkupv1.Object, dest string) (bool, error) {
	fi, err := os.Stat(dest)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != o.Size {
		return false, err
	}
	st, err := c.Stat(ctx, o.Key)
	if err != nil || !st.HasCrc32C {
		return false, err
	}
	f, err := os.Open(dest)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := crc.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return h.Sum32() == st.Crc32C, nil
}
