package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// The command line is one ffcli tree (github.com/peterbourgon/ff/v3/ffcli)
// of flag.FlagSets: Go's single-dash flags, -h on every command. Flags are
// parsed only from the command line (no config files, no environment).

// cli is what the commands of one run share: where they print, and the
// help text of the flag sets.
type cli struct {
	stdout, stderr io.Writer
	reg            *systems.Registry
	// args is the whole command line (after the binary's name).
	args []string
	// early is an error found while building the tree (serve's -system
	// names no system), reported before parsing.
	early error
	// help collects what the flag package prints on -h or a bad flag; it
	// goes to stdout for -h and is dropped for a bad flag (which gets one
	// line on stderr instead).
	help bytes.Buffer
	// failed is the name of the last flag set that printed, i.e. the one
	// whose parse failed.
	failed string
}

// flagOut is a flag set's output: it records which set printed.
type flagOut struct {
	c    *cli
	name string
}

func (w flagOut) Write(p []byte) (int, error) {
	w.c.failed = w.name
	return w.c.help.Write(p)
}

// flagSet returns a flag set named name (e.g. "bench put") that prints
// into c.help.
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(flagOut{c, name})
	return fs
}

// command returns an ffcli command whose -h prints usage (ShortUsage or,
// if usage is long, usage verbatim) followed by the flags.
func (c *cli) command(name, usage string, fs *flag.FlagSet, exec func(ctx context.Context, args []string) error) *ffcli.Command {
	return &ffcli.Command{
		Name:    name,
		FlagSet: fs,
		Exec:    exec,
		UsageFunc: func(cmd *ffcli.Command) string {
			var b strings.Builder
			b.WriteString(strings.TrimRight(usage, "\n"))
			n := 0
			cmd.FlagSet.VisitAll(func(*flag.Flag) { n++ })
			if n > 0 {
				fmt.Fprintf(&b, "\n\nflags of %s:\n", cmd.FlagSet.Name())
				o := cmd.FlagSet.Output()
				var fb bytes.Buffer
				cmd.FlagSet.SetOutput(&fb)
				cmd.FlagSet.PrintDefaults()
				cmd.FlagSet.SetOutput(o)
				b.WriteString(strings.TrimRight(fb.String(), "\n"))
			}
			return b.String()
		},
	}
}

// group is a command made of subcommands (bench put|get|scan, ...): with no
// or an unknown subcommand it fails with missing or unknown; "help" prints
// usage.
func (c *cli) group(name, usage, missing string, unknown func(sub string) error, subs ...*ffcli.Command) *ffcli.Command {
	cmd := c.command(name, usage, c.flagSet(name), func(_ context.Context, args []string) error {
		switch {
		case len(args) == 0:
			return cmdline.Usagef("%s", missing)
		case args[0] == "help":
			return flag.ErrHelp
		}
		return unknown(args[0])
	})
	cmd.Subcommands = subs
	return cmd
}

// writeJSON prints v as indented JSON (the -json output of version and
// systems).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// noArgs fails with a usage error naming the first positional argument.
func noArgs(name string, args []string) error {
	if len(args) > 0 {
		return cmdline.Usagef("%s: unexpected argument %q", name, args[0])
	}
	return nil
}

// parseInterleaved continues parsing with fs after the first positional
// argument (ffcli stops there): flags may come before, between or after
// positional arguments. It returns the positional ones; "--" ends flags,
// also when a parse already consumed it.
func (c *cli) parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	// endsFlags: the parse that left rest (a suffix of all) stopped at "--".
	endsFlags := func(all, rest []string) bool {
		n := len(all) - len(rest)
		return n > 0 && all[n-1] == "--"
	}
	if endsFlags(c.args, args) {
		return args, nil
	}
	var pos []string
	for len(args) > 0 {
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		if !strings.HasPrefix(args[0], "-") || args[0] == "-" {
			pos = append(pos, args[0])
			args = args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.help.Reset() // ffcli prints the usage for flag.ErrHelp
				return nil, err
			}
			return nil, cmdline.Usagef("%s: %v", fs.Name(), err)
		}
		if endsFlags(args, fs.Args()) {
			return append(pos, fs.Args()...), nil
		}
		args = fs.Args()
	}
	return pos, nil
}

// flagGiven reports whether the flag name was given on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
