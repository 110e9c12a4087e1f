package experiments

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/experiments/probe"

	"github.com/nezha-harness/nezha/plots"
	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/workloads"
)

// Geometry of the stores in an experiment (Profile.Geometry).
const (
	// GeometryScaled scales RocksDB's size parameters (write buffer,
	// level-1 target, SST file size, WAL bound, pending-compaction limits,
	// block cache, blob file size) and nezha's GC threshold by (data per
	// node / 100 GB), so that a run with less data has the LSM shape of
	// the paper's 100 GB per node: the same number of levels and the same
	// compaction work per byte, and the paper's GC-threshold-to-data ratio
	// (40 GB / 100 GB).
	GeometryScaled = "scaled"
	// GeometryNative runs every system with its defaults (RocksDB's own
	// sizes, nezha's 1 GiB GC threshold).
	GeometryNative = "native"
)

// maxConditionRuns bounds the runs of one system under one condition
// (Profile.ConditionMinSeconds).
const maxConditionRuns = 8

// paperPutRatio is the paper's PUT throughput of Nezha over Raft+RocksDB.
const paperPutRatio = 1 + paperPutGain

// The paper's conditions (Profile.Conditions): each is run alone at
// ConditionDataBytes, then all together, beside our own conditions at the
// same point, so that each one's share of the paper's effect shows.
const (
	// CondNoFsync: -sync=false on every system (the paper's code never
	// fsyncs).
	CondNoFsync = systems.CondNoFsync
	// CondCacheOff: RocksDB's block cache off and its default compression
	// (Snappy), as the paper's code opened RocksDB (raft/persister.go of
	// the authors' repository: default options, no_block_cache).
	CondCacheOff = systems.CondCacheOff
	// CondLowercase: values of random lowercase letters, as the paper's
	// benchmark programs write (compressible, unlike our random bytes).
	CondLowercase = systems.CondLowercase
	// CondPaperGC: nezha with the paper's GC (merge, threshold 40 % of the
	// data per node) instead of the default strategy.
	CondPaperGC = systems.CondPaperGC
	// CondAll: all of the above at once.
	CondAll = "all"
)

// ConditionNames returns the accepted Profile.Conditions values.
func ConditionNames() []string {
	return []string{CondNoFsync, CondCacheOff, CondLowercase, CondPaperGC, CondAll}
}

// conditionText describes a condition for tables.
func conditionText(c string) string {
	switch c {
	case "":
		return "ours: fsync, random values, block cache on, no compression"
	case CondNoFsync:
		return "no fsync (-sync=false)"
	case CondCacheOff:
		return "RocksDB block cache off, Snappy"
	case CondLowercase:
		return "random lowercase values"
	case CondPaperGC:
		return "nezha: paper's GC (merge at 40 % of the data, unpaced)"
	case CondAll:
		return "all of the paper's conditions"
	}
	return c
}

// system returns sys's registration; false when the run's registry
// (RunOptions.Registry) does not know sys or the run has none.
func (x *Run) system(sys string) (systems.System, bool) {
	if x.reg == nil {
		return systems.System{}, false
	}
	s, err := x.reg.Lookup(sys)
	return s, err == nil
}

// hasCompactions reports whether sys's engine compacts an LSM tree that
// its nodes report on (systems.System.Compactions).
func (x *Run) hasCompactions(sys string) bool {
	s, ok := x.system(sys)
	return ok && s.Compactions
}

// hasGC reports whether sys collects garbage (systems.System.GCStrategies).
func (x *Run) hasGC(sys string) bool {
	s, ok := x.system(sys)
	return ok && len(s.GCStrategies) > 0
}

// geometry is sys's geometry (systems.System.Geometry) under the
// profile's for a store of dataPerNode bytes per node: scaled to it, or
// the system's defaults under native geometry.
func (x *Run) geometry(sys string, dataPerNode int64) systems.Geometry {
	s, ok := x.system(sys)
	if !ok || s.Geometry == nil {
		return systems.Geometry{}
	}
	var scale systems.GeometryScale
	if x.Profile.Geometry == GeometryScaled && dataPerNode > 0 {
		scale = systems.GeometryScale{DataPerNodeBytes: dataPerNode, SegmentSizeBytes: x.Profile.SegmentSizeBytes}
	}
	return s.Geometry(scale)
}

// geometryArgs are the node flags that give sys the profile's geometry
// for a store of dataPerNode bytes per node (none for native geometry).
func (x *Run) geometryArgs(sys string, dataPerNode int64) []string {
	if x.Profile.Geometry != GeometryScaled || dataPerNode <= 0 {
		return nil
	}
	return x.geometry(sys, dataPerNode).Flags
}

// writeBufferBytes is the reference baseline's write buffer (RocksDB's)
// under the profile's geometry for dataPerNode bytes per node.
func (x *Run) writeBufferBytes(dataPerNode int64) int64 {
	if x.reg == nil {
		return 0
	}
	return x.geometry(x.reg.Reference(), dataPerNode).WriteBufferBytes
}

// conditionArgs are the node flags of a paper's condition for sys: the
// node's -sync=false under no-fsync, then the system's own
// (systems.System.ConditionFlags) for each condition cond stands for.
func (x *Run) conditionArgs(cond, sys string, dataPerNode int64) []string {
	var args []string
	has := func(c string) bool { return cond == c || cond == CondAll }
	if has(CondNoFsync) {
		args = append(args, "-sync=false")
	}
	s, ok := x.system(sys)
	if !ok || s.ConditionFlags == nil {
		return args
	}
	for _, c := range []string{CondNoFsync, CondCacheOff, CondLowercase, CondPaperGC} {
		if has(c) {
			args = append(args, s.ConditionFlags(c, dataPerNode)...)
		}
	}
	return args
}

