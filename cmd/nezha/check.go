package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/linearizability"
)

const checkUsage = `usage: nezha check -system S [-nemesis LIST] [-duration D] [-clients N] [-seed N]
                   [-read-mode linearizable|lease|stale] [-out DIR]
                   [-backend local|docker|ssh [-image I] [-hosts FILE]] [flags] [-- NODE FLAGS]

Starts a fresh cluster (on this machine, or with -backend in containers or
on hosts) whose peer links its nodes' agents can cut and delay, runs here
(one clock) a recorded workload of put/get/delete/scan on a small key space
while a seeded schedule injects and heals faults one at a time, heals
everything, requires one final write to succeed and every node to reach the
same state hash at the same applied index, and checks the history for
linearizability with Porcupine. Flags after -- go to every node (e.g.
-- -gcContinuous -segmentSizeBytes 1048576 to keep nezha's GC busy).

Exit status: 0 linearizable (and healed, converged), 1 not (the
visualization's path is printed), 2 usage error. Ctrl-C heals every fault
and tears the cluster down.

nemeses (-nemesis: a comma-separated list, all, or none):
`

// checkCommand is `nezha check`: linearizability.Run with Options from
// flags; flags after -- go to every node.
func (c *cli) checkCommand() *ffcli.Command {
	o := linearizability.DefaultOptions()
	fs := c.flagSet("check")
	fs.StringVar(&o.System, "system", "", "system under test (required; etcd: the external reference system)")
	nemesis := fs.String("nemesis", "all", "nemeses to inject, one at a time: comma-separated names, all, or none")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long the workload runs, a duration such as 30s (faults are healed before its end; without this flag, longer if the nemeses need it)")
	fs.IntVar(&o.Clients, "clients", o.Clients, "logical clients, pinned to the nodes in turn")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "cluster size in nodes")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed of the fault schedule and the workload")
	fs.StringVar(&o.ReadMode, "read-mode", o.ReadMode, "reads: linearizable (ReadIndex), lease (nodes run -leaseRead), stale (local reads; not linearizable)")
	fs.StringVar(&o.Out, "out", "", "output directory (default results/check/SYSTEM-READMODE-seedN-TIME)")
	fs.StringVar(&o.Binary, "binary", "", "nezha executable for the nodes (default: this one)")
	fs.DurationVar(&o.Tick, "tick", o.Tick, "Raft tick of the nodes, a duration (election timeout 10 ticks)")
	fs.IntVar(&o.Keys, "keys", o.Keys, "size of the key space in keys")
	fs.IntVar(&o.ScanGroup, "scan-group", o.ScanGroup, "keys a scan may span (scans stay within consecutive groups of this size)")
	fs.IntVar(&o.ValueBytes, "value-size", o.ValueBytes, "pad written values to this many bytes (0: short unique ids)")
	fs.DurationVar(&o.ThinkTime, "think", o.ThinkTime, "mean pause of a client between operations, a duration")
	fs.DurationVar(&o.CheckTimeout, "check-timeout", o.CheckTimeout, "time limit of Porcupine, a duration (running out counts as failure)")
	fs.BoolVar(&o.KeepData, "keep-data", false, "keep the nodes' data directories of a passing run (docker, ssh: keep the cluster, which nezha cluster down -cluster OUT/cluster -purge removes)")
	hosts := registerBackend(fs, &o.Backend)
	return c.command("check", checkUsage+faults.Describe(), fs, func(ctx context.Context, args []string) error {
		// Flags after "--" go to every node, as with `cluster up`; the
		// flag package drops the "--" itself, so find it in the raw
		// command line.
		if i := slices.Index(c.args, "--"); i >= 0 {
			o.ExtraArgs = append([]string(nil), c.args[i+1:]...)
		}
		if err := noArgs("check", args[:len(args)-min(len(args), len(o.ExtraArgs))]); err != nil {
			return err
		}
		if err := hosts.load(&o.Backend); err != nil {
			return cmdline.OneLine("check", err)
		}
		return c.check(ctx, fs, o, *nemesis)
	})
}

// check validates the parsed flags and runs the check.
func (c *cli) check(ctx context.Context, fs *flag.FlagSet, o linearizability.Options, nemesis string) error {
	// Options treat zero as "the default"; on the command line an explicit
	// zero is a mistake, not a request for the default.
	var zeros []error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "duration", "clients", "nodes", "seed", "tick", "keys", "scan-group", "check-timeout":
			if v := f.Value.String(); v == "0" || v == "0s" {
				zeros = append(zeros, cmdline.Usagef("-%s 0 is not allowed", f.Name))
			}
		}
	})
	if err := errors.Join(zeros...); err != nil {
		return cmdline.OneLine("check", err)
	}
	names, err := faults.ParseNemeses(nemesis)
	if err != nil {
		return cmdline.OneLine("check", err)
	}
	o.Nemeses = names
	if !flagGiven(fs, "duration") {
		o.FitDuration()
	}
	if o.Out == "" && o.System != "" {
		o.Out = filepath.Join("results", "check", fmt.Sprintf("%s-%s-seed%d-%s", o.System, o.ReadMode, o.Seed, time.Now().Format("20060102-150405")))
	}
	start := time.Now()
	o.Logf = func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "[%7.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if err := o.Validate(); err != nil {
		return cmdline.OneLine("check", err)
	}

	// Ctrl-C (or SIGTERM, SIGHUP, or an EPIPE when the output is cut)
	// cancels the run, which heals every fault and tears the cluster down
	// before returning. A second Ctrl-C kills this process at once; its
	// nodes die with it (cluster.Spec.Detach).
	ctx, stdout, stop := stopContext(ctx, c.stdout)
	defer stop()
	killOnSecondSignal(ctx, stop)

	res, err := linearizability.Run(ctx, o)
	if res != nil {
		linearizability.WriteResult(stdout, res)
	}
	if err != nil {
		var ue *cmdline.UsageError
		if errors.As(err, &ue) {
			return cmdline.OneLine("check", err)
		}
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("check: %w: faults healed and cluster torn down; partial history in %s", context.Cause(ctx), o.Out)
		}
		return fmt.Errorf("check: %w", err)
	}
	if !res.OK {
		return &linearizability.FailedError{Result: res}
	}
	return nil
}
