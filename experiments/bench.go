package experiments

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/experiments/probe"
	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

// diskLimit measures the disk where the nodes run (the run's probe,
// calibrate.go): sequential writes of DiskLimitWriteBytes, each followed by
// fdatasync, and 4 KiB writes each fsynced, with their latencies; and the
// CPU's calibration. Three replicas on one disk share the first figure,
// so a 3-node cluster on one machine's PUT goodput is bounded by limit / 3.
func diskLimit() Experiment {
	return Experiment{
		Name: "disk-limit", Title: "Disk limit",
		Shows:            "the node hosts' sequential write bandwidth with fsync, the ceiling of every PUT figure, and their fsync latency",
		NeedsOwnClusters: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			x.param("bytes", p.DiskLimitBytes)
			x.param("write_bytes", p.DiskLimitWriteBytes)
			// The ceiling is what the disk does when nothing else writes:
			// the probe first flushes what earlier work left dirty (a
			// previous run's data and deletions, written back in the
			// background, once took a standard run's limit from about
			// 1,100 to 339 MB/s), then takes the best of
			// diskLimitSamples passes.
			pr, err := x.diskProbe(ctx)
			if err != nil {
				return err
			}
			mbps := pr.DiskLimitMBps()
			x.metric("disk_limit_mb_per_sec", mbps)
			var samples []float64
			bw := Table{Title: "Sequential writes with fsync after each (write + fdatasync latency)", Columns: []string{"node host", "write size", "MB/s", "writes+fsyncs/s", "latency p50 (ms)", "latency p99 (ms)"}}
			speed := Table{Title: "The node hosts' CPU at the start of the run (one goroutine each, best of 5 samples of 0.1 s)", Columns: []string{"node host", "loopback TCP round trip of 64 bytes", "copy between 256 KiB buffers"}}
			for _, h := range pr.Hosts {
				samples = append(samples, h.MBPerSec...)
				big, small := slices.Max(h.MBPerSec), h.SmallMBPerSec
				lat := func(size int) (string, string) {
					l, ok := h.Fsync[size]
					if !ok {
						return "-", "-"
					}
					return f2(float64(l.P50Ns) / 1e6), f2(float64(l.P99Ns) / 1e6)
				}
				p50, p99 := lat(h.WriteBytes)
				bw.Rows = append(bw.Rows, []string{h.Host, fmt.Sprintf("%d KiB", h.WriteBytes/kib), f1(big), f0(big * 1e6 / float64(h.WriteBytes)), p50, p99})
				if h.WriteBytes != probe.LargeWriteBytes {
					p50, p99 = lat(probe.LargeWriteBytes)
					bw.Rows = append(bw.Rows, []string{h.Host, "1 MiB", "-", "-", p50, p99})
				}
				p50, p99 = lat(probe.SmallWriteBytes)
				bw.Rows = append(bw.Rows, []string{h.Host, "4 KiB", f1(small), f0(small * 1e6 / probe.SmallWriteBytes), p50, p99})
				speed.Rows = append(speed.Rows, []string{h.Host, fmt.Sprintf("%.1f µs", h.LoopbackRoundTripNs/1e3), fmt.Sprintf("%.1f GB/s", h.MemmoveGBPerSec)})
			}
			first := pr.Hosts[0]
			x.samples("disk_limit_mb_per_sec", samples)
			x.metric("fsync_4k_per_sec", first.SmallMBPerSec*1e6/probe.SmallWriteBytes)
			// Unranked metrics (no direction in compare.go): facts about
			// the disk and the machine, shown beside a comparison of two
			// runs.
			for size, name := range map[int]string{probe.SmallWriteBytes: "4k", probe.LargeWriteBytes: "1m"} {
				l := pr.Hosts[0].Fsync[size]
				for _, h := range pr.Hosts[1:] {
					l.P50Ns, l.P99Ns = max(l.P50Ns, h.Fsync[size].P50Ns), max(l.P99Ns, h.Fsync[size].P99Ns)
				}
				x.metric("disk_fsync_median_ns/"+name, float64(l.P50Ns))
				x.metric("disk_fsync_99th_percentile_ns/"+name, float64(l.P99Ns))
			}
			x.table(bw)
			x.note("Probed %s. The %d KiB row is the best of %d passes of %s each (MB/s: %s), after a sync of everything dirty; its latencies are over all passes. A 3-node cluster on one machine writes every value on one disk three times: its PUT goodput is bounded by %.1f MB/s / 3 = %.1f MB/s.",
				pr.Where, p.DiskLimitWriteBytes/kib, diskLimitSamples, bytesText(p.DiskLimitBytes/diskLimitSamples), floatsText(samples), mbps, mbps/3)
			x.logf("%.1f MB/s in %d KiB fsynced writes; %.0f 4 KiB write+fsync/s", mbps, p.DiskLimitWriteBytes/kib, first.SmallMBPerSec*1e6/probe.SmallWriteBytes)
			x.metric("machine_loopback_round_trip_ns", first.LoopbackRoundTripNs)
			x.metric("machine_memmove_gb_s", first.MemmoveGBPerSec)
			x.table(speed)
			x.note("CPU-bound systems (nezha's PUT path) move with these between runs on a shared VM more than disk- or compaction-bound ones (original); compare two runs' ratios beside them (`nezha experiment compare` lists both).")
			return nil
		},
	}
}