// sameAsOurs reports whether cond changes nothing for sys (no node flag,
// the same values): such a run would repeat ours, so put-scale does not
// run it and the condition's row uses ours (e.g. nezha under cache-off,
// which concerns RocksDB only, or nezha-nogc under paper-gc).
func (x *Run) sameAsOurs(cond, sys string, dataPerNode int64) bool {
	return len(x.conditionArgs(cond, sys, dataPerNode)) == 0 && conditionValueKind(cond) == conditionValueKind("")
}

// conditionValueKind is the workload's value kind under cond.
func conditionValueKind(cond string) string {
	if cond == CondLowercase || cond == CondAll {
		return workloads.ValueLowercase
	}
	return workloads.ValueRandom
}

// putRun is one PUT run of put-scale, as saved in runs.json.
type putRun struct {
	// Phase is "point" (a data-size point), "headline" (a repetition at
	// the largest point) or "condition" (a paper's condition row).
	Phase     string `json:"phase"`
	System    string `json:"system"`
	Condition string `json:"condition,omitempty"`
	DataBytes int64  `json:"data_bytes_per_node"`
	Geometry  string `json:"geometry"`
	GeomBytes int64  `json:"geometry_data_bytes"`
	Rep       int    `json:"rep"`
	// UserBytes are the keys and values the clients wrote.
	UserBytes float64     `json:"user_bytes"`
	MBPerSec  float64     `json:"mb_per_sec"`
	OpsPerSec float64     `json:"ops_per_sec"`
	P50Ms     float64     `json:"p50_ms"`
	P99Ms     float64     `json:"p99_ms"`
	Window    windowStats `json:"window"`
	// WriteAmp is the window's write amplification per node: bytes the
	// node wrote / user bytes (keys and values) written.
	WriteAmp float64 `json:"write_amp"`
	// LeaderWriteAmp and FollowerWriteAmp split it by role: the bytes the
	// node that led at the window's end wrote / user bytes, and the
	// followers' mean (0 where the nodes' /metrics did not say who led;
	// Window.Nodes has each node's bytes, by cause).
	LeaderWriteAmp   float64 `json:"leader_write_amp,omitempty"`
	FollowerWriteAmp float64 `json:"follower_write_amp,omitempty"`
	// Settled is the on-disk shape once the nodes stopped writing after
	// the window (RocksDB's compaction debt paid, nezha's idle sort done),
	// for the first headline run of the baselines and nezha only;
	// SettledWriteAmp counts those bytes too, and its leader's and
	// followers' parts.
	Settled                 *systems.StorageShape `json:"settled_shape,omitempty"`
	SettledWriteAmp         float64               `json:"settled_write_amp,omitempty"`
	SettledLeaderWriteAmp   float64               `json:"settled_leader_write_amp,omitempty"`
	SettledFollowerWriteAmp float64               `json:"settled_follower_write_amp,omitempty"`
	// CPUProfile summarizes the nodes' CPU profiles taken during the run
	// (the second headline run of each headline system).
	CPUProfile *probe.CPUProfileSummary `json:"cpu_profile,omitempty"`
	// MetricsCSV is the file, relative to the experiment's directory, of
	// the nodes' metrics scraped every second during the load (headline
	// runs; metrics.go), and Log what it says of the Raft log's fsyncs and
	// RocksDB's compaction debt over the run.
	MetricsCSV string    `json:"metrics_csv,omitempty"`
	Log        *logStats `json:"log,omitempty"`
	// ScrapeOffsetSec is where the load's second 0 falls on the scrape's
	// time axis (the scrape starts just before the load), to shift the
	// run's windows onto the scrape's figures.
	ScrapeOffsetSec float64 `json:"scrape_offset_sec,omitempty"`
	Error           string  `json:"error,omitempty"`
}

// headlineWindowsRun is the RunWindows.Run of put-scale's first headline
// run of a system, the run its time-series figures show.
const headlineWindowsRun = "headline run 1"

