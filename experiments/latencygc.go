package experiments

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/workloads"
)

// latency-gc: tail latency from the intended start of an open loop, split
// into the operations that overlapped a GC round (nezha) or a RocksDB
// compaction (original, blobdb) on any node and those that overlapped
// none, at fractions of each system's own closed-loop peak.

// latencyGCSystems are the systems latency-gc compares (nezha with its
// default GC, nezha-nogc, original, blobdb), those of syss, in that order.
func latencyGCSystems(syss []string) []string {
	var out []string
	for _, s := range []string{sysNezha, sysNezhaNoGC, sysOriginal, sysBlobDB} {
		if slices.Contains(syss, s) {
			out = append(out, s)
		}
	}
	return out
}

// latencyGCWindowKind is the background work whose windows split a
// system's operations: GC rounds for nezha, compactions for the RocksDB
// systems, none for nezha-nogc.
func (x *Run) latencyGCWindowKind(sys string) (plots.WindowKind, bool) {
	switch {
	case sys == sysNezha:
		return plots.WindowGC, true
	case x.hasCompactions(sys):
		return plots.WindowCompaction, true
	}
	return "", false
}

// latencyGCWork names the background work of kind in prose.
func latencyGCWork(kind plots.WindowKind) string {
	if kind == plots.WindowGC {
		return "GC"
	}
	return "compaction"
}

// latencyGCRate is one open-loop run of a system.
type latencyGCRate struct {
	fraction float64
	sum      workloads.Summary
	// windows are the GC rounds or compactions of the run, in seconds
	// from the start of its measurement, clipped to it; shaded are all
	// of its windows (write stalls and leader changes too), for its
	// figure.
	windows, shaded []plots.Window
	// covered is the fraction of the measured time in at least one window
	// (on any node).
	covered float64
	// during and outside hold the latencies from the intended start, in
	// microseconds, of the completed operations that overlapped a window
	// and of those that overlapped none.
	during, outside *hdrhistogram.Histogram
}

// latencyGCOutcome is one system's runs.
type latencyGCOutcome struct {
	peak  workloads.Summary
	rates []latencyGCRate
}

