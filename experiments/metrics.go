package experiments

import (
	"fmt"
	"path/filepath"

	"github.com/nezha-harness/nezha/experiments/probe"
	"github.com/nezha-harness/nezha/plots"
)

// What put-scale keeps and reports of the nodes' /metrics scrapes (probe
// scrapes them): the Raft log's fsyncs and RocksDB's compaction debt over
// a run, the CSV beside the results, and the figures of the first
// headline run.

// logStats is what a run's scrape says, over the whole run, of the Raft
// log's fsyncs and of RocksDB's compaction debt: the evidence of the fsync
// and compaction bounds (bound.go).
type logStats struct {
	// Seconds is the span of the scrape.
	Seconds float64 `json:"seconds"`
	// FsyncsPerSecPerNode, FsyncMeanMs, FsyncP50Ms, FsyncP99Ms: the Raft
	// log's fsyncs, all nodes' histograms merged (probe.FsyncTotals).
	FsyncsPerSecPerNode float64 `json:"fsyncs_per_sec_per_node"`
	FsyncMeanMs         float64 `json:"fsync_mean_ms"`
	FsyncP50Ms          float64 `json:"fsync_p50_ms"`
	FsyncP99Ms          float64 `json:"fsync_p99_ms"`
	// FsyncBusy is the share of the run a node's Raft log spent in fsync:
	// the fsyncs' summed duration per node over the span (fsyncs/s x mean
	// fsync time).
	FsyncBusy float64 `json:"fsync_busy"`
	// HaveRocksDB: the nodes report RocksDB's write stalls (the
	// baselines); StallSecondsPerNode is the time RocksDB stalled or
	// slowed writes in the run, mean per node, and
	// PendingCompactionBytesMax the largest compaction debt a node
	// reported at a scrape.
	HaveRocksDB               bool    `json:"have_rocksdb"`
	StallSecondsPerNode       float64 `json:"stall_seconds_per_node"`
	PendingCompactionBytesMax float64 `json:"pending_compaction_bytes_max"`
}

// logStatsOf computes a run's logStats from its scrape; ok is false
// without fsyncs in it.
func logStatsOf(samples []probe.Sample) (logStats, bool) {
	var ls logStats
	rate, p50, p99, ok := probe.FsyncTotals(samples)
	if !ok {
		return ls, false
	}
	ls.FsyncsPerSecPerNode, ls.FsyncP50Ms, ls.FsyncP99Ms = rate, p50, p99
	total := func(series string) (sum float64, nodes int) {
		for _, pts := range probe.SeriesPoints(samples, series) {
			nodes++
			probe.Increases(pts, func(_, d, _ float64) { sum += d })
		}
		return sum, nodes
	}
	sec, nodes := total(probe.SeriesFsync + "_sum")
	count, _ := total(probe.SeriesFsync + "_count")
	var lo, hi float64
	for i, s := range samples {
		if i == 0 || s.Seconds < lo {
			lo = s.Seconds
		}
		hi = max(hi, s.Seconds)
	}
	ls.Seconds = hi - lo
	if count > 0 {
		ls.FsyncMeanMs = 1000 * sec / count
	}
	if nodes > 0 && ls.Seconds > 0 {
		ls.FsyncBusy = sec / float64(nodes) / ls.Seconds
	}
	if stall, n := total(probe.SeriesRocksStall); n > 0 {
		ls.HaveRocksDB, ls.StallSecondsPerNode = true, stall/float64(n)
	}
	for _, pts := range probe.SeriesPoints(samples, probe.SeriesRocksPending) {
		for _, pt := range pts {
			ls.PendingCompactionBytesMax = max(ls.PendingCompactionBytesMax, pt[1])
		}
	}
	return ls, true
}

// keepScrape writes a run's scrape to metrics/<sys>-<label>.csv in the
// experiment's directory and returns that relative path ("" if it could
// not be written or holds nothing).
func (x *Run) keepScrape(sys, label string, res probe.ScrapeResult) string {
	if res.Failed > 0 {
		x.logf("%s: %d scrapes of a node's /metrics failed, the last: %v", sys, res.Failed, res.LastErr)
	}
	if len(res.Samples) == 0 {
		return ""
	}
	rel := filepath.Join("metrics", sys+"-"+label+".csv")
	if err := probe.WriteScrapeCSV(filepath.Join(x.Dir, rel), res.Samples); err != nil {
		x.logf("%s: keep the metrics scrape: %v", sys, err)
		return ""
	}
	return rel
}

// scrapeReport adds, from the first headline run of each system that has
// a scrape, the figure of its disk writes by cause, one figure of the
// fsync latency p99 of every system, and a table of fsync rates and
// latencies over the run.
func (x *Run) scrapeReport(all []putRun) {
	runs := runsOf(all, func(r putRun) bool { return r.Phase == "headline" && r.Rep == 0 && r.MetricsCSV != "" })
	if len(runs) == 0 {
		return
	}
	x.note("Every node's /metrics was scraped once a second during each headline run; the series are in `put-scale/metrics/<system>-<run>.csv` " +
		"(columns seconds since the load started, node, series as Prometheus names it with its labels, histograms as _bucket{le}, _sum and _count, value). " +
		"The disk-write and fsync figures come from each system's first headline run.")
	fsync := plots.Figure{Name: "put-fsync-latency", Kind: plots.Lines,
		Title:  "Raft log fsync latency, p99 per second (the nodes' histograms merged; first headline run)",
		XLabel: "time (s)", YLabel: "fsync latency p99 (ms)",
		Caption: "From nezha_raftlog_fsync_duration_seconds, scraped every second: the 99th percentile of the fsyncs in each second, interpolated within the histogram's buckets (50 µs to 1.6 s, doubling) as Prometheus's histogram_quantile does."}
	t := Table{Title: "Raft log fsyncs in the first headline run (from the scraped histograms, all nodes)",
		Columns: []string{"system", "fsyncs/s per node", "p50 (ms)", "p99 (ms)", "metrics file"}}
	for _, r := range runs {
		samples, err := probe.ReadScrapeCSV(filepath.Join(x.Dir, r.MetricsCSV))
		if err != nil {
			x.logf("%s: %v", r.System, err)
			continue
		}
		ws := x.windowsOf(headlineWindowsRun, r.System)
		if f, ok := probe.DiskWriteFigure(r.System, "first headline run", samples); ok {
			f.Windows = figureWindows(ws, r.ScrapeOffsetSec, "")
			f.Caption += " " + windowsCaption(false)
			x.figure(f)
		}
		if s, ok := probe.FsyncQuantileSeries(samples, 0.99, r.System); ok {
			fsync.Series = append(fsync.Series, s)
			fsync.Windows = append(fsync.Windows, figureWindows(ws, r.ScrapeOffsetSec, r.System, plots.WindowCompaction)...)
		}
		if rate, p50, p99, ok := probe.FsyncTotals(samples); ok {
			t.Rows = append(t.Rows, []string{r.System, fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.2f", p50), fmt.Sprintf("%.2f", p99), r.MetricsCSV})
		}
	}
	if len(t.Rows) > 0 {
		x.table(t)
	}
	if len(fsync.Series) > 0 {
		fsync.Caption += " " + windowsCaption(len(fsync.Series) > 1, plots.WindowCompaction)
		x.figure(fsync)
	}
}
