package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// flagSet wraps flag.FlagSet so every flag has an environment twin, named in its
// usage, whose value becomes the flag's default.
type flagSet struct {
	*flag.FlagSet
	errs  []error
	creds *credFlags // set by clientFlags
	// notes are paragraphs -h prints between the usage line and the flags.
	notes []string
	// envNames maps each flag to its environment twin (flags that have one).
	envNames map[string]string
}

func newFlagSet(name, usage string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs.Usage = func() {
		if c, ok := fs.Output().(*flagCollector); ok {
			c.add(fs)
			return
		}
		fmt.Fprintf(fs.Output(), "usage: chunkup %s\n\n", usage)
		if s := commandSummary(name); s != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", s)
		}
		for _, n := range fs.notes {
			fmt.Fprintf(fs.Output(), "%s\n\n", n)
		}
		fmt.Fprintf(fs.Output(), "flags (each also read from the environment variable shown):\n")
		fs.PrintDefaults()
	}
	return fs
}

// flagCollector, as the output of a command's flag set, takes the flag set instead of
// its -h text: `chunkup completion` and `chunkup docs-flags` run a command with -h to
// learn its flags from the definitions themselves. The environment is not read then,
// so each flag keeps the default its definition gives.
type flagCollector struct {
	io.Writer // discards anything else the command writes
	flags     []*flag.Flag
	envNames  map[string]string // flag name to its environment variable
}

func (c *flagCollector) add(fs *flagSet) {
	fs.VisitAll(func(f *flag.Flag) { c.flags = append(c.flags, f) })
	for name, env := range fs.envNames {
		if c.envNames == nil {
			c.envNames = make(map[string]string)
		}
		c.envNames[name] = env
	}
}

func (fs *flagSet) env(name, envName string) (string, bool) {
	if envName == "" {
		return "", false
	}
	if fs.envNames == nil {
		fs.envNames = make(map[string]string)
	}
	fs.envNames[name] = envName
	if _, collecting := fs.Output().(*flagCollector); collecting {
		return "", false
	}
	return os.LookupEnv(envName)
}

func help(usage, envName string) string {
	if envName == "" {
		return usage
	}
	return usage + " [$" + envName + "]"
}

func (fs *flagSet) String(name, envName, def, usage string) *string {
	if v, ok := fs.env(name, envName); ok {
		def = v
	}
	return fs.FlagSet.String(name, def, help(usage, envName))
}

func (fs *flagSet) Bool(name, envName string, def bool, usage string) *bool {
	if v, ok := fs.env(name, envName); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fs.errs = append(fs.errs, fmt.Errorf("$%s: %w", envName, err))
		}
		def = b
	}
	return fs.FlagSet.Bool(name, def, help(usage, envName))
}

func (fs *flagSet) Int(name, envName string, def int, usage string) *int {
	if v, ok := fs.env(name, envName); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			fs.errs = append(fs.errs, fmt.Errorf("$%s: %w", envName, err))
		}
		def = n
	}
	return fs.FlagSet.Int(name, def, help(usage, envName))
}

func (fs *flagSet) Duration(name, envName string, def time.Duration, usage string) *time.Duration {
	if v, ok := fs.env(name, envName); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			fs.errs = append(fs.errs, fmt.Errorf("$%s: %w", envName, err))
		}
		def = d
	}
	return fs.FlagSet.Duration(name, def, help(usage, envName))
}

// Size is a byte count flag accepting suffixes KiB, MiB, GiB (and K, M, G).
func (fs *flagSet) Size(name, envName string, def int64, usage string) *int64 {
	v := &sizeValue{n: def}
	if s, ok := fs.env(name, envName); ok {
		if err := v.Set(s); err != nil {
			fs.errs = append(fs.errs, fmt.Errorf("$%s: %w", envName, err))
		}
	}
	fs.Var(v, name, help(usage, envName))
	return &v.n
}

type sizeValue struct{ n int64 }

func (v *sizeValue) String() string {
	switch {
	case v.n != 0 && v.n%(1<<30) == 0:
		return strconv.FormatInt(v.n>>30, 10) + "GiB"
	case v.n != 0 && v.n%(1<<20) == 0:
		return strconv.FormatInt(v.n>>20, 10) + "MiB"
	case v.n != 0 && v.n%(1<<10) == 0:
		return strconv.FormatInt(v.n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(v.n, 10)
}

func (v *sizeValue) Set(s string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a size (e.g. 8MiB)", s)
	}
	v.n = n * mult
	return nil
}

// commandSummary is the sentence that says what command name ("upload", "ocr status")
// does, or "" for a name no list holds.
func commandSummary(name string) string {
	list := commands()
	if sub, ok := strings.CutPrefix(name, "ocr "); ok {
		list, name = ocrCommands(), sub
	}
	for _, c := range list {
		if c.name == name && c.summary != "" {
			return strings.ToUpper(c.summary[:1]) + c.summary[1:] + "."
		}
	}
	return ""
}

// parse parses args and reports flag and environment errors together. -h (or --help)
// prints the command's help; a bad flag is one line that names it and points to -h,
// not the flag package's error followed by every flag.
func (fs *flagSet) parse(args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return fmt.Errorf("%s: %s (see 'chunkup %s -h')", fs.Name(), flagMessage(err.Error()), fs.Name())
	}
	if len(fs.errs) > 0 {
		return fs.errs[0]
	}
	if rest := fs.Args(); len(rest) > 0 && len(args) > len(rest) {
		// "--ocr false": a boolean flag takes no separate value, so the flags ended
		// at "false" and it reads as an argument.
		prev, v := strings.TrimLeft(args[len(args)-len(rest)-1], "-"), rest[0]
		if f := fs.Lookup(prev); f != nil && isBoolFlag(f) && (v == "true" || v == "false") {
			return fmt.Errorf("%s: --%s takes its value after =: --%s=%s (alone it means true; see 'chunkup %s -h')", fs.Name(), prev, prev, v, fs.Name())
		}
	}
	return nil
}

// isBoolFlag reports whether f is set without a value (flag's boolFlag).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagNameInError finds the flag a flag package error names ("-bogus").
var flagNameInError = regexp.MustCompile(`(defined: |for flag |for |argument: )-([^\s:]+)`)

// flagMessage rewrites a flag package error in chunkup's words: flags written as the
// help writes them (--name; -r for one letter), an undefined one as "unknown flag".
func flagMessage(msg string) string {
	msg = flagNameInError.ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagNameInError.FindStringSubmatch(m)
		dashes := "--"
		if len(sub[2]) == 1 {
			dashes = "-"
		}
		return sub[1] + dashes + sub[2]
	})
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return "unknown flag " + name
	}
	return msg
}
