package workloads

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/client"
	"github.com/nezha-harness/nezha/systems/cluster"
	"github.com/nezha-harness/nezha/systems/kvpb"
)

// Result is what -json FILE and summary.json hold: the summary, with the
// run record beside it.
type Result struct {
	Summary
	Run RunInfo `json:"run"`
}

// Connect makes a client of cfg and checks that at least one server
// answers Status within timeout; if none does, it fails with a
// *systems.UsageError (exit 2) before any load starts. It returns the
// statuses of the servers that answered.
func Connect(ctx context.Context, cfg client.Config, consistency string, timeout time.Duration) (*client.Client, []*kvpb.StatusResponse, error) {
	addrs := cfg.Servers
	switch strings.ToLower(consistency) {
	case "", "linearizable":
	case "stale":
		cfg.Consistency = kvpb.ReadConsistency_STALE
	default:
		return nil, nil, systems.Usagef("-consistency %q: want linearizable or stale", consistency)
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sts := c.Discover(dctx)
	if len(sts) == 0 {
		c.Close()
		return nil, nil, systems.Usagef("no server answered within %v at %s", timeout, strings.Join(addrs, ","))
	}
	return c, sts, nil
}

// PrintTable prints one row per summary.
func PrintTable(w io.Writer, ss ...Summary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tops\tsec\tops/s\tMB/s\tavg(us)\tp50\tp95\tp99\tp99.9\tmax\terrors\tambiguous\tmisses\t")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.1f\t%.2f\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.Op, s.Ops, s.DurationSec, s.OpsPerSec,
			s.MBPerSec, s.AvgUs, s.P50Us, s.P95Us, s.P99Us, s.P999Us, s.MaxUs, s.Errors, s.Ambiguous, s.Misses)
	}
	tw.Flush()
	for _, s := range ss {
		for _, e := range s.ErrorSamples {
			fmt.Fprintf(w, "%s error: %s\n", s.Op, e)
		}
	}
}

// Outputs are the result files of a run: -json FILE, -raw FILE, -out DIR
// (config.json, summary.json, raw.csv, timeseries.csv).
type Outputs struct {
	JSON, Raw, Dir string
}

// Register adds -json, -raw (if raw) and -out to fs.
func (o *Outputs) Register(fs *flag.FlagSet, raw bool) {
	fs.StringVar(&o.JSON, "json", "", "write the summary (with the run record) as JSON to `FILE`")
	if raw {
		fs.StringVar(&o.Raw, "raw", "", "write every operation (op,start_unix_us,latency_us,ok,outcome) as CSV to `FILE`")
	}
	fs.StringVar(&o.Dir, "out", "", "write config.json, summary.json, raw.csv and timeseries.csv to `DIR`")
}

// Open creates -out DIR and opens the raw CSV files; the returned writer is
// nil if no raw output was asked for. close closes them.
func (o *Outputs) Open(info RunInfo) (raw io.Writer, close func() error, err error) {
	var files []*os.File
	close = func() error {
		var first error
		for _, f := range files {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
		files = nil
		return first
	}
	var paths []string
	if o.Raw != "" {
		paths = append(paths, o.Raw)
	}
	if o.Dir != "" {
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return nil, close, systems.Usagef("-out %s: %v", o.Dir, err)
		}
		if err := WriteJSON(filepath.Join(o.Dir, "config.json"), info); err != nil {
			return nil, close, systems.Usagef("-out %s: %v", o.Dir, err)
		}
		paths = append(paths, filepath.Join(o.Dir, "raw.csv"))
	}
	var ws []io.Writer
	for _, p := range paths {
		f, err := os.Create(p)
		if err != nil {
			close()
			return nil, func() error { return nil }, systems.Usagef("%v", err)
		}
		files = append(files, f)
		ws = append(ws, f)
	}
	switch len(ws) {
	case 0:
		return nil, close, nil
	case 1:
		return ws[0], close, nil
	}
	return io.MultiWriter(ws...), close, nil
}