// putScale: PUT goodput and in-window write amplification vs data per
// node, the headline PUT ratio (repeated, interleaved runs at the largest
// point) and the paper's conditions as labelled rows.
func putScale() Experiment {
	return Experiment{
		Name: "put-scale", Title: "PUT vs data per node: the paper's regime",
		Shows: "how much faster a value persisted once (nezha) is than values applied into RocksDB as the data per node grows " +
			"and RocksDB's compaction deepens; the headline PUT ratio, and the paper's conditions each on its own",
		NeedsOwnClusters: true,
		run: func(ctx context.Context, x *Run) error {
			p := x.Profile
			vbytes := p.ScaleValueBytes
			top := p.ScaleDataBytes[len(p.ScaleDataBytes)-1]
			x.param("data_bytes_per_node", p.ScaleDataBytes)
			x.param("value_bytes", vbytes)
			x.param("clients", p.Clients)
			x.param("geometry", p.Geometry)
			x.param("headline_runs", p.HeadlineRuns)
			x.param("headline_systems", intersect(x.Systems, p.HeadlineSystems))
			x.param("condition_systems", intersect(x.Systems, p.ConditionSystems))
			x.param("headline_min_seconds", p.HeadlineMinSeconds.Seconds())
			x.param("conditions", p.Conditions)
			x.param("condition_data_bytes_per_node", p.ConditionDataBytes)
			x.param("condition_min_seconds", p.ConditionMinSeconds.Seconds())
			if p.Geometry == GeometryScaled {
				x.note("Geometry scaled: every point runs with RocksDB's size parameters and nezha's GC threshold scaled to the largest point, %s per node, by %s / 100 GB = %.4g, "+
					"so the largest point has the LSM shape of the paper's 100 GB per node and the smaller ones the shape the paper's cluster has with proportionally less data. "+
					"The conditions rows run at %s per node with the geometry scaled to that size.", bytesText(top), bytesText(top), float64(top)/systems.PaperDataPerNodeBytes, bytesText(p.ConditionDataBytes))
			} else {
				x.note("Geometry native: every system with its defaults (RocksDB's own sizes, nezha's GC threshold).")
			}
			x.param("headline_others", p.HeadlineOthers)
			if others := without(x.Systems, p.HeadlineSystems); len(others) > 0 && !p.HeadlineOthers {
				x.note("This profile runs %s at the smaller points only, not at %s (the headline point's runs are for the headline systems' ratios).", strings.Join(others, " and "), bytesText(top))
			}
			x.note("Write amplification is measured in each run's window: bytes each node caused to be written (/proc/PID/io write_bytes minus cancelled_write_bytes, mean over the nodes) over the user bytes the clients wrote; RocksDB's compaction debt left at the end of the window is not in it. " +
				"Leader / followers splits it: the node that led at the end of the window, and the followers' mean; the bytes by cause come from each node's /metrics at both ends of the window (docs/measurements.md). " +
				"Node CPU is user+system time of the three node processes per GB of user data; machine busy is the share of both CPUs' time not idle (clients included); disk is the data device's write rate (/proc/diskstats).")
			// The probe of the node hosts' disks (disk-limit's, or taken now)
			// is what the bounds judge the disk's bandwidth and fsync
			// latency against.
			pr, err := x.diskProbe(ctx)
			if err != nil {
				x.note("No disk probe (%v): the bounds judge neither the disk's bandwidth nor its fsync latency against one.", err)
				pr = nil
			} else if x.Prior["disk-limit"] == nil {
				x.note("disk-limit did not run: the disk was probed (%s) before the first run, for the bounds.", pr.Where)
			}
			limit, haveLimit := x.diskLimitOf()
			var all []putRun
			ops := func(data int64) int64 { return max(data/int64(vbytes), 1) }

			// The data-size points, once each but the last.
			for i, data := range p.ScaleDataBytes[:len(p.ScaleDataBytes)-1] {
				for _, sys := range rotate(x.Systems, i) {
					all = append(all, x.putScaleRun(ctx, "point", sys, "", data, top, 0, ops(data), nil, 0))
				}
			}
			// The headline point, interleaved rounds: every system once,
			// then the headline systems until each has HeadlineRuns runs
			// and HeadlineMinSeconds of measured time (a fast system's
			// runs last seconds: more of them steady its median).
			var raws = map[string]*bytes.Buffer{}
			first := map[string]float64{} // seconds of each system's first headline run
			all = append(all, interleaved(ctx, x.Systems, 3*p.HeadlineRuns, len(p.ScaleDataBytes)-1,
				func(rep int, sys string, t tally) bool {
					headline := slices.Contains(p.HeadlineSystems, sys)
					return rep == 0 && (headline || p.HeadlineOthers) ||
						headline && (t.Runs < p.HeadlineRuns || t.Seconds < p.HeadlineMinSeconds.Seconds())
				},
				func(rep int, sys string) (putRun, float64, bool) {
					var raw *bytes.Buffer
					if rep == 0 {
						raw = &bytes.Buffer{}
						raws[sys] = raw
					}
					// The second run of a headline system is profiled
					// for most of the first's duration.
					var prof time.Duration
					if rep == 1 && first[sys] > 0 {
						prof = time.Duration(0.8 * first[sys] * float64(time.Second))
					}
					r := x.putScaleRun(ctx, "headline", sys, "", top, top, rep, ops(top), raw, prof)
					if rep == 0 {
						first[sys] = r.Window.Seconds
					}
					return r, r.Window.Seconds, r.Error != ""
				})...)
			// The paper's conditions, with our own as the reference row.
			// Each condition in interleaved rounds: every system once,
			// then those short of ConditionMinSeconds of measured time.
			condSystems := intersect(x.Systems, p.ConditionSystems)
			if len(p.Conditions) > 0 && len(condSystems) > 0 {
				conds := append([]string{""}, p.Conditions...)
				for ci, cond := range conds {
					all = append(all, interleaved(ctx, condSystems, maxConditionRuns, ci,
						func(rep int, sys string, t tally) bool {
							if cond != "" && x.sameAsOurs(cond, sys, p.ConditionDataBytes) {
								return false
							}
							return rep == 0 || t.Seconds < p.ConditionMinSeconds.Seconds()
						},
						func(rep int, sys string) (putRun, float64, bool) {
							r := x.putScaleRun(ctx, "condition", sys, cond, p.ConditionDataBytes, p.ConditionDataBytes, rep, ops(p.ConditionDataBytes), nil, 0)
							return r, r.Window.Seconds, r.Error != ""
						})...)
				}
			}
			if err := writeJSON(filepath.Join(x.Dir, "runs.json"), all); err != nil {
				return err
			}
			x.putScaleReport(all, top, limit, haveLimit, raws, pr)
			return nil
		},
	}
}

