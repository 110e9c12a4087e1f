package ycsb

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/cluster"
	"github.com/nezha-harness/nezha/workloads"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Result is what -json FILE and summary.json hold.
type Result struct {
	Summary
	Run workloads.RunInfo `json:"run"`
}

// Command is `nezha ycsb load|run -P FILE [-p name=value ...]` with
// -servers or -cluster.
func Command(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return systems.Usagef("ycsb: want a subcommand: load or run")
	}
	phase, args := args[0], args[1:]
	if err := systems.SubcommandHelp(phase, stdout, "usage: nezha ycsb load|run -P WORKLOAD_FILE [-p name=value ...] (-cluster DIR | -servers A,B,C)   (nezha ycsb load -h lists its flags)"); err != nil {
		return err
	}
	if phase != "load" && phase != "run" {
		return systems.Usagef("ycsb: unknown subcommand %q (want load or run)", phase)
	}
	o := DefaultOptions(phase)
	fs := flag.NewFlagSet("ycsb "+phase, flag.ContinueOnError)
	var (
		af    cluster.AddressFlags
		outs  workloads.Outputs
		files listFlag
		sets  listFlag
	)
	af.Register(fs)
	outs.Register(fs, false)
	fs.Var(&files, "P", "property `FILE` (repeatable; shipped: "+strings.Join(ShippedNames(), ", ")+")")
	fs.Var(&sets, "p", "property `name=value` overriding the files (repeatable)")
	fs.IntVar(&o.MaxValueBytes, "maxValueBytes", o.MaxValueBytes, "the servers' -maxValueBytes (largest value they accept)")
	fs.DurationVar(&o.OpTimeout, "timeout", o.OpTimeout, "deadline of one store operation, retries included")
	fs.DurationVar(&o.StallTimeout, "stallTimeout", o.StallTimeout, "stop (saving what was measured) when no operation got an answer from the cluster for this long; 0: never")
	fs.DurationVar(&o.ProgressInterval, "interval", o.ProgressInterval, "progress line interval when stdout is not a terminal")
	consistency := fs.String("consistency", "linearizable", "read consistency: linearizable or stale")
	connectTimeout := fs.Duration("connectTimeout", 5*time.Second, "how long to wait for a server to answer before starting")
	if err := systems.ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return systems.Usagef("ycsb %s: unexpected argument %q", phase, fs.Arg(0))
	}
	o.Files, o.Settings, o.Output, o.Warn, o.Progress = files, sets, stdout, stderr, stdout
	p, sources, _, err := o.Properties()
	if err != nil {
		return systems.OneLine("ycsb "+phase, err)
	}
	cfg, system, err := af.ClientConfig()
	if err != nil {
		return systems.OneLine("ycsb "+phase, err)
	}
	addrs := cfg.Servers
	ctx := context.Background()
	c, sts, err := workloads.Connect(ctx, cfg, *consistency, *connectTimeout)
	if err != nil {
		return systems.OneLine("ycsb "+phase, err)
	}
	defer c.Close()

	props := p.Map()
	info := workloads.NewRunInfo("ycsb "+phase, os.Args, nil, map[string]any{
		"options": o, "property_sources": sources, "properties": props, "consistency": *consistency, "servers": addrs,
	})
	info.SeedNote = "go-ycsb v1.0.3 seeds each worker from the clock; the operation sequence is not reproducible"
	info.System = system
	info.SetServers(sts)
	if _, _, err := outs.Open(info); err != nil {
		return err
	}

	fmt.Fprintf(stdout, "ycsb %s: %s, servers %s%s\n", phase, strings.Join(sources, " + "), strings.Join(addrs, ","),
		map[bool]string{true: " (" + system + ")", false: ""}[system != ""])
	fmt.Fprintln(stdout, "***************** properties *****************")
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(stdout, "%q=%q\n", k, props[k])
	}
	fmt.Fprintln(stdout, "**********************************************")

	s, err := Run(ctx, c, o)
	var stall *workloads.StallError
	if errors.As(err, &stall) {
		stall.Nodes = workloads.ProbeNodes(ctx, c, 2*time.Second)
	} else if err != nil {
		return fmt.Errorf("ycsb %s: %w", phase, err)
	}
	fmt.Fprintln(stdout, "**********************************************")
	fmt.Fprintf(stdout, "nezha summary (TOTAL: one row per YCSB operation; latencies of completed operations, us):\n")
	rows := []workloads.Summary{s.Summary}
	ops := make([]string, 0, len(s.Operations))
	for op := range s.Operations {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		rows = append(rows, s.Operations[op])
	}
	workloads.PrintTable(stdout, rows...)
	if err := outs.Save(Result{Summary: s, Run: info}, s.Summary.WriteSeriesCSV); err != nil {
		return err
	}
	if stall != nil {
		return fmt.Errorf("ycsb %s: %w", phase, stall)
	}
	return s.Failures()
}
