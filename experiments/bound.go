package experiments

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nezha-harness/nezha/experiments/probe"
)

// What bounded a system's PUTs in its measured windows. Two machines'
// ratios compare only when the same resource bounded each system on both:
// a system bounded by the CPU moves with the CPU's speed, one bounded by
// fsync latency with the disk's, and a ratio of two systems bounded by
// different resources moves with both. So put-scale names, for each
// headline system and the run's backend, the bound its headline runs
// reached, with the numbers that decided it, and says "mixed" when more
// than one was reached and "none reached" when the evidence supports none.

// The bounds a window may reach.
const (
	// BoundCPU: the node hosts' CPUs were busy (machine busy), mostly
	// with the run's own processes.
	BoundCPU = "CPU"
	// BoundCPUOtherWork: the node hosts' CPUs were busy, mostly outside
	// the run's processes: other processes, or the kernel's own threads
	// (writeback of what the nodes wrote among them).
	BoundCPUOtherWork = "CPU (outside the run's processes)"
	// BoundDiskBandwidth: the data devices wrote near the probed limit.
	BoundDiskBandwidth = "disk bandwidth"
	// BoundFsyncLatency: the Raft log spent most of the window in fsync.
	BoundFsyncLatency = "fsync latency"
	// BoundCompactionDebt: RocksDB stalled writes on its compaction debt.
	BoundCompactionDebt = "compaction debt"
	// BoundNone: no bound's evidence held.
	BoundNone = "none reached"
	// boundMixed prefixes the bounds when more than one was reached.
	boundMixed = "mixed"
)

// The thresholds of classifyBound.
const (
	// cpuBusyBound: the node hosts' CPUs were not idle at least this
	// share of the window. On two cores shared by three nodes and the
	// clients, 15 % idle is less than a third of one core: the nodes
	// could not have run faster.
	cpuBusyBound = 0.85
	// runShareOfBusy: the CPU bound is the run's own (BoundCPU) when its
	// processes (the nodes, and the clients where they share the host)
	// used at least this share of the busy time, else something else
	// kept it busy (BoundCPUOtherWork). On a shared 2-core machine the
	// host was 88-100 % busy in some of nezha's runs with 5 ms added to
	// every fsync while its processes used 40-44 % (and those runs were
	// slower than the ones on a 54-68 % busy host).
	runShareOfBusy = 0.5
	// diskShareBound: each data device wrote at least this share of the
	// probed limit. The probe is one writer's sequential fsynced writes;
	// three nodes writing at once seldom get more out of the device.
	diskShareBound = 0.8
	// fsyncBusyBound: each node's Raft log was in fsync at least this
	// share of the window (fsyncs per second x their mean duration). The
	// log writer appends the next group while an fsync runs
	// (raftkv/node/logwrite.go), so a log in fsync part of the time has
	// room to spare; one in fsync nearly all the time has its flusher
	// always busy, and every acknowledgement waits in its queue. The
	// fsyncs' p99 against the probe's says whether the disk (or a fault)
	// made them slow or they were long because the groups were large. On
	// a fast disk (4 KiB fsync p50 0.15-0.21 ms) nezha's and
	// nezha-nogc's logs were in fsync 49-53 % of the quick headline
	// windows on local and 37-38 % in containers, with the machine
	// 74-84 % busy; with 5 ms added to every fsync 79-81 %, the machine
	// 64-69 % busy, goodput 7-11 % lower (2026-12-05, commit 1e7c154's
	// writer). The threshold lies between the two.
	fsyncBusyBound = 0.7
	// stallShareBound: RocksDB stalled or slowed writes (its write stall
	// counter) at least this share of the window, per node; or its
	// pending compaction bytes reached the soft limit, where it starts
	// slowing writes.
	stallShareBound = 0.1
)

