package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// tokenEnv carries the agent's token when no -tokenFile is given (a
// container started with it in its environment).
const tokenEnv = "NEZHA_AGENT_TOKEN"

// agentCommand is `nezha agent`: agent.Serve with an agent.Config from
// flags, until SIGINT, SIGTERM or an Exit call.
//
//	nezha agent -dir DIR -tokenFile FILE [-listen HOST:PORT] [-addressFile FILE] [-etcdBinary PATH] [-packetFilter]
func (c *cli) agentCommand() *ffcli.Command {
	cfg := agent.DefaultConfig()
	fs := c.flagSet("agent")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "host:port to serve the agent's gRPC API on; port 0: a free port (see -addressFile)")
	fs.StringVar(&cfg.AddressFile, "addressFile", "", "write the address actually listened on to this file once serving (default none)")
	fs.StringVar(&cfg.Dir, "dir", "", "the node's directory on this host: DIR/data is its data, DIR/node.log its log, DIR/dial-peers.json its dial peers file")
	tokenFile := fs.String("tokenFile", "", "file holding the token every call must carry (one line, mode 0600); default $"+tokenEnv)
	fs.StringVar(&cfg.EtcdBinary, "etcdBinary", cfg.EtcdBinary, "etcd program a node of the etcd system runs (looked up in PATH without a slash)")
	fs.BoolVar(&cfg.PacketFilter, "packetFilter", false, "also cut peer links with nftables (needs CAP_NET_ADMIN; only where the node has a network namespace of its own, never on a shared loopback)")
	usage := "usage: nezha agent -dir DIR -tokenFile FILE [-listen HOST:PORT] [-addressFile FILE] [flags]: the per-node agent the harness drives a node through (docs/design/2026-12-04-beyond-one-machine.md)"
	return c.command("agent", usage, fs, func(ctx context.Context, args []string) error {
		if err := noArgs("agent", args); err != nil {
			return err
		}
		if *tokenFile != "" {
			token, err := agent.ReadToken(*tokenFile)
			if err != nil {
				return cmdline.Usagef("agent: -tokenFile: %v", err)
			}
			cfg.Token = token
		} else {
			cfg.Token = os.Getenv(tokenEnv)
		}
		if err := cfg.Validate(); err != nil {
			return cmdline.OneLine("agent", err)
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return agent.Serve(ctx, cfg)
	})
}
