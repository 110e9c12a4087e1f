package experiments

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/experiments/probe"
)

// TestClassifyBound: each bound is named only when its evidence holds,
// several at once are mixed, and a bound without its evidence (no probe,
// no scrape, no RocksDB) is never reached.
func TestClassifyBound(t *testing.T) {
	// idle: nothing near a bound.
	idle := boundEvidence{MachineBusy: 0.5, RunCPUShare: 0.45, DiskWriteMBps: 100, DiskLimitMBps: 400, HaveLog: true, FsyncBusy: 0.2,
		ProbeFsyncP50Ms: 0.2, ProbeFsyncP99Ms: 0.7, HaveRocksDB: true, StallShare: 0, PendingCompactionBytes: 1 << 20, SoftPendingCompactionBytes: 300 << 20}
	with := func(f func(*boundEvidence)) boundEvidence { e := idle; f(&e); return e }
	for _, c := range []struct {
		name    string
		e       boundEvidence
		want    string
		reached []string
	}{
		{"none", idle, BoundNone, nil},
		{"cpu at the threshold", with(func(e *boundEvidence) { e.MachineBusy, e.RunCPUShare = cpuBusyBound, 0.8 }), BoundCPU, []string{BoundCPU}},
		{"cpu just under", with(func(e *boundEvidence) { e.MachineBusy, e.RunCPUShare = cpuBusyBound-0.01, 0.8 }), BoundNone, nil},
		// A machine busy with other work: the run's processes used a
		// third of it.
		{"cpu busy with other work", with(func(e *boundEvidence) { e.MachineBusy, e.RunCPUShare = 0.95, 0.3 }), BoundCPUOtherWork, []string{BoundCPUOtherWork}},
		{"cpu, half of it the run's", with(func(e *boundEvidence) { e.MachineBusy, e.RunCPUShare = 0.9, 0.45 }), BoundCPU, []string{BoundCPU}},
		{"disk bandwidth", with(func(e *boundEvidence) { e.DiskWriteMBps = 330 }), BoundDiskBandwidth, []string{BoundDiskBandwidth}},
		{"disk without a probe", with(func(e *boundEvidence) { e.DiskWriteMBps, e.DiskLimitMBps = 330, 0 }), BoundNone, nil},
		// The slow-fsync disk: the log in fsync nearly all the time, the
		// CPUs and the bandwidth far from their limits.
		{"fsync latency", with(func(e *boundEvidence) { e.FsyncBusy, e.FsyncP99Ms, e.MachineBusy = 0.95, 6.1, 0.3 }), BoundFsyncLatency, []string{BoundFsyncLatency}},
		{"fsync just under", with(func(e *boundEvidence) { e.FsyncBusy = fsyncBusyBound - 0.01 }), BoundNone, nil},
		// nezha's quick headline with 5 ms added to every fsync: neither
		// CPU- nor bandwidth-bound, the log in fsync 79 % of the time.
		{"fsync, 5 ms added", boundEvidence{MachineBusy: 0.69, RunCPUShare: 0.68, DiskWriteMBps: 447, DiskLimitMBps: 1012, HaveLog: true, FsyncBusy: 0.79},
			BoundFsyncLatency, []string{BoundFsyncLatency}},
		// The same on the fast disk: the pipelined log writer in fsync
		// half the time has room to spare.
		{"fsync, fast disk", boundEvidence{MachineBusy: 0.81, RunCPUShare: 0.81, DiskWriteMBps: 502, DiskLimitMBps: 1031, HaveLog: true, FsyncBusy: 0.49},
			BoundNone, nil},
		{"fsync without a scrape", with(func(e *boundEvidence) { e.FsyncBusy, e.HaveLog = 0.95, false }), BoundNone, nil},
		{"compaction: stalls", with(func(e *boundEvidence) { e.StallShare = 0.25 }), BoundCompactionDebt, []string{BoundCompactionDebt}},
		{"compaction: pending at the soft limit", with(func(e *boundEvidence) { e.PendingCompactionBytes = 300 << 20 }), BoundCompactionDebt, []string{BoundCompactionDebt}},
		{"compaction without RocksDB", with(func(e *boundEvidence) { e.StallShare, e.HaveRocksDB = 0.5, false }), BoundNone, nil},
		{"pending without a known limit", with(func(e *boundEvidence) { e.PendingCompactionBytes, e.SoftPendingCompactionBytes = 1<<40, 0 }), BoundNone, nil},
		{"mixed", with(func(e *boundEvidence) { e.MachineBusy, e.RunCPUShare, e.StallShare = 0.95, 0.9, 0.3 }), "mixed: CPU + compaction debt", []string{BoundCPU, BoundCompactionDebt}},
		// The slow disk on a machine busy with other work.
		{"fsync on a busy machine", with(func(e *boundEvidence) { e.MachineBusy, e.RunCPUShare, e.FsyncBusy = 0.95, 0.3, 0.8 }),
			"mixed: CPU (outside the run's processes) + fsync latency", []string{BoundCPUOtherWork, BoundFsyncLatency}},
	} {
		got, reached := classifyBound(c.e)
		if got != c.want || !slices.Equal(reached, c.reached) {
			t.Errorf("%s: %q %v, want %q %v", c.name, got, reached, c.want, c.reached)
		}
	}
	text := evidenceText(with(func(e *boundEvidence) {
		e.FsyncBusy, e.FsyncsPerSecPerNode, e.FsyncMeanMs, e.FsyncP99Ms = 0.95, 180, 5.3, 6.1
	}))
	for _, want := range []string{"machine 50 % busy, 45 % by the run's processes", "25 % of the 400 MB/s probed", "180 fsyncs/s per node, mean 5.30 ms, p99 6.10 ms",
		"4 KiB fsync p50 0.20 ms, p99 0.70 ms", "in fsync 95 % of the window (>= 70 %)", "RocksDB stalled writes 0 %", "of the 300 MiB soft limit"} {
		if !strings.Contains(text, want) {
			t.Errorf("evidence lacks %q: %s", want, text)
		}
	}
}

