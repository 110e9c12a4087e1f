package workloads

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Result is what -json FILE and summary.json hold: the summary, with the
// run record beside it.
type Result struct {
	Summary
	Run RunInfo `json:"run"`
}

// Connect makes a client of cfg and checks that at least one server
// answers Status within timeout; if none does, it fails with a
// *cmdline.UsageError (exit 2) before any load starts. It returns the
// statuses of the servers that answered.
func Connect(ctx context.Context, cfg client.Config, consistency string, timeout time.Duration) (*client.Client, []*kvpb.StatusResponse, error) {
	addrs := cfg.Servers
	switch strings.ToLower(consistency) {
	case "", "linearizable":
	case "stale":
		cfg.Consistency = kvpb.ReadConsistency_STALE
	default:
		return nil, nil, cmdline.Usagef("-consistency %q: want linearizable or stale", consistency)
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
		return nil, nil, cmdline.Usagef("no server answered within %v at %s", timeout, strings.Join(addrs, ","))
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
	printOpenLoop(w, ss)
}

// printOpenLoop prints, for the open-loop summaries of ss, the offered
// load and the latencies from the intended start, with the late
// operations.
func printOpenLoop(w io.Writer, ss []Summary) {
	var open []Summary
	for _, s := range ss {
		if s.Load.Loop == LoopOpen {
			open = append(open, s)
		}
	}
	if len(open) == 0 {
		return
	}
	l := open[0].Load
	fmt.Fprintf(w, "open loop: %.1f ops/s offered (%s arrivals", l.RateOpsPerSec, l.Arrivals)
	if l.Seed != nil && l.Arrivals == ArrivalsPoisson {
		fmt.Fprintf(w, ", seed %d", *l.Seed)
	}
	fmt.Fprintf(w, "), at most %d in flight", l.MaxInFlight)
	if l.RateSource != "" {
		fmt.Fprintf(w, "; rate: %s", l.RateSource)
	}
	if l.WarmupSec > 0 {
		fmt.Fprintf(w, "; the first %gs were a warm-up, left out", l.WarmupSec)
	}
	fmt.Fprintln(w, "\nlatency from the intended start (us); late: not sent on time, every sender busy:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tops\tlate\tavg(us)\tp50\tp95\tp99\tp99.9\tmax\t")
	for _, s := range open {
		i := s.Intended
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t\n", s.Op, s.Ops, s.LateOps, i.AvgUs, i.P50Us, i.P95Us, i.P99Us, i.P999Us, i.MaxUs)
	}
	tw.Flush()
}

// Outputs are the result files of a run: -json FILE, -raw FILE, -out DIR
// (config.json, summary.json, raw.csv, timeseries.csv, latency.hlog). Empty
// fields write nothing.
type Outputs struct {
	// JSON is the file the summary (with the run record) is written to.
	JSON string
	// Raw is the CSV file of every operation (see WriteRawCSV).
	Raw string
	// Dir receives config.json, summary.json, timeseries.csv (the
	// per-second series, WriteSeriesCSV), latency.hlog (its HdrHistogram
	// interval log, WriteHistogramLog) and, with RawInDir, raw.csv.
	Dir string
	// RawInDir: the run records every operation (bench; ycsb does not), so
	// Dir gets raw.csv.
	RawInDir bool
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
			return nil, close, cmdline.Usagef("-out %s: %v", o.Dir, err)
		}
		if err := WriteJSON(filepath.Join(o.Dir, "config.json"), info); err != nil {
			return nil, close, cmdline.Usagef("-out %s: %v", o.Dir, err)
		}
		if o.RawInDir {
			paths = append(paths, filepath.Join(o.Dir, "raw.csv"))
		}
	}
	var ws []io.Writer
	for _, p := range paths {
		f, err := os.Create(p)
		if err != nil {
			close()
			return nil, func() error { return nil }, cmdline.Usagef("%v", err)
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

// Save writes the summary files: -json FILE, and summary.json,
// timeseries.csv and latency.hlog (if s has per-second histograms) in
// -out DIR. res is what the JSON files hold; s its (total) summary; what
// names the run in the interval log.
func (o *Outputs) Save(res any, s Summary, what string) error {
	if o.JSON != "" {
		if err := WriteJSON(o.JSON, res); err != nil {
			return err
		}
	}
	if o.Dir == "" {
		return nil
	}
	if err := WriteJSON(filepath.Join(o.Dir, "summary.json"), res); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(o.Dir, "timeseries.csv"), s.WriteSeriesCSV); err != nil {
		return err
	}
	if s.intervals == nil {
		return nil
	}
	return writeFile(filepath.Join(o.Dir, "latency.hlog"), func(w io.Writer) error { return s.WriteHistogramLog(w, what) })
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
