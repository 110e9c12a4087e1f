package probe

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/plots"
)

// cannedScrape is a /metrics body of a node: the Raft log, flush and GC
// byte counters, the fsync histogram with buckets of 1 and 2 ms
// (cumulative counts), and families the CSV does not keep.
func cannedScrape(logBytes, flushBytes, gcBytes float64, le1ms, le2ms, all int) string {
	return fmt.Sprintf(`# HELP nezha_raftlog_written_bytes_total x
# TYPE nezha_raftlog_written_bytes_total counter
nezha_raftlog_written_bytes_total %g
# TYPE nezha_rocksdb_flush_written_bytes_total counter
nezha_rocksdb_flush_written_bytes_total %g
# TYPE nezha_gc_written_bytes_total counter
nezha_gc_written_bytes_total %g
# TYPE nezha_storage_level_bytes gauge
nezha_storage_level_bytes{level="0"} 7
# TYPE nezha_raftlog_fsync_duration_seconds histogram
nezha_raftlog_fsync_duration_seconds_bucket{le="0.001"} %d
nezha_raftlog_fsync_duration_seconds_bucket{le="0.002"} %d
nezha_raftlog_fsync_duration_seconds_bucket{le="+Inf"} %d
nezha_raftlog_fsync_duration_seconds_sum 0.5
nezha_raftlog_fsync_duration_seconds_count %d
# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="nezha.kv.KV",grpc_type="unary"} 3
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 0.001
go_gc_duration_seconds_sum 0.1
go_gc_duration_seconds_count 4
`, logBytes, flushBytes, gcBytes, le1ms, le2ms, all, all)
}

