// Command nezha is the one binary of the harness: it runs nodes, local
// clusters, clients, workloads, checks, experiments and plots. See
// `nezha help` and docs/architecture.md section 6.1. The command line is one
// ffcli tree (root.go); the library packages it calls take Options or
// Config structs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nezha-harness/nezha/baseline"
	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/dwisckey"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/systems"
)

func main() { os.Exit(signalExit(run(os.Args[1:], os.Stdout, os.Stderr))) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == agent.CgroupExecCommand {
		// The agent starting a node inside a memory cgroup; not a command
		// of the tree (it must not parse the node's arguments).
		fmt.Fprintln(stderr, "nezha:", agent.ExecInCgroup(args[1:]))
		return 1
	}
	reg, err := newRegistry()
	if err != nil {
		fmt.Fprintln(stderr, "nezha:", err)
		return 1
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	c := &cli{stdout: stdout, stderr: stderr, reg: reg, args: args}
	return c.exitCode(c.run(context.Background(), args))
}

// exitCode prints err and maps it to the exit status: 0 ok, 1 failure or
// not found, 2 bad usage, 128 + the signal's number for a command a stop
// signal interrupted (130 for SIGINT; main then dies of the signal, see
// signalExit).
func (c *cli) exitCode(err error) int {
	var ue *cmdline.UsageError
	var se *signalError
	switch {
	case err == nil, errors.Is(err, cmdline.ErrHelp):
		// cmdline.ErrHelp: runCluster printed its own help.
		return 0
	case errors.Is(err, flag.ErrHelp):
		c.stdout.Write(c.help.Bytes())
		return 0
	case errors.Is(err, errNotFound):
		fmt.Fprintln(c.stderr, "not found")
		return 1
	case errors.As(err, &ue):
		fmt.Fprintln(c.stderr, "nezha:", ue.Msg)
		return 2
	case errors.As(err, &se):
		fmt.Fprintln(c.stderr, "nezha:", err)
		return se.exitCode()
	}
	fmt.Fprintln(c.stderr, "nezha:", err)
	return 1
}

// newRegistry registers the systems this binary runs, in the order every
// listing shows them.
func newRegistry() (*systems.Registry, error) {
	return systems.NewRegistry(nezha.Nezha(), nezha.NezhaNoGC(), baseline.Original(), baseline.PASV(), baseline.BlobDB(),
		baseline.LSMRaft(), dwisckey.System())
}
