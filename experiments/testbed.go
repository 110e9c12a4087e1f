package experiments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/vfs"
)

// A testbed: one cluster of a system under test, started for a run and
// torn down after it.

// testbed is one cluster under test and a client for it.
type testbed struct {
	system string
	spec   *cluster.Spec // nil with -servers
	c      *client.Client
	// hosts are where its nodes run (nil with -servers).
	hosts []nodeHost
}

// start brings up a fresh cluster of system (or connects to -servers) in
// the experiment's clusters/ directory. The caller must call stop.
func (x *Run) start(ctx context.Context, system, label string, extra ...string) (*testbed, error) {
	return x.startIn(ctx, filepath.Join(x.Dir, "clusters", system+"-"+label), system, extra...)
}

// startIn is start with the cluster in dir.
func (x *Run) startIn(ctx context.Context, dir, system string, extra ...string) (*testbed, error) {
	if len(x.Servers) > 0 {
		c, err := client.New(client.DefaultConfig(x.Servers...))
		if err != nil {
			return nil, err
		}
		c.Discover(ctx)
		return &testbed{system: system, c: c}, nil
	}
	return x.up(ctx, dir, system, x.Profile.Nodes, extra...)
}

// up starts a cluster of nodes nodes of system on the run's backend in
// dir, learns its node hosts and, with FsyncDelay, slows every node's
// fsyncs.
func (x *Run) up(ctx context.Context, dir, system string, nodes int, extra ...string) (*testbed, error) {
	if err := x.needRegistry(); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	args := x.systemArgs(system, extra...)
	if x.FsyncDelay > 0 {
		args = append(args, faults.DiskNodeArgs()...)
	}
	spec, _, err := cluster.Up(ctx, cluster.UpOptions{Dir: dir, System: system, Nodes: nodes,
		Binary: x.Binary, ExtraArgs: args, Backend: x.Backend})
	if err != nil {
		return nil, err
	}
	c, err := client.New(client.DefaultConfig(spec.Addresses()...))
	if err != nil {
		spec.Down(true)
		return nil, err
	}
	tb := &testbed{system: system, spec: spec, c: c}
	if tb.hosts, err = learnHosts(ctx, spec); err != nil {
		tb.stop(false)
		return nil, err
	}
	x.noteHosts(tb)
	if err := x.slowFsyncs(ctx, tb); err != nil {
		tb.stop(false)
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c.Discover(dctx)
	cancel()
	return tb, nil
}

// needRegistry fails when the run has no registry (RunOptions.Registry):
// a cluster started without it would run every system with its defaults,
// none of its geometry, condition or GC flags, and measure something else
// than the experiment says.
func (x *Run) needRegistry() error {
	if x.reg == nil {
		return errors.New("experiments start clusters only with the systems' registry (RunOptions.Registry is nil): without it every system would run with its defaults")
	}
	return nil
}

// slowFsyncs adds FsyncDelay to every fsync of every node of tb (the
// nodes' file layer: the DiskFaults RPC's slow-disk fault). A restarted
// node starts without it: call again after a restart.
func (x *Run) slowFsyncs(ctx context.Context, tb *testbed) error {
	if x.FsyncDelay <= 0 {
		return nil
	}
	f := vfs.Fault{Kind: vfs.FaultSlowDisk, Latency: x.FsyncDelay}
	// The cluster goes with its testbed: no heal.
	if _, err := faults.SlowDisks(ctx, tb.spec.Addresses(), x.FsyncDelay); err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	x.measured(Measurement{What: measureFsyncDelay, Backend: tb.spec.BackendName(), Where: "in every node process (its file layer)",
		How: fmt.Sprintf("%s on every node (-fsyncDelay: the DiskFaults RPC of nodes started with -diskFaults), on top of the disk's own", f)})
	return nil
}

// stop tears the cluster down and deletes its data (node logs are kept
// when keepLogs, e.g. after a failure).
func (t *testbed) stop(keepLogs bool) {
	t.c.Close()
	if t.spec == nil {
		return
	}
	if keepLogs && t.spec.BackendName() == cluster.BackendLocal {
		// Elsewhere the logs' tails are in the failure already: the
		// containers, volumes and remote directories go.
		t.spec.Down(false)
		for _, n := range t.spec.Nodes {
			os.RemoveAll(n.Data)
		}
		return
	}
	t.spec.Down(true)
}
