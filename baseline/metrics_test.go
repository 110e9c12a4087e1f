package baseline

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nezha-harness/nezha/systems"
)

// gather collects s's metrics through a pedantic registry (which also
// checks that Collect sends only what Describe declared) and returns each
// series' value by name and labels ("name" or `name{reason="bound"}`).
func gather(t *testing.T, s *Store) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
			}
			out[key] = metricValue(m)
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// The RocksDB systems report the bytes their WAL wrote (the experiments'
// write amplification by cause), at RocksDB's 0.01 GB resolution.
func TestWALWrittenMetric(t *testing.T) {
	s := openTest(t, testConfig(ModeOriginal), t.TempDir())
	defer s.Close()
	const values, valueBytes = 24, 1 << 20
	v := string(bytes.Repeat([]byte("v"), valueBytes))
	for i := range values {
		mustApply(t, s, put(uint64(i+1), fmt.Sprintf("k%02d", i), v))
	}
	got, ok := gather(t, s)["nezha_rocksdb_wal_written_bytes_total"]
	const gb = 1 << 30
	if !ok || got < 0.01*gb || got > 1.1*values*valueBytes {
		t.Fatalf("nezha_rocksdb_wal_written_bytes_total = %v (present %v) after %d MiB of values, want 10 MiB..%d MiB",
			got, ok, values*valueBytes>>20, 11*values*valueBytes/10>>20)
	}
}

// An lsm-raft store exports what its spans did: the leader's spans cut and
// their bytes, the follower's spans ingested and their bytes, its replays
// by reason and their bytes, and what it holds. (The spans the leader
// sent are the node's: nezha_raft_span_sends_total, raftkv/node.)
func TestLSMRaftMetrics(t *testing.T) {
	c := lsmConfig()
	leader := openLSM(t, c, t.TempDir(), true)
	defer leader.Close()
	fc := lsmConfig()
	fc.MaxHeldBytes = 30 // over the first entries, under the last
	follower := openLSM(t, fc, t.TempDir(), false)
	defer follower.Close()
	ents := []systems.AppliedEntry{put(1, "a", "0123456789"), put(2, "b", "0123456789"), del(3, "a")}
	mustApply(t, leader.Store, ents...)
	mustApply(t, follower.Store, ents...)
	h := cutSpan(t, leader)
	if _, v, _ := ship(t, leader, follower, 1); v != systems.SpanIngested {
		t.Fatalf("span %v: %v, want ingested", h, v)
	}
	// Held entries over the bound: the follower replays them itself.
	last := put(4, "c", string(bytes.Repeat([]byte("x"), 40)))
	mustApply(t, follower.Store, last)

	lm, fm := gather(t, leader.Store), gather(t, follower.Store)
	for _, c := range []struct {
		who  string
		name string
		want float64
	}{
		{"leader", "nezha_lsmraft_spans_cut_total", 1},
		{"leader", "nezha_lsmraft_span_cut_bytes_total", float64(h.SizeBytes)},
		{"leader", "nezha_lsmraft_spans_ingested_total", 0},
		{"follower", "nezha_lsmraft_spans_cut_total", 0},
		{"follower", "nezha_lsmraft_spans_ingested_total", 1},
		{"follower", "nezha_lsmraft_ingested_bytes_total", float64(h.SizeBytes)},
		{"follower", `nezha_lsmraft_replays_total{reason="bound"}`, 1},
		{"follower", `nezha_lsmraft_replays_total{reason="leader"}`, 0},
		{"follower", "nezha_lsmraft_replayed_bytes_total", float64(len(last.Command.Key) + len(last.Command.Value))},
		{"follower", "nezha_lsmraft_held_bytes", 0},
		{"follower", "nezha_lsmraft_stored_index", 4},
		{"follower", `nezha_lsmraft_spans_not_taken_total{reason="gap"}`, 0},
	} {
		m := map[string]map[string]float64{"leader": lm, "follower": fm}[c.who]
		if got, ok := m[c.name]; !ok || got != c.want {
			t.Errorf("%s: %s = %v (present %v), want %v", c.who, c.name, got, ok, c.want)
		}
	}
	orig := openTest(t, testConfig(ModeOriginal), t.TempDir())
	defer orig.Close()
	if _, ok := gather(t, orig)["nezha_lsmraft_spans_cut_total"]; ok {
		t.Error("original exports lsm-raft metrics")
	}
}