func latencyGCExperiment() Experiment {
	return Experiment{
		Name: "latency-gc", Title: "Tail latency during GC and compaction (open loop)",
		Shows:            "what nezha's GC rounds and the RocksDB systems' compactions do to the p99 and p99.9 latency from the intended start, at 50, 70 and 90 % of each system's own peak",
		NeedsOwnClusters: true, SmallDisk: true, OutsideQuickAll: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			syss := latencyGCSystems(x.Systems)
			if len(syss) == 0 {
				return fmt.Errorf("none of %s, %s, %s, %s among the systems %v", sysNezha, sysNezhaNoGC, sysOriginal, sysBlobDB, x.Systems)
			}
			live := p.LatencyGCKeys * int64(p.LatencyGCValueBytes)
			// Twice the live data, as the gc experiment: rounds spaced by
			// a few seconds, so that there is time outside them.
			threshold := max(2*live, p.SegmentSizeBytes)
			x.param("systems", syss)
			x.param("keys", p.LatencyGCKeys)
			x.param("value_bytes", p.LatencyGCValueBytes)
			x.param("peak_clients", p.Clients)
			x.param("peak_duration", p.LatencyGCPeak.String())
			x.param("warmup", p.LatencyGCWarmup.String())
			x.param("duration", p.LatencyGCDuration.String())
			x.param("rates_of_peak", p.LatencyGCRates)
			x.param("senders", p.LatencyGCSenders)
			x.param("arrivals", workloads.ArrivalsPoisson)
			x.param("gc_threshold_bytes", threshold)
			x.param("geometry", p.Geometry)
			x.note("Each system gets a fresh cluster, %d keys of %d KiB (%s live), then overwrites of uniformly drawn keys: first a closed loop of %d clients for %v after a warm-up of %v, whose throughput is the system's peak; then an open loop at each of %s of that peak (bench's -rate Fx: on the peak's summary.json), Poisson arrivals, at most %d in flight, %v of warm-up left out and %v measured. The cluster settles (its nodes write less than 1 MB/s) before each run. nezha's GC runs with its default knobs once a node's log holds %s; the RocksDB systems' geometry is %s.",
				p.LatencyGCKeys, p.LatencyGCValueBytes/kib, bytesText(live), p.Clients, p.LatencyGCPeak, p.LatencyGCWarmup,
				percentList(p.LatencyGCRates), p.LatencyGCSenders, p.LatencyGCWarmup, p.LatencyGCDuration, bytesText(threshold), geometryText(p.Geometry, live))
			x.note("Latency is from each operation's intended start (its time on the schedule) to its answer (docs/latency.md). An operation counts 'during GC' (nezha: a GC round; original and blobdb: a RocksDB compaction, 'during compaction') if the span from its intended start to its answer overlaps such a window on any node, as the nodes report them (nezha's GC rounds; RocksDB's compaction jobs from its info log, to the microsecond); 'outside' if it overlaps none. A long operation is the likelier to overlap a window, so slow operations lean towards 'during'; 'time in windows' says how much of the run the windows covered. nezha-nogc has no GC: all its operations are outside. The p99.9 of fewer than 1000 operations (the p99 of fewer than 100) is their maximum: the ratio column and the metrics leave such values out.")
			outcomes := map[string]latencyGCOutcome{}
			for _, sys := range syss {
				o, err := x.latencyGCRun(ctx, sys, threshold)
				if err != nil {
					continue // recorded by latencyGCRun
				}
				outcomes[sys] = o
			}
			x.latencyGCReport(syss, outcomes)
			if len(outcomes) == 0 {
				return errors.New("no system ran")
			}
			return nil
		},
	}
}

// geometryText says how the RocksDB systems' geometry was set.
func geometryText(geometry string, live int64) string {
	if geometry == GeometryScaled {
		return "scaled to the live data (" + bytesText(live) + " per node), floors at 64 KiB"
	}
	return "RocksDB's defaults"
}

