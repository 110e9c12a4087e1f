package experiments

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/experiments/probe"
)

// nodeScrape is a node's /metrics as writesOf reads it: whether it leads,
// and byte counters (series -> value).
func nodeScrape(t *testing.T, leader bool, counters map[string]float64) []probe.Sample {
	t.Helper()
	var b strings.Builder
	lead := 0
	if leader {
		lead = 1
	}
	b.WriteString("# TYPE nezha_raft_is_leader gauge\nnezha_raft_is_leader " + f1(float64(lead)) + "\n")
	for series, v := range counters {
		b.WriteString("# TYPE " + series + " counter\n" + series + " " + f1(v) + "\n")
	}
	samples, err := probe.ParseMetrics(strings.NewReader(b.String()), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return samples
}

// sampleOf is a node's sample: its /proc bytes and CPU, and its scrape.
func sampleOf(t *testing.T, writeBytes int64, cpu float64, leader bool, counters map[string]float64) nodeSample {
	written, lead, ok := writesOf(nodeScrape(t, leader, counters))
	return nodeSample{writeBytes: writeBytes, cpuSec: cpu, written: written, leader: lead, scraped: ok}
}

// TestWindowRoles: a window splits its bytes by node and role (the node
// that led at its end, the followers' mean) and by cause from the nodes'
// /metrics at both ends; a leader change is flagged, a counter that went
// down counts from 0, and a node whose metrics were not read leaves the
// roles unknown rather than wrong.
func TestWindowRoles(t *testing.T) {
	t0 := time.Unix(100, 0)
	zero := map[string]float64{probe.SeriesLogWritten: 0, probe.SeriesWALWritten: 0, probe.SeriesFlushWritten: 0, probe.SeriesCompactionWritten: 0, probe.SeriesSpansIngestedBytes: 0}
	from := windowSample{at: t0, nodes: map[uint64]nodeSample{
		1: sampleOf(t, 0, 0, true, zero), 2: sampleOf(t, 0, 0, false, zero),
		// Node 3's RocksDB restarted its counters in the window (a
		// snapshot restore): its WAL counter reads less at the end.
		3: sampleOf(t, 0, 0, false, map[string]float64{probe.SeriesLogWritten: 0, probe.SeriesWALWritten: 500}),
	}}
	// Node 1 leads as original's leader does (log, WAL, flush,
	// compaction); the followers write the log and ingest spans.
	to := windowSample{at: t0.Add(time.Second), nodes: map[uint64]nodeSample{
		1: sampleOf(t, 360, 3, true, map[string]float64{probe.SeriesLogWritten: 100, probe.SeriesWALWritten: 100, probe.SeriesFlushWritten: 100, probe.SeriesCompactionWritten: 50}),
		2: sampleOf(t, 210, 1, false, map[string]float64{probe.SeriesLogWritten: 100, probe.SeriesSpansIngestedBytes: 100}),
		3: sampleOf(t, 206, 1, false, map[string]float64{probe.SeriesLogWritten: 100, probe.SeriesSpansIngestedBytes: 100, probe.SeriesWALWritten: 4}),
	}}
	ws := windowBetween(from, to, 1)
	if len(ws.Nodes) != 3 || ws.Nodes[0].ID != 1 || !ws.Nodes[0].Leader || ws.Nodes[1].Leader || ws.Nodes[2].ID != 3 || ws.LeaderChanged {
		t.Fatalf("nodes %+v, leader changed %v", ws.Nodes, ws.LeaderChanged)
	}
	if got := ws.Nodes[2].WrittenBytesByCause; got["rocksdb_wal"] != 4 || got["raft_log"] != 100 || got["spans_ingested"] != 100 || len(got) != 3 {
		t.Fatalf("node 3 by cause %v: want the restarted WAL counter from 0, no zero causes", got)
	}
	l, f, ok := ws.roleWriteBytes()
	if !ok || l != 360 || f != 208 {
		t.Fatalf("roleWriteBytes = %v, %v, %v; want 360, 208", l, f, ok)
	}
	lc, fc, ok := ws.roleCauseBytes()
	if !ok || lc["rocksdb_compaction"] != 50 || fc["spans_ingested"] != 100 || fc["rocksdb_wal"] != 2 || fc["rocksdb_flush"] != 0 {
		t.Fatalf("roleCauseBytes = %v, %v, %v", lc, fc, ok)
	}
	const want = "node 1 leader 3.60 = log 1.00 + WAL 1.00 + flush 1.00 + compaction 0.50 + other 0.10; " +
		"node 2 follower 2.10 = log 1.00 + spans ingested 1.00 + other 0.10; " +
		"node 3 follower 2.06 = log 1.00 + WAL 0.04 + spans ingested 1.00 + other 0.02"
	if got := nodeWriteAmpText(ws, 100); got != want {
		t.Fatalf("nodeWriteAmpText:\n got %s\nwant %s", got, want)
	}
	// Node 2 led at the start: the leader changed in the window.
	from.nodes[1], from.nodes[2] = sampleOf(t, 0, 0, false, zero), sampleOf(t, 0, 0, true, zero)
	if ws := windowBetween(from, to, 1); !ws.LeaderChanged {
		t.Fatal("a leader change in the window is not flagged")
	}
	if got := roleWriteAmpText(3.6, 2.08, true); got != "leader 3.60, followers 2.08; the leader changed in the window" {
		t.Fatalf("roleWriteAmpText = %q", got)
	}
	// Node 3's metrics could not be read at the end.
	n3 := to.nodes[3]
	n3.scraped, n3.written = false, nil
	to.nodes[3] = n3
	ws = windowBetween(from, to, 1)
	if _, _, ok := ws.roleWriteBytes(); ok || ws.Nodes[2].Scraped || len(ws.Nodes[2].WrittenBytesByCause) != 0 {
		t.Fatalf("roles with an unread node: %+v", ws.Nodes)
	}
	if !strings.HasSuffix(nodeWriteAmpText(ws, 100), "; node 3 (role unknown) 2.06") {
		t.Fatalf("nodeWriteAmpText with an unread node: %s", nodeWriteAmpText(ws, 100))
	}
}

// roleWindow is a window of three nodes: node 1 led, writing leader bytes
// by cause, the followers each followers bytes by cause (per user byte
// of user bytes).
func roleWindow(user float64, leader, followers map[string]float64) windowStats {
	sum := func(m map[string]float64) float64 {
		s := 0.0
		for _, v := range m {
			s += v * user
		}
		return s
	}
	scale := func(m map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			out[k] = v * user
		}
		return out
	}
	ws := windowStats{Seconds: 10, NodeCPUSeconds: 30, Nodes: []nodeWindow{
		{ID: 1, Leader: true, Scraped: true, WriteBytes: sum(leader), WrittenBytesByCause: scale(leader)},
		{ID: 2, Scraped: true, WriteBytes: sum(followers), WrittenBytesByCause: scale(followers)},
		{ID: 3, Scraped: true, WriteBytes: sum(followers), WrittenBytesByCause: scale(followers)},
	}}
	ws.WriteBytesPerNode = (sum(leader) + 2*sum(followers)) / 3
	return ws
}

