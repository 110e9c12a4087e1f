package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/workloads"
)

const benchUsage = `usage: nezha bench put|get|scan (-cluster DIR | -servers A,B,C) [flags]   (nezha bench put -h lists its flags)
  put    -vsize BYTES -cnums CLIENTS -dnums OPS   closed-loop PUTs (the paper's PUT benchmark)
  get    -zipf S -cnums CLIENTS -dnums OPS        Zipf GETs over the keys bench put wrote
  scan   -scansize KEYS -cnums CLIENTS -dnums OPS range scans over the keys bench put wrote
  -rate OPS_PER_SEC (or FRACTIONx:SUMMARY.json) makes any of them an open loop`

// benchCommand is `nezha bench put|get|scan`, after the paper's
// randwrite_goroutine, zipf_read and scan_pro (workloads.RunPut, RunGet,
// RunScan).
func (c *cli) benchCommand() *ffcli.Command {
	return c.group("bench", benchUsage, "bench: want a subcommand: put, get, scan",
		func(sub string) error {
			return cmdline.Usagef("bench: unknown subcommand %q (want put, get, scan)", sub)
		},
		c.benchSub("put"), c.benchSub("get"), c.benchSub("scan"))
}

// benchFlags are the flags of one bench subcommand.
type benchFlags struct {
	sub            string
	af             cluster.Address
	outs           workloads.Outputs
	com            *workloads.Common
	put            workloads.PutOptions
	get            workloads.GetOptions
	scan           workloads.ScanOptions
	consistency    string
	connectTimeout time.Duration
	benchfmt       bool
	cpuProfile     string
	rate           string
	fsyncDelay     time.Duration
}

func (c *cli) benchSub(sub string) *ffcli.Command {
	b := &benchFlags{sub: sub}
	fs := c.flagSet("bench " + sub)
	registerAddress(fs, &b.af)
	registerOutputs(fs, &b.outs, true)
	switch sub {
	case "put":
		b.put = workloads.DefaultPutOptions()
		b.com = &b.put.Common
		fs.IntVar(&b.put.ValueBytes, "vsize", b.put.ValueBytes, "value size in bytes")
		fs.IntVar(&b.put.MaxValueBytes, "maxValueBytes", b.put.MaxValueBytes, "the servers' -maxValueBytes (largest value they accept, in bytes)")
		fs.StringVar(&b.put.Order, "order", b.put.Order, "write order of the key indices: random or sequential")
		fs.Int64Var(&b.put.OverwriteKeys, "overwrite", 0, "overwrite `KEYS` keys an earlier bench put wrote (indices drawn uniformly) instead of writing -dnums new keys")
		fs.StringVar(&b.put.ValueKind, "valueKind", b.put.ValueKind, "value bytes: random (incompressible) or lowercase (random a-z, as the paper's programs)")
	case "get":
		b.get = workloads.DefaultGetOptions()
		b.com = &b.get.Common
		fs.Int64Var(&b.get.Keys, "keys", 0, "number of keys written by bench put (0: find them with a binary search of GETs)")
		fs.Float64Var(&b.get.Zipf, "zipf", b.get.Zipf, "Zipf exponent s (> 1)")
	case "scan":
		b.scan = workloads.DefaultScanOptions()
		b.com = &b.scan.Common
		fs.Int64Var(&b.scan.Keys, "keys", 0, "number of keys written by bench put (0: find them with a binary search of GETs)")
		fs.IntVar(&b.scan.ScanSize, "scansize", b.scan.ScanSize, "keys per scan")
	}
	com := b.com
	fs.IntVar(&com.Clients, "cnums", com.Clients, "concurrent closed-loop clients (open loop: the most operations in flight)")
	fs.Int64Var(&com.Ops, "dnums", com.Ops, "total operations over all clients")
	fs.DurationVar(&com.MaxDuration, "duration", 0, "end the run after this long even if fewer than -dnums operations were done (a duration, e.g. 10s); 0: no limit")
	fs.StringVar(&com.KeyPrefix, "keyprefix", com.KeyPrefix, "key prefix; keys are PREFIX + 9 digits")
	fs.Int64Var(&com.Seed, "seed", com.Seed, "random seed (client i uses seed+i)")
	fs.DurationVar(&com.OpTimeout, "timeout", com.OpTimeout, "deadline of one operation, retries included (a duration, e.g. 10s)")
	fs.DurationVar(&com.StallTimeout, "stallTimeout", com.StallTimeout, "stop (saving what was measured) when no operation got an answer from the cluster for this long (a duration); 0: never")
	fs.DurationVar(&com.ProgressInterval, "interval", com.ProgressInterval, "progress line interval when stdout is not a terminal (a duration)")
	registerLoad(fs, &b.rate, &com.Arrivals, &com.Warmup)
	fs.StringVar(&b.consistency, "consistency", "linearizable", "read consistency: linearizable or stale")
	fs.DurationVar(&b.connectTimeout, "connectTimeout", 5*time.Second, "how long to wait for a server to answer before starting (a duration)")
	fs.BoolVar(&b.benchfmt, "benchfmt", false, "also print the result as a Go benchmark line (benchstat compares runs), with the nodes' CPU time when they run on this machine")
	fs.StringVar(&b.cpuProfile, "cpuprofile", "", "write a CPU profile of this client process during the run to `FILE` (go tool pprof)")
	fs.DurationVar(&b.fsyncDelay, "fsyncDelay", 0, "for the run, add this to every fsync of every server (the slow-disk fault through their DiskFaults RPC: start them with -diskFaults), cleared at its end; a duration, at most 10s; 0: leave the servers' disks alone")
	return c.command(sub, benchUsage, fs, func(ctx context.Context, args []string) error {
		if err := noArgs("bench "+sub, args); err != nil {
			return err
		}
		ctx, stdout, stop := loadContext(ctx, c.stdout)
		defer stop()
		return interrupted(ctx, c.bench(ctx, stdout, b))
	})
}

