package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/workloads"
	"github.com/nezha-harness/nezha/ycsb"
)

const ycsbUsage = "usage: nezha ycsb load|run -P WORKLOAD_FILE [-p name=value ...] (-cluster DIR | -servers A,B,C)   (nezha ycsb load -h lists its flags)"

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// ycsbCommand is `nezha ycsb load|run -P FILE [-p name=value ...]` with
// -servers or -cluster: ycsb.Run with Options from flags.
func (c *cli) ycsbCommand() *ffcli.Command {
	return c.group("ycsb", ycsbUsage, "ycsb: want a subcommand: load or run",
		func(sub string) error { return cmdline.Usagef("ycsb: unknown subcommand %q (want load or run)", sub) },
		c.ycsbPhase("load"), c.ycsbPhase("run"))
}

// ycsbFlags are the flags of ycsb load or run.
type ycsbFlags struct {
	o              ycsb.Options
	af             cluster.Address
	outs           workloads.Outputs
	files, sets    listFlag
	consistency    string
	connectTimeout time.Duration
	rate           string
}

func (c *cli) ycsbPhase(phase string) *ffcli.Command {
	y := &ycsbFlags{o: ycsb.DefaultOptions(phase)}
	o := &y.o
	fs := c.flagSet("ycsb " + phase)
	registerAddress(fs, &y.af)
	registerOutputs(fs, &y.outs, false)
	fs.Var(&y.files, "P", "property `FILE` (repeatable; shipped: "+strings.Join(ycsb.ShippedNames(), ", ")+")")
	fs.Var(&y.sets, "p", "property `name=value` overriding the files (repeatable)")
	fs.IntVar(&o.MaxValueBytes, "maxValueBytes", o.MaxValueBytes, "the servers' -maxValueBytes (largest value they accept, in bytes)")
	fs.DurationVar(&o.OpTimeout, "timeout", o.OpTimeout, "deadline of one store operation, retries included (a duration, e.g. 1m)")
	fs.DurationVar(&o.StallTimeout, "stallTimeout", o.StallTimeout, "stop (saving what was measured) when no operation got an answer from the cluster for this long (a duration); 0: never")
	fs.DurationVar(&o.ProgressInterval, "interval", o.ProgressInterval, "progress line interval when stdout is not a terminal (a duration)")
	registerLoad(fs, &y.rate, &o.Arrivals, &o.Warmup)
	fs.Int64Var(&o.Seed, "seed", o.Seed, "open loop: seed of the poisson arrivals (go-ycsb seeds its workload from the clock)")
	fs.StringVar(&y.consistency, "consistency", "linearizable", "read consistency: linearizable or stale")
	fs.DurationVar(&y.connectTimeout, "connectTimeout", 5*time.Second, "how long to wait for a server to answer before starting (a duration)")
	return c.command(phase, ycsbUsage, fs, func(ctx context.Context, args []string) error {
		if err := noArgs("ycsb "+phase, args); err != nil {
			return err
		}
		ctx, stdout, stop := loadContext(ctx, c.stdout)
		defer stop()
		return interrupted(ctx, c.ycsb(ctx, stdout, phase, y))
	})
}

// ycsb connects and runs one phase, printing to stdout. A stall or an
// interrupt (ctx's end) stops the run: its tables and result files are
// still written, with what was measured, before the error says why it
// stopped.
func (c *cli) ycsb(ctx context.Context, stdout io.Writer, phase string, y *ycsbFlags) error {
	o := y.o
	o.Files, o.Settings, o.Output, o.Warn, o.Progress = y.files, y.sets, stdout, c.stderr, stdout
	var rerr error
	o.Rate, o.RateSource, rerr = workloads.ParseRate(y.rate)
	p, sources, _, err := o.Properties()
	if err = errors.Join(rerr, err); err != nil {
		return cmdline.OneLine("ycsb "+phase, err)
	}
	cn, err := connect(ctx, "ycsb "+phase, &y.af, y.consistency, y.connectTimeout)
	if err != nil {
		return err
	}
	kc, sts, system, addrs := cn.kc, cn.sts, cn.system, cn.addrs
	defer kc.Close()

	props := p.Map()
	info := workloads.NewRunInfo("ycsb "+phase, os.Args, nil, map[string]any{
		"options": o, "property_sources": sources, "properties": props, "consistency": y.consistency, "servers": addrs,
	})
	info.SeedNote = "go-ycsb v1.0.3 seeds each worker from the clock; the operation sequence is not reproducible"
	if o.Rate > 0 {
		seed := o.Seed
		info.Seed = &seed
		info.SeedNote += "; the seed draws the open loop's poisson arrivals"
	}
	info.System = system
	info.SetServers(sts)
	if _, closeOuts, err := y.outs.Open(info); err != nil {
		return err
	} else if err := closeOuts(); err != nil { // nothing is open: ycsb keeps no raw CSV
		return err
	}

	w := stdout
	fmt.Fprintf(w, "ycsb %s: %s, servers %s%s\n", phase, strings.Join(sources, " + "), strings.Join(addrs, ","),
		map[bool]string{true: " (" + system + ")", false: ""}[system != ""])
	fmt.Fprintln(w, "***************** properties *****************")
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%q=%q\n", k, props[k])
	}
	fmt.Fprintln(w, "**********************************************")

	s, err := ycsb.Run(ctx, kc, o)
	stop, err := stopped(ctx, kc, "ycsb "+phase, err)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "**********************************************")
	label := system
	if label == "" {
		label = "servers " + strings.Join(addrs, ",")
	}
	fmt.Fprintf(w, "%s summary (TOTAL: one row per YCSB operation; latencies of completed operations, us):\n", label)
	rows := []workloads.Summary{s.Summary}
	ops := make([]string, 0, len(s.Operations))
	for op := range s.Operations {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		rows = append(rows, s.Operations[op])
	}
	workloads.PrintTable(w, rows...)
	if err := y.outs.Save(ycsb.Result{Summary: s, Run: info}, s.Summary, "nezha ycsb "+phase+" TOTAL"); err != nil {
		return err
	}
	if stop != nil {
		return fmt.Errorf("ycsb %s: %w (the table and the result files hold the %d operations done)", phase, stop, s.Ops+s.Errors+s.Ambiguous)
	}
	return s.Failures()
}