// boundEvidence are the numbers that decide a bound: medians over a
// system's headline runs.
type boundEvidence struct {
	// MachineBusy is the node hosts' CPU busy share in the window,
	// RunCPUShare the share the run's own processes used (windowStats).
	MachineBusy float64 `json:"machine_busy"`
	RunCPUShare float64 `json:"run_cpu_share"`
	// DiskWriteMBps is the mean write rate of one data device in the
	// window, DiskLimitMBps the disk-limit probe's (0: not probed).
	DiskWriteMBps float64 `json:"disk_write_mb_per_sec_per_device"`
	DiskLimitMBps float64 `json:"disk_limit_mb_per_sec"`
	// HaveLog: the Raft log's fsyncs were scraped (logStats).
	HaveLog             bool    `json:"have_log"`
	FsyncsPerSecPerNode float64 `json:"fsyncs_per_sec_per_node"`
	FsyncMeanMs         float64 `json:"fsync_mean_ms"`
	FsyncP99Ms          float64 `json:"fsync_p99_ms"`
	FsyncBusy           float64 `json:"fsync_busy"`
	// ProbeFsyncP50Ms and ProbeFsyncP99Ms: the probe's 4 KiB write +
	// fdatasync (0: not probed).
	ProbeFsyncP50Ms float64 `json:"probe_fsync_4k_p50_ms"`
	ProbeFsyncP99Ms float64 `json:"probe_fsync_4k_p99_ms"`
	// HaveRocksDB: the nodes report RocksDB's write stalls. StallShare is
	// the share of the window RocksDB stalled writes (per node);
	// PendingCompactionBytes the largest compaction debt a node reported,
	// SoftPendingCompactionBytes the limit where RocksDB slows writes (0:
	// unknown).
	HaveRocksDB                bool    `json:"have_rocksdb"`
	StallShare                 float64 `json:"stall_share"`
	PendingCompactionBytes     float64 `json:"pending_compaction_bytes"`
	SoftPendingCompactionBytes float64 `json:"soft_pending_compaction_bytes"`
}

// Bound is what limited one system's PUTs in its headline runs on one
// backend (Result.Bounds).
type Bound struct {
	System  string `json:"system"`
	Backend string `json:"backend"`
	// Bound is one of the Bound* names, or "mixed: A + B".
	Bound string `json:"bound"`
	// Reached are the bounds whose evidence held.
	Reached []string `json:"reached,omitempty"`
	// Evidence says the numbers that decided it, each against its
	// threshold.
	Evidence string        `json:"evidence"`
	Runs     int           `json:"runs"`
	Inputs   boundEvidence `json:"inputs"`
}

// classifyBound names the bound e reached: the one bound whose evidence
// held, "mixed: ..." when several did, BoundNone when none did. A bound
// whose evidence is missing (no probe, no scrape, no RocksDB) is not
// reached.
func classifyBound(e boundEvidence) (bound string, reached []string) {
	switch {
	case e.MachineBusy < cpuBusyBound:
	case e.RunCPUShare >= runShareOfBusy*e.MachineBusy:
		reached = append(reached, BoundCPU)
	default:
		reached = append(reached, BoundCPUOtherWork)
	}
	if e.DiskLimitMBps > 0 && e.DiskWriteMBps >= diskShareBound*e.DiskLimitMBps {
		reached = append(reached, BoundDiskBandwidth)
	}
	if e.HaveLog && e.FsyncBusy >= fsyncBusyBound {
		reached = append(reached, BoundFsyncLatency)
	}
	if e.HaveRocksDB && (e.StallShare >= stallShareBound || e.SoftPendingCompactionBytes > 0 && e.PendingCompactionBytes >= e.SoftPendingCompactionBytes) {
		reached = append(reached, BoundCompactionDebt)
	}
	switch len(reached) {
	case 0:
		return BoundNone, nil
	case 1:
		return reached[0], reached
	}
	return boundMixed + ": " + strings.Join(reached, " + "), reached
}

