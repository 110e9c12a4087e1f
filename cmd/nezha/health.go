package main

import (
	"context"
	"fmt"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// healthCommand is `nezha health -address host:port [-timeout D]`: one
// request to the node's standard gRPC health service (client.Health).
// Exit 0 when it answers SERVING (the node knows a leader); otherwise one
// line and exit 1. The container image's HEALTHCHECK and
// deploy/compose.yaml run it, so it needs no shell or other tool.
func (c *cli) healthCommand() *ffcli.Command {
	fs := c.flagSet("health")
	addr := fs.String("address", "", "the node's client API (or peer API) address host:port")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer (a duration)")
	return c.command("health", "usage: nezha health -address host:port [-timeout 2s]: exit 0 if the node's gRPC health service answers SERVING, else 1", fs,
		func(ctx context.Context, args []string) error {
			if err := noArgs("health", args); err != nil {
				return err
			}
			if *addr == "" {
				return cmdline.Usagef("health: -address is required")
			}
			if *timeout <= 0 {
				return cmdline.Usagef("health: -timeout %v must be positive", *timeout)
			}
			cl, err := client.New(client.DefaultConfig(*addr))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			st, err := cl.Health(ctx, *addr)
			if err != nil {
				return fmt.Errorf("health %s: %w", *addr, err)
			}
			if st != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health %s: %s", *addr, st)
			}
			_, err = fmt.Fprintln(c.stdout, st)
			return err
		})
}