// putScaleRun runs one PUT of ops values on a fresh cluster of sys with
// the geometry of geomData bytes per node, under cond. With profile > 0
// (local clusters only) it takes a CPU profile of the nodes for that long
// from the start of the load.
func (x *Run) putScaleRun(ctx context.Context, phase, sys, cond string, data, geomData int64, rep int, ops int64, raw *bytes.Buffer, profile time.Duration) putRun {
	p := x.Profile
	r := putRun{Phase: phase, System: sys, Condition: cond, DataBytes: data, Geometry: p.Geometry, GeomBytes: geomData, Rep: rep}
	label := fmt.Sprintf("scale-%d-%s-%d", data>>20, strings.ReplaceAll(cond, "-", ""), rep)
	args := append(x.geometryArgs(sys, geomData), x.conditionArgs(cond, sys, geomData)...)
	if len(x.Servers) > 0 {
		profile = 0
	}
	tb, err := x.start(ctx, sys, label, args...)
	if err != nil {
		x.fail(sys, "cluster up "+label, err, nil)
		r.Error = err.Error()
		return r
	}
	o := workloads.PutOptions{Common: x.benchCommon("p", p.Clients, ops, 1, nil), ValueBytes: p.ScaleValueBytes,
		MaxValueBytes: max(p.ScaleValueBytes, 64*mib), Order: "random", ValueKind: conditionValueKind(cond)}
	if raw != nil {
		o.Raw = raw
	}
	what := fmt.Sprintf("%s per node", bytesText(data))
	if cond != "" {
		what += ", " + cond
	}
	x.logf("%s: PUT %d x %d KiB (%s)", sys, ops, p.ScaleValueBytes/kib, what)
	before, err := x.sample(ctx, tb)
	if err != nil {
		x.fail(sys, "sample "+label, err, tb.spec)
		tb.stop(true)
		r.Error = err.Error()
		return r
	}
	var profDone chan []string
	if profile > 0 {
		profDone = make(chan []string, 1)
		go func() {
			files, err := x.profileNodes(ctx, tb.spec, profile, filepath.Join(x.Dir, "cpu-profiles"), fmt.Sprintf("%s-%s", sys, label))
			if err != nil {
				x.logf("%s: %v", sys, err)
			}
			profDone <- files
		}()
	}
	var scr *probe.Scraper
	if phase == "headline" && tb.spec != nil {
		scr = probe.StartScrape(ctx, tb.spec.Nodes, probe.ScrapeInterval)
	}
	sum, err := workloads.RunPut(ctx, tb.c, o)
	from := time.UnixMicro(sum.MeasuredFromUnixUs)
	if scr != nil {
		res := scr.Stop()
		r.MetricsCSV = x.keepScrape(sys, label, res)
		if ls, ok := logStatsOf(res.Samples); ok {
			r.Log = &ls
		}
		if sum.MeasuredFromUnixUs != 0 {
			r.ScrapeOffsetSec = from.Sub(res.Start).Seconds()
		}
	}
	if err == nil && raw != nil {
		// The first headline run's windows, for its time-series figures,
		// before the nodes settle.
		ws, werr := x.nodeWindows(ctx, tb, from, sum.DurationSec)
		if werr != nil {
			x.logf("%s: %v", sys, werr)
		}
		x.recordWindows(RunWindows{Run: headlineWindowsRun, System: sys, Start: from, Seconds: sum.DurationSec, Windows: ws})
	}
	if err == nil {
		err = sum.Failures()
	}
	if err == nil {
		r.Window, err = x.since(ctx, tb, before)
	}
	if profDone != nil {
		if files := <-profDone; len(files) > 0 {
			if s, perr := probe.SummarizeCPUProfiles(files, 12); perr != nil {
				x.logf("%s: cpu profile: %v", sys, perr)
			} else {
				r.CPUProfile = s
			}
		}
	}
	if err != nil {
		x.fail(sys, "put "+label, err, tb.spec)
		tb.stop(true)
		r.Error = err.Error()
		return r
	}
	user := float64(sum.Ops) * float64(int64(p.ScaleValueBytes)+int64(len(workloads.Key("p", 0))))
	r.UserBytes = user
	r.MBPerSec, r.OpsPerSec = sum.MBPerSec, sum.OpsPerSec
	r.P50Ms, r.P99Ms = float64(sum.P50Us)/1000, float64(sum.P99Us)/1000
	if user > 0 {
		r.WriteAmp = r.Window.WriteBytesPerNode / user
		if l, f, ok := r.Window.roleWriteBytes(); ok {
			r.LeaderWriteAmp, r.FollowerWriteAmp = l/user, f/user
		}
	}
	x.logf("%s: %.1f MB/s, write amp %.2f (%s), node CPU %.1f s, machine busy %.0f %%, GC rounds/node %.1f, shape (node 1) %s",
		sys, r.MBPerSec, r.WriteAmp, roleWriteAmpText(r.LeaderWriteAmp, r.FollowerWriteAmp, r.Window.LeaderChanged), r.Window.NodeCPUSeconds, 100*r.Window.MachineBusy, r.Window.GCRounds, shapeText(r.Window.Shape))
	if t := nodeWriteAmpText(r.Window, user); t != "" {
		x.logf("%s: write amp per node: %s", sys, t)
	}
	if phase == "headline" && rep == 0 && (x.hasCompactions(sys) || sys == sysNezha) && slices.Contains(x.Profile.HeadlineSystems, sys) {
		// What the window left to do (RocksDB's compaction debt, nezha's
		// idle sort): let it finish, then look again. Only for the
		// headline systems, whose ratio it qualifies: waiting for pasv's
		// and blobdb's compactions took about 40 s of a quick run.
		if sys == sysNezha {
			err = x.waitIdleGC(ctx, tb, time.Now())
		}
		if err == nil {
			err = settle(ctx, tb)
		}
		if err == nil {
			if w, err := x.since(ctx, tb, before); err == nil && user > 0 {
				r.Settled, r.SettledWriteAmp = w.Shape, w.WriteBytesPerNode/user
				if l, f, ok := w.roleWriteBytes(); ok {
					r.SettledLeaderWriteAmp, r.SettledFollowerWriteAmp = l/user, f/user
				}
				x.logf("%s: after compaction settled: write amp %.2f (%s), shape (node 1) %s", sys, r.SettledWriteAmp,
					roleWriteAmpText(r.SettledLeaderWriteAmp, r.SettledFollowerWriteAmp, w.LeaderChanged), shapeText(r.Settled))
				if t := nodeWriteAmpText(w, user); t != "" {
					x.logf("%s: after compaction settled, write amp per node: %s", sys, t)
				}
			}
		}
	}
	tb.stop(false)
	if raw != nil {
		// The first headline run's per-second series, for the figure.
		if s, ok := throughputSeries(sys, sum, true); ok {
			x.mu.Lock()
			x.headSeries = append(x.headSeries, s)
			x.mu.Unlock()
		}
	}
	return r
}

// intersect returns the elements of a that are in b, in a's order.
func intersect(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(s string) bool { return !slices.Contains(b, s) })
}

// without returns the elements of a that are not in b, in a's order.
func without(a, b []string) []string {
	return slices.DeleteFunc(slices.Clone(a), func(s string) bool { return slices.Contains(b, s) })
}

// runsOf selects the successful runs matching the filter.
func runsOf(all []putRun, keep func(putRun) bool) []putRun {
	var out []putRun
	for _, r := range all {
		if r.Error == "" && keep(r) {
			out = append(out, r)
		}
	}
	return out
}