// latencyGCRun measures sys: load, peak, then each rate, on one cluster.
func (x *Run) latencyGCRun(ctx context.Context, sys string, threshold int64) (latencyGCOutcome, error) {
	p := x.Profile
	var out latencyGCOutcome
	live := p.LatencyGCKeys * int64(p.LatencyGCValueBytes)
	extra := x.geometryArgs(sys, live)
	extra = append(extra, x.gcArgs(sys, "", threshold)...)
	tb, err := x.start(ctx, sys, "latency-gc", extra...)
	if err != nil {
		x.fail(sys, "cluster up", err, nil)
		return out, err
	}
	fail := func(step string, err error) (latencyGCOutcome, error) {
		x.fail(sys, step, err, tb.spec)
		tb.stop(true)
		return out, err
	}
	put := func(prefix string, clients int, ops, seed int64) workloads.PutOptions {
		c := x.benchCommon(prefix, clients, ops, seed, nil)
		c.Progress = nil // a line per phase instead
		return workloads.PutOptions{Common: c, ValueBytes: p.LatencyGCValueBytes, MaxValueBytes: max(p.LatencyGCValueBytes, 64*mib), Order: "random"}
	}
	x.logf("%s: load %d keys x %d KiB", sys, p.LatencyGCKeys, p.LatencyGCValueBytes/kib)
	load := put("l", p.Clients, p.LatencyGCKeys, 1)
	sum, err := workloads.RunPut(ctx, tb.c, load)
	if err == nil {
		err = sum.Failures()
	}
	if err != nil {
		return fail("load", err)
	}
	if err := settle(ctx, tb); err != nil {
		return fail("settle", err)
	}

	// The peak: a closed loop of overwrites.
	peak := put("l", p.Clients, math.MaxInt32, 2)
	peak.OverwriteKeys, peak.Warmup, peak.MaxDuration = p.LatencyGCKeys, p.LatencyGCWarmup, p.LatencyGCWarmup+p.LatencyGCPeak
	x.logf("%s: peak: %d clients overwrite for %v (after %v of warm-up)", sys, p.Clients, p.LatencyGCPeak, p.LatencyGCWarmup)
	if out.peak, err = workloads.RunPut(ctx, tb.c, peak); err == nil {
		err = out.peak.Failures()
	}
	if err != nil {
		return fail("peak", err)
	}
	peakDir := filepath.Join(x.Dir, "runs", sanitize(sys)+"-peak")
	if err := saveRun(peakDir, "latency-gc "+sys+" peak", out.peak, peak); err != nil {
		return fail("peak", err)
	}
	x.logf("%s: peak %.0f ops/s, p99 %s ms", sys, out.peak.OpsPerSec, ms(out.peak.P99Us))

	kind, split := x.latencyGCWindowKind(sys)
	for i, f := range p.LatencyGCRates {
		if err := settle(ctx, tb); err != nil {
			return fail("settle", err)
		}
		rate, source, err := workloads.ParseRate(fmt.Sprintf("%gx:%s", f, peakDir))
		if err != nil {
			return fail("rate", err)
		}
		window := p.LatencyGCWarmup + p.LatencyGCDuration
		// The window ends the run; the operation bound is above what a
		// Poisson schedule brings in it (its mean plus 20 % and 100).
		o := put("l", p.LatencyGCSenders, int64(math.Ceil(1.2*rate*window.Seconds()))+100, int64(10+i))
		var raw bytes.Buffer
		o.Raw = &raw
		o.OverwriteKeys, o.Rate, o.RateSource, o.Arrivals = p.LatencyGCKeys, rate, source, workloads.ArrivalsPoisson
		o.Warmup, o.MaxDuration = p.LatencyGCWarmup, window
		x.logf("%s: open loop at %g %% of the peak: %.0f ops/s for %v", sys, 100*f, rate, window)
		s, err := workloads.RunPut(ctx, tb.c, o)
		if err != nil {
			return fail(fmt.Sprintf("open loop at %g %%", 100*f), err)
		}
		runDir := filepath.Join(x.Dir, "runs", fmt.Sprintf("%s-%g", sanitize(sys), 100*f))
		if err := saveRun(runDir, fmt.Sprintf("latency-gc %s at %g %% of the peak", sys, 100*f), s, o); err != nil {
			return fail("save", err)
		}
		r := latencyGCRate{fraction: f, sum: s}
		start := time.UnixMicro(s.MeasuredFromUnixUs)
		ws, err := x.nodeWindows(ctx, tb, start, s.DurationSec)
		if err != nil {
			return fail("windows", err)
		}
		x.recordWindows(RunWindows{Run: fmt.Sprintf("open loop at %g %% of the peak", 100*f), System: sys, Start: start, Seconds: s.DurationSec, Windows: ws})
		r.shaded = figureWindows(ws, 0, "")
		if split {
			r.windows = figureWindows(ws, 0, "", otherKinds(kind)...)
		}
		// The operations and the windows they were split by, so that the
		// split can be made again from the files.
		if err := os.WriteFile(filepath.Join(runDir, "raw.csv"), raw.Bytes(), 0o644); err != nil {
			return fail("save", err)
		}
		if r.windows == nil {
			r.windows = []plots.Window{}
		}
		if err := writeJSON(filepath.Join(runDir, "windows.json"), r.windows); err != nil {
			return fail("save", err)
		}
		ops, err := workloads.ReadRawCSV(&raw)
		if err != nil {
			return fail("raw", err)
		}
		r.during, r.outside, r.covered = splitByWindows(ops, r.windows, start, s.DurationSec)
		found := "no GC"
		if split {
			found = fmt.Sprintf("%d %s windows over %.0f %% of the time", len(r.windows), latencyGCWork(kind), 100*r.covered)
		}
		x.logf("%s at %g %%: %.0f ops/s, %d late, p99.9 %s ms from the intended start; %s",
			sys, 100*f, s.OpsPerSec, s.LateOps, ms(s.Intended.P999Us), found)
		out.rates = append(out.rates, r)
	}
	tb.stop(false)
	return out, nil
}

