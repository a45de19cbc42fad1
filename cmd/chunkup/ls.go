package main

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ls prints the caller's objects under a prefix (or, with --uploads, its uploads in
// progress), one line (or JSON object) each.
func ls(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ls", "ls [flags] [PREFIX] | ls --uploads")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	uploads := fs.Bool("uploads", "", false, "list your uploads in progress (ACTIVE or COMPLETING) instead of objects")
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 1 || *uploads && fs.NArg() != 0 {
		return usageError{errors.New("ls takes at most one PREFIX, and none with --uploads")}
	}
	c, err := fs.dial(ctx, *server)
	if err != nil {
		return err
	}
	defer c.Close()
	if !*uploads {
		return lsObjects(ctx, c.Client, fs.Arg(0), *asJSON, stdout, stderr)
	}
	ups, err := c.List(ctx)
	if err != nil {
		return fmt.Errorf("ls: %w", err)
	}
	if len(ups) == 0 && !*asJSON {
		// On stderr: a script reading stdout sees no uploads, a person is told so.
		fmt.Fprintln(stderr, "chunkup: no uploads in progress")
	}
	for _, up := range ups {
		if err := printUpload(stdout, up, *asJSON); err != nil {
			return err
		}
	}
	return nil
}