// bench validates b, connects and runs the benchmark, printing to stdout.
// A stall or an interrupt (ctx's end) stops the run: its table and result
// files are still written, with what was measured, before the error says
// why it stopped.
func (c *cli) bench(ctx context.Context, stdout io.Writer, b *benchFlags) error {
	sub, com, put, get, scan := b.sub, b.com, &b.put, &b.get, &b.scan
	com.Progress = stdout

	// Everything that can be checked before contacting the servers.
	var verr, rerr error
	com.Rate, com.RateSource, rerr = workloads.ParseRate(b.rate)
	switch sub {
	case "put":
		verr = put.Validate()
	case "get":
		v := *get
		if v.Keys == 0 {
			v.Keys = workloads.MaxKeys
		}
		verr = v.Validate()
	case "scan":
		v := *scan
		if v.Keys == 0 {
			v.Keys = workloads.MaxKeys
		}
		verr = v.Validate()
	}
	if b.fsyncDelay < 0 || b.fsyncDelay > vfs.MaxLatency {
		verr = errors.Join(verr, cmdline.Usagef("-fsyncDelay %v is outside [0, %v]", b.fsyncDelay, vfs.MaxLatency))
	}
	if verr = errors.Join(rerr, verr); verr != nil {
		return cmdline.OneLine("bench "+sub, verr)
	}
	cn, err := connect(ctx, "bench "+sub, &b.af, b.consistency, b.connectTimeout)
	if err != nil {
		return err
	}
	kc, sts, system, addrs := cn.kc, cn.sts, cn.system, cn.addrs
	defer kc.Close()
	if b.af.Cluster != "" {
		if spec, err := cluster.Load(b.af.Cluster); err == nil {
			spec.FillPIDs(sts)
		}
	}

	keys := &get.Keys
	if sub == "scan" {
		keys = &scan.Keys
	}
	if sub != "put" && *keys == 0 {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := workloads.CountKeys(cctx, kc, com.KeyPrefix)
		cancel()
		if err != nil {
			return fmt.Errorf("bench %s: counting the written keys: %w", sub, err)
		}
		if n == 0 {
			return cmdline.Usagef("bench %s: no key %s found: run bench put first (same -keyprefix) or give -keys", sub, workloads.Key(com.KeyPrefix, 0))
		}
		fmt.Fprintf(stdout, "found %d keys %s..%s\n", n, workloads.Key(com.KeyPrefix, 0), workloads.Key(com.KeyPrefix, n-1))
		*keys = n
		var verr error
		if sub == "get" {
			verr = get.Validate()
		} else {
			verr = scan.Validate()
		}
		if verr != nil {
			return cmdline.OneLine("bench "+sub, verr)
		}
	}

	var config any
	switch sub {
	case "put":
		config = *put
	case "get":
		config = *get
	case "scan":
		config = *scan
	}
	seed := com.Seed
	info := workloads.NewRunInfo("bench "+sub, os.Args, &seed, map[string]any{"options": config, "consistency": b.consistency, "servers": addrs,
		"fsync_delay_ns": b.fsyncDelay.Nanoseconds()})
	info.System = system
	info.SetServers(sts)
	raw, closeRaw, err := b.outs.Open(info)
	if err != nil {
		return err
	}
	defer closeRaw()
	com.Raw = raw

	loop := fmt.Sprintf("%d clients", com.Clients)
	if com.Rate > 0 {
		loop = fmt.Sprintf("open loop at %.1f ops/s (%s arrivals), at most %d in flight", com.Rate, com.Arrivals, com.Clients)
	}
	fmt.Fprintf(stdout, "bench %s: %s, %d operations, seed %d, servers %s%s\n", sub, loop, com.Ops, com.Seed,
		strings.Join(addrs, ","), map[bool]string{true: " (" + cluster.Label(system) + ")", false: ""}[system != ""])
	if b.cpuProfile != "" {
		stop, err := startCPUProfile(b.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if b.fsyncDelay > 0 {
		heal, err := faults.SlowDisks(ctx, addrs, b.fsyncDelay)
		if err != nil {
			return fmt.Errorf("bench %s: -fsyncDelay: %w", sub, err)
		}
		defer func() {
			if err := heal(); err != nil {
				fmt.Fprintf(c.stderr, "bench: %v\n", err)
			}
		}()
		fmt.Fprintf(stdout, "every fsync of %d servers takes %v longer (slow-disk)\n", len(addrs), b.fsyncDelay)
	}
	nodeCPU := workloads.NewNodeCPU(sts)
	cpu0, cpuOK := nodeCPU.Seconds()
	var s workloads.Summary
	switch sub {
	case "put":
		s, err = workloads.RunPut(ctx, kc, *put)
	case "get":
		s, err = workloads.RunGet(ctx, kc, *get)
	case "scan":
		s, err = workloads.RunScan(ctx, kc, *scan)
	}
	stop, err := stopped(ctx, kc, "bench "+sub, err)
	if err != nil {
		return err
	}
	if err := closeRaw(); err != nil {
		return err
	}
	workloads.PrintTable(stdout, s)
	if b.benchfmt {
		cpu := -1.0
		if cpu1, ok := nodeCPU.Seconds(); ok && cpuOK {
			cpu = cpu1 - cpu0
		}
		var parts []string
		switch sub {
		case "put":
			parts = append(parts, fmt.Sprintf("vsize=%d", put.ValueBytes))
		case "get":
			parts = append(parts, "consistency="+strings.ToLower(b.consistency))
		case "scan":
			parts = append(parts, fmt.Sprintf("scansize=%d", scan.ScanSize))
		}
		parts = append(parts, fmt.Sprintf("cnums=%d", com.Clients))
		if b.fsyncDelay > 0 {
			parts = append(parts, "fsyncdelay="+b.fsyncDelay.String())
		}
		workloads.WriteBenchfmt(stdout, workloads.BenchName(sub, system, parts...), s, cpu)
	}
	if err := b.outs.Save(workloads.Result{Summary: s, Run: info}, s, "nezha bench "+sub); err != nil {
		return err
	}
	if stop != nil {
		return fmt.Errorf("bench %s: %w (the table and the result files hold the %d operations done)", sub, stop, s.Ops+s.Errors+s.Ambiguous)
	}
	return s.Failures()
}

// startCPUProfile starts Go's CPU profiler writing to path; stop ends it
// and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, cmdline.Usagef("-cpuprofile %s: %v", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
