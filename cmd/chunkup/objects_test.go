package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/server"
)

// TestObjectCommands works with objects as two tenants, as aws s3 and mc users do: a
// nested tree (an empty file in it) uploaded with upload -r comes back with get -r into
// a new folder byte for byte, and a second get -r fetches nothing again; ls lists the
// tenant's objects (with --json too), stat describes one, rm deletes one (get of it is
// then NOT_FOUND), rm -r of the prefix leaves none. The other tenant sees none of them
// and can delete none.
func TestObjectCommands(t *testing.T) {
	clearEnv(t)
	isolateState(t)
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	cfg := app.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "off", RedisURL: r.URL(), S3: m.S3Config(), Bucket: bucket,
		ShutdownTimeout: 5 * time.Second}
	cfg.Auth.APIKeys = map[string]string{server.HashAPIKey("key-a"): "acme", server.HashAPIKey("key-b"): "globex"}
	addr := runApp(t, cfg).GRPCAddr()
	as := func(key string, args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append([]string{args[0], "--server", addr, "--api-key", key}, args[1:]...)...)
	}
	must := func(code int, stdout, stderr string) string {
		t.Helper()
		if code != exitOK {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		return stdout
	}

	files := map[string][]byte{"a.txt": []byte("alpha"), "docs/b.bin": bytes.Repeat([]byte("b"), 6<<20+1),
		"docs/deep/c.txt": []byte("gamma"), "empty": nil}
	src := writeTree(t, "tree", files)
	must(as("key-a", "upload", "-r", "--prefix", "t", "--progress", "none", src))
	const prefix = "acme/t/tree/"

	out := must(as("key-a", "ls", prefix))
	for name := range files {
		if !strings.Contains(out, prefix+name) {
			t.Errorf("ls %s does not list %s:\n%s", prefix, name, out)
		}
	}
	if out := must(as("key-a", "ls", "--json", prefix+"docs/")); strings.Count(out, `"key"`) != 2 {
		t.Errorf("ls --json of docs/ printed %d objects, want 2:\n%s", strings.Count(out, `"key"`), out)
	}
	if out := must(as("key-a", "stat", prefix+"docs/b.bin")); !strings.Contains(out, "size:") || !strings.Contains(out, "6291457") {
		t.Errorf("stat:\n%s", out)
	}

	// The other tenant sees nothing of it, and can delete nothing.
	if code, out, stderr := as("key-b", "ls"); code != exitOK || out != "" || !strings.Contains(stderr, "no objects") {
		t.Errorf("globex's ls: exit %d, %q, %q; want no objects", code, out, stderr)
	}
	for _, args := range [][]string{{"stat", prefix + "a.txt"}, {"rm", prefix + "a.txt"}, {"get", "--key", prefix + "a.txt", "-"}} {
		if code, _, stderr := as("key-b", args...); code != exitFailure || !strings.Contains(stderr, "NotFound") {
			t.Errorf("globex's %v: exit %d, %s; want NotFound", args, code, stderr)
		}
	}
	if code, _, stderr := as("key-b", "rm", "-r", "acme/"); code != exitOK || !strings.Contains(stderr, "no objects") {
		t.Errorf("globex's rm -r acme/: exit %d, %s", code, stderr)
	}

	// get -r brings the tree back; a second run finds every file there already.
	dest := filepath.Join(t.TempDir(), "back")
	must(as("key-a", "get", "-r", prefix, dest))
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dest, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s came back with %d bytes (%v), want %d", name, len(got), err, len(want))
		}
	}
	if _, _, stderr := as("key-a", "get", "-r", prefix, dest); !strings.Contains(stderr, "4 of 4 files were already there") {
		t.Errorf("a second get -r did not skip the files there:\n%s", stderr)
	}

	// rm of one key, then rm -r of the prefix.
	if out := must(as("key-a", "rm", prefix+"a.txt")); !strings.Contains(out, "deleted "+prefix+"a.txt") {
		t.Errorf("rm printed %q", out)
	}
	if code, _, stderr := as("key-a", "get", "--key", prefix+"a.txt", "-"); code != exitFailure || !strings.Contains(stderr, "NotFound") {
		t.Errorf("get of a deleted key: exit %d, %s; want NotFound", code, stderr)
	}
	must(as("key-a", "rm", "-r", prefix))
	if code, out, _ := as("key-a", "ls", prefix); code != exitOK || out != "" {
		t.Errorf("after rm -r, ls lists %q", out)
	}
}