// saveRun writes a run's summary.json, timeseries.csv and latency.hlog
// (HdrHistogram interval log) to dir, as bench -out does.
func saveRun(dir, what string, s workloads.Summary, o workloads.PutOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	seed := o.Seed
	info := workloads.NewRunInfo("experiment latency-gc", []string{"nezha", "experiment", "run", "latency-gc"}, &seed, o)
	return (&workloads.Outputs{Dir: dir}).Save(workloads.Result{Summary: s, Run: info}, s, what)
}

// otherKinds are the window kinds but kind.
func otherKinds(kind plots.WindowKind) []plots.WindowKind {
	return slices.DeleteFunc(plots.WindowKinds(), func(k plots.WindowKind) bool { return k == kind })
}

// splitByWindows records the latency from the intended start of each
// completed operation of ops (microseconds) into during, if the span from
// its intended start to its answer overlaps one of windows (seconds from
// start), or else into outside; covered is the fraction of the seconds
// from start that the windows cover.
func splitByWindows(ops []workloads.RawOp, windows []plots.Window, start time.Time, seconds float64) (during, outside *hdrhistogram.Histogram, covered float64) {
	during, outside = newUsHistogram(), newUsHistogram()
	type span struct{ from, to float64 }
	var spans []span // the windows' union, sorted and disjoint
	ws := slices.Clone(windows)
	slices.SortFunc(ws, func(a, b plots.Window) int { return cmp.Compare(a.Start, b.Start) })
	for _, w := range ws {
		if n := len(spans); n > 0 && w.Start <= spans[n-1].to {
			spans[n-1].to = max(spans[n-1].to, w.End)
			continue
		}
		spans = append(spans, span{w.Start, w.End})
	}
	for _, s := range spans {
		covered += s.to - s.from
	}
	if seconds > 0 {
		covered /= seconds
	}
	for _, op := range ops {
		if op.Outcome != workloads.OK && op.Outcome != workloads.Miss {
			continue
		}
		done := op.Start.Add(op.Latency)
		from, to := op.Intended.Sub(start).Seconds(), done.Sub(start).Seconds()
		// The first span that does not end before the operation starts.
		i, _ := slices.BinarySearchFunc(spans, from, func(s span, t float64) int { return cmp.Compare(s.to, t) })
		h := outside
		if i < len(spans) && spans[i].from <= to {
			h = during
		}
		_ = h.RecordValue(min(max(done.Sub(op.Intended).Microseconds(), 1), int64(time.Hour/time.Microsecond)))
	}
	return during, outside, covered
}

// newUsHistogram is a histogram of latencies of 1 us to an hour, 3
// significant digits (as workloads records them).
func newUsHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
}

// minOpsForQuantile is how many operations a quantile q (percent) needs
// to be more than their maximum: 1000 for p99.9, 100 for p99. Below it
// the table still shows the value (the maximum), but no ratio or metric
// is made of it.
func minOpsForQuantile(q float64) float64 { return math.Round(100 / (100 - q)) }

// quantileMs is h's quantile q (percent) in milliseconds, "-" if h is
// empty.
func quantileMs(h *hdrhistogram.Histogram, q float64) string {
	if h == nil || h.TotalCount() == 0 {
		return "-"
	}
	return ms(h.ValueAtQuantile(q))
}