// TestHeadlineBound: the evidence is the medians of the runs' windows,
// scrapes and the probe; a run without a scrape does not count towards the
// log's medians.
func TestHeadlineBound(t *testing.T) {
	x := &Run{Profile: Quick(), reg: testRegistry(t), res: &Result{Backend: cluster.BackendDocker}}
	run := func(busy, mbps float64, log *logStats) putRun {
		return putRun{Window: windowStats{MachineBusy: busy, DiskWriteMBps: mbps, DiskDevices: 1}, Log: log}
	}
	slow := &logStats{Seconds: 10, FsyncsPerSecPerNode: 170, FsyncMeanMs: 5.5, FsyncP99Ms: 7, FsyncBusy: 0.93}
	rs := []putRun{run(0.3, 40, slow), run(0.35, 50, slow), run(0.9, 60, nil)}
	pr := &probe.Calibration{Hosts: []probe.HostCalibration{{MBPerSec: []float64{300, 320}, Fsync: map[int]probe.FsyncLatency{probe.SmallWriteBytes: {P50Ns: 200_000, P99Ns: 700_000}}}}}
	b := x.headlineBound(sysNezhaNoGC, rs, pr, 512<<20)
	if b.Bound != BoundFsyncLatency || b.Backend != cluster.BackendDocker || b.Runs != 3 || b.Inputs.MachineBusy != 0.35 ||
		b.Inputs.DiskLimitMBps != 320 || b.Inputs.ProbeFsyncP99Ms != 0.7 || b.Inputs.HaveRocksDB {
		t.Fatalf("bound %+v", b)
	}
	// original: RocksDB's stalls over the scrape's span, against the
	// soft limit of its scaled geometry.
	stalled := &logStats{Seconds: 10, FsyncBusy: 0.2, HaveRocksDB: true, StallSecondsPerNode: 3, PendingCompactionBytesMax: 1 << 20}
	b = x.headlineBound(sysOriginal, []putRun{run(0.5, 40, stalled)}, nil, 512<<20)
	if b.Bound != BoundCompactionDebt || b.Inputs.StallShare != 0.3 || b.Inputs.SoftPendingCompactionBytes <= 0 || b.Inputs.DiskLimitMBps != 0 {
		t.Fatalf("original's bound %+v", b)
	}
	if got := boundsText([]Bound{{System: "nezha", Bound: BoundCPU}, {System: "original", Bound: BoundNone}}, "nezha", "original"); got != "nezha: CPU; original: none reached" {
		t.Fatalf("boundsText = %q", got)
	}
}

