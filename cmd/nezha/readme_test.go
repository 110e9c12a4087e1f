package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/nezha-harness/nezha/experiments"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite README.md's generated experiment-list block from the binary")

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// The documents whose commands TestREADME checks (their shell blocks), and
// whose links it checks with every Markdown file under docs/.
func commandDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, docs...)
}

// TestREADME checks that the README (and every document under docs/) shows
// commands that run as written: every `bin/nezha ...` names a command that
// exists and only flags it takes, with values it accepts (the command is
// parsed with -h after its flags, so nothing runs); every script it runs
// and every repository path it names exists; every link points at a file
// or directory that exists, and at a heading there when it names one.
// It also checks the README's generated experiment list against the
// binary's and the free disk it states against the profiles. It needs no
// cluster.
func TestREADME(t *testing.T) {
	nezhaCmds := 0
	for _, doc := range commandDocs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(repoRoot, doc)
		for _, c := range shellCommands(string(b)) {
			if checkShellCommand(t, name, c) {
				nezhaCmds++
			}
		}
	}
	if nezhaCmds == 0 {
		t.Fatal("no bin/nezha command found in the documents' shell blocks")
	}
	t.Logf("checked %d bin/nezha commands", nezhaCmds)
	var all []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			all = append(all, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append([]string{filepath.Join(repoRoot, "README.md")}, all...) {
		checkLinks(t, doc)
	}
	checkREADMEPaths(t)
	checkExperimentList(t)
	checkFreeDisk(t)
}

// shellCommand is one simple command of a shell block: its words, and the
// line it came from (for messages).
type shellCommand struct {
	words []string
	line  string
}

// shellCommands returns the simple commands of text's sh and bash blocks:
// lines joined at a trailing backslash, comments dropped, split at
// unquoted &&, ||, ;, and |.
func shellCommands(text string) []shellCommand {
	var out []shellCommand
	in := false
	var pending string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			lang := strings.TrimPrefix(trimmed, "```")
			switch {
			case in:
				in = false
			case lang == "sh" || lang == "bash":
				in = true
			}
			continue
		}
		if !in {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			pending += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		full := pending + trimmed
		pending = ""
		for _, words := range splitShell(full) {
			if len(words) > 0 {
				out = append(out, shellCommand{words, full})
			}
		}
	}
	return out
}

// splitShell splits one line into simple commands of words: quotes and
// backslashes as the shell reads them, an unquoted # after a blank starts
// a comment, and &&, ||, ; and | separate commands.
func splitShell(line string) [][]string {
	var cmds [][]string
	var words []string
	var w strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	endCmd := func() {
		endWord()
		cmds = append(cmds, words)
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				w.WriteByte(line[i])
			}
			inWord = true
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case c == '#' && !inWord:
			endCmd()
			return cmds
		case c == ' ' || c == '\t':
			endWord()
		case c == ';' || c == '|' || c == '&':
			endCmd()
			if i+1 < len(line) && (line[i+1] == '|' || line[i+1] == '&') {
				i++
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

// checkShellCommand checks one command of a document's shell block; it
// reports whether it was a bin/nezha command.
func checkShellCommand(t *testing.T, doc string, c shellCommand) bool {
	t.Helper()
	words := c.words
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		words = words[1:] // VAR=value before the command
	}
	if len(words) == 0 {
		return false
	}
	switch {
	case words[0] == "bin/nezha":
		if err := checkNezhaArgs(words[1:]); err != nil {
			t.Errorf("%s: %q: %v", doc, c.line, err)
		}
	case strings.HasPrefix(words[0], "scripts/"):
		st, err := os.Stat(filepath.Join(repoRoot, words[0]))
		if err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s: %q: %s is not an executable file of the repository", doc, c.line, words[0])
		}
	}
	for i, w := range words {
		if i > 0 && words[i-1] == "-P" {
			continue // a YCSB workload: a file, or one of the embedded upstream ones
		}
		if p, ok := repoPath(w); ok {
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("%s: %q names %s, which does not exist", doc, c.line, w)
			}
		}
	}
	return words[0] == "bin/nezha"
}

// repoPath reports whether word names a path in the repository (its first
// element is a top-level directory or file of it other than the build and
// results outputs, with no placeholder or glob), and returns it cleaned
// (a trailing /... of go's package patterns dropped).
func repoPath(word string) (string, bool) {
	w := strings.TrimPrefix(word, "./")
	w = strings.TrimSuffix(w, "/...")
	first, _, ok := strings.Cut(w, "/")
	if !ok || first == "" || first == "bin" || first == "results" || strings.ContainsAny(w, "<>*${}[]:=,") {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(repoRoot, first)); err != nil {
		return "", false
	}
	return w, true
}