// diskLimitSamples is how many passes of DiskLimitBytes/diskLimitSamples
// the disk-limit experiment takes the best of.
const diskLimitSamples = 3

// diskLimitOf returns the disk limit measured earlier in this run, if any.
func (x *Run) diskLimitOf() (float64, bool) {
	x.hosts.mu.Lock()
	defer x.hosts.mu.Unlock()
	if x.hosts.probe != nil {
		v := x.hosts.probe.DiskLimitMBps()
		return v, v > 0
	}
	return 0, false
}

// benchCommon returns workload options for one phase.
func (x *Run) benchCommon(prefix string, clients int, ops int64, seed int64, raw *bytes.Buffer) workloads.Common {
	c := workloads.DefaultCommon()
	c.Clients, c.Ops, c.KeyPrefix, c.Seed = clients, ops, prefix, seed
	c.Progress, c.ProgressInterval = x.Out, 10*time.Second
	if raw != nil {
		c.Raw = raw
	}
	return c
}

// putVsize: PUT throughput and latency vs value size, the same total bytes
// at each size (the paper's method), a fresh cluster per system and size,
// systems interleaved within each size (rotated) so that a drift in the
// machine's load does not favour one system. The headline PUT figure is
// put-scale's.
func putVsize() Experiment {
	return Experiment{
		Name: "put-vsize", Title: "PUT throughput and latency vs value size",
		Shows: "how much a value persisted once (nezha) gains over values applied into RocksDB, per value size",
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			x.param("total_bytes_per_size", p.PutTotalBytes)
			x.param("value_sizes_kib", p.ValueSizesKiB)
			x.param("clients", p.Clients)
			x.param("geometry", p.Geometry)
			if p.Geometry == GeometryScaled {
				x.note("Geometry scaled to %s per node (RocksDB's sizes and nezha's GC threshold x %.3g; floors at 64 KiB). One run per system and size: the headline PUT figure comes from put-scale, which repeats its runs.", bytesText(p.PutTotalBytes), float64(p.PutTotalBytes)/systems.PaperDataPerNodeBytes)
			}
			var cats []string
			for _, s := range p.ValueSizesKiB {
				cats = append(cats, fmt.Sprint(s))
			}
			n := len(p.ValueSizesKiB)
			mbps, opsps, p50, p99 := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
			missing := map[string][]int{}
			for _, sys := range x.Systems {
				mbps[sys], opsps[sys], p50[sys], p99[sys] = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
			}
			limit, haveLimit := x.diskLimitOf()
			tbl := Table{Title: "PUT, per system and value size (one run each)", Columns: []string{"system", "value", "ops", "ops/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms", "errors", "ambiguous", "write amp in window", "on-disk shape at end"}}
			if haveLimit {
				tbl.Columns = append(tbl.Columns, "of disk limit/3")
			}
			rows := map[string][][]string{}
			for i, size := range p.ValueSizesKiB {
				vbytes := size * kib
				ops := p.PutTotalBytes / int64(vbytes)
				for _, sys := range rotate(x.Systems, i) {
					sum, ws, wa, err := x.benchPut(ctx, sys, fmt.Sprintf("%dk", size), ops, vbytes, x.geometryArgs(sys, p.PutTotalBytes)...)
					if err != nil {
						missing[sys] = append(missing[sys], i)
						continue
					}
					mbps[sys][i], opsps[sys][i] = sum.MBPerSec, sum.OpsPerSec
					p50[sys][i], p99[sys][i] = float64(sum.P50Us)/1000, float64(sum.P99Us)/1000
					x.metric(fmt.Sprintf("put_mb_per_sec/%s/%d", sys, size), sum.MBPerSec)
					x.metric(fmt.Sprintf("put_ops_per_sec/%s/%d", sys, size), sum.OpsPerSec)
					row := []string{sys, fmt.Sprintf("%d KiB", size), fmt.Sprint(sum.Ops), f0(sum.OpsPerSec), f1(sum.MBPerSec),
						ms(sum.P50Us), ms(sum.P99Us), ms(sum.P999Us), fmt.Sprint(sum.Errors), fmt.Sprint(sum.Ambiguous), f2(wa), shapeText(ws.Shape)}
					if haveLimit {
						row = append(row, fmt.Sprintf("%.0f%%", 100*sum.MBPerSec/(limit/3)))
					}
					rows[sys] = append(rows[sys], row)
				}
			}
			for _, sys := range x.Systems {
				tbl.Rows = append(tbl.Rows, rows[sys]...)
			}
			x.table(tbl)
			bars := func(name, title, ylabel string, vals map[string][]float64) plots.Figure {
				f := plots.Figure{Name: name, Title: title, Kind: plots.Bars, XLabel: "value size (KiB)", YLabel: ylabel, Categories: cats}
				for _, sys := range x.Systems {
					f.Series = append(f.Series, plots.Series{Name: sys, Values: vals[sys], Missing: missing[sys]})
				}
				return f
			}
			x.figure(bars("put-mbps", "PUT goodput vs value size", "goodput (MB/s)", mbps))
			x.figure(bars("put-ops", "PUT throughput vs value size", "throughput (ops/s)", opsps))
			x.figure(bars("put-p99", "PUT p99 latency vs value size", "p99 latency (ms)", p99))
			x.figure(bars("put-p50", "PUT median latency vs value size", "p50 latency (ms)", p50))
			return nil
		},
	}
}

