package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// clusterCompact is `nezha cluster compact`: every node (or -node N), one
// after the other, makes its applied state durable and compacts its Raft
// log up to it (the nodes' TakeSnapshot, at their client addresses).
func clusterCompact(ctx context.Context, fs *flag.FlagSet, dir *string, args []string, stdout io.Writer) error {
	id := fs.Uint64("node", 0, "node id (default: every node)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long each node's snapshot may take")
	s, err := parseAndLoad(fs, args, stdout, dir)
	if err != nil {
		return err
	}
	if *timeout <= 0 {
		return cmdline.Usagef("cluster compact: -timeout %v must be positive", *timeout)
	}
	if cluster.External(s.System) {
		return cmdline.Usagef("cluster compact: %s compacts its own log (its --snapshot-count); use etcdctl compact for its MVCC history", s.System)
	}
	nodes := s.Nodes
	if flagGiven(fs, "node") {
		n, err := s.Node(*id)
		if err != nil {
			return cmdline.Usagef("cluster compact: %v", err)
		}
		nodes = []cluster.Node{*n}
	}
	c, err := client.New(s.ClientConfig())
	if err != nil {
		return err
	}
	defer c.Close()
	failed := 0
	for _, n := range nodes {
		nctx, cancel := context.WithTimeout(ctx, *timeout)
		r, err := c.TakeSnapshot(nctx, n.Address)
		cancel()
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "node %d: not compacted: %s (%s)\n", n.ID, status.Convert(err).Message(), status.Code(err))
			continue
		}
		fmt.Fprintf(stdout, "node %d: snapshot at index %d (applied %d when asked); the log keeps entries from %d on\n",
			n.ID, r.SnapshotIndex, r.AppliedIndex, r.FirstIndex)
	}
	if failed > 0 {
		return fmt.Errorf("cluster compact: %d of %d nodes not compacted", failed, len(nodes))
	}
	return nil
}
