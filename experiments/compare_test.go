package experiments

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

func TestMetricDirection(t *testing.T) {
	for k, want := range map[string]Direction{
		"put_mb_per_sec/nezha/256":                   HigherIsBetter,
		"ycsb_ratio/nezha/a":                         HigherIsBetter,
		"gc_put_vs_nogc/nezha/merge":                 HigherIsBetter,
		"put_headline/nezha":                         HigherIsBetter,
		"get_ops_per_sec_disk_read_kb_per_op/nezha":  LowerIsBetter,
		"write_amp_load/original":                    LowerIsBetter,
		"space_amp_overwrite/pasv":                   LowerIsBetter,
		"crash_recover_write_p50_sec/nezha":          LowerIsBetter,
		"put_headline_node_cpu_s_per_gb/nezha":       LowerIsBetter,
		"get_node_cpu_us_per_op/nezha":               LowerIsBetter,
		"get_cpu_share/nezha/grpc":                   Unranked,
		"put_headline_deepest_level/original":        Unranked,
		"put_headline_gc_rounds/nezha":               Unranked,
		"put_headline_cpu_share/nezha/rocksdb_flush": Unranked,
	} {
		if got := MetricDirection(k); got != want {
			t.Errorf("MetricDirection(%q) = %v, want %v", k, got, want)
		}
	}
}

// writeResults writes a synthetic results directory: one experiment with
// the given metrics and samples.
func writeResults(t *testing.T, metrics map[string]float64, samples map[string][]float64) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scan"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(dir, "scan", "result.json"), &Result{Name: "scan", Metrics: metrics, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCompareCommand(t *testing.T) {
	reg := testRegistry(t)
	a := writeResults(t, map[string]float64{"scan_ops_per_sec/nezha": 100, "scan_ops_per_sec/original": 50,
		"scan_ops_per_sec_disk_read_kb_per_op/nezha": 10, "put_headline_deepest_level/original": 3},
		map[string][]float64{"scan_ops_per_sec/nezha": {98, 100, 103}})
	// B: nezha's scans 20 % slower (samples disjoint from A's), original's
	// 5 % slower, nezha reads 30 % more per op, original one level deeper.
	b := writeResults(t, map[string]float64{"scan_ops_per_sec/nezha": 80, "scan_ops_per_sec/original": 47.5,
		"scan_ops_per_sec_disk_read_kb_per_op/nezha": 13, "put_headline_deepest_level/original": 4},
		map[string][]float64{"scan_ops_per_sec/nezha": {79, 80, 82}})
	// run compares dirs with -metric and -threshold as in r.
	run := func(r CompareRequest, dirs ...string) (string, error) {
		var out bytes.Buffer
		if r.ThresholdPct == 0 {
			r.ThresholdPct = DefaultCompareThresholdPct
		}
		r.Dirs, r.Systems = dirs, reg.Names()
		err := CompareDirs(&out, r)
		return out.String(), err
	}
	all := CompareRequest{}

	// Same directory: no change, exit 0.
	out, err := run(all, a, a)
	if err != nil {
		t.Fatalf("A vs A: %v\n%s", err, out)
	}
	for _, want := range []string{"## scan", "| nezha | scan_ops_per_sec | 100 | 100 | +0.0% |", "single value", "| original | put_headline_deepest_level | 3 | 3 | +0.0% | single value | - |  |"} {
		if !strings.Contains(out, want) {
			t.Errorf("A vs A: no %q in\n%s", want, out)
		}
	}

	// Every ranked metric gates: nezha's SCAN ops/s (-20 %) and its device
	// reads (+30 %) regress beyond 10 %; original's -5 % does not; the
	// unranked level never gates. Exit 1 (not a usage error).
	out, err = run(all, a, b)
	var ue *cmdline.UsageError
	if err == nil || errors.As(err, &ue) {
		t.Fatalf("A vs B: err %v, want a regression (exit 1)\n%s", err, out)
	}
	if !strings.Contains(err.Error(), "of 3 selected metrics, 2 regressed beyond 10%") || strings.Contains(err.Error(), "missing") {
		t.Errorf("A vs B: %v", err)
	}
	for _, want := range []string{"| nezha | scan_ops_per_sec | 100 | 80 | -20.0% | range ±3% / range ±2% (p=0.100 n=3, not significant) | higher | **REGRESSION** |",
		"| nezha | scan_ops_per_sec_disk_read_kb_per_op | 10 | 13 | +30.0% | single value | lower | **REGRESSION** |",
		"| original | scan_ops_per_sec | 50 | 47.5 | -5.0% | single value | higher | ok |"} {
		if !strings.Contains(out, want) {
			t.Errorf("A vs B: no %q in\n%s", want, out)
		}
	}

	// Only original's throughput gates: clean exit. A 25 % threshold
	// lets nezha's -20 % pass but not its +30 % device reads.
	if out, err := run(CompareRequest{Metric: `^scan/scan_ops_per_sec/original$`}, a, b); err != nil {
		t.Fatalf("-metric original: %v\n%s", err, out)
	}
	if _, err := run(CompareRequest{ThresholdPct: 25}, a, b); err == nil || !strings.Contains(err.Error(), "of 3 selected metrics, 1 regressed") {
		t.Fatalf("-threshold 25: %v", err)
	}
	// A metric missing in B fails the comparison, counted and marked
	// apart from the regressions.
	c := writeResults(t, map[string]float64{"scan_ops_per_sec/nezha": 100}, nil)
	out, err = run(CompareRequest{Metric: "original"}, a, c)
	if err == nil || !strings.Contains(err.Error(), "1 missing in B") || !strings.Contains(err.Error(), "scan/scan_ops_per_sec/original") ||
		strings.Contains(err.Error(), "regressed") {
		t.Fatalf("missing in B: %v", err)
	}
	if !strings.Contains(out, "| original | scan_ops_per_sec | 50 | missing | - | ") || !strings.Contains(out, "**MISSING IN B**") {
		t.Errorf("missing in B: the table does not mark it\n%s", out)
	}

	// Bad arguments: usage errors (exit 2), one line each.
	for _, r := range []CompareRequest{{Dirs: []string{a}}, {Dirs: []string{a, b, b}}, {Dirs: []string{a, filepath.Join(a, "nope")}},
		{Dirs: []string{a, t.TempDir()}}, {Dirs: []string{a, b}, ThresholdPct: -1},
		{Dirs: []string{a, b}, Metric: "("}, {Dirs: []string{a, b}, Metric: "no-such-metric"}} {
		_, err := run(r, r.Dirs...)
		if !errors.As(err, &ue) || strings.Contains(ue.Msg, "\n") {
			t.Errorf("%+v: err %v, want a one-line usage error", r, err)
		}
	}
}

