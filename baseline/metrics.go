package baseline

import (
	"regexp"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// RocksDB's own statistics, read from its properties at scrape time
// (RocksDB 7.8, db/internal_stats.cc): nothing is counted on the write path.
// The cumulative figures are those of the user data column family since the
// database was opened: they restart from zero when the node restarts or a
// Raft snapshot restore swaps the database (Prometheus reads a drop as a
// counter reset).
var (
	rocksFlushWrittenDesc = prometheus.NewDesc("nezha_rocksdb_flush_written_bytes_total",
		"Bytes RocksDB wrote to SST files by memtable flushes (rocksdb.cfstats \"Flush(GB): cumulative\", 1 MB resolution).", nil, nil)
	rocksCompactionWrittenDesc = prometheus.NewDesc("nezha_rocksdb_compaction_written_bytes_total",
		"Bytes RocksDB wrote by compactions, flushes excluded (rocksdb.cfstats \"Cumulative compaction\" write minus flush, 10 MB resolution).", nil, nil)
	rocksCompactionReadDesc = prometheus.NewDesc("nezha_rocksdb_compaction_read_bytes_total",
		"Bytes RocksDB read by compactions (rocksdb.cfstats \"Cumulative compaction\" read, 10 MB resolution).", nil, nil)
	rocksWALWrittenDesc = prometheus.NewDesc("nezha_rocksdb_wal_written_bytes_total",
		"Bytes RocksDB wrote to its write-ahead log (rocksdb.dbstats \"Cumulative WAL\" written, 10 MB resolution; every column family).", nil, nil)
	rocksStallDesc = prometheus.NewDesc("nezha_rocksdb_write_stall_seconds_total",
		"Time RocksDB stalled or slowed writes (rocksdb.dbstats \"Cumulative stall\").", nil, nil)
	rocksPendingCompactionDesc = prometheus.NewDesc("nezha_rocksdb_pending_compaction_bytes",
		"Estimated bytes compaction must rewrite to bring every level under its target (rocksdb.estimate-pending-compaction-bytes).", nil, nil)
	rocksMemtableDesc = prometheus.NewDesc("nezha_rocksdb_memtable_bytes",
		"Bytes of the active and immutable memtables (rocksdb.cur-size-all-mem-tables).", nil, nil)
)

// lsm-raft's span metrics (lsmraft.go), counted since the node started.
var (
	lsmSpansCutDesc = prometheus.NewDesc("nezha_lsmraft_spans_cut_total",
		"Spans this node cut as leader and wrote as SST files.", nil, nil)
	lsmSpanCutBytesDesc = prometheus.NewDesc("nezha_lsmraft_span_cut_bytes_total",
		"Bytes of the span files this node wrote as leader.", nil, nil)
	lsmSpanCutFailuresDesc = prometheus.NewDesc("nezha_lsmraft_span_cut_failures_total",
		"Spans this node cut but could not write (its followers replay instead).", nil, nil)
	lsmSpansIngestedDesc = prometheus.NewDesc("nezha_lsmraft_spans_ingested_total",
		"Spans this node received and ingested into RocksDB (IngestExternalFile).", nil, nil)
	lsmIngestedBytesDesc = prometheus.NewDesc("nezha_lsmraft_ingested_bytes_total",
		"Bytes of the span files this node ingested.", nil, nil)
	lsmSpansNotTakenDesc = prometheus.NewDesc("nezha_lsmraft_spans_not_taken_total",
		"Spans offered to this node that it did not take, by reason: skipped (already passed), gap (too far ahead), behind (not yet applied).", []string{"reason"}, nil)
	lsmReplaysDesc = prometheus.NewDesc("nezha_lsmraft_replays_total",
		"Times this node wrote the entries it held into RocksDB itself, by reason: leader (it became leader), no_span (the leader had no span for it), bound (-lsmraft.maxHeldBytes), snapshot (TakeSnapshot).", []string{"reason"}, nil)
	lsmReplayedBytesDesc = prometheus.NewDesc("nezha_lsmraft_replayed_bytes_total",
		"Bytes of keys and values the replays wrote.", nil, nil)
	lsmHeldBytesDesc = prometheus.NewDesc("nezha_lsmraft_held_bytes",
		"Bytes of keys and values this node holds in memory, applied but in no span ingested yet.", nil, nil)
	lsmStoredIndexDesc = prometheus.NewDesc("nezha_lsmraft_stored_index",
		"The Raft index RocksDB reflects (the state machine's applied index; the node's may be above it).", nil, nil)
)

// Lines of RocksDB 7.8's stats dumps (db/internal_stats.cc).
var (
	flushGBRe      = regexp.MustCompile(`Flush\(GB\): cumulative ([0-9.]+)`)
	compactionGBRe = regexp.MustCompile(`Cumulative compaction: ([0-9.]+) GB write, [0-9.]+ MB/s write, ([0-9.]+) GB read`)
	stallRe        = regexp.MustCompile(`Cumulative stall: ([0-9]+):([0-9]+):([0-9.]+) H:M:S`)
	walGBRe        = regexp.MustCompile(`Cumulative WAL: \S+ writes, \S+ syncs, [0-9.]+ writes per sync, written: ([0-9.]+) GB`)
)

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rocksFlushWrittenDesc, rocksCompactionWrittenDesc, rocksCompactionReadDesc,
		rocksWALWrittenDesc, rocksStallDesc, rocksPendingCompactionDesc, rocksMemtableDesc} {
		ch <- d
	}
	if s.lr != nil {
		for _, d := range []*prometheus.Desc{lsmSpansCutDesc, lsmSpanCutBytesDesc, lsmSpanCutFailuresDesc, lsmSpansIngestedDesc,
			lsmIngestedBytesDesc, lsmSpansNotTakenDesc, lsmReplaysDesc, lsmReplayedBytesDesc, lsmHeldBytesDesc, lsmStoredIndexDesc} {
			ch <- d
		}
	}
}

