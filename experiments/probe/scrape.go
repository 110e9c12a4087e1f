package probe

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
	// ScrapeInterval is the time between two scrapes of all nodes.
	ScrapeInterval = time.Second
	// maxScrapes bounds a scrape loop (4 hours at one a second) whatever
	// the run does.
	maxScrapes = 4 * 3600
	// scrapeCSVHeader is the CSV's first line.
	scrapeCSVHeader = "seconds,node,series,value"
)

// Series of the CSV that the figures use: the causes of disk writes, and
// the Raft log's fsync histogram.
const (
	SeriesLogWritten         = "nezha_raftlog_written_bytes_total"
	SeriesWALWritten         = "nezha_rocksdb_wal_written_bytes_total"
	SeriesFlushWritten       = "nezha_rocksdb_flush_written_bytes_total"
	SeriesCompactionWritten  = "nezha_rocksdb_compaction_written_bytes_total"
	SeriesGCWritten          = "nezha_gc_written_bytes_total"
	SeriesSpanCutBytes       = "nezha_lsmraft_span_cut_bytes_total"
	SeriesSpansIngestedBytes = "nezha_lsmraft_ingested_bytes_total"
	SeriesIsLeader           = "nezha_raft_is_leader"
	SeriesFsync              = "nezha_raftlog_fsync_duration_seconds"
	SeriesRocksStall         = "nezha_rocksdb_write_stall_seconds_total"
	SeriesRocksPending       = "nezha_rocksdb_pending_compaction_bytes"
)