// latencyGCReport makes latency-gc's tables, metrics, notes and figures.
func (x *Run) latencyGCReport(syss []string, outcomes map[string]latencyGCOutcome) {
	p := x.Profile
	peaks := Table{Title: "Closed-loop peak per system (overwrites)", Columns: []string{"system", "peak ops/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms"}}
	tbl := Table{Title: "Latency from the intended start (ms) during GC rounds (nezha) or compactions (original, blobdb) and outside them",
		Columns: []string{"system", "rate", "offered ops/s", "done ops/s", "late ops", "errors", "windows per node", "time in windows",
			"ops during / outside", "p50 during", "p99 during", "p99.9 during", "p50 outside", "p99 outside", "p99.9 outside",
			"p99.9 during / outside", "p99.9 all: intended / send"}}
	cdfs := make([]plots.Figure, len(p.LatencyGCRates))
	for i, f := range p.LatencyGCRates {
		cdfs[i] = plots.Figure{Name: fmt.Sprintf("latency-gc-cdf-%g", 100*f), Title: fmt.Sprintf("Latency from the intended start at %g %% of each system's peak", 100*f),
			Kind: plots.CDF, XLabel: "latency from the intended start (ms)", YLabel: "fraction of operations", LogX: true,
			Caption: fmt.Sprintf("Open loop at %g %% of each system's own closed-loop peak: the operations whose span overlapped a GC round (nezha) or a compaction (original, blobdb) on any node, and the others.", 100*f)}
	}
	for _, sys := range syss {
		o, ok := outcomes[sys]
		if !ok {
			continue
		}
		pk := o.peak
		peaks.Rows = append(peaks.Rows, []string{sys, f0(pk.OpsPerSec), f1(pk.MBPerSec), ms(pk.P50Us), ms(pk.P99Us), ms(pk.P999Us)})
		x.metric("latency_gc_peak_ops_per_sec/"+sys, pk.OpsPerSec)
		kind, split := x.latencyGCWindowKind(sys)
		work := latencyGCWork(kind)
		var pairs []string
		for i, r := range o.rates {
			s := r.sum
			pct := fmt.Sprintf("%g", 100*r.fraction)
			nodes := float64(max(x.Profile.Nodes, 1))
			perNode, covered, ratio := "-", "-", "-"
			// A quantile is a metric only where enough operations hold it.
			quantileMetric := func(name string, h *hdrhistogram.Histogram, q float64) {
				if float64(h.TotalCount()) >= minOpsForQuantile(q) {
					x.metric(fmt.Sprintf("%s/%s/%s", name, sys, pct), float64(h.ValueAtQuantile(q))/1000)
				}
			}
			quantileMetric("latency_gc_p99_outside_ms", r.outside, 99)
			quantileMetric("latency_gc_p999_outside_ms", r.outside, 99.9)
			if split {
				perNode, covered = f1(float64(len(r.windows))/nodes), fmt.Sprintf("%.0f %%", 100*r.covered)
				quantileMetric("latency_gc_p99_during_ms", r.during, 99)
				quantileMetric("latency_gc_p999_during_ms", r.during, 99.9)
				if need := int64(minOpsForQuantile(99.9)); r.during.TotalCount() >= need && r.outside.TotalCount() >= need {
					ratio = f2(float64(r.during.ValueAtQuantile(99.9)) / float64(r.outside.ValueAtQuantile(99.9)))
				}
				pairs = append(pairs, fmt.Sprintf("%s %%: %s ms during %s against %s ms outside (%d operations during, %d outside)",
					pct, quantileMs(r.during, 99.9), work, quantileMs(r.outside, 99.9), r.during.TotalCount(), r.outside.TotalCount()))
			}
			tbl.Rows = append(tbl.Rows, []string{sys, pct + " %", f0(s.Load.RateOpsPerSec), f0(s.OpsPerSec), fmt.Sprint(s.LateOps), fmt.Sprint(s.Errors + s.Ambiguous),
				perNode, covered, fmt.Sprintf("%d / %d", r.during.TotalCount(), r.outside.TotalCount()),
				quantileMs(r.during, 50), quantileMs(r.during, 99), quantileMs(r.during, 99.9),
				quantileMs(r.outside, 50), quantileMs(r.outside, 99), quantileMs(r.outside, 99.9), ratio,
				ms(s.Intended.P999Us) + " / " + ms(s.P999Us)})
			if split {
				cdfs[i].Series = append(cdfs[i].Series, cdfSeries(sys+" during "+work, r.during), cdfSeries(sys+" outside "+work, r.outside))
			} else {
				cdfs[i].Series = append(cdfs[i].Series, cdfSeries(sys+" (no GC)", r.outside))
			}
			x.figure(latencyTimeSeries(sys, r, kind, split))
		}
		if len(pairs) > 0 {
			x.note("%s: p99.9 from the intended start at %s.", sys, strings.Join(pairs, "; "))
		}
	}
	x.table(peaks)
	x.table(tbl)
	for _, f := range cdfs {
		// A histogram with no operations draws no line: leave it out.
		f.Series = slices.DeleteFunc(f.Series, func(s plots.Series) bool { return len(s.X) == 0 })
		if len(f.Series) > 0 {
			x.figure(f)
		}
	}
}

