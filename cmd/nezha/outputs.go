package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/workloads"
)

// registerOutputs adds -json, -raw (if raw) and -out, the result files of
// bench and ycsb, to fs.
func registerOutputs(fs *flag.FlagSet, o *workloads.Outputs, raw bool) {
	fs.StringVar(&o.JSON, "json", "", "write the summary (with the run record) as JSON to `FILE`")
	o.RawInDir = raw
	if raw {
		fs.StringVar(&o.Raw, "raw", "", "write every operation (op,start_unix_us,latency_us,ok,outcome,intended_start_unix_us,intended_latency_us,late; times in microseconds) as CSV to `FILE`")
		fs.StringVar(&o.Dir, "out", "", "write config.json, summary.json, raw.csv, timeseries.csv and latency.hlog (HdrHistogram interval log) to `DIR`")
		return
	}
	fs.StringVar(&o.Dir, "out", "", "write config.json, summary.json, timeseries.csv and latency.hlog (HdrHistogram interval log) to `DIR`")
}

// registerLoad adds -rate, -arrivals and -warmup, how bench and ycsb offer
// their operations, to fs.
func registerLoad(fs *flag.FlagSet, rate, arrivals *string, warmup *time.Duration) {
	fs.StringVar(rate, "rate", "", "open loop: offer `OPS_PER_SEC` operations a second whatever the answers, timing each from when it was due; "+
		"or FRACTIONx:FILE, a fraction of the throughput of a closed-loop run's summary.json (or -out DIR); empty: closed loop")
	fs.StringVar(arrivals, "arrivals", *arrivals, "open loop: when operations are due: constant (evenly spaced) or poisson (seeded)")
	fs.DurationVar(warmup, "warmup", 0, "leave the operations that start (open loop: are due) in the first `DURATION` of the run out of every result")
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
		return conn{}, cmdline.OneLine(name, err)
	}
	kc, sts, err := workloads.Connect(ctx, cfg, consistency, timeout)
	if err != nil {
		return conn{}, cmdline.OneLine(name, err)
	}
	return conn{kc: kc, sts: sts, system: system, addrs: cfg.Servers}, nil
}

// stopped splits the error of a run that may have stopped early, with
// its measurements still to be printed and saved: a *workloads.StallError
// (with the nodes' state probed) or, when ctx ended (a stop signal, a cut
// output; see stopContext), ctx's cause, is returned as stop; any other
// error is returned prefixed with name.
func stopped(ctx context.Context, kc *client.Client, name string, err error) (stop error, _ error) {
	var stall *workloads.StallError
	switch {
	case errors.As(err, &stall):
		stall.Nodes = workloads.ProbeNodes(ctx, kc, 2*time.Second)
		return stall, nil
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return context.Cause(ctx), nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return nil, nil
}

// loadContext is stopContext for a load (bench, ycsb): the first stop
// signal ends the run, which prints and saves what it measured; since the
// operations in flight may take up to -timeout to end, a second one kills
// the process at once.
func loadContext(ctx context.Context, out io.Writer) (context.Context, io.Writer, func()) {
	ctx, out, stop := stopContext(ctx, out)
	killOnSecondSignal(ctx, stop)
	return ctx, out, stop
}

// interrupted returns err, or, when ctx (stopContext) ended and err does
// not say so already, err with ctx's cause: an interrupt that cut short
// the steps before a run (connecting, counting keys) is still reported
// as one (exit 130 for SIGINT).
func interrupted(ctx context.Context, err error) error {
	var se *signalError
	if err == nil || ctx.Err() == nil || errors.As(err, &se) || errors.Is(err, errOutputCut) {
		return err
	}
	return fmt.Errorf("%v: %w", err, context.Cause(ctx))
}