// benchPut runs one PUT phase on a fresh cluster, and (local clusters)
// returns its window and write amplification.
func (x *Run) benchPut(ctx context.Context, sys, label string, ops int64, vbytes int, args ...string) (workloads.Summary, windowStats, float64, error) {
	var ws windowStats
	tb, err := x.start(ctx, sys, "put-"+label, args...)
	if err != nil {
		x.fail(sys, "cluster up", err, nil)
		return workloads.Summary{}, ws, 0, err
	}
	o := workloads.PutOptions{Common: x.benchCommon("p", x.Profile.Clients, ops, 1, nil), ValueBytes: vbytes,
		MaxValueBytes: max(vbytes, 64*mib), Order: "random"}
	x.logf("%s: PUT %d x %d KiB, %d clients", sys, ops, vbytes/kib, o.Clients)
	var before windowSample
	if tb.spec != nil {
		before, err = x.sample(ctx, tb)
	}
	var sum workloads.Summary
	if err == nil {
		sum, err = workloads.RunPut(ctx, tb.c, o)
	}
	if err == nil {
		err = sum.Failures()
	}
	if err == nil && tb.spec != nil {
		ws, err = x.since(ctx, tb, before)
	}
	if err != nil {
		x.fail(sys, "put "+label, err, tb.spec)
		tb.stop(true)
		return sum, ws, 0, err
	}
	wa := 0.0
	if user := float64(sum.Ops) * float64(vbytes+len(workloads.Key("p", 0))); user > 0 {
		wa = ws.WriteBytesPerNode / user
	}
	x.logf("%s: PUT %s: %.0f ops/s, %.1f MB/s, p99 %.1f ms, write amp %.2f", sys, label, sum.OpsPerSec, sum.MBPerSec, float64(sum.P99Us)/1000, wa)
	tb.stop(false)
	return sum, ws, wa, nil
}