// TestScrapeCSVAndFigures: three canned scrapes of two nodes go through
// the CSV unchanged and give the disk-write rates by cause (mean per node;
// a counter that went down counts from 0; a cause that wrote nothing is
// left out), the fsync quantiles per second and over the run, and figures
// that render.
func TestScrapeCSVAndFigures(t *testing.T) {
	bodies := map[uint64][]string{
		1: {cannedScrape(0, 0, 0, 0, 0, 0), cannedScrape(2e6, 0, 0, 10, 20, 20), cannedScrape(6e6, 0, 0, 10, 20, 30)},
		2: {cannedScrape(0, 0, 0, 0, 0, 0), cannedScrape(4e6, 5e6, 0, 0, 0, 0), cannedScrape(8e6, 1e6, 0, 0, 0, 0)},
	}
	var samples []Sample
	for sec := range 3 {
		for node := uint64(1); node <= 2; node++ {
			got, err := ParseMetrics(strings.NewReader(bodies[node][sec]), node, float64(sec))
			if err != nil {
				t.Fatal(err)
			}
			samples = append(samples, got...)
		}
	}
	series := map[string]bool{}
	for _, s := range samples {
		series[s.Series] = true
	}
	for _, want := range []string{SeriesLogWritten, `nezha_storage_level_bytes{level="0"}`, SeriesFsync + `_bucket{le="0.001"}`,
		SeriesFsync + `_bucket{le="+Inf"}`, SeriesFsync + "_sum", SeriesFsync + "_count"} {
		if !series[want] {
			t.Errorf("no series %s in %v", want, series)
		}
	}
	if len(series) != 9 {
		t.Errorf("%d series, want 9 (grpc_* and go_gc_* dropped, +Inf once): %v", len(series), series)
	}
	path := filepath.Join(t.TempDir(), "metrics", "nezha-run.csv")
	if err := WriteScrapeCSV(path, samples); err != nil {
		t.Fatal(err)
	}
	back, err := ReadScrapeCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, samples) {
		t.Fatalf("the CSV changed the samples:\n%v\n%v", back, samples)
	}

	f, ok := DiskWriteFigure("original", "canned", back)
	if !ok {
		t.Fatal("no disk-write figure")
	}
	want := []plots.Series{
		{Name: "Raft log (append)", X: []float64{1, 2}, Y: []float64{3, 4}},
		{Name: "RocksDB flush", X: []float64{1, 2}, Y: []float64{2.5, 0.5}},
	}
	if !reflect.DeepEqual(f.Series, want) {
		t.Errorf("disk writes by cause:\n got %+v\nwant %+v", f.Series, want)
	}

	p99, ok := FsyncQuantileSeries(back, 0.99, "original")
	// Second 1: 10 fsyncs up to 1 ms and 10 in (1, 2] ms: the 19.8th is
	// 98 % into the second bucket. Second 2: 10 more above 2 ms, in +Inf:
	// the largest finite bound.
	if !ok || !reflect.DeepEqual(p99.X, []float64{1, 2}) || math.Abs(p99.Y[0]-1.98) > 1e-9 || p99.Y[1] != 2 {
		t.Errorf("fsync p99 per second: %+v, want 1.98 ms and 2 ms at 1 s and 2 s", p99)
	}
	rate, p50, p99all, ok := FsyncTotals(back)
	// The whole run: 30 fsyncs on node 1, none on node 2, in 2 s: 7.5 per
	// node per second; counts 10, 20, 30: p50 is the 15th (1.5 ms), p99
	// lies in +Inf (2 ms).
	if !ok || rate != 7.5 || math.Abs(p50-1.5) > 1e-9 || p99all != 2 {
		t.Errorf("fsync totals: %v/s per node, p50 %v ms, p99 %v ms (ok %v), want 7.5, 1.5, 2", rate, p50, p99all, ok)
	}

	dir := t.TempDir()
	fs := plots.Figure{Name: "put-fsync-latency", Kind: plots.Lines, Title: "fsync", XLabel: "time (s)", YLabel: "ms", Series: []plots.Series{p99}}
	for _, fig := range []plots.Figure{f, fs} {
		if err := plots.Render(dir, fig); err != nil {
			t.Fatalf("render %s: %v", fig.Name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, fig.Name+".png")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBucketQuantile(t *testing.T) {
	les := []float64{1, 2, math.Inf(1)}
	for _, c := range []struct {
		q      float64
		counts []float64
		want   float64
		ok     bool
	}{
		{0.5, []float64{4, 4, 4}, 0.5, true}, // first bucket from 0
		{0.5, []float64{0, 4, 4}, 1.5, true}, // within (1, 2]
		{0.99, []float64{0, 0, 4}, 2, true},  // +Inf: the largest finite bound
		{0.5, []float64{0, 0, 0}, 0, false},  // no samples
		{1, []float64{2, 4, 4}, 2, true},     // the top of the last finite bucket
	} {
		got, ok := BucketQuantile(c.q, les, c.counts)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("q %v of %v: %v, %v; want %v, %v", c.q, c.counts, got, ok, c.want, c.ok)
		}
	}
}

// TestScrapeLoop: the loop scrapes at once; stop aborts a scrape in
// flight (not counted as a failure) and scrapes once more; a node that
// does not answer is skipped and counted, one without an address ignored.
func TestScrapeLoop(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			close(arrived)
			select { // the first scrape hangs until the test lets it go
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, cannedScrape(1, 0, 0, 1, 1, 1))
	}))
	defer srv.Close()
	defer close(release)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there now
	// The dead node first: its failure is in before the live node's scrape hangs.
	nodes := []cluster.Node{{ID: 2, MetricsAddress: deadAddr}, {ID: 1, MetricsAddress: strings.TrimPrefix(srv.URL, "http://")}, {ID: 3}}
	s := StartScrape(context.Background(), nodes, time.Hour)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no scrape within 30 s")
	}
	res := s.Stop()
	var logSamples int
	for _, x := range res.Samples {
		if x.Node != 1 {
			t.Fatalf("sample of node %d", x.Node)
		}
		if x.Series == SeriesLogWritten {
			logSamples++
		}
	}
	if logSamples != 1 || res.Failed != 2 || requests.Load() != 2 {
		t.Fatalf("%d samples of %s (want 1, the last round's), %d failures (want 2, node 2's), %d requests (want 2): %v",
			logSamples, SeriesLogWritten, res.Failed, requests.Load(), res.LastErr)
	}
}