// cdfSeries is the cumulative distribution of h (microseconds) in
// milliseconds: a point at the top of each bucket that holds values,
// thinned to one per 1 % of latency or 0.5 % of the operations, except
// in the last 1 % and the last point, which all stay (the tail).
func cdfSeries(name string, h *hdrhistogram.Histogram) plots.Series {
	s := plots.Series{Name: name}
	total := h.TotalCount()
	if total == 0 {
		return s
	}
	var cum int64
	for _, b := range h.Distribution() {
		if b.Count == 0 {
			continue
		}
		cum += b.Count
		x, y := float64(b.To)/1000, float64(cum)/float64(total)
		if n := len(s.X); n > 0 && cum < total && y <= 0.99 && x < 1.01*s.X[n-1] && y < s.Y[n-1]+0.005 {
			continue // thinned
		}
		s.X, s.Y = append(s.X, x), append(s.Y, y)
	}
	return s
}

// latencyTimeSeries is a run's p50 and p99.9 per second of the latency
// from the intended start, with its GC or compaction windows shaded.
func latencyTimeSeries(sys string, r latencyGCRate, kind plots.WindowKind, split bool) plots.Figure {
	pct := fmt.Sprintf("%g", 100*r.fraction)
	f := plots.Figure{Name: fmt.Sprintf("latency-gc-timeseries-%s-%s", sanitize(sys), pct),
		Title: fmt.Sprintf("Latency over time, %s at %s %% of its peak", sys, pct), Kind: plots.Lines,
		XLabel: "time (s)", YLabel: "latency from the intended start (ms)", LogY: true, Windows: r.shaded,
		Caption: fmt.Sprintf("%s, open loop at %.0f ops/s (%s %% of its peak): per second, the p50 and p99.9 of the latency from the intended start of the operations answered in it.", sys, r.sum.Load.RateOpsPerSec, pct)}
	f.Caption += " " + windowsCaption(false)
	if split {
		f.Caption += fmt.Sprintf(" The %ss split the operations into during and outside.", kind.Legend())
	}
	p50, p999 := plots.Series{Name: "p50"}, plots.Series{Name: "p99.9"}
	for _, sec := range r.sum.Series {
		if sec.Ops == 0 {
			continue
		}
		x := float64(sec.Second) + 0.5
		p50.X, p50.Y = append(p50.X, x), append(p50.Y, float64(max(sec.IntendedP50Us, 1))/1000)
		p999.X, p999.Y = append(p999.X, x), append(p999.Y, float64(max(sec.IntendedP999Us, 1))/1000)
	}
	f.Series = []plots.Series{p50, p999}
	return f
}