// latencyCDF turns a raw per-operation CSV (workloads.WriteRawCSV: op,
// start_unix_us, latency_us, ok, outcome) into a CDF series in ms, at most
// 200 points.
func latencyCDF(name string, raw *bytes.Buffer) (plots.Series, error) {
	var lats []float64
	for i, line := range strings.Split(raw.String(), "\n") {
		if i == 0 || line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 4 || f[3] != "true" {
			continue
		}
		us, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		lats = append(lats, max(us, 1)/1000)
	}
	if len(lats) == 0 {
		return plots.Series{}, errors.New("no successful operation")
	}
	sort.Float64s(lats)
	s := plots.Series{Name: name}
	n := len(lats)
	points := min(n, 200)
	for i := 1; i <= points; i++ {
		idx := i*n/points - 1
		s.X = append(s.X, lats[idx])
		s.Y = append(s.Y, float64(idx+1)/float64(n))
	}
	return s, nil
}

// throughputSeries is a Summary's per-second goodput in MB/s (bytes) or
// ops/s, without the last, partial second; ok is false for runs shorter
// than 5 s, whose series say nothing.
func throughputSeries(name string, sum workloads.Summary, bytes bool) (plots.Series, bool) {
	s := plots.Series{Name: name}
	full := int(sum.DurationSec)
	for _, sec := range sum.Series {
		if sec.Second >= full {
			continue
		}
		v := float64(sec.Ops)
		if bytes {
			v = float64(sec.Bytes) / 1e6
		}
		s.X, s.Y = append(s.X, float64(sec.Second)), append(s.Y, v)
	}
	return s, len(s.X) >= 5
}

// readBed loads ReadKeys keys on a fresh cluster of sys and, for nezha,
// waits until GC has compacted the load (the paper's SCAN gain comes from
// the sorted runs).
func (x *Run) readBed(ctx context.Context, sys string) (*testbed, error) {
	p := x.Profile
	data := p.ReadKeys * int64(p.ReadValueBytes)
	tb, err := x.startIn(ctx, filepath.Join(x.beds.dir, sys), sys, x.geometryArgs(sys, data)...)
	if err != nil {
		x.fail(sys, "cluster up", err, nil)
		return nil, err
	}
	if tb.spec != nil && p.ReadAheadKB > 0 && p.ReadCache != ReadCacheWarm {
		x.setReadAhead(ctx, tb, p.ReadAheadKB)
	}
	o := workloads.PutOptions{Common: x.benchCommon("r", p.Clients, p.ReadKeys, 1, nil), ValueBytes: p.ReadValueBytes,
		MaxValueBytes: max(p.ReadValueBytes, 64*mib), Order: "random"}
	x.logf("%s: loading %d keys x %d KiB", sys, p.ReadKeys, p.ReadValueBytes/kib)
	sum, err := workloads.RunPut(ctx, tb.c, o)
	if err == nil {
		err = sum.Failures()
	}
	if err != nil {
		x.fail(sys, "load", err, tb.spec)
		tb.stop(true)
		return nil, err
	}
	if sys == sysNezha && tb.spec != nil {
		// The idle round sorts what the load left in the log.
		if err := x.waitIdleGC(ctx, tb, time.Now()); err != nil {
			x.fail(sys, "GC after load", err, tb.spec)
			tb.stop(true)
			return nil, err
		}
	}
	if slices.Contains(x.mapsDataFiles, sys) && tb.spec != nil && x.Profile.ReadCache != ReadCacheWarm {
		if err := x.restartQuiet(ctx, tb); err != nil {
			x.fail(sys, "restart after load", err, tb.spec)
			tb.stop(true)
			return nil, err
		}
	}
	return tb, nil
}

