// Package agenttest lets a test binary double as the agent of the nodes it
// starts: the local backend runs `BINARY agent -listen ... -dir ...
// -tokenFile ...` with BINARY the test binary, which then serves
// agent.Serve (and runs BINARY serve ... for a node: the test's own fake or
// toy node). Call MaybeServe first thing in TestMain.
package agenttest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nezha-harness/nezha/cluster/agent"
)

// MaybeServe serves an agent and exits if the test binary was started as
// `BINARY agent FLAGS` (the flags of `nezha agent` that the backends
// pass), and execs a node in its memory cgroup if it was started as the
// agent's CgroupExecCommand; otherwise it returns at once.
func MaybeServe() {
	if len(os.Args) > 1 && os.Args[1] == agent.CgroupExecCommand {
		// A node the agent starts inside a memory cgroup: exec'd there.
		if err := agent.ExecInCgroup(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if len(os.Args) < 2 || os.Args[1] != "agent" {
		return
	}
	if err := serve(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(args []string) error {
	c := agent.DefaultConfig()
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.StringVar(&c.Listen, "listen", c.Listen, "")
	fs.StringVar(&c.AddressFile, "addressFile", "", "")
	fs.StringVar(&c.Dir, "dir", "", "")
	tokenFile := fs.String("tokenFile", "", "")
	fs.StringVar(&c.EtcdBinary, "etcdBinary", c.EtcdBinary, "")
	fs.BoolVar(&c.PacketFilter, "packetFilter", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	t, err := agent.ReadToken(*tokenFile)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	c.Token, c.Binary = t, exe
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return agent.Serve(ctx, c)
}
