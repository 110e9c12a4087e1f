package main

import (
	"bytes"
	"context"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// clusterCommand is `nezha cluster up|status|kill|restart|down|...`: the
// subcommand and its flags go to runCluster (clustercmd.go).
func (c *cli) clusterCommand() *ffcli.Command {
	names := c.reg.Names()
	cmd := c.command("cluster", "", c.flagSet("cluster"), func(_ context.Context, args []string) error {
		return runCluster(args, names, c.stdout, c.stderr)
	})
	cmd.UsageFunc = func(*ffcli.Command) string {
		var b bytes.Buffer
		runCluster([]string{"-h"}, names, &b, &b)
		return string(bytes.TrimRight(b.Bytes(), "\n"))
	}
	return cmd
}