// collectLSMRaft sends the lsm-raft metrics (none in other modes).
func (s *Store) collectLSMRaft(ch chan<- prometheus.Metric) {
	lr := s.lr
	if lr == nil {
		return
	}
	c := &lr.counters
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(lsmSpansCutDesc, c.spansCut.Load())
	counter(lsmSpanCutBytesDesc, c.cutBytes.Load())
	counter(lsmSpanCutFailuresDesc, c.cutFailures.Load())
	counter(lsmSpansIngestedDesc, c.spansIngested.Load())
	counter(lsmIngestedBytesDesc, c.ingestedBytes.Load())
	counter(lsmSpansNotTakenDesc, c.spansSkipped.Load(), "skipped")
	counter(lsmSpansNotTakenDesc, c.spansRefused.Load(), "gap")
	counter(lsmSpansNotTakenDesc, c.spansBehind.Load(), "behind")
	for i, r := range replayReasons() {
		counter(lsmReplaysDesc, c.replays[i].Load(), r)
	}
	counter(lsmReplayedBytesDesc, c.replayedBytes.Load())
	ch <- prometheus.MustNewConstMetric(lsmHeldBytesDesc, prometheus.GaugeValue, float64(lr.heldBytes.Load()))
	ch <- prometheus.MustNewConstMetric(lsmStoredIndexDesc, prometheus.GaugeValue, float64(lr.stored.Load()))
}

// Collect implements prometheus.Collector: it reads RocksDB's properties
// of the user data column family (nothing once the store is closed;
// figures RocksDB's text does not hold are left out).
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return
	}
	s.collectLSMRaft(ch)
	const gb = 1 << 30
	cf := s.db.GetPropertyCF("rocksdb.cfstats-no-file-histogram", s.data)
	flush, flushOK := 0.0, false
	if m := flushGBRe.FindStringSubmatch(cf); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			flush, flushOK = v*gb, true
			ch <- prometheus.MustNewConstMetric(rocksFlushWrittenDesc, prometheus.CounterValue, flush)
		}
	}
	if m := compactionGBRe.FindStringSubmatch(cf); m != nil {
		w, err1 := strconv.ParseFloat(m[1], 64)
		r, err2 := strconv.ParseFloat(m[2], 64)
		if err1 == nil && flushOK {
			// RocksDB counts a flush's output in level 0's compaction
			// stats, so the cumulative write includes it.
			ch <- prometheus.MustNewConstMetric(rocksCompactionWrittenDesc, prometheus.CounterValue, max(0, w*gb-flush))
		}
		if err2 == nil {
			ch <- prometheus.MustNewConstMetric(rocksCompactionReadDesc, prometheus.CounterValue, r*gb)
		}
	}
	dbStats := s.db.GetProperty("rocksdb.dbstats")
	if m := walGBRe.FindStringSubmatch(dbStats); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			ch <- prometheus.MustNewConstMetric(rocksWALWrittenDesc, prometheus.CounterValue, v*gb)
		}
	}
	if m := stallRe.FindStringSubmatch(dbStats); m != nil {
		h, err1 := strconv.ParseFloat(m[1], 64)
		mi, err2 := strconv.ParseFloat(m[2], 64)
		sec, err3 := strconv.ParseFloat(m[3], 64)
		if err1 == nil && err2 == nil && err3 == nil {
			ch <- prometheus.MustNewConstMetric(rocksStallDesc, prometheus.CounterValue, h*3600+mi*60+sec)
		}
	}
	if v, ok := s.db.GetIntPropertyCF("rocksdb.estimate-pending-compaction-bytes", s.data); ok {
		ch <- prometheus.MustNewConstMetric(rocksPendingCompactionDesc, prometheus.GaugeValue, float64(v))
	}
	if v, ok := s.db.GetIntPropertyCF("rocksdb.cur-size-all-mem-tables", s.data); ok {
		ch <- prometheus.MustNewConstMetric(rocksMemtableDesc, prometheus.GaugeValue, float64(v))
	}
}
