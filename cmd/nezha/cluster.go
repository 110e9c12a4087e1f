package main

import (
	"bytes"
	"context"
	"io"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// clusterCommand is `nezha cluster up|status|kill|restart|down|...`: the
// subcommand and its flags go to runCluster (clustercmd.go).
func (c *cli) clusterCommand() *ffcli.Command {
	names := c.reg.Names()
	cmd := c.command("cluster", "", c.flagSet("cluster"), func(_ context.Context, args []string) error {
		return runCluster(args, names, c.stdout, c.stderr, c.checkServeArgs)
	})
	cmd.UsageFunc = func(*ffcli.Command) string {
		var b bytes.Buffer
		runCluster([]string{"-h"}, names, &b, &b, nil)
		return string(bytes.TrimRight(b.Bytes(), "\n"))
	}
	return cmd
}

// checkServeArgs parses args as `nezha serve -system system ARGS` would,
// the system's own flags included, and runs nothing: a flag serve does
// not take is a usage error before `cluster up` starts any process or
// writes any file. An external system's flags are translated and checked
// by cluster.Up.
func (c *cli) checkServeArgs(system string, args []string) error {
	if cluster.External(system) || system == "" {
		return nil
	}
	sub := &cli{stdout: io.Discard, stderr: io.Discard, reg: c.reg, args: append([]string{"serve", "-system", system}, args...)}
	cmd := sub.serveCommand()
	if sub.early != nil {
		return nil // an unknown system: Up names it with the others
	}
	if err := cmd.FlagSet.Parse(sub.args[1:]); err != nil {
		return cmdline.Usagef("the serve flags after --: %v", err)
	}
	return nil
}