// Save writes the summary files: -json FILE, and summary.json and
// timeseries.csv in -out DIR.
func (o *Outputs) Save(res any, series func(io.Writer) error) error {
	if o.JSON != "" {
		if err := WriteJSON(o.JSON, res); err != nil {
			return err
		}
	}
	if o.Dir != "" {
		if err := WriteJSON(filepath.Join(o.Dir, "summary.json"), res); err != nil {
			return err
		}
		if series != nil {
			f, err := os.Create(filepath.Join(o.Dir, "timeseries.csv"))
			if err != nil {
				return err
			}
			if err := series(f); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
	}
	return nil
}

const benchUsage = `usage: nezha bench put|get|scan (-cluster DIR | -servers A,B,C) [flags]   (nezha bench put -h lists its flags)
  put    -vsize BYTES -cnums CLIENTS -dnums OPS   closed-loop PUTs (the paper's PUT benchmark)
  get    -zipf S -cnums CLIENTS -dnums OPS        Zipf GETs over the keys bench put wrote
  scan   -scansize KEYS -cnums CLIENTS -dnums OPS range scans over the keys bench put wrote`

// Command is `nezha bench put|get|scan`, after the paper's
// randwrite_goroutine, zipf_read and scan_pro.
func Command(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return systems.Usagef("bench: want a subcommand: put, get, scan")
	}
	sub, args := args[0], args[1:]
	if err := systems.SubcommandHelp(sub, stdout, benchUsage); err != nil {
		return err
	}
	fs := flag.NewFlagSet("bench "+sub, flag.ContinueOnError)
	var (
		af   cluster.AddressFlags
		outs Outputs
		com  *Common
		put  PutOptions
		get  GetOptions
		scan ScanOptions
	)
	af.Register(fs)
	outs.Register(fs, true)
	switch sub {
	case "put":
		put = DefaultPutOptions()
		com = &put.Common
		fs.IntVar(&put.ValueBytes, "vsize", put.ValueBytes, "value size in bytes")
		fs.IntVar(&put.MaxValueBytes, "maxValueBytes", put.MaxValueBytes, "the servers' -maxValueBytes (largest value they accept)")
		fs.StringVar(&put.Order, "order", put.Order, "write order of the key indices: random or sequential")
		fs.StringVar(&put.ValueKind, "valueKind", put.ValueKind, "value bytes: random (incompressible) or lowercase (random a-z, as the paper's programs)")
	case "get":
		get = DefaultGetOptions()
		com = &get.Common
		fs.Int64Var(&get.Keys, "keys", 0, "number of keys written by bench put (0: find them with a binary search of GETs)")
		fs.Float64Var(&get.Zipf, "zipf", get.Zipf, "Zipf exponent s (> 1)")
	case "scan":
		scan = DefaultScanOptions()
		com = &scan.Common
		fs.Int64Var(&scan.Keys, "keys", 0, "number of keys written by bench put (0: find them with a binary search of GETs)")
		fs.IntVar(&scan.ScanSize, "scansize", scan.ScanSize, "keys per scan")
	default:
		return systems.Usagef("bench: unknown subcommand %q (want put, get, scan)", sub)
	}
	fs.IntVar(&com.Clients, "cnums", com.Clients, "concurrent closed-loop clients")
	fs.Int64Var(&com.Ops, "dnums", com.Ops, "total operations over all clients")
	fs.StringVar(&com.KeyPrefix, "keyprefix", com.KeyPrefix, "key prefix; keys are PREFIX + 9 digits")
	fs.Int64Var(&com.Seed, "seed", com.Seed, "random seed (client i uses seed+i)")
	fs.DurationVar(&com.OpTimeout, "timeout", com.OpTimeout, "deadline of one operation, retries included")
	fs.DurationVar(&com.StallTimeout, "stallTimeout", com.StallTimeout, "stop (saving what was measured) when no operation got an answer from the cluster for this long; 0: never")
	fs.DurationVar(&com.ProgressInterval, "interval", com.ProgressInterval, "progress line interval when stdout is not a terminal")
	consistency := fs.String("consistency", "linearizable", "read consistency: linearizable or stale")
	connectTimeout := fs.Duration("connectTimeout", 5*time.Second, "how long to wait for a server to answer before starting")
	benchfmt := fs.Bool("benchfmt", false, "also print the result as a Go benchmark line (benchstat compares runs), with the nodes' CPU time when they run on this machine")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this client process during the run to `FILE` (go tool pprof)")
	if err := systems.ParseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return systems.Usagef("bench %s: unexpected argument %q", sub, fs.Arg(0))
	}
	com.Progress = stdout

	// Everything that can be checked before contacting the servers.
	var verr error
	switch sub {
	case "put":
		verr = put.Validate()
	case "get":
		v := get
		if v.Keys == 0 {
			v.Keys = MaxKeys
		}
		verr = v.Validate()
	case "scan":
		v := scan
		if v.Keys == 0 {
			v.Keys = MaxKeys
		}
		verr = v.Validate()
	}
	if verr != nil {
		return systems.OneLine("bench "+sub, verr)
	}
	cfg, system, err := af.ClientConfig()
	if err != nil {
		return systems.OneLine("bench "+sub, err)
	}
	addrs := cfg.Servers
	ctx := context.Background()
	c, sts, err := Connect(ctx, cfg, *consistency, *connectTimeout)
	if err != nil {
		return systems.OneLine("bench "+sub, err)
	}
	defer c.Close()
	if af.Cluster != "" {
		if spec, err := cluster.Load(af.Cluster); err == nil {
			spec.FillPIDs(sts)
		}
	}

	keys := &get.Keys
	if sub == "scan" {
		keys = &scan.Keys
	}
	if sub != "put" && *keys == 0 {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := CountKeys(cctx, c, com.KeyPrefix)
		cancel()
		if err != nil {
			return fmt.Errorf("bench %s: counting the written keys: %w", sub, err)
		}
		if n == 0 {
			return systems.Usagef("bench %s: no key %s found: run bench put first (same -keyprefix) or give -keys", sub, Key(com.KeyPrefix, 0))
		}
		fmt.Fprintf(stdout, "found %d keys %s..%s\n", n, Key(com.KeyPrefix, 0), Key(com.KeyPrefix, n-1))
		*keys = n
		var verr error
		if sub == "get" {
			verr = get.Validate()
		} else {
			verr = scan.Validate()
		}
		if verr != nil {
			return systems.OneLine("bench "+sub, verr)
		}
	}

	var config any
	switch sub {
	case "put":
		config = put
	case "get":
		config = get
	case "scan":
		config = scan
	}
	seed := com.Seed
	info := NewRunInfo("bench "+sub, os.Args, &seed, map[string]any{"options": config, "consistency": *consistency, "servers": addrs})
	info.System = system
	info.SetServers(sts)
	raw, closeRaw, err := outs.Open(info)
	if err != nil {
		return err
	}
	defer closeRaw()
	com.Raw = raw

	fmt.Fprintf(stdout, "bench %s: %d clients, %d operations, seed %d, servers %s%s\n", sub, com.Clients, com.Ops, com.Seed,
		strings.Join(addrs, ","), map[bool]string{true: " (" + cluster.Label(system) + ")", false: ""}[system != ""])
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	nodeCPU := NewNodeCPU(sts)
	cpu0, cpuOK := nodeCPU.Seconds()
	var s Summary
	switch sub {
	case "put":
		s, err = RunPut(ctx, c, put)
	case "get":
		s, err = RunGet(ctx, c, get)
	case "scan":
		s, err = RunScan(ctx, c, scan)
	}
	var stall *StallError
	if errors.As(err, &stall) {
		stall.Nodes = ProbeNodes(ctx, c, 2*time.Second)
	} else if err != nil {
		return fmt.Errorf("bench %s: %w", sub, err)
	}
	if err := closeRaw(); err != nil {
		return err
	}
	PrintTable(stdout, s)
	if *benchfmt {
		cpu := -1.0
		if cpu1, ok := nodeCPU.Seconds(); ok && cpuOK {
			cpu = cpu1 - cpu0
		}
		var parts []string
		switch sub {
		case "put":
			parts = append(parts, fmt.Sprintf("vsize=%d", put.ValueBytes))
		case "get":
			parts = append(parts, "consistency="+strings.ToLower(*consistency))
		case "scan":
			parts = append(parts, fmt.Sprintf("scansize=%d", scan.ScanSize))
		}
		parts = append(parts, fmt.Sprintf("cnums=%d", com.Clients))
		WriteBenchfmt(stdout, BenchName(sub, system, parts...), s, cpu)
	}
	if err := outs.Save(Result{Summary: s, Run: info}, s.WriteSeriesCSV); err != nil {
		return err
	}
	if stall != nil {
		return fmt.Errorf("bench %s: %w", sub, stall)
	}
	return s.Failures()
}

// startCPUProfile starts Go's CPU profiler writing to path; stop ends it
// and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, systems.Usagef("-cpuprofile %s: %v", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
