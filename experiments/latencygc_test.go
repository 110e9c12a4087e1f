package experiments

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/workloads"
)

// TestSplitByWindows: an operation goes to "during" when the span from
// its intended start to its answer overlaps a window of any node, even if
// it was sent late or only its answer falls in one; failed operations are
// left out; the covered share counts overlapping windows once.
func TestSplitByWindows(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	op := func(intendedMs, sentMs, latMs int, out workloads.Outcome) workloads.RawOp {
		return workloads.RawOp{Op: "put", Intended: at(intendedMs), Start: at(sentMs), Latency: time.Duration(latMs) * time.Millisecond, Outcome: out}
	}
	windows := []plots.Window{
		{Kind: plots.WindowGC, Node: 2, Start: 3, End: 4},
		{Kind: plots.WindowGC, Node: 1, Start: 1, End: 2},
		{Kind: plots.WindowGC, Node: 3, Start: 1.5, End: 2.5},
	}
	ops := []workloads.RawOp{
		op(100, 100, 5, workloads.OK),          // before every window: outside
		op(990, 990, 20, workloads.OK),         // answered in node 1's window: during
		op(2400, 2400, 50, workloads.OK),       // in node 3's, past node 1's: during
		op(2600, 2600, 300, workloads.Miss),    // between the windows: outside
		op(2900, 3050, 30, workloads.OK),       // due before node 2's, sent late in it: during
		op(3500, 3500, 1, workloads.Failed),    // failed: left out
		op(4100, 4100, 7, workloads.OK),        // after every window: outside
		op(1000, 1000, 3000, workloads.OK),     // spans several: during
		op(2510, 2510, 480, workloads.Miss),    // from after node 3's to before node 2's: outside
		op(4000, 4000, 1, workloads.Ambiguous), // not completed: left out
	}
	during, outside, covered := splitByWindows(ops, windows, start, 5)
	if during.TotalCount() != 4 || outside.TotalCount() != 4 {
		t.Fatalf("%d during, %d outside; want 4 and 4", during.TotalCount(), outside.TotalCount())
	}
	if covered != (1.5+1)/5 {
		t.Fatalf("covered %v, want the union 2.5 s of 5 s", covered)
	}
	// The latencies are from the intended start: the late one's 180 ms.
	if during.Max() < 180_000 || during.Min() < 19_900 || outside.Max() < 480_000 || outside.Min() > 5_000 {
		t.Fatalf("during %d..%d us, outside %d..%d us", during.Min(), during.Max(), outside.Min(), outside.Max())
	}
	if d, _, c := splitByWindows(ops, nil, start, 5); d.TotalCount() != 0 || c != 0 {
		t.Fatalf("no windows: %d during, covered %v", d.TotalCount(), c)
	}
}

// TestCDFSeries: the points of a histogram's distribution, in
// milliseconds, ascending in both coordinates and ending at 1.
func TestCDFSeries(t *testing.T) {
	h := newUsHistogram()
	for v := int64(1); v <= 1000; v++ {
		_ = h.RecordValue(v * 100)
	}
	s := cdfSeries("x", h)
	if len(s.X) < 10 || s.Y[len(s.Y)-1] != 1 || !slices.IsSorted(s.X) || !slices.IsSorted(s.Y) || s.X[len(s.X)-1] < 99.9 || s.X[0] > 0.2 {
		t.Fatalf("cdf %+v", s)
	}
	if e := cdfSeries("empty", newUsHistogram()); len(e.X) != 0 {
		t.Fatalf("empty histogram: %+v", e)
	}
}

// TestLatencyGCSystems: the four systems the issue names, in its order,
// those the run has.
func TestLatencyGCSystems(t *testing.T) {
	got := latencyGCSystems([]string{sysBlobDB, "pasv", sysNezhaNoGC, sysNezha})
	if !slices.Equal(got, []string{sysNezha, sysNezhaNoGC, sysBlobDB}) {
		t.Fatalf("got %v", got)
	}
}

// TestLatencyGCExperiment runs latency-gc small on nezha and original:
// a peak and one open-loop rate each, every completed operation split
// into during and outside, nezha's GC rounds and original's compactions
// found, and each run's files written.
func TestLatencyGCExperiment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	p := Quick()
	p.SegmentSizeBytes = mib // GC at 8 MiB of log: rounds within seconds
	p.LatencyGCKeys, p.LatencyGCPeak, p.LatencyGCWarmup, p.LatencyGCDuration, p.LatencyGCRates = 256, 2*time.Second, time.Second, 4*time.Second, []float64{0.5}
	r, out := runExperiment(t, "latency-gc", p, []string{sysNezha, sysOriginal, "pasv"}, 4*time.Minute)
	if len(r.Tables) != 2 || len(r.Tables[1].Rows) != 2 {
		t.Fatalf("tables %+v: want the peaks and one row per system (pasv is not one of latency-gc's)", r.Tables)
	}
	for _, row := range r.Tables[1].Rows {
		sys := row[0]
		var during, outside int
		if _, err := fmt.Sscanf(row[8], "%d / %d", &during, &outside); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(out, "latency-gc", "runs", sys+"-50")
		ops, err := os.ReadFile(filepath.Join(dir, "raw.csv"))
		if err != nil {
			t.Fatal(err)
		}
		var ws []plots.Window
		b, err := os.ReadFile(filepath.Join(dir, "windows.json"))
		if err == nil {
			err = json.Unmarshal(b, &ws)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Every operation completed (no errors), so each is in one of
		// the two; and the background work was found.
		if lines := bytes.Count(ops, []byte("\n")) - 1; during+outside != lines || row[5] != "0" || len(ws) == 0 || during == 0 {
			t.Fatalf("%s: %d during + %d outside of %d operations, errors %s, %d windows", sys, during, outside, lines, row[5], len(ws))
		}
		want := plots.WindowGC
		if sys == sysOriginal {
			want = plots.WindowCompaction
		}
		for _, w := range ws {
			if w.Kind != want || w.Node == 0 || w.End < w.Start {
				t.Fatalf("%s: window %+v", sys, w)
			}
		}
		if _, ok := r.Metrics["latency_gc_peak_ops_per_sec/"+sys]; !ok {
			t.Fatalf("no peak metric for %s: %v", sys, r.Metrics)
		}
	}
	figs, err := plots.Load(filepath.Join(out, "latency-gc"))
	if err != nil || len(figs) != 3 {
		t.Fatalf("%d figures (want two time series and a CDF), %v", len(figs), err)
	}
}
