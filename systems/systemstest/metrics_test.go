package systemstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/nezha-harness/nezha/cluster"
)

// scrape fetches node n's /metrics and parses it (Prometheus text format).
func scrape(t *testing.T, n cluster.Node) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	if n.MetricsAddress == "" {
		t.Fatalf("node %d has no metrics address in cluster.json", n.ID)
	}
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.MetricsAddress+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape node %d: %v", n.ID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape node %d: status %d, %v\n%s", n.ID, resp.StatusCode, err, body)
	}
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse node %d's metrics: %v", n.ID, err)
	}
	return mfs, body
}

// value returns the value of the first series of a counter, gauge or
// untyped family, or of a histogram's count; ok=false if absent.
func value(mfs map[string]*dto.MetricFamily, name string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok || len(mf.GetMetric()) == 0 {
		return 0, false
	}
	m := mf.GetMetric()[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// waitMetrics scrapes every node until cond holds for all of them or the
// deadline passes (then it fails with what cond last said).
func waitMetrics(t *testing.T, h *harness, what string, timeout time.Duration, cond func(id uint64, mfs map[string]*dto.MetricFamily) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var last error
		for _, n := range h.spec.Nodes {
			mfs, _ := scrape(t, n)
			if err := cond(n.ID, mfs); err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, last)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronization
	}
}

// TestMetrics starts a 3-node cluster of nezha (GC forced to run
// continuously) and of original, puts keys, and checks each node's
// /metrics: the fsync histogram counts the writes, the Raft indexes and
// proposals move, GC moved bytes (nezha), RocksDB's properties are there
// (original), spans were cut, sent and ingested (lsm-raft), and `promtool check metrics` accepts the output (skipped
// without promtool, from Debian's prometheus package).
func TestMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not found (apt-get install prometheus); the lint check is skipped")
	}
	const puts = 400
	for i, c := range []struct {
		system string
		args   []string
		want   []string // families that must be present
	}{
		// The nezha nodes log JSON (checked at the end).
		{"nezha", append(gcArgs("tiered"), "-logFormat", "json"), []string{"nezha_gc_rounds_total", "nezha_storage_value_log_bytes", "nezha_storage_sorted_run_bytes"}},
		{"original", nil, []string{"nezha_rocksdb_flush_written_bytes_total", "nezha_rocksdb_compaction_written_bytes_total",
			"nezha_rocksdb_wal_written_bytes_total", "nezha_rocksdb_write_stall_seconds_total", "nezha_rocksdb_memtable_bytes", "nezha_gc_rounds_total"}},
		{"nezha-nogc", nil, []string{"nezha_storage_value_log_bytes"}},
		{"pasv", nil, []string{"nezha_rocksdb_flush_written_bytes_total", "nezha_rocksdb_memtable_bytes"}},
		{"blobdb", nil, []string{"nezha_rocksdb_flush_written_bytes_total", "nezha_rocksdb_memtable_bytes"}},
		{"dwisckey", nil, nil}, // Badger's own metrics are not exported
		{"lsm-raft", lsmRaftSpanArgs, []string{"nezha_lsmraft_spans_cut_total", "nezha_lsmraft_span_cut_bytes_total", "nezha_lsmraft_spans_ingested_total",
			"nezha_lsmraft_ingested_bytes_total", "nezha_lsmraft_replays_total", "nezha_lsmraft_replayed_bytes_total",
			"nezha_raft_span_sends_total", "nezha_raft_span_sent_bytes_total", "nezha_rocksdb_wal_written_bytes_total"}},
	} {
		t.Run(c.system, func(t *testing.T) {
			h := start(t, Options{System: c.system, Binary: binary, ExtraArgs: c.args, Seed: int64(i + 1)})
			before := map[uint64]float64{}
			for _, n := range h.spec.Nodes {
				mfs, _ := scrape(t, n)
				for _, name := range append([]string{"nezha_raftlog_fsync_duration_seconds", "nezha_raftlog_append_duration_seconds",
					"nezha_raft_term", "nezha_raft_commit_index", "nezha_raft_applied_index", "nezha_raft_leader_changes_total",
					"nezha_raft_snapshot_sends_total", "nezha_node_info", "go_goroutines", "process_resident_memory_bytes"}, c.want...) {
					if _, ok := mfs[name]; !ok {
						t.Errorf("node %d: no %s", n.ID, name)
					}
				}
				before[n.ID], _ = value(mfs, "nezha_raftlog_fsync_duration_seconds")
			}
			// Twice the same keys: the second round makes the first garbage.
			acked := len(h.writeMany("m", puts, "first"))
			acked += len(h.writeMany("m", puts, "second"))
			waitMetrics(t, h, "fsyncs and indexes after the puts", 30*time.Second, func(id uint64, mfs map[string]*dto.MetricFamily) error {
				fsyncs, _ := value(mfs, "nezha_raftlog_fsync_duration_seconds")
				applied, _ := value(mfs, "nezha_raft_applied_index")
				commit, _ := value(mfs, "nezha_raft_commit_index")
				if fsyncs <= before[id] || applied < 2*puts || commit < applied {
					return fmt.Errorf("node %d: fsyncs %v (before the puts %v), applied index %v, commit index %v after %d puts",
						id, fsyncs, before[id], applied, commit, 2*puts)
				}
				return nil
			})
			var proposals float64
			for _, n := range h.spec.Nodes {
				mfs, _ := scrape(t, n)
				v, _ := value(mfs, "nezha_raft_proposals_total")
				proposals += v
			}
			if proposals < 2*puts {
				t.Errorf("%v proposals on all nodes after %d puts", proposals, 2*puts)
			}
			checkGRPCMetrics(t, h, 2*puts, acked)
			// nezha counts the keys of its index exactly; RocksDB estimates
			// them (overwritten keys not yet compacted away count);
			// nezha-nogc does not count them (it would cost a lookup per put),
			// nor does dwisckey.
			if c.system != "nezha-nogc" && c.system != "dwisckey" {
				waitMetrics(t, h, "index entries after the puts", 30*time.Second, func(id uint64, mfs map[string]*dto.MetricFamily) error {
					keys, ok := value(mfs, "nezha_index_entries")
					if c.system == "nezha" && (keys != puts || !ok) || keys == 0 {
						return fmt.Errorf("node %d: nezha_index_entries %v (present %v) after puts of %d keys", id, keys, ok, puts)
					}
					return nil
				})
			}
			switch c.system {
			case "nezha-nogc":
				waitMetrics(t, h, "value log bytes after the puts", 30*time.Second, func(id uint64, mfs map[string]*dto.MetricFamily) error {
					// Two rounds of 400 puts of a few bytes each.
					if v, _ := value(mfs, "nezha_storage_value_log_bytes"); v < 2*puts {
						return fmt.Errorf("node %d: the value log holds %v bytes after %d puts", id, v, 2*puts)
					}
					return nil
				})
			case "dwisckey":
			case "lsm-raft":
				// The leader cut and sent spans, each follower ingested some.
				waitMetrics(t, h, "spans after the puts", 30*time.Second, func(id uint64, mfs map[string]*dto.MetricFamily) error {
					leads, _ := value(mfs, "nezha_raft_is_leader")
					cut, _ := value(mfs, "nezha_lsmraft_spans_cut_total")
					sent, _ := value(mfs, "nezha_raft_span_sent_bytes_total")
					ingested, _ := value(mfs, "nezha_lsmraft_spans_ingested_total")
					ingestedBytes, _ := value(mfs, "nezha_lsmraft_ingested_bytes_total")
					if leads == 1 && (cut == 0 || sent == 0) || leads == 0 && (ingested == 0 || ingestedBytes == 0) {
						return fmt.Errorf("node %d (leader %v): %v spans cut, %v bytes sent, %v spans of %v bytes ingested",
							id, leads == 1, cut, sent, ingested, ingestedBytes)
					}
					return nil
				})
			case "nezha":
				waitMetrics(t, h, "GC bytes after forced GC rounds", 30*time.Second, func(id uint64, mfs map[string]*dto.MetricFamily) error {
					rounds, _ := value(mfs, "nezha_gc_rounds_total")
					read, _ := value(mfs, "nezha_gc_read_bytes_total")
					written, _ := value(mfs, "nezha_gc_written_bytes_total")
					if rounds == 0 || read == 0 || written == 0 {
						return fmt.Errorf("node %d: %v GC rounds read %v bytes, wrote %v", id, rounds, read, written)
					}
					return nil
				})
			default:
				waitMetrics(t, h, "RocksDB memtable bytes", 30*time.Second, func(id uint64, mfs map[string]*dto.MetricFamily) error {
					if v, _ := value(mfs, "nezha_rocksdb_memtable_bytes"); v == 0 {
						return fmt.Errorf("node %d: RocksDB memtables hold 0 bytes after %d puts", id, 2*puts)
					}
					return nil
				})
			}
			for _, n := range h.spec.Nodes {
				_, body := scrape(t, n)
				if promtool == "" {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
				cmd.Stdin = bytes.NewReader(body)
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil {
					t.Errorf("promtool check metrics on node %d: %v\n%s", n.ID, err, out)
				}
			}
			if c.system == "nezha" {
				for _, n := range h.spec.Nodes {
					checkJSONLog(t, n)
				}
			}
		})
	}
}

