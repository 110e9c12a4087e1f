package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/peterbourgon/ff/v3/ffcli"
)

const usage = `usage: nezha <command> [flags]

commands:
  serve     run one node: serve -system S -address A -internalAddress I -peers P1,P2,P3 -data D
  cluster   clusters on local processes, containers or ssh hosts: cluster up|status|kill|restart|down|add|promote|remove|transfer|replace|members|compact -cluster DIR
  kv        one request: kv put K V | get K | delete K | scan START END [-limit N]
  check     linearizability under faults: check -system S [-nemesis LIST] [-duration D] [-read-mode M]
  bench     the paper's workloads: bench put|get|scan [-cnums N -dnums N -vsize BYTES] -servers ...|-cluster DIR
  ycsb      YCSB core workloads: ycsb load|run -P FILE [-p name=value ...] -servers ...|-cluster DIR
  experiment  named experiments and the report: experiment list | run NAME...|all [-profile quick|standard|paper] | report DIR | record DIR | compare DIR_A DIR_B
  plot      redraw figures: plot RESULTS_DIR (every figures.json under it -> PNG, SVG, PDF)
  systems   the registered systems and their roles (studied, baseline; reference) [-json]
  health    exit 0 if a node's gRPC health service answers SERVING: health -address A [-timeout D]
  version   module version, VCS revision (+dirty) and Go version of this binary (from its build info) [-json]
  agent     the per-node agent the harness drives a node through: agent -dir DIR -tokenFile FILE [-listen HOST:PORT]
  help      this text

Run 'nezha <command> -h' for the flags of a command.
`

// root is the command tree.
func (c *cli) root() *ffcli.Command {
	root := &ffcli.Command{
		Name:      "nezha",
		FlagSet:   c.flagSet("nezha"),
		UsageFunc: func(*ffcli.Command) string { return strings.TrimRight(usage, "\n") },
		Exec: func(_ context.Context, args []string) error {
			if len(args) > 0 && args[0] != "help" {
				return cmdline.Usagef("unknown command %q (run 'nezha help')", args[0])
			}
			return flag.ErrHelp
		},
		Subcommands: []*ffcli.Command{
			c.serveCommand(), c.clusterCommand(), c.kvCommand(), c.checkCommand(), c.benchCommand(),
			c.ycsbCommand(), c.experimentCommand(), c.plotCommand(), c.systemsCommand(), c.healthCommand(),
			c.versionCommand(), c.agentCommand(),
		},
	}
	return root
}

// run parses args with the tree and runs the selected command. A bad flag
// is a one-line *cmdline.UsageError naming the command; -h returns
// flag.ErrHelp with the usage in c.help.
func (c *cli) run(ctx context.Context, args []string) error {
	root := c.root()
	if c.early != nil {
		return c.early
	}
	if err := exactNames(root, args); err != nil {
		return err
	}
	if err := root.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		if c.failed == "nezha" { // a flag where the command belongs
			return cmdline.Usagef("unknown command %q (run 'nezha help')", args[0])
		}
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // ff wraps the flag package's error
		}
		return cmdline.Usagef("%s: %v", c.failed, err)
	}
	c.help.Reset()
	return root.Run(ctx)
}

// exactNames refuses a command or subcommand name spelt in another case:
// ffcli matches names case-insensitively, the binary never did. Groups
// have no flags of their own, so names are the leading arguments.
func exactNames(cmd *ffcli.Command, args []string) error {
	for _, a := range args {
		var next *ffcli.Command
		for _, sub := range cmd.Subcommands {
			if strings.EqualFold(sub.Name, a) {
				next = sub
			}
		}
		if next == nil {
			return nil
		}
		if next.Name != a {
			return cmdline.Usagef("unknown command %q (commands are lower case; run 'nezha help')", a)
		}
		cmd = next
	}
	return nil
}