func medianOf(rs []putRun, f func(putRun) float64) float64 { return median(valuesOf(rs, f)) }

// closestToMedian returns the run of rs (not empty) whose goodput is
// closest to their median, and that median (MB/s).
func closestToMedian(rs []putRun) (putRun, float64) {
	med := medianOf(rs, func(r putRun) float64 { return r.MBPerSec })
	best := rs[0]
	for _, r := range rs {
		if math.Abs(r.MBPerSec-med) < math.Abs(best.MBPerSec-med) {
			best = r
		}
	}
	return best, med
}

// conditionRunsText says how many runs each condition row has.
func conditionRunsText(p Profile) string {
	if p.ConditionMinSeconds <= 0 {
		return "one run each, interleaved"
	}
	return fmt.Sprintf("interleaved runs until each system has %.0f s of measured time, at most %d", p.ConditionMinSeconds.Seconds(), maxConditionRuns)
}

// addSpreadPoint adds to s the point (at, median of vs / per) with the
// range of vs / per as its error bar and len(vs) as its n.
func addSpreadPoint(s *plots.Series, at float64, vs []float64, per float64) {
	med, lo, hi := median(vs)/per, slices.Min(vs)/per, slices.Max(vs)/per
	s.X, s.Y = append(s.X, at), append(s.Y, med)
	s.Errors, s.ErrorsUp = append(s.Errors, med-lo), append(s.ErrorsUp, hi-med)
	s.N = append(s.N, len(vs))
}

// valuesOf is f of each run.
func valuesOf(rs []putRun, f func(putRun) float64) []float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	return vs
}

