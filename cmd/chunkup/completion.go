package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// completionShells are the shells `chunkup completion` writes scripts for.
var completionShells = []string{"bash", "zsh", "fish"}

func completionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("completion", "completion bash|zsh|fish")
	fs.SetOutput(stderr)
	fs.notes = append(fs.notes, `Prints a script that completes chunkup's commands and their flags. Load it with
  bash:  source <(chunkup completion bash)    (or save it in ~/.local/share/bash-completion/completions/chunkup)
  zsh:   source <(chunkup completion zsh)     (or save it as _chunkup in a directory of $fpath)
  fish:  chunkup completion fish | source     (or save it in ~/.config/fish/completions/chunkup.fish)`)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("completion needs one shell: bash, zsh or fish")}
	}
	nodes := completionTree(ctx)
	switch fs.Arg(0) {
	case "bash":
		return writeBash(stdout, nodes)
	case "zsh":
		return writeZsh(stdout, nodes)
	case "fish":
		return writeFish(stdout, nodes)
	}
	return usageError{fmt.Errorf("completion: unknown shell %q: use bash, zsh or fish", fs.Arg(0))}
}

// compNode is chunkup or one of its (sub)commands, as a script completes it.
type compNode struct {
	// path names it from the root: "chunkup", "chunkup/upload", "chunkup/ocr/dead/list".
	path    string
	summary string
	flags   []*flag.Flag
}

func (n compNode) name() string { return n.path[strings.LastIndexByte(n.path, '/')+1:] }

// children are the nodes right under n.
func (n compNode) children(nodes []compNode) []compNode {
	var kids []compNode
	for _, k := range nodes {
		if parent, _, ok := cutLast(k.path, "/"); ok && parent == n.path {
			kids = append(kids, k)
		}
	}
	return kids
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// completionTree lists chunkup's commands with their flags, which it learns by running
// each command with -h into a flagCollector: the scripts follow the flags' definitions.
func completionTree(ctx context.Context) []compNode {
	flagsOf := func(run runFunc) []*flag.Flag {
		c := &flagCollector{Writer: io.Discard}
		_ = run(ctx, []string{"-h"}, io.Discard, c)
		return c.flags
	}
	nodes := []compNode{{path: "chunkup"}}
	for _, c := range commands() {
		path := "chunkup/" + c.name
		nodes = append(nodes, compNode{path: path, summary: c.summary, flags: flagsOf(c.run)})
		switch c.name {
		case "ocr":
			for _, oc := range ocrCommands() {
				words := strings.Fields(oc.name)
				// A command of two words ("dead list") needs its first as a node too.
				if group := path + "/" + words[0]; len(words) > 1 && !slices.ContainsFunc(nodes, func(n compNode) bool { return n.path == group }) {
					nodes = append(nodes, compNode{path: group, summary: words[0] + " commands"})
				}
				nodes = append(nodes, compNode{path: path + "/" + strings.Join(words, "/"), summary: oc.summary, flags: flagsOf(oc.run)})
			}
		case "completion":
			for _, sh := range completionShells {
				nodes = append(nodes, compNode{path: path + "/" + sh, summary: "the script for " + sh})
			}
		}
	}
	return nodes
}

// flagWord is how a script offers f: -r for one letter, --name otherwise.
func flagWord(f *flag.Flag) string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

// firstLine is a description's first line.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// pathPattern is the shell case pattern matching every node's path but the root's.
func pathPattern(nodes []compNode, sep string) string {
	var paths []string
	for _, n := range nodes[1:] {
		paths = append(paths, n.path)
	}
	return strings.Join(paths, sep)
}

func writeBash(w io.Writer, nodes []compNode) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# bash completion for chunkup; load it with: source <(chunkup completion bash)
_chunkup() {
    local cur=${COMP_WORDS[COMP_CWORD]} node=chunkup w i
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case "$node/$w" in
        %s) node=$node/$w ;;
        esac
    done
    local flags= words=
    case $node in
`, pathPattern(nodes, "|"))
	for _, n := range nodes {
		var flags, words []string
		for _, f := range n.flags {
			flags = append(flags, flagWord(f))
		}
		for _, k := range n.children(nodes) {
			words = append(words, k.name())
		}
		fmt.Fprintf(&b, "    %s) flags='%s' words='%s' ;;\n", n.path, strings.Join(flags, " "), strings.Join(words, " "))
	}
	b.WriteString(`    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    fi
}
complete -o default -F _chunkup chunkup
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// zshQuote quotes s for zsh (and bash) in single quotes.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func writeZsh(w io.Writer, nodes []compNode) error {
	var b strings.Builder
	fmt.Fprintf(&b, `#compdef chunkup
# zsh completion for chunkup; load it with: source <(chunkup completion zsh)
_chunkup() {
  local node=chunkup w i
  local -a items
  for ((i = 2; i < CURRENT; i++)); do
    w=${words[i]}
    case "$node/$w" in
      (%s) node=$node/$w ;;
    esac
  done
  if [[ ${words[CURRENT]} == -* ]]; then
    case $node in
`, pathPattern(nodes, "|"))
	describe := func(items []string) string { return strings.Join(items, " ") }
	for _, n := range nodes {
		var items []string
		for _, f := range n.flags {
			items = append(items, zshQuote(flagWord(f)+":"+firstLine(f.Usage)))
		}
		if len(items) > 0 {
			fmt.Fprintf(&b, "      (%s) items=(%s) ;;\n", n.path, describe(items))
		}
	}
	b.WriteString(`    esac
    (( ${#items} )) && _describe -t flags flag items && return
  else
    case $node in
`)
	for _, n := range nodes {
		var items []string
		for _, k := range n.children(nodes) {
			items = append(items, zshQuote(k.name()+":"+k.summary))
		}
		if len(items) > 0 {
			fmt.Fprintf(&b, "      (%s) items=(%s) ;;\n", n.path, describe(items))
		}
	}
	b.WriteString(`    esac
    (( ${#items} )) && _describe -t commands command items && return
  fi
  _files
}
if [[ $funcstack[1] == _chunkup ]]; then _chunkup "$@"; else compdef _chunkup chunkup; fi
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for fish in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func writeFish(w io.Writer, nodes []compNode) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# fish completion for chunkup; load it with: chunkup completion fish | source
function __chunkup_node
    set -l node chunkup
    for w in (commandline -opc)[2..-1]
        switch "$node/$w"
            case %s
                set node "$node/$w"
        end
    end
    echo $node
end
function __chunkup_at
    test (__chunkup_node) = $argv[1]
end
`, pathPattern(nodes, " "))
	for _, n := range nodes {
		for _, k := range n.children(nodes) {
			fmt.Fprintf(&b, "complete -c chunkup -n '__chunkup_at %s' -f -a %s -d %s\n", n.path, k.name(), fishQuote(k.summary))
		}
		for _, f := range n.flags {
			opt := "-l " + f.Name
			if len(f.Name) == 1 {
				opt = "-s " + f.Name
			}
			fmt.Fprintf(&b, "complete -c chunkup -n '__chunkup_at %s' %s -d %s\n", n.path, opt, fishQuote(firstLine(f.Usage)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