// TestCompareSpread: with six runs a side benchstat gives a 95 % interval
// and a significant U-test for disjoint samples.
func TestCompareSpread(t *testing.T) {
	k := "get_ops_per_sec/nezha"
	a := map[string]*Result{"get-zipf": {Metrics: map[string]float64{k: 100}, Samples: map[string][]float64{k: {97, 98, 99, 101, 102, 103}}}}
	b := map[string]*Result{"get-zipf": {Metrics: map[string]float64{k: 90}, Samples: map[string][]float64{k: {88, 89, 90, 90, 91, 92}}}}
	cs := Compare(a, b, CompareOptions{ThresholdPct: 5, Systems: []string{"nezha"}})
	if len(cs) != 1 || cs[0].Spread != "±3% / ±2% (p=0.002 n=6, significant)" || !cs[0].Regressed || cs[0].Metric != "get_ops_per_sec" {
		t.Fatalf("got %+v", cs)
	}
}

// TestCompareBounds: beside each side's headline ratio, what bounded each
// headline system there; nothing when neither side has bounds.
func TestCompareBounds(t *testing.T) {
	side := func(backend string, nezha float64, bounds ...string) map[string]*Result {
		r := &Result{Name: "put-scale", Backend: backend, Metrics: map[string]float64{"put_headline/nezha": nezha, "put_headline/original": 20}}
		for i, sys := range []string{"nezha", "original"} {
			r.Bounds = append(r.Bounds, Bound{System: sys, Backend: backend, Bound: bounds[i]})
		}
		return map[string]*Result{"put-scale": r}
	}
	var out bytes.Buffer
	if err := WriteBoundComparison(&out, side("local", 80, BoundCPU, BoundCompactionDebt), side("docker", 100, BoundFsyncLatency, BoundNone)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| nezha | 4.00x | CPU (local) | 5.00x | fsync latency (docker) |", "| original | - | compaction debt (local) | - | none reached (docker) |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := WriteBoundComparison(&out, map[string]*Result{}, map[string]*Result{"scan": {Name: "scan"}}); err != nil || out.Len() != 0 {
		t.Fatalf("without bounds: %q, %v", out.String(), err)
	}
}