// TestLogStats: the fsync rate, mean and busy share, and RocksDB's stalls
// and debt, from a scrape of two nodes over 2 s.
func TestLogStats(t *testing.T) {
	var ss []probe.Sample
	add := func(sec float64, node uint64, series string, v float64) {
		ss = append(ss, probe.Sample{Seconds: sec, Node: node, Series: series, Value: v})
	}
	for _, node := range []uint64{1, 2} {
		// 200 fsyncs of 5 ms each per node in 2 s: 100 fsyncs/s, in fsync
		// half the time.
		add(0, node, probe.SeriesFsync+`_bucket{le="0.004"}`, 0)
		add(0, node, probe.SeriesFsync+`_bucket{le="0.008"}`, 0)
		add(0, node, probe.SeriesFsync+`_bucket{le="+Inf"}`, 0)
		add(0, node, probe.SeriesFsync+"_sum", 0)
		add(0, node, probe.SeriesFsync+"_count", 0)
		add(2, node, probe.SeriesFsync+`_bucket{le="0.004"}`, 0)
		add(2, node, probe.SeriesFsync+`_bucket{le="0.008"}`, 200)
		add(2, node, probe.SeriesFsync+`_bucket{le="+Inf"}`, 200)
		add(2, node, probe.SeriesFsync+"_sum", 1)
		add(2, node, probe.SeriesFsync+"_count", 200)
		add(0, node, probe.SeriesRocksStall, 10)
		add(2, node, probe.SeriesRocksStall, 10+float64(node)*0.2)
		add(1, node, probe.SeriesRocksPending, float64(node)*1e6)
	}
	ls, ok := logStatsOf(ss)
	if !ok || ls.Seconds != 2 || ls.FsyncsPerSecPerNode != 100 || ls.FsyncMeanMs != 5 || ls.FsyncBusy != 0.5 ||
		!ls.HaveRocksDB || ls.StallSecondsPerNode < 0.2999 || ls.StallSecondsPerNode > 0.3001 || ls.PendingCompactionBytesMax != 2e6 {
		t.Fatalf("logStats %+v %v", ls, ok)
	}
	if _, ok := logStatsOf(nil); ok {
		t.Fatal("stats of an empty scrape")
	}
}