// checkJSONLog: every line node n wrote to its log (serve -logFormat json;
// the launcher's "=== ... start" lines aside) is a JSON object with the
// node's id under "node" and a Raft term under "term", and the node saw a
// term above 0 (an election).
func checkJSONLog(t *testing.T, n cluster.Node) {
	t.Helper()
	data, err := os.ReadFile(n.Log)
	if err != nil {
		t.Fatal(err)
	}
	lines, maxTerm := 0, 0.0
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "=== ") {
			continue
		}
		lines++
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("node %d: log line is not JSON (%v): %s", n.ID, err, line)
			continue
		}
		term, ok := rec["term"].(float64)
		if rec["node"] != float64(n.ID) || !ok {
			t.Errorf("node %d: log line without node %d and a term: %s", n.ID, n.ID, line)
		}
		maxTerm = max(maxTerm, term)
	}
	if lines == 0 || maxTerm == 0 {
		t.Errorf("node %d: %d log lines, highest term %v in %s", n.ID, lines, maxTerm, n.Log)
	}
}

// sumSeries sums the series of family name whose labels include want
// (a histogram's series count as their sample counts).
func sumSeries(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var sum float64
	for _, m := range mfs[name].GetMetric() {
		n := 0
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
				n++
			}
		}
		if n != len(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// checkGRPCMetrics: the nodes' gRPC server metrics (go-grpc-middleware's
// providers/prometheus) counted every Put the clients sent (started and
// handled, acknowledged ones with code OK, each with its handling time),
// and every node serves the peer transport's stream.
func checkGRPCMetrics(t *testing.T, h *harness, puts, acked int) {
	t.Helper()
	put := map[string]string{"grpc_service": "nezha.kv.KV", "grpc_method": "Put"}
	putOK := map[string]string{"grpc_service": "nezha.kv.KV", "grpc_method": "Put", "grpc_code": "OK"}
	// Small puts travel on Batch streams (client.Config.Unary), counted
	// per operation by the nezha_batch_* series.
	batchPut := map[string]string{"op": "Put"}
	batchPutOK := map[string]string{"op": "Put", "code": "OK"}
	var started, handled, ok, timed float64
	for _, n := range h.spec.Nodes {
		mfs, _ := scrape(t, n)
		started += sumSeries(mfs, "grpc_server_started_total", put) + sumSeries(mfs, "nezha_batch_ops_started_total", batchPut)
		handled += sumSeries(mfs, "grpc_server_handled_total", put) + sumSeries(mfs, "nezha_batch_ops_handled_total", batchPut)
		ok += sumSeries(mfs, "grpc_server_handled_total", putOK) + sumSeries(mfs, "nezha_batch_ops_handled_total", batchPutOK)
		timed += sumSeries(mfs, "grpc_server_handling_seconds", put) + sumSeries(mfs, "nezha_batch_op_handling_seconds", batchPut)
		if v := sumSeries(mfs, "grpc_server_started_total", map[string]string{"grpc_service": "nezha.kv.Raft", "grpc_method": "Stream"}); v == 0 {
			t.Errorf("node %d: no peer stream started (grpc_server_started_total{grpc_service=\"nezha.kv.Raft\",grpc_method=\"Stream\"})", n.ID)
		}
	}
	if started < float64(puts) || handled != started || ok < float64(acked) || timed != handled {
		t.Errorf("Put RPCs on all nodes: %v started, %v handled (%v OK, %v timed) after %d puts (%d acknowledged)",
			started, handled, ok, timed, puts, acked)
	}
}