// restartQuiet stops every node of tb (SIGTERM: the engine closes cleanly;
// the agents stay) and starts them again, for an engine that reads
// through mmap (Badger): pages a process maps stay in memory whatever
// drop_caches does, and stay charged where they were faulted in. With the
// cgroup arrangement, where the node hosts allow it, each node starts
// inside a memory cgroup its agent makes (arrangeReads then sets its
// limit), so that what it maps at open (Badger reads its last value log
// file through) and later counts against the group's limit like any
// other system's page cache; otherwise the fresh processes at least map
// nothing of the load.
func (x *Run) restartQuiet(ctx context.Context, tb *testbed) error {
	spec := tb.spec
	for _, n := range spec.Nodes {
		if err := spec.Signal(n.ID, syscall.SIGTERM); err != nil {
			return err
		}
	}
	if x.Profile.ReadCache == ReadCacheCgroup {
		gap := capabilityGaps([]*testbed{tb}, (*agentpb.InfoResponse).GetMemoryCgroup)
		if gap == "" {
			gap = capabilityGaps([]*testbed{tb}, (*agentpb.InfoResponse).GetDropCaches)
		}
		if gap != "" {
			x.logf("%s: restarting the nodes after the load outside memory cgroups (%s)", spec.System, gap)
		} else {
			// A page in the page cache stays charged to the group that
			// brought it in (the load's, outside): drop what the stopped
			// nodes left, so that the new ones read it in their groups.
			rc := &readCache{droppers: distinctHostAgents([]*testbed{tb})}
			if err := rc.dropCaches(ctx); err != nil {
				x.logf("%s: dropping the page cache before the restart failed: %v", spec.System, err)
			}
			// No limit yet (the host's memory): the engine's start
			// (memtables, caches) must not meet the group's OOM killer;
			// arrangeReads' follower sets it.
			spec.StartMemoryLimitBytes = tb.hosts[0].info.GetMemoryBytes()
			defer func() { spec.StartMemoryLimitBytes = 0 }()
			x.logf("%s: restarting the nodes after the load inside memory cgroups (the engine maps its files: pages mapped before would stay in memory)", spec.System)
		}
	}
	for _, n := range spec.Nodes {
		if err := spec.Restart(n.ID); err != nil {
			return err
		}
	}
	if _, err := spec.WaitLeader(ctx, 30*time.Second); err != nil {
		return err
	}
	return x.slowFsyncs(ctx, tb)
}

// bedPool keeps the read beds (one loaded cluster per system) and their
// read arrangement from get-zipf for scan when both run in one Execute:
// the same keys serve both, and loading them twice would double the
// experiments' time. The last experiment that uses the beds stops them.
type bedPool struct {
	dir   string
	beds  map[string]*testbed
	rc    *readCache
	users int // experiments of this Execute that still use the beds
	// readAheadText says how the beds' readahead was set, for the report
	// ("" if nothing was changed); readAhead are its measurements.
	readAheadText string
	readAhead     []Measurement
}

// readBeds returns the loaded beds of every system (loading the missing
// ones) and the read arrangement, arranging it on first use.
func (x *Run) readBeds(ctx context.Context) (map[string]*testbed, *readCache) {
	pool := x.beds
	for _, sys := range x.Systems {
		if pool.beds[sys] != nil {
			continue
		}
		if tb, err := x.readBed(ctx, sys); err == nil {
			pool.beds[sys] = tb
		}
	}
	if pool.rc == nil {
		var tbs []*testbed
		for _, sys := range x.Systems {
			if tb := pool.beds[sys]; tb != nil && tb.spec != nil {
				tbs = append(tbs, tb)
			}
		}
		pool.rc = x.arrangeReads(ctx, tbs)
	} else {
		if err := pool.rc.again(ctx); err != nil {
			x.logf("reads: dropping the page cache before this experiment failed: %v", err)
		}
		// The arrangement's measurements, in this experiment's result too.
		x.arrangedBefore(pool)
	}
	return pool.beds, pool.rc
}

