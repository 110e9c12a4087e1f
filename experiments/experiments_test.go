package experiments

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/plots"
)

func TestLookup(t *testing.T) {
	all, err := Lookup([]string{"all"})
	if err != nil || len(all) != len(All()) {
		t.Fatalf("all: %d experiments, %v", len(all), err)
	}
	two, err := Lookup([]string{"scan", "put-vsize", "scan"})
	if err != nil || len(two) != 2 || two[0].Name != "scan" {
		t.Fatalf("scan, put-vsize: %v %v", two, err)
	}
	_, err = Lookup([]string{"put-vsize", "nope", "zzz"})
	var ue *cmdline.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "nope, zzz") {
		t.Fatalf("unknown names: %v", err)
	}
	names := map[string]bool{}
	for _, e := range All() {
		if names[e.Name] || e.Name == "" || e.Title == "" || e.Shows == "" || e.run == nil {
			t.Fatalf("experiment %+v is incomplete or duplicated", e.Name)
		}
		names[e.Name] = true
	}
	for _, want := range []string{"put-vsize", "put-scale", "get-zipf", "scan", "ycsb", "amplification", "disk-limit", "gc", "latency-gc", "linearizability"} {
		if !names[want] {
			t.Fatalf("experiment %s missing", want)
		}
	}
}

func TestProfiles(t *testing.T) {
	for _, name := range []string{"quick", "standard", "paper"} {
		p, err := ProfileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(p.String(), name) {
			t.Fatalf("%s: String() = %s", name, p.String())
		}
	}
	if _, err := ProfileByName("huge"); err == nil {
		t.Fatal("unknown profile accepted")
	}
	bad := Quick()
	bad.Clients, bad.Zipf, bad.ValueSizesKiB, bad.ConditionMinSeconds = 0, 0.5, []int{0}, -time.Second
	bad.LinDuration = 6 * time.Second // partition-leader needs 8 s: each check would fail
	err := bad.Validate()
	for _, want := range []string{"clients", "zipf", "value size", "condition_min_seconds_ns", "lin_duration_ns 6s is below the 8s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate missed %s: %v", want, err)
		}
	}
	// A zero profile fails in every part at once.
	err = (&Profile{Name: "zero"}).Validate()
	for _, want := range []string{"nodes 0", "clients = 0", "segment_size_bytes", "disk_limit_bytes", "geometry", "put_total_bytes",
		"scale_data_bytes is empty", "headline_runs", "read_cache \"\"", "read_keys", "zipf", "scan_ops", "ycsb_records", "amp_keys",
		"gc_keys", "gc_duration_ns", "latency_gc_keys", "latency_gc_rates is empty", "lin_seeds is empty", "lin_duration_ns 0s must be positive",
		"crash_kills", "crash_duration_ns", "embedded_readers", "embedded_read_duration_ns"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Validate of a zero profile missed %s: %v", want, err)
		}
	}
	paper := Paper()
	if paper.Clients != 100 || paper.YCSBOps != 1_000_000 || paper.Nodes != 3 {
		t.Fatalf("paper profile drifted from the paper: %+v", paper)
	}
}

