package experiments

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/plots"
)

// The nodes' Prometheus metrics during a measured run: put-scale's
// headline runs scrape every node's /metrics (the address `cluster up`
// records, serve's -metricsAddress) once a second while the load runs and
// once more when it ends, keep the series as CSV beside the results
// (put-scale/metrics/<system>-<run>.csv) and draw from the first headline
// run of each system the disk bytes written per second by cause and the
// Raft log's fsync latency.

const (
	// scrapeInterval is the time between two scrapes of all nodes.
	scrapeInterval = time.Second
	// maxScrapes bounds a scrape loop (4 hours at one a second) whatever
	// the run does.
	maxScrapes = 4 * 3600
	// scrapeCSVHeader is the CSV's first line.
	scrapeCSVHeader = "seconds,node,series,value"
)

// Series of the CSV that the figures use: the causes of disk writes, and
// the Raft log's fsync histogram.
const (
	seriesLogWritten         = "nezha_raftlog_written_bytes_total"
	seriesWALWritten         = "nezha_rocksdb_wal_written_bytes_total"
	seriesFlushWritten       = "nezha_rocksdb_flush_written_bytes_total"
	seriesCompactionWritten  = "nezha_rocksdb_compaction_written_bytes_total"
	seriesGCWritten          = "nezha_gc_written_bytes_total"
	seriesSpanCutBytes       = "nezha_lsmraft_span_cut_bytes_total"
	seriesSpansIngestedBytes = "nezha_lsmraft_ingested_bytes_total"
	seriesIsLeader           = "nezha_raft_is_leader"
	seriesFsync              = "nezha_raftlog_fsync_duration_seconds"
	seriesRocksStall         = "nezha_rocksdb_write_stall_seconds_total"
	seriesRocksPending       = "nezha_rocksdb_pending_compaction_bytes"
)

// scrapeSample is one series of one node at one scrape.
type scrapeSample struct {
	// Seconds since the scrape loop started, at the start of the scrape
	// (every node of one scrape has the same).
	Seconds float64
	Node    uint64
	// Series is the name and labels as Prometheus's text format writes
	// them, histograms flattened: name_bucket{le="0.0001"}, name_sum,
	// name_count.
	Series string
	Value  float64
}

// keepFamily says which metric families the CSV keeps: the node's own
// (nezha_*) and the process's CPU, memory and goroutines; not the gRPC
// series per method nor the Go runtime's.
func keepFamily(name string) bool {
	return strings.HasPrefix(name, "nezha_") || name == "process_cpu_seconds_total" ||
		name == "process_resident_memory_bytes" || name == "go_goroutines"
}