// arrangedBefore records in this experiment the measurements of the beds'
// arrangement an earlier experiment of the run made.
func (x *Run) arrangedBefore(pool *bedPool) {
	for _, m := range append([]Measurement{pool.rc.measurement}, pool.readAhead...) {
		x.measured(m)
	}
	for _, tb := range pool.beds {
		if tb.spec != nil {
			x.noteHosts(tb)
		}
	}
}

// done is called by each experiment that used the beds; the last one
// stops them.
func (p *bedPool) done() {
	p.users--
	if p.users > 0 {
		return
	}
	p.close()
}

// drop stops a bed that failed (keeping its node logs for the report) and
// forgets it.
func (p *bedPool) drop(sys string, tb *testbed) {
	tb.stop(true)
	delete(p.beds, sys)
}

// close releases the read arrangement and stops every bed (their agents
// put back the readahead they changed).
func (p *bedPool) close() {
	if p.rc != nil {
		p.rc.release()
		p.rc = nil
	}
	for sys, tb := range p.beds {
		tb.stop(false)
		delete(p.beds, sys)
	}
	os.RemoveAll(p.dir)
}

// getZipf: Zipf GETs over the keys that were written.
func getZipf() Experiment {
	return Experiment{
		Name: "get-zipf", WithOptional: true, Title: "GET throughput and latency, Zipf",
		Shows:        "point reads of values read back from the log or sorted runs (nezha) vs RocksDB",
		UsesReadBeds: true,
		run: func(ctx context.Context, x *Run) error {
			return x.readExperiment(ctx, "get")
		},
	}
}

// scan: range scans from random start keys.
func scan() Experiment {
	return Experiment{
		Name: "scan", WithOptional: true, Title: "SCAN throughput and latency",
		Shows:        "range scans, where nezha reads GC's key-sorted runs sequentially",
		UsesReadBeds: true,
		run: func(ctx context.Context, x *Run) error {
			return x.readExperiment(ctx, "scan")
		},
	}
}