// flagLineRE matches a flag in a flag set's -h output: its name, and the
// name of its value if it takes one.
var flagLineRE = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][\w.\-]*)(?: (\S+))?(?:\t|$)`)

// checkNezhaArgs parses args as `nezha ARGS` would without running it:
// the command path (its subcommand names), then its flags and their values
// with -h after them, which must exit 0; serve flags after `--` of cluster
// up and check are parsed the same way as `serve -system S FLAGS -h`.
func checkNezhaArgs(args []string) error {
	path, rest := commandPath(args)
	if len(path) == 0 {
		return fmt.Errorf("no command")
	}
	var extra []string
	for i, a := range rest {
		if a == "--" {
			rest, extra = rest[:i], rest[i+1:]
			break
		}
	}
	system := systemFlag(rest)
	help := append(append([]string{}, path...), "-h")
	if path[0] == "serve" && system != "" {
		help = []string{"serve", "-system", system, "-h"}
	}
	code, stdout, stderr := runHelp(help)
	if code != 0 {
		return fmt.Errorf("nezha %s: exit %d: %s", strings.Join(help, " "), code, strings.TrimSpace(stderr))
	}
	takesValue := map[string]bool{}
	for _, m := range flagLineRE.FindAllStringSubmatch(stdout, -1) {
		takesValue[m[1]] = m[2] != ""
	}
	var flags []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue // a positional argument
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		tv, known := takesValue[name]
		if !known {
			return fmt.Errorf("nezha %s takes no flag -%s", strings.Join(path, " "), name)
		}
		flags = append(flags, a)
		if tv && !hasValue && i+1 < len(rest) {
			i++
			flags = append(flags, rest[i])
		}
	}
	parse := append(append(append([]string{}, path...), flags...), "-h")
	if code, _, stderr := runHelp(parse); code != 0 {
		return fmt.Errorf("nezha %s: exit %d: %s", strings.Join(parse, " "), code, strings.TrimSpace(stderr))
	}
	if len(extra) > 0 && (path[0] == "check" || len(path) > 1 && path[0] == "cluster" && path[1] == "up") &&
		system != "" && system != "etcd" {
		return checkNezhaArgs(append([]string{"serve", "-system", system}, extra...))
	}
	return nil
}

// commandPath splits args into the command's names (nezha's subcommands,
// and cluster's subcommand) and the rest.
func commandPath(args []string) (path, rest []string) {
	c := &cli{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, args: args}
	reg, err := newRegistry()
	if err != nil {
		return nil, args
	}
	c.reg = reg
	cmd := c.root()
	for len(args) > 0 {
		found := false
		for _, sub := range cmd.Subcommands {
			if sub.Name == args[0] {
				path, args, cmd, found = append(path, args[0]), args[1:], sub, true
				break
			}
		}
		if !found {
			break
		}
	}
	if len(path) == 1 && path[0] == "cluster" && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		path, args = append(path, args[0]), args[1:]
	}
	return path, args
}

// runHelp runs nezha in-process; args end with -h, so nothing but parsing
// happens.
func runHelp(args []string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)
	codeRE    = regexp.MustCompile("`([^`\n]+)`")
)

// checkLinks checks every relative link of doc: the file or directory
// exists, and a #fragment names a heading of the target (or of doc).
func checkLinks(t *testing.T, doc string) {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := filepath.Rel(repoRoot, doc)
	for _, m := range linkRE.FindAllStringSubmatch(stripCode(string(b)), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		path := doc
		if file != "" {
			path = filepath.Join(filepath.Dir(doc), file)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: link %s: %s does not exist", name, target, file)
			continue
		}
		if frag == "" {
			continue
		}
		if st.IsDir() || !strings.HasSuffix(path, ".md") {
			t.Errorf("%s: link %s: a #fragment of something that is not a Markdown file", name, target)
			continue
		}
		tb, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !anchors(string(tb))[frag] {
			t.Errorf("%s: link %s: %s has no heading whose anchor is #%s", name, target, file, frag)
		}
	}
}

// stripCode removes fenced code blocks, whose text is not Markdown.
func stripCode(text string) string {
	var out strings.Builder
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String()
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// text: lower case, punctuation but hyphens and underscores dropped, blanks
// as hyphens, and -1, -2 ... after repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(stripCode(text), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// checkREADMEPaths checks every repository path the README names in a code
// span.
func checkREADMEPaths(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range codeRE.FindAllStringSubmatch(stripCode(string(b)), -1) {
		if strings.Contains(m[1], " ") {
			continue
		}
		if p, ok := repoPath(m[1]); ok {
			if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
				t.Errorf("README.md names `%s`, which does not exist", m[1])
			}
		}
	}
}

// The README's generated experiment list: `experiment list`'s output in a
// text block between these markers.
const (
	listBegin = "<!-- experiment-list:begin"
	listEnd   = "<!-- experiment-list:end -->"
)

// checkExperimentList checks the README's experiment list against the
// binary's (with -update-readme, rewrites it).
func checkExperimentList(t *testing.T) {
	t.Helper()
	path := filepath.Join(repoRoot, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	code, list, stderr := runHelp([]string{"experiment", "list"})
	if code != 0 {
		t.Fatalf("experiment list: exit %d: %s", code, stderr)
	}
	b := bytes.Index(readme, []byte(listBegin))
	e := bytes.Index(readme, []byte(listEnd))
	if b < 0 || e < b {
		t.Fatalf("README.md has no experiment list block (%s ... %s)", listBegin, listEnd)
	}
	start := b + bytes.IndexByte(readme[b:], '\n') + 1
	want := "```text\n$ bin/nezha experiment list\n" + list + "```\n"
	if string(readme[start:e]) == want {
		return
	}
	if !*updateREADME {
		t.Errorf("README.md's experiment list is not `bin/nezha experiment list`'s output; rewrite it with go test ./cmd/nezha -run TestREADME -update-readme")
		return
	}
	out := append(append(append([]byte{}, readme[:start]...), want...), readme[e:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkFreeDisk checks the free disk the README states per profile.
func checkFreeDisk(t *testing.T) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, name := range []string{"quick", "standard", "paper"} {
		p, err := experiments.ProfileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf("%s %d GiB", name, p.MinFreeDiskBytes>>30))
	}
	want := "Free disk under `-out`**, checked before a run starts: " + strings.Join(parts, ", ") + "."
	if !bytes.Contains(readme, []byte(want)) {
		t.Errorf("README.md does not say %q (the profiles' MinFreeDiskBytes)", want)
	}
}

// TestShellParsing pins the shell splitting the README check relies on.
func TestShellParsing(t *testing.T) {
	for _, c := range []struct {
		line string
		want [][]string
	}{
		{`bin/nezha kv put -cluster /tmp/c k v   # prints "OK"`, [][]string{{"bin/nezha", "kv", "put", "-cluster", "/tmp/c", "k", "v"}}},
		{`go test -c -o /tmp/x ./nezha/ && cd nezha`, [][]string{{"go", "test", "-c", "-o", "/tmp/x", "./nezha/"}, {"cd", "nezha"}}},
		{`bin/nezha experiment compare a b -metric 'put-scale/put_headline/' | head`, [][]string{{"bin/nezha", "experiment", "compare", "a", "b", "-metric", "put-scale/put_headline/"}, {"head"}}},
		{`echo "a # b" x#y`, [][]string{{"echo", "a # b", "x#y"}}},
	} {
		got := splitShell(c.line)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("splitShell(%q) = %q, want %q", c.line, got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		bad  bool
	}{
		{[]string{"kv", "put", "-cluster", "/tmp/c", "k", "v"}, false},
		{[]string{"kv", "put", "-clusterr", "/tmp/c", "k", "v"}, true},
		{[]string{"cluster", "up", "-system", "nezha", "-cluster", "/tmp/c", "--", "-tick", "50ms"}, false},
		{[]string{"cluster", "up", "-system", "nezha", "-cluster", "/tmp/c", "--", "-tick", "fast"}, true},
		{[]string{"cluster", "frobnicate", "-cluster", "/tmp/c"}, true},
		{[]string{"check", "-system", "nezha", "-duration", "30x"}, true},
		{[]string{"serve", "-system", "nezha", "-gcThresholdBytes", "1048576"}, false},
		{[]string{"experiment", "run", "put-vsize", "-systems", "nezha", "-out", "/tmp/r"}, false},
		{[]string{"experiments", "list"}, true},
	} {
		err := checkNezhaArgs(c.args)
		if (err != nil) != c.bad {
			t.Errorf("checkNezhaArgs(%q) = %v, want an error: %v", c.args, err, c.bad)
		}
	}
}
