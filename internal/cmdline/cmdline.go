// Package cmdline holds the command-line conventions shared by cmd/nezha and
// the packages whose flags and input it checks: usage errors (exit code 2),
// -h handling, and comma-separated list values.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// UsageError is a bad command line or bad input detected before any work
// started. The binary prints it as one line and exits with code 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a *UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ErrHelp is returned by ParseFlags when -h or -help was given; the binary
// exits 0 after the usage text was printed.
var ErrHelp = errors.New("help requested")

// SubcommandHelp handles `nezha GROUP -h`: if sub asks for help (-h,
// -help, --help or help) it prints usage (one line per subcommand) to w and
// returns ErrHelp; otherwise nil.
func SubcommandHelp(sub string, w io.Writer, usage string) error {
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(w, strings.TrimRight(usage, "\n"))
		return ErrHelp
	}
	return nil
}

// ParseFlags parses args with fs. A bad flag becomes a one-line
// *UsageError; -h prints the flags to w and returns ErrHelp. Positional
// arguments are left in fs.Args().
func ParseFlags(fs *flag.FlagSet, args []string, w io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(w)
		fmt.Fprintf(w, "usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		return ErrHelp
	}
	if err != nil {
		return Usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

// SplitList splits a comma-separated flag value, dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// OneLine flattens err (possibly an errors.Join of several) into one line
// prefixed with prefix, if every part is a *UsageError (bad input gets a
// one-line reason); otherwise it returns err prefixed, as is.
func OneLine(prefix string, err error) error {
	var parts []string
	allUsage := true
	var collect func(error)
	collect = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				collect(x)
			}
			return
		}
		var ue *UsageError
		if !errors.As(e, &ue) {
			allUsage = false
		}
		parts = append(parts, strings.ReplaceAll(e.Error(), "\n", " "))
	}
	collect(err)
	if !allUsage {
		return fmt.Errorf("%s: %w", prefix, err)
	}
	return &UsageError{Msg: prefix + ": " + strings.Join(parts, "; ")}
}