func (x *Run) readExperiment(ctx context.Context, op string) error {
	p := x.Profile
	x.param("keys", p.ReadKeys)
	x.param("value_bytes", p.ReadValueBytes)
	x.param("runs", p.ReadRuns)
	x.param("run_max_duration", p.ReadRunMaxDuration.String())
	if op == "get" {
		x.param("ops", p.GetOps)
		x.param("zipf", p.Zipf)
		x.param("clients", p.Clients)
	} else {
		x.param("ops", p.ScanOps)
		x.param("scan_size", p.ScanSize)
		x.param("clients", p.ScanClients)
	}
	x.param("geometry", p.Geometry)
	x.note("Each system: one cluster and one load (shared by get-zipf and scan when both run; nezha's idle GC round has sorted the load); all clusters stay up, then %d rounds each run every system once, in rotated order (interleaved, so that slow minutes of a shared machine fall on all systems alike). The table gives the median and range over the rounds, the figure the median with the range as error bars. Device reads per op are the nodes' read_bytes (/proc/PID/io: bytes read from the device, not the page cache) over the operations of the run.", p.ReadRuns)
	tbl := Table{Title: strings.ToUpper(op), Columns: []string{"system", "median ops/s", "min", "max", "MB/s", "p50 ms", "p99 ms", "p99.9 ms", "errors", "misses", "device KB read per op (median)", "page cache held (largest)"}}
	bar := plots.Figure{Name: op + "-throughput", Title: fmt.Sprintf("%s throughput (median of %d interleaved runs, range as error bars)", strings.ToUpper(op), p.ReadRuns), Kind: plots.Bars,
		XLabel: "system", YLabel: "throughput (ops/s)", Categories: []string{op}}
	var cdfs, series []plots.Series
	var windows []plots.Window
	// Every system's cluster is loaded first and kept up; then each round
	// runs every system once, in rotated order, so that slow minutes of a
	// shared machine fall on all systems alike.
	type bed struct {
		tb      *testbed
		rates   []float64
		opsDone []float64 // operations done per run (fewer than asked if ReadRunMaxDuration cut it)
		readKBs []float64
		cache   int64 // largest page cache its nodes held after a run (-1: not limited)
		first   workloads.Summary
		raw     bytes.Buffer
		failed  bool
		// windows are the first run's, for the time-series figure.
		windows []plots.Window
		// firstSeconds is the first run's duration; the second run is
		// profiled for 80 % of it (prof, its window and summary).
		firstSeconds float64
		prof         *profiledRun
	}
	beds := map[string]*bed{}
	loaded, rc := x.readBeds(ctx)
	defer x.beds.done()
	for sys, tb := range loaded {
		beds[sys] = &bed{tb: tb, cache: -1}
	}
	x.param("read_cache", rc.Short)
	x.note("Reads: %s.", rc.Text)
	for run := 0; run < p.ReadRuns; run++ {
		for _, sys := range rotate(x.Systems, run) {
			b := beds[sys]
			if b == nil || b.failed {
				continue
			}
			if err := rc.beforeRun(ctx); err != nil {
				x.fail(sys, op, err, b.tb.spec)
				x.beds.drop(sys, b.tb)
				b.failed = true
				continue
			}
			var before windowSample
			if b.tb.spec != nil {
				before, _ = x.sample(ctx, b.tb)
			}
			var sum workloads.Summary
			var err error
			var rb *bytes.Buffer
			if run == 0 {
				rb = &b.raw
			}
			var profDone chan []string
			if run == 1 && b.tb.spec != nil && b.firstSeconds > 0 {
				profDone = make(chan []string, 1)
				go func() {
					files, err := x.profileNodes(ctx, b.tb.spec, time.Duration(0.8*b.firstSeconds*float64(time.Second)), filepath.Join(x.Dir, "cpu-profiles"), sys+"-"+op)
					if err != nil {
						x.logf("%s: %v", sys, err)
					}
					profDone <- files
				}()
			}
			start := time.Now()
			if op == "get" {
				o := workloads.GetOptions{Common: x.benchCommon("r", p.Clients, p.GetOps, int64(2+run), rb), Keys: p.ReadKeys, Zipf: p.Zipf}
				o.MaxDuration = p.ReadRunMaxDuration
				sum, err = workloads.RunGet(ctx, b.tb.c, o)
			} else {
				o := workloads.ScanOptions{Common: x.benchCommon("r", p.ScanClients, p.ScanOps, int64(3+run), rb), Keys: p.ReadKeys, ScanSize: p.ScanSize}
				o.MaxDuration = p.ReadRunMaxDuration
				sum, err = workloads.RunScan(ctx, b.tb.c, o)
			}
			if run == 0 {
				b.firstSeconds = time.Since(start).Seconds()
			}
			var profFiles []string
			if profDone != nil {
				profFiles = <-profDone
			}
			if err == nil {
				err = sum.Failures()
			}
			if err == nil && sum.Misses > 0 {
				err = fmt.Errorf("%d %s operations missed keys that were written", sum.Misses, op)
			}
			if err == nil && b.tb.spec != nil {
				err = rc.oomKilled(ctx, sys)
			}
			if err != nil {
				x.fail(sys, op, err, b.tb.spec)
				x.beds.drop(sys, b.tb)
				b.failed = true
				continue
			}
			b.rates = append(b.rates, sum.OpsPerSec)
			b.opsDone = append(b.opsDone, float64(sum.Ops))
			if b.tb.spec != nil {
				b.cache = max(b.cache, rc.pageCacheBytes(ctx, sys))
			}
			if b.tb.spec != nil && sum.Ops > 0 {
				if w, err := x.since(ctx, b.tb, before); err == nil {
					b.readKBs = append(b.readKBs, w.ReadBytesPerNode*float64(len(b.tb.spec.Nodes))/float64(sum.Ops)/1e3)
					if len(profFiles) > 0 {
						if s, err := probe.SummarizeCPUProfiles(profFiles, 12); err != nil {
							x.logf("%s: cpu profile: %v", sys, err)
						} else {
							b.prof = &profiledRun{System: sys, Rate: sum.OpsPerSec, Per: float64(sum.Ops), Window: w, Profile: s}
						}
					}
				}
			}
			if run == 0 {
				b.first = sum
				from := time.UnixMicro(sum.MeasuredFromUnixUs)
				ws, err := x.nodeWindows(ctx, b.tb, from, sum.DurationSec)
				if err != nil {
					x.logf("%s: %v", sys, err)
				}
				x.recordWindows(RunWindows{Run: op + ", first run", System: sys, Start: from, Seconds: sum.DurationSec, Windows: ws})
				b.windows = figureWindows(ws, 0, sys)
			}
		}
	}
	for _, sys := range x.Systems {
		b := beds[sys]
		if b == nil || b.failed {
			bar.Series = append(bar.Series, plots.Series{Name: sys, Values: []float64{0}, Missing: []int{0}})
			continue
		}
		rates, first := b.rates, b.first
		med, lo, hi := median(rates), slices.Min(rates), slices.Max(rates)
		cut := ""
		if asked := map[bool]int64{true: p.GetOps, false: p.ScanOps}[op == "get"]; slices.Min(b.opsDone) < float64(asked) {
			cut = fmt.Sprintf("; runs cut at %v after %.0f..%.0f of %d ops", p.ReadRunMaxDuration, slices.Min(b.opsDone), slices.Max(b.opsDone), asked)
		}
		x.logf("%s: %s median %.0f ops/s over %d runs (%.0f..%.0f)%s", sys, op, med, len(rates), lo, hi, cut)
		x.metric(op+"_ops_per_sec/"+sys, med)
		x.samples(op+"_ops_done/"+sys, b.opsDone)
		x.samples(op+"_ops_per_sec/"+sys, rates)
		readKB := "-"
		if len(b.readKBs) > 0 {
			readKB = f1(median(b.readKBs))
			x.metric(op+"_ops_per_sec_disk_read_kb_per_op/"+sys, median(b.readKBs))
			x.samples(op+"_ops_per_sec_disk_read_kb_per_op/"+sys, b.readKBs)
		}
		tbl.Rows = append(tbl.Rows, []string{sys, f0(med), f0(lo), f0(hi), f1(first.MBPerSec * med / first.OpsPerSec),
			ms(first.P50Us), ms(first.P99Us), ms(first.P999Us), fmt.Sprint(first.Errors), fmt.Sprint(first.Misses), readKB, cacheText(b.cache)})
		bar.Series = append(bar.Series, plots.Series{Name: sys, Values: []float64{med}, Errors: []float64{med - lo}, ErrorsUp: []float64{hi - med}, N: []int{len(rates)}})
		if c, err := latencyCDF(sys, &b.raw); err == nil {
			cdfs = append(cdfs, c)
		}
		if s, ok := throughputSeries(sys, first, false); ok {
			series = append(series, s)
			windows = append(windows, b.windows...)
		}
	}
	tbl.Title += " (latencies of the first run)"
	x.table(tbl)
	x.figure(bar)
	var profiled []profiledRun
	for _, sys := range x.Systems {
		if b := beds[sys]; b != nil && !b.failed && b.prof != nil {
			profiled = append(profiled, *b.prof)
		}
	}
	x.profileTables(profileTablesSpec{What: strings.ToUpper(op) + " run (the second of each system)", RateColumn: "ops/s", PerColumn: "node CPU us/op", PerScale: 1e6, MetricPrefix: op + "_cpu_share", PerMetric: op + "_node_cpu_us_per_op"}, profiled)
	if len(cdfs) > 0 {
		x.figure(plots.Figure{Name: op + "-latency-cdf", Title: strings.ToUpper(op) + " latency CDF (first run)", Kind: plots.CDF,
			XLabel: "latency (ms)", YLabel: "fraction of operations", LogX: true, Series: cdfs})
	}
	if len(series) > 0 {
		x.figure(plots.Figure{Name: op + "-timeseries", Title: strings.ToUpper(op) + " throughput over time (first run)", Kind: plots.Lines,
			XLabel: "time (s)", YLabel: "throughput (ops/s)", Series: series, Windows: windows, Caption: windowsCaption(len(series) > 1)})
	}
	return nil
}