// parseScrape parses one /metrics body (Prometheus text format) of node
// into samples at sec, keeping the families keepFamily keeps.
func parseScrape(body io.Reader, node uint64, sec float64) ([]scrapeSample, error) {
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(body)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(mfs))
	for name := range mfs {
		if keepFamily(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []scrapeSample
	add := func(series string, v float64) {
		out = append(out, scrapeSample{Seconds: sec, Node: node, Series: series, Value: v})
	}
	for _, name := range names {
		for _, m := range mfs[name].GetMetric() {
			labels := labelText(m.GetLabel(), "")
			switch {
			case m.Counter != nil:
				add(name+labels, m.Counter.GetValue())
			case m.Gauge != nil:
				add(name+labels, m.Gauge.GetValue())
			case m.Untyped != nil:
				add(name+labels, m.Untyped.GetValue())
			case m.Histogram != nil:
				h := m.Histogram
				for _, b := range h.GetBucket() {
					if math.IsInf(b.GetUpperBound(), 1) {
						continue // the parser keeps +Inf as a bucket; written from the count below
					}
					add(name+"_bucket"+labelText(m.GetLabel(), formatFloat(b.GetUpperBound())), float64(b.GetCumulativeCount()))
				}
				add(name+"_bucket"+labelText(m.GetLabel(), "+Inf"), float64(h.GetSampleCount()))
				add(name+"_sum"+labels, h.GetSampleSum())
				add(name+"_count"+labels, float64(h.GetSampleCount()))
			}
		}
	}
	return out, nil
}

// labelText writes labels as {a="x",b="y"}, with le last if le is set;
// "" if there are none.
func labelText(labels []*dto.LabelPair, le string) string {
	var parts []string
	for _, l := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	if le != "" {
		parts = append(parts, fmt.Sprintf("le=%q", le))
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// scraper scrapes a cluster's nodes in the background (startScrape).
type scraper struct {
	cancel context.CancelFunc
	done   chan scrapeResult
}

type scrapeResult struct {
	// start is second 0 of the samples.
	start   time.Time
	samples []scrapeSample
	failed  int // scrapes of a node that failed
	lastErr error
}

// startScrape scrapes /metrics of every node with a metrics address at
// once and then every interval, until stop (or ctx ends; at most
// maxScrapes rounds). A node that does not answer within the interval is
// skipped for that round.
func startScrape(ctx context.Context, nodes []cluster.Node, interval time.Duration) *scraper {
	ctx, cancel := context.WithCancelCause(ctx)
	s := &scraper{cancel: func() { cancel(errScrapeStopped) }, done: make(chan scrapeResult, 1)}
	go func() {
		var res scrapeResult
		hc := &http.Client{Timeout: interval}
		t0 := time.Now()
		res.start = t0
		round := func(ctx context.Context) {
			sec := math.Round(time.Since(t0).Seconds()*1000) / 1000
			for _, n := range nodes {
				if n.MetricsAddress == "" {
					continue
				}
				got, err := scrapeNode(ctx, hc, n, sec)
				if err != nil && ctx.Err() != nil {
					return // stopped: the last round follows
				}
				if err != nil {
					res.failed++
					res.lastErr = err
					continue
				}
				res.samples = append(res.samples, got...)
			}
		}
		tick := time.NewTicker(interval)
		defer tick.Stop()
	loop:
		for range maxScrapes {
			round(ctx)
			select {
			case <-ctx.Done():
				break loop
			case <-tick.C:
			}
		}
		// The last round, when the load ended (the run's context is not
		// cancelled by stop: the parent's is checked).
		if context.Cause(ctx) == errScrapeStopped {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
			round(fctx)
			cancel()
		}
		s.done <- res
	}()
	return s
}

// errScrapeStopped is the cause of a scrape loop's end by stop.
var errScrapeStopped = errors.New("scrape stopped")

// stop ends the scrape loop after one last round and returns what it
// scraped.
func (s *scraper) stop() scrapeResult {
	s.cancel()
	return <-s.done
}

// scrapeNode fetches and parses node n's /metrics.
func scrapeNode(ctx context.Context, hc *http.Client, n cluster.Node, sec float64) ([]scrapeSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.MetricsAddress+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape node %d: %w", n.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape node %d: HTTP %s", n.ID, resp.Status)
	}
	out, err := parseScrape(resp.Body, n.ID, sec)
	if err != nil {
		return nil, fmt.Errorf("scrape node %d: %w", n.ID, err)
	}
	return out, nil
}

// writeScrapeCSV writes samples to path (directories created) as CSV:
// scrapeCSVHeader, then one line per sample.
func writeScrapeCSV(path string, samples []scrapeSample) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(strings.Split(scrapeCSVHeader, ","))
	for _, s := range samples {
		w.Write([]string{formatFloat(s.Seconds), strconv.FormatUint(s.Node, 10), s.Series, formatFloat(s.Value)})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// readScrapeCSV reads a file writeScrapeCSV wrote.
func readScrapeCSV(path string) ([]scrapeSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != scrapeCSVHeader {
		return nil, fmt.Errorf("%s: not a metrics scrape (want the header %s)", path, scrapeCSVHeader)
	}
	out := make([]scrapeSample, 0, len(rows)-1)
	for i, r := range rows[1:] {
		sec, err1 := strconv.ParseFloat(r[0], 64)
		node, err2 := strconv.ParseUint(r[1], 10, 64)
		v, err3 := strconv.ParseFloat(r[3], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+2, err)
		}
		out = append(out, scrapeSample{Seconds: sec, Node: node, Series: r[2], Value: v})
	}
	return out, nil
}

// scrapePoints returns, per node, the (seconds, value) points of series,
// in time order.
func scrapePoints(samples []scrapeSample, series string) map[uint64][][2]float64 {
	out := map[uint64][][2]float64{}
	for _, s := range samples {
		if s.Series == series {
			out[s.Node] = append(out[s.Node], [2]float64{s.Seconds, s.Value})
		}
	}
	for _, pts := range out {
		slices.SortFunc(pts, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
	}
	return out
}

// rateSeries is the per-second rate of counter series between
// consecutive scrapes, the mean over the nodes, divided by scale, at the
// end of each interval; ok is false if no node has two scrapes of it. A
// counter that went down (a node restarted) counts from 0, as
// Prometheus's rate does.
func rateSeries(samples []scrapeSample, series, name string, scale float64) (plots.Series, bool) {
	sum, n := map[float64]float64{}, map[float64]int{}
	for _, pts := range scrapePoints(samples, series) {
		increases(pts, func(t, d, dt float64) {
			sum[t] += d / dt / scale
			n[t]++
		})
	}
	s := plots.Series{Name: name}
	for _, t := range slices.Sorted(maps.Keys(sum)) {
		s.X, s.Y = append(s.X, t), append(s.Y, sum[t]/float64(n[t]))
	}
	return s, len(s.X) > 0
}

// increases calls fn with the end, increase and length of each interval
// between consecutive points of a counter (in time order); a counter that
// went down (a restart) counts from 0.
func increases(pts [][2]float64, fn func(t, d, dt float64)) {
	for i := 1; i < len(pts); i++ {
		dt := pts[i][0] - pts[i-1][0]
		if dt <= 0 {
			continue
		}
		d := pts[i][1] - pts[i-1][1]
		if d < 0 {
			d = pts[i][1]
		}
		fn(pts[i][0], d, dt)
	}
}

// writeCause is a counter of the bytes a node writes for one cause, as
// its /metrics names it.
type writeCause struct {
	// Key names the cause in results (windowStats' nodes), Short in log
	// lines and table columns, Name in figures.
	Key, Short, Name string
	Series           string
}

// writeCauses are the counters of the bytes a node writes, by cause: each
// a part of what the node writes (/proc/PID/io), none counted twice (a
// follower's replays and a leader's own applies go through RocksDB's WAL,
// memtable and flushes and are counted there). What they leave out
// (RocksDB's MANIFEST, nezha's index, session checkpoints, the counters'
// 1-10 MB resolution) is the "other" of a node's bytes.
func writeCauses() []writeCause {
	return []writeCause{
		{"raft_log", "log", "Raft log (append)", seriesLogWritten},
		{"rocksdb_wal", "WAL", "RocksDB WAL", seriesWALWritten},
		{"rocksdb_flush", "flush", "RocksDB flush", seriesFlushWritten},
		{"rocksdb_compaction", "compaction", "RocksDB compaction", seriesCompactionWritten},
		{"gc", "GC", "GC (sorted runs)", seriesGCWritten},
		{"span_files", "span files", "span files cut (lsm-raft leader)", seriesSpanCutBytes},
		{"spans_ingested", "spans ingested", "span files received and ingested (lsm-raft follower)", seriesSpansIngestedBytes},
	}
}

// diskWriteFigure is the figure of sys's disk bytes written per second by
// cause (mean per node, MB/s) from a scrape; causes that wrote nothing
// are left out. ok is false if none wrote anything.
func diskWriteFigure(sys, run string, samples []scrapeSample) (plots.Figure, bool) {
	f := plots.Figure{Name: "put-disk-writes-" + sys, Kind: plots.Lines,
		Title:  fmt.Sprintf("Disk bytes written per second by cause, %s (%s; mean per node)", sys, run),
		XLabel: "time (s)", YLabel: "written (MB/s per node)",
		Caption: "From the nodes' /metrics, scraped every second (put-scale/metrics/*.csv): the Raft log's appended record bytes, " +
			"RocksDB's WAL bytes and the flush and compaction bytes of its data column family (parsed from rocksdb.dbstats and rocksdb.cfstats at 1-10 MB resolution, so they come in steps), " +
			"the bytes nezha's GC wrote into sorted runs, and lsm-raft's span files (cut by the leader, received and ingested by the followers); causes that wrote nothing are left out."}
	for _, c := range writeCauses() {
		s, ok := rateSeries(samples, c.Series, c.Name, 1e6)
		if ok && slices.ContainsFunc(s.Y, func(v float64) bool { return v > 0 }) {
			f.Series = append(f.Series, s)
		}
	}
	return f, len(f.Series) > 0
}

// fsyncQuantileSeries is the q-quantile (0 < q < 1) of the Raft log's
// fsync latency in each interval between scrapes, in milliseconds, from
// the histogram's bucket increases summed over the nodes (linear
// interpolation within a bucket, as Prometheus's histogram_quantile);
// intervals without an fsync have no point.
func fsyncQuantileSeries(samples []scrapeSample, q float64, name string) (plots.Series, bool) {
	prefix := seriesFsync + `_bucket{le="`
	byBound := map[float64]string{} // upper bound -> series
	for _, s := range samples {
		rest, ok := strings.CutPrefix(s.Series, prefix)
		if !ok {
			continue
		}
		if le, err := strconv.ParseFloat(strings.TrimSuffix(rest, `"}`), 64); err == nil {
			byBound[le] = s.Series
		}
	}
	les := slices.Sorted(maps.Keys(byBound))
	// inc[t][i]: the increase of bucket les[i] in the interval ending at t,
	// summed over the nodes.
	inc := map[float64][]float64{}
	for i, le := range les {
		for _, pts := range scrapePoints(samples, byBound[le]) {
			increases(pts, func(t, d, _ float64) {
				if inc[t] == nil {
					inc[t] = make([]float64, len(les))
				}
				inc[t][i] += d
			})
		}
	}
	s := plots.Series{Name: name}
	for _, t := range slices.Sorted(maps.Keys(inc)) {
		if v, ok := bucketQuantile(q, les, inc[t]); ok {
			s.X, s.Y = append(s.X, t), append(s.Y, v*1000)
		}
	}
	return s, len(s.X) > 0
}

// bucketQuantile is the q-quantile of cumulative bucket counts with upper
// bounds les (ascending, the last +Inf), by linear interpolation within
// the bucket it falls in (the first bucket from 0); a quantile in the
// +Inf bucket is the largest finite bound. ok is false without samples.
func bucketQuantile(q float64, les, counts []float64) (float64, bool) {
	if len(les) == 0 || counts[len(counts)-1] <= 0 {
		return 0, false
	}
	rank := q * counts[len(counts)-1]
	for i, c := range counts {
		if c < rank {
			continue
		}
		if math.IsInf(les[i], 1) {
			if i == 0 {
				return 0, false
			}
			return les[i-1], true
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = les[i-1], counts[i-1]
		}
		if c == below {
			return les[i], true
		}
		return lo + (les[i]-lo)*(rank-below)/(c-below), true
	}
	return les[len(les)-1], true
}

// fsyncTotals are a run's fsync count and latency quantiles (ms) over the
// whole scrape: from the first to the last scrape of the histogram,
// summed over the nodes; ok is false without fsyncs.
func fsyncTotals(samples []scrapeSample) (perNodePerSec, p50, p99 float64, ok bool) {
	first, last := map[string]scrapeSample{}, map[string]scrapeSample{}
	for _, s := range samples {
		if !strings.HasPrefix(s.Series, seriesFsync+"_bucket") {
			continue
		}
		k := fmt.Sprintf("%d %s", s.Node, s.Series)
		if f, seen := first[k]; !seen || s.Seconds < f.Seconds {
			first[k] = s
		}
		if l, seen := last[k]; !seen || s.Seconds > l.Seconds {
			last[k] = s
		}
	}
	// Treat the whole run as one interval: two synthetic scrapes.
	var two []scrapeSample
	nodes := map[uint64]bool{}
	var span float64
	for k, f := range first {
		l := last[k]
		nodes[f.Node] = true
		span = max(span, l.Seconds-f.Seconds)
		two = append(two, scrapeSample{Seconds: 0, Node: f.Node, Series: f.Series, Value: f.Value},
			scrapeSample{Seconds: 1, Node: l.Node, Series: l.Series, Value: l.Value})
	}
	if span <= 0 {
		return 0, 0, 0, false
	}
	s50, ok50 := fsyncQuantileSeries(two, 0.5, "")
	s99, ok99 := fsyncQuantileSeries(two, 0.99, "")
	if !ok50 || !ok99 {
		return 0, 0, 0, false
	}
	var n float64
	for k, f := range first {
		if strings.HasSuffix(k, `le="+Inf"}`) {
			n += last[k].Value - f.Value
		}
	}
	return n / float64(len(nodes)) / span, s50.Y[0], s99.Y[0], true
}

// logStats is what a run's scrape says, over the whole run, of the Raft
// log's fsyncs and of RocksDB's compaction debt: the evidence of the fsync
// and compaction bounds (bound.go).
type logStats struct {
	// Seconds is the span of the scrape.
	Seconds float64 `json:"seconds"`
	// FsyncsPerSecPerNode, FsyncMeanMs, FsyncP50Ms, FsyncP99Ms: the Raft
	// log's fsyncs, all nodes' histograms merged (fsyncTotals).
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
func logStatsOf(samples []scrapeSample) (logStats, bool) {
	var ls logStats
	rate, p50, p99, ok := fsyncTotals(samples)
	if !ok {
		return ls, false
	}
	ls.FsyncsPerSecPerNode, ls.FsyncP50Ms, ls.FsyncP99Ms = rate, p50, p99
	total := func(series string) (sum float64, nodes int) {
		for _, pts := range scrapePoints(samples, series) {
			nodes++
			increases(pts, func(_, d, _ float64) { sum += d })
		}
		return sum, nodes
	}
	sec, nodes := total(seriesFsync + "_sum")
	count, _ := total(seriesFsync + "_count")
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
	if stall, n := total(seriesRocksStall); n > 0 {
		ls.HaveRocksDB, ls.StallSecondsPerNode = true, stall/float64(n)
	}
	for _, pts := range scrapePoints(samples, seriesRocksPending) {
		for _, pt := range pts {
			ls.PendingCompactionBytesMax = max(ls.PendingCompactionBytesMax, pt[1])
		}
	}
	return ls, true
}

// keepScrape writes a run's scrape to metrics/<sys>-<label>.csv in the
// experiment's directory and returns that relative path ("" if it could
// not be written or holds nothing).
func (x *Run) keepScrape(sys, label string, res scrapeResult) string {
	if res.failed > 0 {
		x.logf("%s: %d scrapes of a node's /metrics failed, the last: %v", sys, res.failed, res.lastErr)
	}
	if len(res.samples) == 0 {
		return ""
	}
	rel := filepath.Join("metrics", sys+"-"+label+".csv")
	if err := writeScrapeCSV(filepath.Join(x.Dir, rel), res.samples); err != nil {
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
		samples, err := readScrapeCSV(filepath.Join(x.Dir, r.MetricsCSV))
		if err != nil {
			x.logf("%s: %v", r.System, err)
			continue
		}
		ws := x.windowsOf(headlineWindowsRun, r.System)
		if f, ok := diskWriteFigure(r.System, "first headline run", samples); ok {
			f.Windows = figureWindows(ws, r.ScrapeOffsetSec, "")
			f.Caption += " " + windowsCaption(false)
			x.figure(f)
		}
		if s, ok := fsyncQuantileSeries(samples, 0.99, r.System); ok {
			fsync.Series = append(fsync.Series, s)
			fsync.Windows = append(fsync.Windows, figureWindows(ws, r.ScrapeOffsetSec, r.System, plots.WindowCompaction)...)
		}
		if rate, p50, p99, ok := fsyncTotals(samples); ok {
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