// Sample is one series of one node at one scrape.
type Sample struct {
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

// ParseMetrics parses one /metrics body (Prometheus text format) of node
// into samples at sec, keeping the families keepFamily keeps.
func ParseMetrics(body io.Reader, node uint64, sec float64) ([]Sample, error) {
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
	var out []Sample
	add := func(series string, v float64) {
		out = append(out, Sample{Seconds: sec, Node: node, Series: series, Value: v})
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

// Scraper scrapes a cluster's nodes in the background (StartScrape).
type Scraper struct {
	cancel context.CancelFunc
	done   chan ScrapeResult
}

type ScrapeResult struct {
	// Start is second 0 of the samples.
	Start   time.Time
	Samples []Sample
	Failed  int // scrapes of a node that failed
	LastErr error
}

// StartScrape scrapes /metrics of every node with a metrics address at
// once and then every interval, until Stop (or ctx ends; at most
// maxScrapes rounds). A node that does not answer within the interval is
// skipped for that round.
func StartScrape(ctx context.Context, nodes []cluster.Node, interval time.Duration) *Scraper {
	ctx, cancel := context.WithCancelCause(ctx)
	s := &Scraper{cancel: func() { cancel(errScrapeStopped) }, done: make(chan ScrapeResult, 1)}
	go func() {
		var res ScrapeResult
		hc := &http.Client{Timeout: interval}
		t0 := time.Now()
		res.Start = t0
		round := func(ctx context.Context) {
			sec := math.Round(time.Since(t0).Seconds()*1000) / 1000
			for _, n := range nodes {
				if n.MetricsAddress == "" {
					continue
				}
				got, err := ScrapeNode(ctx, hc, n, sec)
				if err != nil && ctx.Err() != nil {
					return // stopped: the last round follows
				}
				if err != nil {
					res.Failed++
					res.LastErr = err
					continue
				}
				res.Samples = append(res.Samples, got...)
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
		// cancelled by Stop: the parent's is checked).
		if context.Cause(ctx) == errScrapeStopped {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
			round(fctx)
			cancel()
		}
		s.done <- res
	}()
	return s
}

// errScrapeStopped is the cause of a scrape loop's end by Stop.
var errScrapeStopped = errors.New("scrape stopped")

// Stop ends the scrape loop after one last round and returns what it
// scraped.
func (s *Scraper) Stop() ScrapeResult {
	s.cancel()
	return <-s.done
}

// ScrapeNode fetches and parses node n's /metrics.
func ScrapeNode(ctx context.Context, hc *http.Client, n cluster.Node, sec float64) ([]Sample, error) {
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
	out, err := ParseMetrics(resp.Body, n.ID, sec)
	if err != nil {
		return nil, fmt.Errorf("scrape node %d: %w", n.ID, err)
	}
	return out, nil
}

// WriteScrapeCSV writes samples to path (directories created) as CSV:
// scrapeCSVHeader, then one line per sample.
func WriteScrapeCSV(path string, samples []Sample) error {
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

// ReadScrapeCSV reads a file WriteScrapeCSV wrote.
func ReadScrapeCSV(path string) ([]Sample, error) {
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
	out := make([]Sample, 0, len(rows)-1)
	for i, r := range rows[1:] {
		sec, err1 := strconv.ParseFloat(r[0], 64)
		node, err2 := strconv.ParseUint(r[1], 10, 64)
		v, err3 := strconv.ParseFloat(r[3], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+2, err)
		}
		out = append(out, Sample{Seconds: sec, Node: node, Series: r[2], Value: v})
	}
	return out, nil
}

// SeriesPoints returns, per node, the (seconds, value) points of series,
// in time order.
func SeriesPoints(samples []Sample, series string) map[uint64][][2]float64 {
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

// RateSeries is the per-second rate of counter series between
// consecutive scrapes, the mean over the nodes, divided by scale, at the
// end of each interval; ok is false if no node has two scrapes of it. A
// counter that went down (a node restarted) counts from 0, as
// Prometheus's rate does.
func RateSeries(samples []Sample, series, name string, scale float64) (plots.Series, bool) {
	sum, n := map[float64]float64{}, map[float64]int{}
	for _, pts := range SeriesPoints(samples, series) {
		Increases(pts, func(t, d, dt float64) {
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

// Increases calls fn with the end, increase and length of each interval
// between consecutive points of a counter (in time order); a counter that
// went down (a restart) counts from 0.
func Increases(pts [][2]float64, fn func(t, d, dt float64)) {
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

// WriteCause is a counter of the bytes a node writes for one cause, as
// its /metrics names it.
type WriteCause struct {
	// Key names the cause in results (windowStats' nodes), Short in log
	// lines and table columns, Name in figures.
	Key, Short, Name string
	Series           string
}

// WriteCauses are the counters of the bytes a node writes, by cause: each
// a part of what the node writes (/proc/PID/io), none counted twice (a
// follower's replays and a leader's own applies go through RocksDB's WAL,
// memtable and flushes and are counted there). What they leave out
// (RocksDB's MANIFEST, nezha's index, session checkpoints, the counters'
// 1-10 MB resolution) is the "other" of a node's bytes.
func WriteCauses() []WriteCause {
	return []WriteCause{
		{"raft_log", "log", "Raft log (append)", SeriesLogWritten},
		{"rocksdb_wal", "WAL", "RocksDB WAL", SeriesWALWritten},
		{"rocksdb_flush", "flush", "RocksDB flush", SeriesFlushWritten},
		{"rocksdb_compaction", "compaction", "RocksDB compaction", SeriesCompactionWritten},
		{"gc", "GC", "GC (sorted runs)", SeriesGCWritten},
		{"span_files", "span files", "span files cut (lsm-raft leader)", SeriesSpanCutBytes},
		{"spans_ingested", "spans ingested", "span files received and ingested (lsm-raft follower)", SeriesSpansIngestedBytes},
	}
}

// DiskWriteFigure is the figure of sys's disk bytes written per second by
// cause (mean per node, MB/s) from a scrape; causes that wrote nothing
// are left out. ok is false if none wrote anything.
func DiskWriteFigure(sys, run string, samples []Sample) (plots.Figure, bool) {
	f := plots.Figure{Name: "put-disk-writes-" + sys, Kind: plots.Lines,
		Title:  fmt.Sprintf("Disk bytes written per second by cause, %s (%s; mean per node)", sys, run),
		XLabel: "time (s)", YLabel: "written (MB/s per node)",
		Caption: "From the nodes' /metrics, scraped every second (put-scale/metrics/*.csv): the Raft log's appended record bytes, " +
			"RocksDB's WAL bytes and the flush and compaction bytes of its data column family (parsed from rocksdb.dbstats and rocksdb.cfstats at 1-10 MB resolution, so they come in steps), " +
			"the bytes nezha's GC wrote into sorted runs, and lsm-raft's span files (cut by the leader, received and ingested by the followers); causes that wrote nothing are left out."}
	for _, c := range WriteCauses() {
		s, ok := RateSeries(samples, c.Series, c.Name, 1e6)
		if ok && slices.ContainsFunc(s.Y, func(v float64) bool { return v > 0 }) {
			f.Series = append(f.Series, s)
		}
	}
	return f, len(f.Series) > 0
}

// FsyncQuantileSeries is the q-quantile (0 < q < 1) of the Raft log's
// fsync latency in each interval between scrapes, in milliseconds, from
// the histogram's bucket increases summed over the nodes (linear
// interpolation within a bucket, as Prometheus's histogram_quantile);
// intervals without an fsync have no point.
func FsyncQuantileSeries(samples []Sample, q float64, name string) (plots.Series, bool) {
	prefix := SeriesFsync + `_bucket{le="`
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
		for _, pts := range SeriesPoints(samples, byBound[le]) {
			Increases(pts, func(t, d, _ float64) {
				if inc[t] == nil {
					inc[t] = make([]float64, len(les))
				}
				inc[t][i] += d
			})
		}
	}
	s := plots.Series{Name: name}
	for _, t := range slices.Sorted(maps.Keys(inc)) {
		if v, ok := BucketQuantile(q, les, inc[t]); ok {
			s.X, s.Y = append(s.X, t), append(s.Y, v*1000)
		}
	}
	return s, len(s.X) > 0
}

// BucketQuantile is the q-quantile of cumulative bucket counts with upper
// bounds les (ascending, the last +Inf), by linear interpolation within
// the bucket it falls in (the first bucket from 0); a quantile in the
// +Inf bucket is the largest finite bound. ok is false without samples.
func BucketQuantile(q float64, les, counts []float64) (float64, bool) {
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

// FsyncTotals are a run's fsync count and latency quantiles (ms) over the
// whole scrape: from the first to the last scrape of the histogram,
// summed over the nodes; ok is false without fsyncs.
func FsyncTotals(samples []Sample) (perNodePerSec, p50, p99 float64, ok bool) {
	first, last := map[string]Sample{}, map[string]Sample{}
	for _, s := range samples {
		if !strings.HasPrefix(s.Series, SeriesFsync+"_bucket") {
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
	var two []Sample
	nodes := map[uint64]bool{}
	var span float64
	for k, f := range first {
		l := last[k]
		nodes[f.Node] = true
		span = max(span, l.Seconds-f.Seconds)
		two = append(two, Sample{Seconds: 0, Node: f.Node, Series: f.Series, Value: f.Value},
			Sample{Seconds: 1, Node: l.Node, Series: l.Series, Value: l.Value})
	}
	if span <= 0 {
		return 0, 0, 0, false
	}
	s50, ok50 := FsyncQuantileSeries(two, 0.5, "")
	s99, ok99 := FsyncQuantileSeries(two, 0.99, "")
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