// evidenceText says the numbers of e, each with its threshold.
func evidenceText(e boundEvidence) string {
	parts := []string{fmt.Sprintf("machine %.0f %% busy, %.0f %% by the run's processes (CPU at >= %.0f %% busy; the run's own when it used >= %.0f %% of that)",
		100*e.MachineBusy, 100*e.RunCPUShare, 100*cpuBusyBound, 100*runShareOfBusy)}
	if e.DiskLimitMBps > 0 {
		parts = append(parts, fmt.Sprintf("disk wrote %.0f MB/s per device = %.0f %% of the %.0f MB/s probed (>= %.0f %%)",
			e.DiskWriteMBps, 100*e.DiskWriteMBps/e.DiskLimitMBps, e.DiskLimitMBps, 100*diskShareBound))
	} else {
		parts = append(parts, fmt.Sprintf("disk wrote %.0f MB/s per device (no probe: bandwidth not judged)", e.DiskWriteMBps))
	}
	if e.HaveLog {
		probe := "no probe"
		if e.ProbeFsyncP50Ms > 0 {
			probe = fmt.Sprintf("the probe's 4 KiB fsync p50 %.2f ms, p99 %.2f ms", e.ProbeFsyncP50Ms, e.ProbeFsyncP99Ms)
		}
		parts = append(parts, fmt.Sprintf("Raft log %.0f fsyncs/s per node, mean %.2f ms, p99 %.2f ms (%s): in fsync %.0f %% of the window (>= %.0f %%)",
			e.FsyncsPerSecPerNode, e.FsyncMeanMs, e.FsyncP99Ms, probe, 100*e.FsyncBusy, 100*fsyncBusyBound))
	} else {
		parts = append(parts, "no fsync scrape")
	}
	if e.HaveRocksDB {
		soft := ""
		if e.SoftPendingCompactionBytes > 0 {
			soft = fmt.Sprintf(" of the %s soft limit", bytesText(int64(e.SoftPendingCompactionBytes)))
		}
		parts = append(parts, fmt.Sprintf("RocksDB stalled writes %.0f %% of the window (>= %.0f %%), pending compaction up to %s%s",
			100*e.StallShare, 100*stallShareBound, bytesText(int64(e.PendingCompactionBytes)), soft))
	}
	return strings.Join(parts, "; ")
}

// softPendingBytes is RocksDB's soft pending compaction limit of sys
// under the profile's geometry for geomData bytes per node (0 for systems
// without RocksDB's compaction).
func (x *Run) softPendingBytes(sys string, geomData int64) float64 {
	return float64(x.geometry(sys, geomData).SoftPendingCompactionBytes)
}

// headlineBound classifies sys's headline runs rs (not empty) against the
// run's probe (nil: none).
func (x *Run) headlineBound(sys string, rs []putRun, pr *probe.Calibration, geomData int64) Bound {
	med := func(f func(putRun) float64) float64 { return medianOf(rs, f) }
	e := boundEvidence{
		MachineBusy: med(func(r putRun) float64 { return r.Window.MachineBusy }),
		RunCPUShare: med(func(r putRun) float64 { return r.Window.RunCPUShare }),
		DiskWriteMBps: med(func(r putRun) float64 {
			return r.Window.DiskWriteMBps / float64(max(r.Window.DiskDevices, 1))
		}),
	}
	if pr != nil {
		e.DiskLimitMBps = pr.DiskLimitMBps()
		l := pr.Fsync4K()
		e.ProbeFsyncP50Ms, e.ProbeFsyncP99Ms = float64(l.P50Ns)/1e6, float64(l.P99Ns)/1e6
	}
	logged := slices.DeleteFunc(slices.Clone(rs), func(r putRun) bool { return r.Log == nil })
	if len(logged) > 0 {
		lmed := func(f func(*logStats) float64) float64 {
			return medianOf(logged, func(r putRun) float64 { return f(r.Log) })
		}
		e.HaveLog = true
		e.FsyncsPerSecPerNode = lmed(func(l *logStats) float64 { return l.FsyncsPerSecPerNode })
		e.FsyncMeanMs = lmed(func(l *logStats) float64 { return l.FsyncMeanMs })
		e.FsyncP99Ms = lmed(func(l *logStats) float64 { return l.FsyncP99Ms })
		e.FsyncBusy = lmed(func(l *logStats) float64 { return l.FsyncBusy })
		if slices.ContainsFunc(logged, func(r putRun) bool { return r.Log.HaveRocksDB }) {
			e.HaveRocksDB = true
			e.StallShare = lmed(func(l *logStats) float64 {
				if l.Seconds <= 0 {
					return 0
				}
				return l.StallSecondsPerNode / l.Seconds
			})
			e.PendingCompactionBytes = lmed(func(l *logStats) float64 { return l.PendingCompactionBytesMax })
			e.SoftPendingCompactionBytes = x.softPendingBytes(sys, geomData)
		}
	}
	b := Bound{System: sys, Backend: x.res.Backend, Runs: len(rs), Inputs: e, Evidence: evidenceText(e)}
	b.Bound, b.Reached = classifyBound(e)
	return b
}

// boundsText is "sys: bound; ..." for the systems of bs in order, "" if
// none of them has one.
func boundsText(bs []Bound, systems ...string) string {
	var parts []string
	for _, sys := range systems {
		if i := slices.IndexFunc(bs, func(b Bound) bool { return b.System == sys }); i >= 0 {
			parts = append(parts, sys+": "+bs[i].Bound)
		}
	}
	return strings.Join(parts, "; ")
}
