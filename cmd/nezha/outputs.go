package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/client"
	"github.com/nezha-harness/nezha/systems/cluster"
	"github.com/nezha-harness/nezha/systems/kvpb"
	"github.com/nezha-harness/nezha/workloads"
)

// registerOutputs adds -json, -raw (if raw) and -out, the result files of
// bench and ycsb, to fs.
func registerOutputs(fs *flag.FlagSet, o *workloads.Outputs, raw bool) {
	fs.StringVar(&o.JSON, "json", "", "write the summary (with the run record) as JSON to `FILE`")
	if raw {
		fs.StringVar(&o.Raw, "raw", "", "write every operation (op,start_unix_us,latency_us,ok,outcome; times in microseconds) as CSV to `FILE`")
	}
	fs.StringVar(&o.Dir, "out", "", "write config.json, summary.json, raw.csv and timeseries.csv to `DIR`")
}

// conn is a load generator's connection to the cluster named by -servers
// or -cluster.
type conn struct {
	kc     *client.Client
	sts    []*kvpb.StatusResponse // of the servers that answered
	system string                 // the cluster's system (-cluster only)
	addrs  []string
}

// connect resolves af and connects with the given read consistency,
// waiting up to timeout for a server to answer; errors are one line,
// prefixed with name (e.g. "bench put").
func connect(ctx context.Context, name string, af *cluster.Address, consistency string, timeout time.Duration) (conn, error) {
	cfg, system, err := af.ClientConfig()
	if err != nil {
		return conn{}, systems.OneLine(name, err)
	}
	kc, sts, err := workloads.Connect(ctx, cfg, consistency, timeout)
	if err != nil {
		return conn{}, systems.OneLine(name, err)
	}
	return conn{kc: kc, sts: sts, system: system, addrs: cfg.Servers}, nil
}

// stalled splits the error of a run: a *workloads.StallError (the run
// stopped, its measurements are still saved) gets the nodes' state and
// is returned as stall; any other error is returned prefixed with name.
func stalled(ctx context.Context, kc *client.Client, name string, err error) (stall *workloads.StallError, _ error) {
	if errors.As(err, &stall) {
		stall.Nodes = workloads.ProbeNodes(ctx, kc, 2*time.Second)
		return stall, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return nil, nil
}
