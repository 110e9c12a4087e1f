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

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/client"
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
// (config.json, summary.json, raw.csv, timeseries.csv). Empty fields write
// nothing.
type Outputs struct {
	// JSON is the file the summary (with the run record) is written to.
	JSON string
	// Raw is the CSV file of every operation
	// (op,start_unix_us,latency_us,ok,outcome).
	Raw string
	// Dir receives config.json, summary.json, timeseries.csv and, with
	// RawInDir, raw.csv.
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
			return nil, close, systems.Usagef("-out %s: %v", o.Dir, err)
		}
		if err := WriteJSON(filepath.Join(o.Dir, "config.json"), info); err != nil {
			return nil, close, systems.Usagef("-out %s: %v", o.Dir, err)
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
