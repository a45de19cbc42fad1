package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGet uploads a tree, then downloads every file with get: by upload id into a named
// file, by key to standard output, by key into the working directory under the key's
// last element, and in ranges; each download is byte for byte the file. A get that
// fails leaves no file behind.
func TestGet(t *testing.T) {
	clearEnv(t)
	addr, _ := startServer(t)
	files := map[string][]byte{
		"top.txt":        []byte("top"),
		"empty.txt":      nil,
		"a/one.bin":      bytes.Repeat([]byte("0123456789"), 1<<20), // two chunks
		"a/b/c/deep.txt": []byte("deep"),
	}
	root := writeTree(t, "tree", files)
	code, stdout, stderr := runCLI(t, "upload", "--server", addr, "--json", "-r", root)
	if code != exitOK {
		t.Fatalf("upload -r exited %d\n%s", code, stderr)
	}
	out := t.TempDir()
	t.Chdir(out)
	for _, up := range parseUploads(t, stdout) {
		rel := strings.TrimPrefix(up.Key, "uploads/tree/")
		want := files[rel]
		t.Run(rel, func(t *testing.T) {
			byID := filepath.Join(out, "by-id-"+filepath.Base(rel))
			if code, _, stderr := runCLI(t, "get", "--server", addr, up.UploadId, byID); code != exitOK {
				t.Fatalf("get by id exited %d: %s", code, stderr)
			}
			requireFile(t, byID, want)

			code, got, stderr := runCLI(t, "get", "--server", addr, up.Key, "-")
			if code != exitOK || got != string(want) {
				t.Fatalf("get KEY - exited %d with %d bytes, want %d: %s", code, len(got), len(want), stderr)
			}

			if code, _, stderr := runCLI(t, "get", "--server", addr, "--key", up.Key); code != exitOK {
				t.Fatalf("get KEY exited %d: %s", code, stderr)
			}
			requireFile(t, filepath.Join(out, filepath.Base(rel)), want)
		})
	}

	one := files["a/one.bin"]
	for _, tc := range []struct {
		name  string
		args  []string
		want  []byte
		fails string
	}{
		{"range across chunks", []string{"--offset", "8MiB", "--length", "1MiB", "uploads/tree/a/one.bin", "-"}, one[8<<20 : 9<<20], ""},
		{"range to the end", []string{"--offset", "10485750", "uploads/tree/a/one.bin", "-"}, one[10485750:], ""},
		{"offset past the end", []string{"--offset", "20MiB", "uploads/tree/a/one.bin", "-"}, nil, "past the object's"},
		{"no such key", []string{"uploads/tree/nothing", filepath.Join(out, "nothing")}, nil, "not found"},
		{"no argument", nil, nil, "needs an UPLOAD_ID or KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got, stderr := runCLI(t, append([]string{"get", "--server", addr}, tc.args...)...)
			if tc.fails != "" {
				if code == exitOK || !strings.Contains(stderr, tc.fails) {
					t.Fatalf("exited %d, stderr %q; want a failure saying %q", code, stderr, tc.fails)
				}
				if _, err := os.Stat(filepath.Join(out, "nothing")); !os.IsNotExist(err) {
					t.Fatalf("a failed get left a file: %v", err)
				}
				return
			}
			if code != exitOK || !bytes.Equal([]byte(got), tc.want) {
				t.Fatalf("exited %d with %d bytes, want %d: %s", code, len(got), len(tc.want), stderr)
			}
		})
	}
	leftovers, _ := filepath.Glob(filepath.Join(out, ".chunkup-get-*"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary files left behind: %v", leftovers)
	}
}

// requireFile checks that the file at path holds exactly want.
func requireFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes that differ from the %d uploaded", path, len(got), len(want))
	}
}