// TestWindowDiskFallback: hosts are counted once; a data device without
// counters makes the window fall back to the nodes' own bytes, and the
// measurement records it with the reason.
func TestWindowDiskFallback(t *testing.T) {
	t0 := time.Unix(100, 0)
	node := func(w, r int64, cpu float64) nodeSample {
		return nodeSample{writeBytes: w, readBytes: r, cpuSec: cpu, threadCPUSec: map[string]float64{threadGo: cpu}}
	}
	from := windowSample{at: t0, nodes: map[uint64]nodeSample{1: node(0, 0, 1), 2: node(0, 0, 1)},
		hosts: map[string]hostCPUSample{"h": {busySec: 10, totalSec: 20}}, disks: map[string]diskSample{"h vda": {writeBytes: 0, readBytes: 0}}}
	to := windowSample{at: t0.Add(2 * time.Second), nodes: map[uint64]nodeSample{1: node(4e6, 2e6, 2), 2: node(2e6, 0, 3)},
		hosts: map[string]hostCPUSample{"h": {busySec: 13, totalSec: 24}}, disks: map[string]diskSample{"h vda": {writeBytes: 10e6, readBytes: 1e6}}}
	ws := windowBetween(from, to, 1)
	if ws.MachineBusy != 0.75 || ws.RunCPUShare != 0.75 || ws.DiskWriteMBps != 5 || ws.DiskReadMBps != 0.5 || ws.DiskFromNodes || ws.DiskDevices != 1 ||
		ws.WriteBytesPerNode != 3e6 || ws.NodeCPUSeconds != 3 {
		t.Fatalf("window %+v", ws)
	}
	to.noDisk = "the agent on h found no block device"
	ws = windowBetween(from, to, 1)
	if !ws.DiskFromNodes || ws.DiskWriteMBps != 3 || ws.DiskReadMBps != 1 {
		t.Fatalf("fallback window %+v", ws)
	}
	x := &Run{res: &Result{}}
	tb := &testbed{spec: &cluster.Spec{Backend: cluster.BackendSpec{Name: cluster.BackendDocker}},
		hosts: []nodeHost{{id: 1, host: "h", info: &agentpb.InfoResponse{InContainer: true}}}}
	x.measureWindow(tb, to.noDisk)
	i := slices.IndexFunc(x.res.Measurements, func(m Measurement) bool { return m.What == measureDiskCounters })
	if i < 0 || x.res.Measurements[i].FellBackFrom == "" || x.res.Measurements[i].Why != to.noDisk || !strings.Contains(x.res.Measurements[i].How, "/proc/PID/io") ||
		!strings.Contains(x.res.Measurements[i].Where, "containers") {
		t.Fatalf("measurements %+v", x.res.Measurements)
	}
	x.measureWindow(tb, to.noDisk)
	if len(x.res.Measurements) != 3 {
		t.Fatalf("a measurement recorded twice: %+v", x.res.Measurements)
	}
}

// TestArrangeReadsFallsBack: node hosts that allow neither a memory cgroup
// nor dropping the page cache (a container without privileges) get warm
// reads, and the measurement names what the profile asked for and each
// host's reason.
func TestArrangeReadsFallsBack(t *testing.T) {
	no := func(why string) *agentpb.Capability { return &agentpb.Capability{Why: why} }
	info := &agentpb.InfoResponse{InContainer: true, MemoryCgroup: no("mkdir /sys/fs/cgroup/memory/x: read-only file system"),
		DropCaches: no("open /proc/sys/vm/drop_caches: read-only file system")}
	tb := &testbed{system: "nezha", hosts: []nodeHost{{id: 1, host: "h", info: info}, {id: 2, host: "h", info: info}}}
	x := &Run{Profile: Quick(), Backend: cluster.BackendOptions{Name: cluster.BackendDocker}, res: &Result{Name: "scan"}, beds: &bedPool{}, Out: io.Discard}
	rc := x.arrangeReads(context.Background(), []*testbed{tb})
	if rc.Mode != ReadCacheWarm || !strings.Contains(rc.Text, "read-only file system") {
		t.Fatalf("arrangement %s: %s", rc.Mode, rc.Text)
	}
	ms := x.res.Measurements
	if len(ms) != 1 || ms[0].What != measurePageCache || ms[0].FellBackFrom != ReadCacheCgroup || ms[0].Backend != cluster.BackendDocker ||
		strings.Count(ms[0].Why, "read-only file system") != 2 || !strings.Contains(ms[0].Where, "containers") {
		t.Fatalf("measurements %+v", ms)
	}
	var b bytes.Buffer
	b.WriteString(MeasurementsText([]*Result{x.res}))
	if !strings.Contains(b.String(), "| page cache arrangement | docker |") || !strings.Contains(b.String(), "**cgroup**") || !strings.Contains(b.String(), "| scan |") {
		t.Fatalf("measurements table:\n%s", b.String())
	}
}
