package main

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ls prints the caller's uploads in progress, one line (or JSON object) each.
func ls(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ls", "ls [flags]")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 0 {
		return usageError{errors.New("ls takes no arguments")}
	}
	c, err := fs.dial(ctx, *server)
	if err != nil {
		return err
	}
	defer c.Close()
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