// TestPutScaleReportRoles: put-scale's report of synthetic runs gives the
// leader's and the followers' write amplification per system and point
// (tables and metrics) and the bytes by cause of the median run.
func TestPutScaleReportRoles(t *testing.T) {
	p := Quick()
	p.ScaleDataBytes, p.Conditions = []int64{128 * mib, 512 * mib}, nil
	x := &Run{Profile: p, Systems: []string{sysNezha, sysOriginal, sysLSMRaft}, Out: io.Discard,
		res: &Result{Name: "put-scale", Params: map[string]any{}, Metrics: map[string]float64{}}}
	original := map[string]float64{"raft_log": 1, "rocksdb_wal": 1, "rocksdb_flush": 1, "rocksdb_compaction": 1.5}
	lsmLeader := map[string]float64{"raft_log": 1, "rocksdb_wal": 1, "rocksdb_flush": 1, "rocksdb_compaction": 1, "span_files": 1}
	lsmFollower := map[string]float64{"raft_log": 1, "spans_ingested": 1, "rocksdb_compaction": 0.5}
	nezhaNode := map[string]float64{"raft_log": 1}
	var all []putRun
	run := func(phase, sys string, data int64, rep int, mbps float64, leader, followers map[string]float64) {
		user := float64(data)
		w := roleWindow(user, leader, followers)
		r := putRun{Phase: phase, System: sys, DataBytes: data, Rep: rep, MBPerSec: mbps, UserBytes: user, Window: w, WriteAmp: w.WriteBytesPerNode / user}
		r.LeaderWriteAmp, r.FollowerWriteAmp = w.Nodes[0].WriteBytes/user, w.Nodes[1].WriteBytes/user
		all = append(all, r)
	}
	for _, sys := range x.Systems {
		l, f := map[string]map[string]float64{sysNezha: nezhaNode, sysOriginal: original, sysLSMRaft: lsmLeader}[sys],
			map[string]map[string]float64{sysNezha: nezhaNode, sysOriginal: original, sysLSMRaft: lsmFollower}[sys]
		run("point", sys, 128*mib, 0, 30, l, f)
		for rep, mbps := range []float64{20, 24, 22} {
			run("headline", sys, 512*mib, rep, mbps, l, f)
		}
	}
	x.putScaleReport(all, 512*mib, 0, false, nil, nil)
	m := x.res.Metrics
	for k, want := range map[string]float64{
		"put_headline_leader_write_amp/original": 4.5, "put_headline_follower_write_amp/original": 4.5,
		"put_headline_leader_write_amp/lsm-raft": 5, "put_headline_follower_write_amp/lsm-raft": 2.5,
		"put_headline_follower_write_amp/nezha": 1, "put_scale_follower_write_amp/lsm-raft/134217728": 2.5,
		"put_scale_leader_write_amp/original/536870912": 4.5,
	} {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if got := x.res.Samples["put_headline_follower_write_amp/lsm-raft"]; !slices.Equal(got, []float64{2.5, 2.5, 2.5}) {
		t.Errorf("follower samples %v", got)
	}
	var points, head, causes *Table
	for i, tb := range x.res.Tables {
		switch {
		case strings.HasPrefix(tb.Title, "PUT vs data per node"):
			points = &x.res.Tables[i]
		case strings.HasPrefix(tb.Title, "Headline PUT"):
			head = &x.res.Tables[i]
		case strings.HasPrefix(tb.Title, "Bytes written per node by cause"):
			causes = &x.res.Tables[i]
		}
	}
	if points == nil || head == nil || causes == nil {
		t.Fatalf("tables %+v", x.res.Tables)
	}
	cell := func(tb *Table, row []string, col string) string {
		i := slices.Index(tb.Columns, col)
		if i < 0 {
			t.Fatalf("%q has no column %q: %v", tb.Title, col, tb.Columns)
		}
		return row[i]
	}
	for _, row := range points.Rows {
		if row[0] == sysLSMRaft && cell(points, row, "write amp leader / followers") != "5.00 / 2.50" {
			t.Errorf("point row %v", row)
		}
	}
	for _, row := range head.Rows {
		if row[0] == sysOriginal && cell(head, row, "write amp leader / followers (medians)") != "4.50 / 4.50" {
			t.Errorf("headline row %v", row)
		}
	}
	// Two points x three systems x (leader, followers).
	if len(causes.Rows) != 12 || !slices.Contains(causes.Columns, "spans ingested") || !slices.Contains(causes.Columns, "span files") ||
		slices.Contains(causes.Columns, "GC") {
		t.Fatalf("by cause: %v, %d rows", causes.Columns, len(causes.Rows))
	}
	found := false
	for _, row := range causes.Rows {
		if row[0] == sysLSMRaft && row[2] == "followers (mean)" {
			found = cell(causes, row, "write amp") == "2.50" && cell(causes, row, "spans ingested") == "1.00" && cell(causes, row, "WAL") == "0.00" &&
				cell(causes, row, "other") == "0.00"
		}
	}
	if !found {
		t.Fatalf("lsm-raft's followers by cause: %v", causes.Rows)
	}
}

// TestHeadlineOverLSMRaft: with lsm-raft among put-scale's headline
// systems, the headline table has "nezha over lsm-raft" after "nezha over
// original", each with the node CPU per GiB of both systems; the report
// says lsm-raft's figures against the LSM-Raft paper's; experiment
// compare shows the rows of both sides.
func TestHeadlineOverLSMRaft(t *testing.T) {
	res := []*Result{{Name: "put-scale", Title: "PUT scale", Shows: "scale",
		Params: map[string]any{"geometry": "scaled", "headline_systems": []string{sysNezha, sysNezhaNoGC, sysOriginal, sysLSMRaft}},
		Metrics: map[string]float64{
			"put_headline/nezha": 90, "put_headline/original": 30, "put_headline/lsm-raft": 36, "put_headline/nezha-nogc": 95,
			"put_headline_value_bytes": 256 << 10, "put_headline_data_bytes": 512 << 20,
			"put_headline_node_cpu_s_per_gb/nezha": 10, "put_headline_node_cpu_s_per_gb/original": 40, "put_headline_node_cpu_s_per_gb/lsm-raft": 30,
			"put_headline_write_amp/nezha": 1.01, "put_headline_write_amp/original": 4.5, "put_headline_write_amp/lsm-raft": 3.33,
			"put_headline_leader_write_amp/lsm-raft": 5, "put_headline_follower_write_amp/lsm-raft": 2.5,
			"put_headline_leader_write_amp/original": 4.5, "put_headline_follower_write_amp/original": 4.5,
			"put_headline_leader_write_amp/nezha": 1.01, "put_headline_follower_write_amp/nezha": 1.01,
		}}}
	hs := Headlines(res)
	var rows []string
	var over *Headline
	for i, h := range hs {
		if h.Workload == "PUT" {
			rows = append(rows, h.System+" over "+h.against())
		}
		if h.Against == sysLSMRaft {
			over = &hs[i]
		}
	}
	if !slices.Equal(rows, []string{"nezha over original", "nezha over lsm-raft", "nezha-nogc over original"}) {
		t.Fatalf("PUT rows %v", rows)
	}
	if over == nil || over.Ratio != 2.5 || over.Paper != 0 || over.System != sysNezha ||
		!strings.Contains(over.Regime, "write amp in window 1.01 (lsm-raft 3.33: leader 5.00, followers 2.50 (original's followers 4.50))") ||
		!strings.Contains(over.Regime, "node CPU per GiB: nezha 10.7 s, lsm-raft 32.2 s") {
		t.Fatalf("nezha over lsm-raft: %+v", over)
	}
	if !strings.Contains(hs[0].Regime, "node CPU per GiB: nezha 10.7 s, original 42.9 s") {
		t.Fatalf("nezha over original: %+v", hs[0])
	}
	var b bytes.Buffer
	WriteHeadlines(&b, hs)
	table := b.String()
	if !strings.Contains(table, "| PUT | nezha **over lsm-raft** | 2.50x (+150.0 %) | - |") ||
		strings.Index(table, "**over lsm-raft**") < strings.Index(table, "| PUT | nezha | 3.00x") {
		t.Fatalf("headline table:\n%s", table)
	}
	// Through result.json (the parameter comes back as []any) into the
	// report.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "put-scale"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(dir, "put-scale", "result.json"), res[0]); err != nil {
		t.Fatal(err)
	}
	path, err := WriteReport(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	report, _ := os.ReadFile(path)
	for _, want := range []string{"| PUT | nezha **over lsm-raft** | 2.50x",
		"**PUT, nezha over lsm-raft.** Ours: nezha 2.50x lsm-raft's goodput, and lsm-raft 1.20x original's.",
		"leader and followers: lsm-raft 5.00 and 2.50, original 4.50 and 4.50, nezha 1.01 and 1.01",
		"here lsm-raft has +20 % goodput and -25 % node CPU per GiB against original."} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	b.Reset()
	slower := *res[0]
	slower.Metrics = map[string]float64{"put_headline/nezha": 80, "put_headline/original": 40}
	if err := WriteHeadlineComparison(&b, map[string]*Result{"put-scale": res[0]}, map[string]*Result{"put-scale": &slower}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| nezha over original | 3.00x | node CPU per GiB: nezha 10.7 s, original 42.9 s | 2.00x | - |",
		"| nezha over lsm-raft | 2.50x | node CPU per GiB: nezha 10.7 s, lsm-raft 32.2 s | - | - |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("compare lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteHeadlineComparison(&b, map[string]*Result{}, map[string]*Result{"scan": {Name: "scan"}}); err != nil || b.Len() != 0 {
		t.Fatalf("without headlines: %q, %v", b.String(), err)
	}
}