// putScaleReport turns the runs into tables, figures and metrics.
func (x *Run) putScaleReport(all []putRun, top int64, limit float64, haveLimit bool, raws map[string]*bytes.Buffer, pr *probe.Calibration) {
	p := x.Profile
	gbPerRun := func(r putRun) float64 { return float64(r.DataBytes) / 1e9 }
	diskCol := func(r putRun) string {
		if !haveLimit || r.Window.DiskWriteMBps == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f (%.0f %%)", r.Window.DiskWriteMBps, 100*r.Window.DiskWriteMBps/limit)
	}
	row := func(r putRun, base float64) []string {
		ratio := "-"
		if base > 0 {
			ratio = f2(r.MBPerSec/base) + "x"
		}
		return []string{r.System, bytesText(r.DataBytes), f1(r.MBPerSec), ratio, f2(r.WriteAmp), roleCell(r.LeaderWriteAmp, r.FollowerWriteAmp, r.Window.LeaderChanged),
			f1(r.Window.NodeCPUSeconds / gbPerRun(r)), fmt.Sprintf("%.0f %%", 100*r.Window.MachineBusy), diskCol(r), f1(r.Window.GCRounds), shapeText(r.Window.Shape)}
	}
	cols := []string{"system", "data/node", "MB/s", "/ original", "write amp", "write amp leader / followers", "node CPU s/GB", "machine busy", "disk MB/s (of limit)", "GC rounds/node", "on-disk shape at end (node 1)"}

	// 1. Data-size points (the headline point: its median run).
	tbl := Table{Title: "PUT vs data per node (the largest point: the run closest to the median of its repetitions)", Columns: cols}
	// The x axis is in the binary units the profiles give data sizes in.
	dataUnit, dataUnitName := float64(mib), "MiB"
	if top >= 10*gib {
		dataUnit, dataUnitName = gib, "GiB"
	}
	dataLabel := "data per node (" + dataUnitName + ")"
	ratioFig := plots.Figure{Name: "put-scale-ratio", Title: "PUT goodput over original's vs data per node", Kind: plots.Lines,
		XLabel: dataLabel, YLabel: "goodput / original's", HLines: []plots.Mark{{At: paperPutRatio, Label: "paper: 5.6x at 100 GB"}, {At: 1, Label: "1x"}}}
	mbpsFig := plots.Figure{Name: "put-scale-mbps", Title: "PUT goodput vs data per node", Kind: plots.Lines,
		XLabel: dataLabel, YLabel: "goodput (MB/s)"}
	waFig := plots.Figure{Name: "put-scale-write-amp", Title: "Write amplification in the window vs data per node", Kind: plots.Lines,
		XLabel: dataLabel, YLabel: "bytes written per node / user bytes", HLines: []plots.Mark{{At: 1, Label: "1 (written once)"}}}
	pointRun := func(sys string, data int64) (putRun, bool) {
		rs := runsOf(all, func(r putRun) bool { return r.System == sys && r.Phase != "condition" && r.DataBytes == data })
		if len(rs) == 0 {
			return putRun{}, false
		}
		best, _ := closestToMedian(rs)
		return best, true
	}
	byCause := causeTable{title: "Bytes written per node by cause, per user byte: the leader (at the end of the window) and the followers' mean (the run closest to the median at each point; from the nodes' /metrics at both ends of the window, " +
		"RocksDB's at 1-10 MB resolution; other: what no counter names, the nodes' /proc/PID/io bytes less the causes)"}
	series := map[string]*[3]plots.Series{}
	for _, sys := range x.Systems {
		series[sys] = &[3]plots.Series{{Name: sys}, {Name: sys}, {Name: sys}}
	}
	for _, data := range p.ScaleDataBytes {
		base := 0.0
		if rs := runsOf(all, func(r putRun) bool { return r.System == sysOriginal && r.Phase != "condition" && r.DataBytes == data }); len(rs) > 0 {
			base = medianOf(rs, func(r putRun) float64 { return r.MBPerSec })
		}
		for _, sys := range x.Systems {
			rs := runsOf(all, func(r putRun) bool { return r.System == sys && r.Phase != "condition" && r.DataBytes == data })
			r, ok := pointRun(sys, data)
			if !ok {
				continue
			}
			mbs := valuesOf(rs, func(r putRun) float64 { return r.MBPerSec })
			med := median(mbs)
			tbl.Rows = append(tbl.Rows, row(r, base))
			at := float64(data) / dataUnit
			s := series[sys]
			addSpreadPoint(&s[1], at, mbs, 1)
			addSpreadPoint(&s[2], at, valuesOf(rs, func(r putRun) float64 { return r.WriteAmp }), 1)
			if base > 0 && sys != sysOriginal {
				addSpreadPoint(&s[0], at, mbs, base)
				x.metric(fmt.Sprintf("put_scale_ratio/%s/%d", sys, data), med/base)
			}
			x.metric(fmt.Sprintf("put_scale_mb_per_sec/%s/%d", sys, data), med)
			x.metric(fmt.Sprintf("put_scale_write_amp/%s/%d", sys, data), medianOf(rs, func(r putRun) float64 { return r.WriteAmp }))
			if l, f, ok := roleMedians(rs); ok {
				x.metric(fmt.Sprintf("put_scale_leader_write_amp/%s/%d", sys, data), l)
				x.metric(fmt.Sprintf("put_scale_follower_write_amp/%s/%d", sys, data), f)
			}
			byCause.add(r)
		}
	}
	for _, sys := range x.Systems {
		s := series[sys]
		if sys != sysOriginal && len(s[0].X) > 0 {
			ratioFig.Series = append(ratioFig.Series, s[0])
		}
		if len(s[1].X) > 0 {
			mbpsFig.Series = append(mbpsFig.Series, s[1])
			waFig.Series = append(waFig.Series, s[2])
		}
	}
	x.table(tbl)
	if t, ok := byCause.table(); ok {
		x.table(t)
	}

	// 2. The headline: median and range at the largest point.
	size := p.ScaleValueBytes / kib
	head := Table{Title: fmt.Sprintf("Headline PUT: %d KiB values, %s per node, interleaved runs: at least %d per headline system and %.0f s of measured time", size, bytesText(top), p.HeadlineRuns, p.HeadlineMinSeconds.Seconds()),
		Columns: []string{"system", "median MB/s", "min", "max", "runs", "median / original's", "write amp (median)", "write amp leader / followers (medians)", "node CPU s/GB (median)", "machine busy", "GC rounds/node", "deepest LSM level", "bound (" + x.res.Backend + ")"}}
	bounds := Table{Title: fmt.Sprintf("What bounded each headline system (backend %s): medians over its headline runs, each bound against its threshold", x.res.Backend),
		Columns: []string{"system", "bound", "runs", "evidence"}}
	fig := plots.Figure{Name: "put-headline", Title: fmt.Sprintf("PUT goodput, %d KiB values, %s per node (median of interleaved runs, range as error bars)", size, bytesText(top)),
		Kind: plots.Bars, XLabel: "value size", YLabel: "goodput (MB/s)", Categories: []string{fmt.Sprintf("%d KiB", size)}}
	if haveLimit {
		fig.HLines = []plots.Mark{{At: limit / 3, Label: "disk limit / 3"}}
	}
	headRuns := func(sys string) []putRun {
		return runsOf(all, func(r putRun) bool { return r.System == sys && r.Phase == "headline" })
	}
	baseMed := medianOf(headRuns(sysOriginal), func(r putRun) float64 { return r.MBPerSec })
	var cdfs []plots.Series
	for _, sys := range x.Systems {
		rs := headRuns(sys)
		if len(rs) == 0 && !p.HeadlineOthers && !slices.Contains(p.HeadlineSystems, sys) {
			continue // not run at the headline point in this profile
		}
		if len(rs) == 0 {
			fig.Series = append(fig.Series, plots.Series{Name: sys, Values: []float64{0}, Missing: []int{0}})
			continue
		}
		mb := make([]float64, len(rs))
		for i, r := range rs {
			mb[i] = r.MBPerSec
		}
		med, lo, hi := median(mb), slices.Min(mb), slices.Max(mb)
		wa := medianOf(rs, func(r putRun) float64 { return r.WriteAmp })
		cpu := medianOf(rs, func(r putRun) float64 { return r.Window.NodeCPUSeconds / gbPerRun(r) })
		busy := medianOf(rs, func(r putRun) float64 { return r.Window.MachineBusy })
		gcr := medianOf(rs, func(r putRun) float64 { return r.Window.GCRounds })
		last, _ := pointRun(sys, top)
		deep := deepestLevel(last.Window.Shape)
		ratio := "-"
		if baseMed > 0 {
			ratio = f2(med/baseMed) + "x"
		}
		levels := "-"
		if deep >= 0 {
			levels = fmt.Sprintf("L%d", deep)
		}
		bound := "-"
		if slices.Contains(p.HeadlineSystems, sys) {
			b := x.headlineBound(sys, rs, pr, top)
			x.res.Bounds = append(x.res.Bounds, b)
			bounds.Rows = append(bounds.Rows, []string{sys, b.Bound, fmt.Sprint(b.Runs), b.Evidence})
			bound = b.Bound
			x.logf("%s: bound %s (%s)", sys, b.Bound, b.Evidence)
		}
		roles := "-"
		if l, f, ok := roleMedians(rs); ok {
			roles = roleCell(l, f, slices.ContainsFunc(rs, func(r putRun) bool { return r.Window.LeaderChanged }))
			x.metric("put_headline_leader_write_amp/"+sys, l)
			x.metric("put_headline_follower_write_amp/"+sys, f)
			x.samples("put_headline_follower_write_amp/"+sys, valuesOf(withRoles(rs), func(r putRun) float64 { return r.FollowerWriteAmp }))
		}
		head.Rows = append(head.Rows, []string{sys, f1(med), f1(lo), f1(hi), fmt.Sprint(len(rs)), ratio, f2(wa), roles, f1(cpu), fmt.Sprintf("%.0f %%", 100*busy), f1(gcr), levels, bound})
		fig.Series = append(fig.Series, plots.Series{Name: sys, Values: []float64{med}, Errors: []float64{med - lo}, ErrorsUp: []float64{hi - med}, N: []int{len(rs)}})
		x.metric("put_headline/"+sys, med)
		x.samples("put_headline/"+sys, mb)
		x.metric("put_headline_write_amp/"+sys, wa)
		x.samples("put_headline_write_amp/"+sys, valuesOf(rs, func(r putRun) float64 { return r.WriteAmp }))
		x.metric("put_headline_machine_busy/"+sys, busy)
		x.metric("put_headline_gc_rounds/"+sys, gcr)
		x.metric("put_headline_deepest_level/"+sys, float64(deep))
		x.metric("put_headline_node_cpu_s_per_gb/"+sys, cpu)
		if haveLimit {
			x.metric("put_headline_disk_fraction/"+sys, medianOf(rs, func(r putRun) float64 { return r.Window.DiskWriteMBps / limit }))
		}
		if raw := raws[sys]; raw != nil {
			if c, err := latencyCDF(sys, raw); err == nil {
				cdfs = append(cdfs, c)
			}
		}
	}
	x.metric("put_headline_data_bytes", float64(top))
	x.metric("put_headline_value_bytes", float64(p.ScaleValueBytes))
	x.table(head)
	if len(bounds.Rows) > 0 {
		x.table(bounds)
		x.note("Bounds (bound.go): CPU when the node hosts' CPUs were busy >= %.0f %% of the window, at least half of it the run's own processes (nodes, and the clients where they share the host; else CPU (outside the run's processes)); disk bandwidth when each data device wrote >= %.0f %% of the probed limit; fsync latency when each node's Raft log was in fsync >= %.0f %% of the window (fsyncs/s x their mean, from the scraped histogram), its p99 shown against the probe's 4 KiB fsyncs; compaction debt when RocksDB stalled writes >= %.0f %% of the window or its pending compaction bytes reached the soft limit. More than one reached: mixed; none: none reached.",
			100*cpuBusyBound, 100*diskShareBound, 100*fsyncBusyBound, 100*stallShareBound)
	}
	x.figure(fig)
	x.figure(ratioFig)
	x.figure(mbpsFig)
	x.figure(waFig)
	if len(cdfs) > 0 {
		x.figure(plots.Figure{Name: "put-latency-cdf", Title: fmt.Sprintf("PUT latency CDF, %d KiB values, %s per node (first headline run)", size, bytesText(top)), Kind: plots.CDF,
			XLabel: "latency (ms)", YLabel: "fraction of operations", LogX: true, Series: cdfs})
	}
	if len(x.headSeries) > 0 {
		var ws []plots.Window
		for _, s := range x.headSeries {
			ws = append(ws, figureWindows(x.windowsOf(headlineWindowsRun, s.Name), 0, s.Name, plots.WindowCompaction)...)
		}
		x.figure(plots.Figure{Name: "put-timeseries", Title: fmt.Sprintf("PUT goodput over time, %s per node (first headline run)", bytesText(top)), Kind: plots.Lines,
			XLabel: "time (s)", YLabel: "goodput (MB/s)", Series: x.headSeries, Windows: ws,
			Caption: windowsCaption(len(x.headSeries) > 1, plots.WindowCompaction)})
	}

	x.scrapeReport(all)
	x.cpuTables(all)

	for _, r := range runsOf(all, func(r putRun) bool { return r.Phase == "headline" && r.Rep == 0 && r.Settled != nil }) {
		x.metric("put_headline_settled_write_amp/"+r.System, r.SettledWriteAmp)
		if r.SettledLeaderWriteAmp > 0 {
			x.metric("put_headline_settled_leader_write_amp/"+r.System, r.SettledLeaderWriteAmp)
			x.metric("put_headline_settled_follower_write_amp/"+r.System, r.SettledFollowerWriteAmp)
		}
	}
	// 3. The LSM shape: expected from the geometry vs measured.
	for _, r := range runsOf(all, func(r putRun) bool { return r.System == sysOriginal && r.Phase == "headline" && r.Rep == 0 }) {
		if r.Window.Shape != nil {
			x.table(x.shapeTable(r, top))
			x.metric("put_headline_settled_deepest_level/original", float64(deepestLevel(r.Settled)))
			x.metric("put_headline_settled_write_amp/original", r.SettledWriteAmp)
		}
	}

	// 4. The paper's conditions.
	if len(p.Conditions) == 0 {
		return
	}
	ct := Table{Title: fmt.Sprintf("The paper's conditions, each alone and all together, at %s per node (%s; the row shows the run closest to the median)", bytesText(p.ConditionDataBytes), conditionRunsText(p)),
		Columns: []string{"condition", "system", "runs", "MB/s (median; range)", "/ original (same condition)", "write amp", "machine busy", "GC rounds/node", "on-disk shape at end"}}
	cf := plots.Figure{Name: "put-conditions", Title: fmt.Sprintf("PUT goodput over original's under the paper's conditions, %s per node", bytesText(p.ConditionDataBytes)),
		Kind: plots.Bars, XLabel: "condition", YLabel: "goodput / original's", HLines: []plots.Mark{{At: paperPutRatio, Label: "paper: 5.6x"}, {At: 1, Label: "1x"}}}
	conds := append([]string{""}, p.Conditions...)
	for _, c := range conds {
		name := c
		if name == "" {
			name = "ours"
		}
		cf.Categories = append(cf.Categories, name)
	}
	for _, sys := range intersect(x.Systems, p.ConditionSystems) {
		s := plots.Series{Name: sys}
		for ci, c := range conds {
			runsUnder := func(sys, c string) []putRun {
				if c != "" && x.sameAsOurs(c, sys, p.ConditionDataBytes) {
					c = ""
				}
				return runsOf(all, func(r putRun) bool { return r.System == sys && r.Phase == "condition" && r.Condition == c })
			}
			rs, bs := runsUnder(sys, c), runsUnder(sysOriginal, c)
			if len(rs) == 0 {
				s.Values = append(s.Values, 0)
				s.Missing = append(s.Missing, ci)
				s.Errors, s.ErrorsUp, s.N = append(s.Errors, 0), append(s.ErrorsUp, 0), append(s.N, 1)
				continue
			}
			mbpsOf := func(r putRun) float64 { return r.MBPerSec }
			r, med := closestToMedian(rs)
			base := medianOf(bs, mbpsOf) // 0 for none
			ratio, rv := "-", 0.0
			if base > 0 {
				rv = med / base
				ratio = f2(rv) + "x"
			}
			mbps := f1(med)
			if vs := valuesOf(rs, mbpsOf); len(vs) > 1 {
				mbps = fmt.Sprintf("%s (%s..%s)", f1(med), f1(slices.Min(vs)), f1(slices.Max(vs)))
			}
			s.Values = append(s.Values, rv)
			lo, hi := 0.0, 0.0 // the range of the runs, over original's median
			if base > 0 {
				vs := valuesOf(rs, mbpsOf)
				lo, hi = rv-slices.Min(vs)/base, slices.Max(vs)/base-rv
			}
			s.Errors, s.ErrorsUp, s.N = append(s.Errors, lo), append(s.ErrorsUp, hi), append(s.N, len(rs))
			name := c
			if name == "" {
				name = "ours"
			}
			runs := fmt.Sprint(len(rs))
			if c != "" && x.sameAsOurs(c, sys, p.ConditionDataBytes) {
				runs += " (ours: the condition changes nothing for " + sys + ")"
			}
			ct.Rows = append(ct.Rows, []string{conditionText(c), sys, runs, mbps, ratio, f2(r.WriteAmp), fmt.Sprintf("%.0f %%", 100*r.Window.MachineBusy), f1(r.Window.GCRounds), shapeText(r.Window.Shape)})
			if rv > 0 {
				x.metric(fmt.Sprintf("put_condition_ratio/%s/%s", name, sys), rv)
			}
		}
		if sys != sysOriginal {
			cf.Series = append(cf.Series, s)
		}
	}
	x.table(ct)
	if len(cf.Series) > 0 {
		x.figure(cf)
	}
}