func TestHeadlinesAndReport(t *testing.T) {
	dir := t.TempDir()
	res := []*Result{
		{Name: "put-vsize", Title: "PUT", Shows: "puts", Params: map[string]any{"n": 3},
			Metrics: map[string]float64{
				"put_mb_per_sec/nezha/256": 80, "put_mb_per_sec/original/256": 40, "put_mb_per_sec/nezha/1": 5, "put_mb_per_sec/original/1": 5,
			},
			Tables:  []Table{{Title: "t", Columns: []string{"a", "b"}, Rows: [][]string{{"1", "2"}}}},
			Figures: []string{"put-mbps"},
		},
		{Name: "put-scale", Title: "PUT scale", Shows: "scale", Params: map[string]any{"geometry": "scaled", "condition_data_bytes_per_node": float64(256 << 20), "condition_min_seconds": 4.0},
			Metrics: map[string]float64{
				"put_headline/nezha": 90, "put_headline/original": 30, "put_headline_value_bytes": 256 << 10, "put_headline_data_bytes": 512 << 20,
				"put_headline_write_amp/nezha": 1.01, "put_headline_write_amp/original": 6.2, "put_headline_deepest_level/original": 4,
				"put_condition_ratio/ours/nezha": 3.1, "put_condition_ratio/no-fsync/nezha": 1.5,
			},
			Backend: "docker",
			Bounds: []Bound{{System: "nezha", Backend: "docker", Bound: BoundCPU, Evidence: "machine 93 % busy"},
				{System: "original", Backend: "docker", Bound: BoundCompactionDebt, Evidence: "RocksDB stalled writes 30 %"}},
			Measurements: []Measurement{{What: measureHostCPU, Backend: "docker", Where: "in the nodes' containers", How: "/proc/stat"},
				{What: measurePageCache, Backend: "docker", Where: "in the nodes' containers", How: "page cache (warm)", FellBackFrom: "cgroup", Why: "read-only file system"}},
			Hosts: []HostInfo{{Host: "this machine (local Docker daemon)", Backend: "docker", Hostname: "node1", InContainer: true, CPUs: 2,
				Capabilities: map[string]Capability{"memory_cgroup": {Why: "read-only file system"}}}}},
		{Name: "scan", Title: "SCAN", Shows: "scans", Metrics: map[string]float64{"scan_ops_per_sec/nezha": 20, "scan_ops_per_sec/original": 10,
			"scan_ops_per_sec_disk_read_kb_per_op/nezha": 100, "scan_ops_per_sec_disk_read_kb_per_op/original": 700,
			"scan_ops_per_sec/dwisckey": 8, "scan_ops_per_sec_disk_read_kb_per_op/dwisckey": 300},
			Params:   map[string]any{"read_cache": "disk (cgroup)", "keys": float64(4096), "value_bytes": float64(16384), "clients": float64(1), "scan_size": float64(100)},
			Failures: []Failure{{System: "pasv", Step: "load", Error: "boom", LogTails: map[string]string{"node1": "last line"}}}},
	}
	for _, r := range res {
		if err := os.MkdirAll(filepath.Join(dir, r.Name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(filepath.Join(dir, r.Name, "result.json"), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := plots.Save(filepath.Join(dir, "put-vsize"), plots.Figure{Name: "put-mbps", Title: "PUT goodput", Kind: plots.Bars,
		XLabel: "value size (KiB)", YLabel: "goodput (MB/s)", Categories: []string{"1", "256"},
		Series: []plots.Series{{Name: "nezha", Values: []float64{5, 90}}}}); err != nil {
		t.Fatal(err)
	}
	hs := Headlines(res)
	var put, scanH, cond, overDw *Headline
	for i := range hs {
		if hs[i].Against == sysDwisckey {
			if overDw != nil {
				t.Fatalf("two rows over dwisckey: %+v", hs)
			}
			overDw = &hs[i]
			continue
		}
		if hs[i].System == "nezha" && hs[i].Workload == "PUT" && hs[i].Condition == "" {
			put = &hs[i]
		}
		if hs[i].System == "nezha" && hs[i].Condition == CondNoFsync {
			cond = &hs[i]
		}
		if hs[i].System == "nezha" && hs[i].Workload == "SCAN" {
			scanH = &hs[i]
		}
	}
	if put == nil || !put.Have || put.Ratio != 3 || !strings.Contains(put.Basis, "256 KiB") || !strings.Contains(put.Basis, "512 MiB per node") ||
		!strings.Contains(put.Regime, "write amp in window 1.01 (original 6.20)") || !strings.Contains(put.Regime, "L4") ||
		put.Bound != "nezha: CPU; original: compaction debt" || !strings.Contains(put.Basis, "backend docker") {
		t.Fatalf("PUT headline %+v: want 3x at 256 KiB and 512 MiB per node, with its regime", put)
	}
	if scanH == nil || scanH.Ratio != 2 || scanH.Paper < 1.72 || scanH.Paper > 1.73 || !strings.Contains(scanH.Regime, "disk (cgroup)") ||
		!strings.Contains(scanH.Regime, "100 KB (original 700 KB)") {
		t.Fatalf("SCAN headline %+v", scanH)
	}
	if overDw == nil || overDw.Workload != "SCAN" || overDw.System != sysNezha || overDw.Ratio != 2.5 || overDw.Paper < 3.088 || overDw.Paper > 3.09 ||
		!strings.Contains(overDw.Regime, "100 KB (dwisckey 300 KB)") {
		t.Fatalf("SCAN over dwisckey headline %+v", overDw)
	}
	if cond == nil || cond.Ratio != 1.5 || !strings.Contains(cond.Regime, "ours at the same point: 3.10x") ||
		cond.Basis != "put-scale, 256 MiB per node, medians of runs adding up to 4 s each" {
		t.Fatalf("no-fsync condition row %+v", cond)
	}
	if !AnyMeasured(hs) || AnyMeasured(Headlines(nil)) {
		t.Fatalf("AnyMeasured: want true for this run, false for none")
	}
	var b bytes.Buffer
	WriteHeadlines(&b, hs)
	table := b.String()
	if !strings.Contains(table, "3.00x (+200.0 %)") || !strings.Contains(table, "+460.2 %") ||
		strings.Index(table, "the paper's conditions") < strings.LastIndex(table, "| SCAN |") ||
		!strings.Contains(table, "| PUT, no-fsync | nezha | 1.50x") ||
		!strings.Contains(table, "| SCAN | nezha **over dwisckey** | 2.50x (+150.0 %) | 3.089x (+208.9 %) over Dwisckey |") ||
		!strings.Contains(table, "| nezha: CPU; original: compaction debt |") {
		t.Fatalf("headline table: want ours first, then the paper's conditions:\n%s", table)
	}
	path, err := WriteReport(dir, map[string]any{"profile_text": "profile quick", "git commit": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	report, _ := os.ReadFile(path)
	for _, want := range []string{"profile quick", "git commit", "![PUT goodput](put-vsize/put-mbps.png)", "**pasv failed** at load", "last line", "n = 3", "| 1 | 2 |",
		"reads from disk (cgroup), 4096 keys x 16 KiB (64 MiB per node), 1 client, 100 keys per scan.",
		"## Measurements", "| host CPU | docker | in the nodes' containers | /proc/stat | - | put-scale |", "**cgroup** (read-only file system)",
		"| this machine (local Docker daemon) | docker | node1 (in a container, says its agent)", "nezha (backend docker) was bounded by **CPU** in its headline runs: machine 93 % busy."} {
		if !strings.Contains(string(report), want) {
			t.Fatalf("report lacks %q:\n%s", want, report)
		}
	}
}

func TestOutDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if err := checkOutDir(dir, false); err != nil {
		t.Fatal(err)
	}
	if err := checkFreeDisk(dir, 1); err != nil { // dir does not exist yet: its parent is checked
		t.Fatal(err)
	}
	if err := clearOutDir(dir); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	var ue *cmdline.UsageError
	if err := checkOutDir(dir, false); !errors.As(err, &ue) || !strings.Contains(err.Error(), "-force") {
		t.Fatalf("non-empty dir: %v", err)
	}
	// Not a results directory: -force must not delete it.
	if err := checkOutDir(dir, true); !errors.As(err, &ue) || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("-force on a directory without config.json: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
	if err := checkOutDir(dir, true); err != nil {
		t.Fatal(err)
	}
	if err := clearOutDir(dir); err != nil {
		t.Fatal(err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatalf("clearOutDir left %d entries", len(des))
	}
	if err := checkFreeDisk(dir, 1<<62); err == nil || !errors.As(err, &ue) {
		t.Fatalf("free disk check: %v", err)
	}
}

func TestRunAndReportUsageErrors(t *testing.T) {
	reg := testRegistry(t)
	req := func(names []string, set func(*RunRequest)) RunRequest {
		r := RunRequest{Names: names, Profile: "quick", Systems: DefaultSystems(reg), OutDir: t.TempDir(), Out: &bytes.Buffer{}}
		if set != nil {
			set(&r)
		}
		return r
	}
	for name, r := range map[string]RunRequest{
		"no names":        req(nil, nil),
		"unknown name":    req([]string{"nope"}, nil),
		"unknown profile": req([]string{"scan"}, func(r *RunRequest) { r.Profile = "huge" }),
		"unknown system":  req([]string{"scan"}, func(r *RunRequest) { r.Systems = []string{"nezha", "bogus"} }),
		"no systems":      req([]string{"scan"}, func(r *RunRequest) { r.Systems = nil }),
		"servers of two systems": req([]string{"scan"}, func(r *RunRequest) {
			r.Servers, r.Systems = []string{"127.0.0.1:1"}, []string{"nezha", "original"}
		}),
		"bad server":         req([]string{"scan"}, func(r *RunRequest) { r.Servers, r.Systems = []string{"bogus"}, []string{"nezha"} }),
		"too many nodes":     req([]string{"scan"}, func(r *RunRequest) { r.Nodes = 100 }),
		"negative nodes":     req([]string{"scan"}, func(r *RunRequest) { r.Nodes = -1 }),
		"nodes with servers": req([]string{"scan"}, func(r *RunRequest) { r.Nodes, r.Servers, r.Systems = 5, []string{"127.0.0.1:1"}, []string{"nezha"} }),
		"unknown backend":    req([]string{"scan"}, func(r *RunRequest) { r.Backend.Name = "cloud" }),
		"ssh without hosts":  req([]string{"scan"}, func(r *RunRequest) { r.Backend.Name = cluster.BackendSSH }),
		"backend with servers": req([]string{"scan"}, func(r *RunRequest) {
			r.Backend.Name, r.Servers, r.Systems = cluster.BackendDocker, []string{"127.0.0.1:1"}, []string{"nezha"}
		}),
		"negative fsync delay": req([]string{"scan"}, func(r *RunRequest) { r.FsyncDelay = -time.Millisecond }),
		"fsync delay too long": req([]string{"scan"}, func(r *RunRequest) { r.FsyncDelay = time.Minute }),
		"fsync delay, servers": req([]string{"scan"}, func(r *RunRequest) {
			r.FsyncDelay, r.Servers, r.Systems = time.Millisecond, []string{"127.0.0.1:1"}, []string{"nezha"}
		}),
	} {
		err := RunAndReport(context.Background(), reg, r)
		var ue *cmdline.UsageError
		if !errors.As(err, &ue) {
			t.Fatalf("%s: %v, want a usage error", name, err)
		}
	}
	if _, err := Report(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("Report of a missing directory succeeded")
	}
	// A refused run deletes nothing, even with -force.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
	err := RunAndReport(context.Background(), reg, req([]string{"scan"}, func(r *RunRequest) {
		r.Systems, r.Servers, r.OutDir, r.Force = []string{"nezha"}, []string{"bogus"}, dir, true
	}))
	if _, serr := os.Stat(filepath.Join(dir, "notes.txt")); err == nil || serr != nil {
		t.Fatalf("refused run: %v; notes.txt: %v", err, serr)
	}
}

func TestLatencyCDF(t *testing.T) {
	raw := bytes.NewBufferString("op,start_unix_us,latency_us,ok,outcome\nput,1,1000,true,ok\nput,2,3000,true,ok\nput,3,2000,false,error\nput,4,2000,true,ok\n")
	s, err := latencyCDF("x", raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.X) != 3 || s.X[0] != 1 || s.X[2] != 3 || s.Y[2] != 1 {
		t.Fatalf("CDF %+v", s)
	}
	if _, err := latencyCDF("x", bytes.NewBufferString("op,start_unix_us,latency_us,ok,outcome\n")); err == nil {
		t.Fatal("empty raw accepted")
	}
}

// TestGeometry: scaled geometry gives the baselines RocksDB's sizes times
// data / 100 GB, nezha 40 % of the data as GC threshold and both nezha
// systems their index cache scaled as RocksDB's block cache; native gives
// nothing; the expected LSM of 100 GB under RocksDB's defaults has levels
// 1-4 (the paper's "about five levels" with level 0), and a scaled store
// the same levels.
func TestGeometry(t *testing.T) {
	x := &Run{Profile: Quick(), reg: testRegistry(t)}
	x.Profile.Geometry = GeometryScaled
	args := strings.Join(x.geometryArgs("original", 1<<30), " ")
	// 64 MiB x 2^30 / 10^11 = 720,575 bytes.
	if !strings.Contains(args, "-rocksdb.writeBufferBytes 720575") || !strings.Contains(args, "-rocksdb.maxBytesForLevelBase 2882303") {
		t.Fatalf("original scaled to 1 GiB: %s", args)
	}
	// lsm-raft, a RocksDB system of package baseline, gets original's
	// geometry (its spans follow the write buffer).
	if got := strings.Join(x.geometryArgs("lsm-raft", 1<<30), " "); got != args {
		t.Fatalf("lsm-raft scaled to 1 GiB: %s, want original's %s", got, args)
	}
	// The index cache as RocksDB's block cache: 262,144 keys x 2^30 / 10^11.
	if got := strings.Join(x.geometryArgs("nezha", 1<<30), " "); got != "-gcThresholdBytes 429496729 -indexCacheEntries 2814" {
		t.Fatalf("nezha scaled to 1 GiB: %s", got)
	}
	if got := strings.Join(x.geometryArgs("nezha-nogc", 1<<30), " "); got != "-indexCacheEntries 2814" {
		t.Fatalf("nezha-nogc scaled to 1 GiB: %v", got)
	}
	if got := strings.Join(x.geometryArgs("nezha-nogc", 1<<20), " "); got != "-indexCacheEntries 655" {
		t.Fatalf("nezha-nogc scaled to 1 MiB (the floor, 64 KiB at 100 bytes a key): %v", got)
	}
	x.Profile.Geometry = GeometryNative
	if got := x.geometryArgs("original", 1<<30); got != nil {
		t.Fatalf("native geometry: %v", got)
	}
	paper := expectedLevels(100e9, 256<<20)
	if len(paper) != 5 || paper[1] != 256<<20 || paper[4] < 70e9 || paper[4] > 72e9 {
		t.Fatalf("100 GB, RocksDB defaults: %v, want L1 256 MiB .. L4 ~72 GB", paper)
	}
	f := float64(1<<30) / 100e9
	scaled := expectedLevels(1<<30, 256*(1<<20)*f)
	if len(scaled) != len(paper) {
		t.Fatalf("scaled: %v, want as many levels as %v", scaled, paper)
	}
	if got := expectedLevels(100<<20, 256<<20); len(got) != 2 {
		t.Fatalf("100 MiB fits level 1: %v", got)
	}
	if got := strings.Join(x.conditionArgs(CondAll, "original", 1<<30), " "); got != "-sync=false -rocksdb.blockCacheBytes 0 -rocksdb.compression snappy" {
		t.Fatalf("all conditions on original: %s", got)
	}
	if got := strings.Join(x.conditionArgs(CondPaperGC, "nezha", 1<<30), " "); got != "-gc merge -gcThresholdBytes 429496729 -gcRateBytesPerSec 0 -gcStagger 0 -gcIdleAfter 0" {
		t.Fatalf("paper GC on nezha: %s", got)
	}
	if conditionValueKind(CondLowercase) != "lowercase" || conditionValueKind("") != "random" {
		t.Fatal("value kinds")
	}
	// Runs that would repeat ours are not run: cache-off concerns RocksDB,
	// paper-gc nezha's GC.
	for _, c := range []struct {
		cond, sys string
		same      bool
	}{
		{CondCacheOff, "nezha", true}, {CondCacheOff, "nezha-nogc", true}, {CondCacheOff, "original", false},
		{CondPaperGC, "nezha-nogc", true}, {CondPaperGC, "original", true}, {CondPaperGC, "nezha", false},
		{CondNoFsync, "nezha-nogc", false}, {CondLowercase, "nezha-nogc", false}, {CondAll, "nezha-nogc", false},
	} {
		if got := x.sameAsOurs(c.cond, c.sys, 1<<30); got != c.same {
			t.Errorf("sameAsOurs(%s, %s) = %v, want %v", c.cond, c.sys, got, c.same)
		}
	}
}

// A condition row is the median of its runs, and shows the run closest
// to it; an even count takes the mean of the middle two.
func TestClosestToMedian(t *testing.T) {
	runs := func(mbps ...float64) []putRun {
		var rs []putRun
		for i, v := range mbps {
			rs = append(rs, putRun{Rep: i, MBPerSec: v})
		}
		return rs
	}
	for _, c := range []struct {
		mbps   []float64
		rep    int
		median float64
	}{
		{[]float64{170}, 0, 170},
		{[]float64{250, 160, 175, 120, 180}, 2, 175},
		{[]float64{100, 200, 130, 160}, 2, 145}, // 130 and 160 tie: the first wins
	} {
		r, med := closestToMedian(runs(c.mbps...))
		if r.Rep != c.rep || med != c.median {
			t.Errorf("closestToMedian(%v) = run %d, median %v; want run %d, median %v", c.mbps, r.Rep, med, c.rep, c.median)
		}
	}
	if got := conditionRunsText(Profile{}); got != "one run each, interleaved" {
		t.Errorf("conditionRunsText without a minimum: %q", got)
	}
	if got := conditionBasis(0); got != "one run each" {
		t.Errorf("conditionBasis(0) = %q", got)
	}
}
