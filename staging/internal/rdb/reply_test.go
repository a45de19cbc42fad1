package rdb

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type slice struct {
	v   []any
	err error
}

func (s slice) Slice() ([]any, error) { return s.v, s.err }

func TestDecode(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		in   slice
		code string
		err  string // part of the error; "" for none
	}{
		{"a reply with values", slice{v: []any{"ok", int64(3), "k", []any{"a", "b"}}}, CodeOK, ""},
		{"a code alone", slice{v: []any{"notfound"}}, CodeNotFound, ""},
		{"the command's error", slice{err: boom}, "", "boom"},
		{"an empty reply", slice{v: []any{}}, "", "empty reply"},
		{"a number first", slice{v: []any{int64(1)}}, "", "not a result code"},
		{"a word of no vocabulary", slice{v: []any{"gone"}}, "", "not a result code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Decode("test", tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Decode = %+v, %v; want an error with %q", r, err, tc.err)
				}
				return
			}
			if err != nil || r.Code != tc.code {
				t.Fatalf("Decode = %+v, %v; want code %q", r, err, tc.code)
			}
		})
	}
	r, _ := Decode("test", slice{v: []any{"ok", int64(3), "7", []any{"a", "b"}, "1"}})
	if r.I64(0) != 3 || r.U32(1) != 7 || r.Str(0) != "3" || len(r.List(2)) != 2 || !r.Flag(3) || r.Len() != 4 {
		t.Errorf("values of %+v read wrong", r)
	}
	// Past the end, and of the wrong type: zero values, never a panic.
	if r.I64(9) != 0 || r.Str(9) != "" || r.List(0) != nil || r.Flag(9) || r.U32(9) != 0 {
		t.Errorf("missing values of %+v are not zero", r)
	}
	if err := r.Unexpected(); !strings.Contains(err.Error(), `script test returned "ok"`) {
		t.Errorf("Unexpected: %v", err)
	}
}

// TestScriptsSpeakTheVocabulary reads every script of the staging tree and checks that
// each code a script returns first is one of the vocabulary's: a script and its Go side
// cannot drift apart unseen.
func TestScriptsSpeakTheVocabulary(t *testing.T) {
	ret := regexp.MustCompile(`return \{'([a-z_]*)'|code = '([a-z_]*)'`)
	seen := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range ret.FindAllStringSubmatch(string(src), -1) {
			code := m[1] + m[2]
			seen++
			if !vocabulary[code] {
				t.Errorf("%s: a script returns %q, which is not in the vocabulary (reply.go)", path, code)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("found only %d script results; is the walk reading the staging tree?", seen)
	}
}