// shapeTable compares original's LSM at the headline point with the shape
// RocksDB's leveled compaction aims for with the run's geometry, and with
// the paper's 100 GB per node under RocksDB's defaults.
func (x *Run) shapeTable(r putRun, data int64) Table {
	t := Table{Title: fmt.Sprintf("RocksDB's LSM (original, node 1) in the first headline run: at the end of the window, after compaction settled (write amp then %.2f), and the level targets", r.SettledWriteAmp),
		Columns: []string{"level", "files at end of window", "bytes at end of window", "files settled", "bytes settled", "target bytes (this geometry)", "paper: targets at 100 GB, RocksDB defaults"}}
	var levelBase float64 // under the system's defaults
	if s, ok := x.system(r.System); ok && s.Geometry != nil {
		levelBase = float64(s.Geometry(systems.GeometryScale{}).LevelBaseBytes)
	}
	scale := 1.0
	if x.Profile.Geometry == GeometryScaled {
		scale = float64(data) / systems.PaperDataPerNodeBytes
	}
	ours := expectedLevels(float64(data), levelBase*scale)
	paper := expectedLevels(systems.PaperDataPerNodeBytes, levelBase)
	n := max(len(ours), len(paper))
	measured, settled := map[int][2]int64{}, map[int][2]int64{}
	for _, l := range r.Window.Shape.Levels {
		measured[l.Level] = [2]int64{l.Files, l.Bytes}
	}
	if r.Settled != nil {
		for _, l := range r.Settled.Levels {
			settled[l.Level] = [2]int64{l.Files, l.Bytes}
		}
	}
	for l := 0; l < max(n, deepestLevel(r.Window.Shape)+1, deepestLevel(r.Settled)+1); l++ {
		m, st := measured[l], settled[l]
		cell := func(v []float64) string {
			if l == 0 {
				return "flushes (4 files trigger a compaction)"
			}
			if l < len(v) && v[l] > 0 {
				return bytesText(int64(v[l]))
			}
			return "-"
		}
		t.Rows = append(t.Rows, []string{fmt.Sprintf("L%d", l), fmt.Sprint(m[0]), bytesText(m[1]), fmt.Sprint(st[0]), bytesText(st[1]), cell(ours), cell(paper)})
	}
	return t
}

// expectedLevels returns the bytes RocksDB's leveled compaction (static
// level targets, RocksDB 7.8's default) keeps per level for data bytes:
// level 1 up to levelBase, each further level up to 10x the previous, the
// last level the rest. Index 0 (level 0) is 0.
func expectedLevels(data, levelBase float64) []float64 {
	out := []float64{0}
	left, target := data, levelBase
	for left > 0 {
		// Levels above the last hold their targets; the last holds the rest.
		if left <= target*10 || len(out) > 8 {
			if left <= target {
				out = append(out, left)
				break
			}
			out = append(out, target, left-target)
			break
		}
		out = append(out, target)
		left -= target
		target *= 10
	}
	return out
}

// cpuTables shows where the nodes' CPU went in each headline system's
// profiled run (the second of each).
func (x *Run) cpuTables(all []putRun) {
	prof := runsOf(all, func(r putRun) bool { return r.Phase == "headline" && r.CPUProfile != nil })
	var runs []profiledRun
	for _, sys := range x.Systems {
		if rs := runsOf(prof, func(r putRun) bool { return r.System == sys }); len(rs) > 0 {
			r := rs[0]
			runs = append(runs, profiledRun{System: sys, Rate: r.MBPerSec, Per: float64(r.DataBytes) / 1e9, Window: r.Window, Profile: r.CPUProfile})
		}
	}
	x.profileTables(profileTablesSpec{What: "headline run (the second of each headline system)", RateColumn: "MB/s", PerColumn: "node CPU s/GB", PerScale: 1, MetricPrefix: "put_headline_cpu_share"}, runs)
}
