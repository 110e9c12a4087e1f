package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/raft/v3"
	"google.golang.org/grpc"

	"github.com/nezha-harness/nezha/systems"
)

// metrics are a node's Prometheus metrics (Config.MetricsAddress), named
// by Prometheus's conventions (https://prometheus.io/docs/practices/naming/):
// the nezha_ prefix, base units, _total for counters. Each node has its own
// registry, so that nodes in one process (tests) do not share state.
// Counters of events the node sees (leader changes, proposals, snapshots)
// and the Raft log's latency histograms are updated where they happen; the
// rest (Raft indexes, GC totals, storage shape, RocksDB properties) is read
// from the node and its state machine at scrape time by nodeCollector.
type metrics struct {
	reg *prometheus.Registry

	leaderChanges    prometheus.Counter
	proposals        prometheus.Counter
	proposalsDropped prometheus.Counter
	// readRounds counts the ReadIndex rounds this node issued and
	// readWaiters the waits they served (each a unary read, or the reads
	// of one Batch request that share a consistency).
	readRounds, readWaiters prometheus.Counter
	// batch counts the operations of Batch streams as grpc counts
	// unary calls (batchmetrics.go).
	batch            *batchMetrics
	snapshotSends    *prometheus.CounterVec // label result: success, failure
	snapshotInstalls prometheus.Counter
	// spanSends counts the spans this leader offered its peers by result
	// (the peer's verdict, or failure) and spanSentBytes the span bytes it
	// sent (span.go; lsm-raft only).
	spanSends     *prometheus.CounterVec
	spanSentBytes prometheus.Counter
	// writeStalls and writeStallSeconds count client writes held by the
	// state machine's write stall (systems.WriteStaller) and the time
	// they waited.
	writeStalls       prometheus.Counter
	writeStallSeconds prometheus.Counter
	// diskRefusing is 1 while the disk guard refuses client writes;
	// diskTransfers counts the leader's searches for a voter to hand its
	// leadership to for its disk, by result (diskhandoff.go).
	diskRefusing  prometheus.Gauge
	diskTransfers *prometheus.CounterVec
	// appendSeconds and fsyncSeconds go to raftlog.Options.
	appendSeconds, fsyncSeconds prometheus.Histogram
	// flushBytes and flushAppends observe each flush of the log writer
	// (logwrite.go): the entry bytes and the Readies' appends it made
	// durable, the size of a group commit.
	flushBytes, flushAppends prometheus.Histogram
	// grpc counts the RPCs of the node's gRPC servers (client API, peer
	// transport, etcd API): grpc_server_started_total and
	// grpc_server_handled_total by service, method and code,
	// grpc_server_handling_seconds, grpc_server_msg_{received,sent}_total
	// (go-grpc-middleware's providers/prometheus).
	grpc *grpcprom.ServerMetrics

	srv *http.Server // nil until serve
}

// logLatencyBuckets span 50 µs to 1.6 s (fdatasync on NVMe to a stalled
// disk), in seconds.
func logLatencyBuckets() []float64 { return prometheus.ExponentialBuckets(50e-6, 2, 16) }

// newMetrics returns the metrics of a node; process adds the Go runtime's
// and the process's collectors (not for the tests' nodes that share one
// process, Config.env: building the Go collector matches regular
// expressions over every runtime metric, a large part of such a node's
// start).
func newMetrics(process bool) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_raft_leader_changes_total",
			Help: "Times this node saw the Raft leader change (to another node or to none)."}),
		proposals: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_raft_proposals_total",
			Help: "Client writes this node proposed to Raft (counted where the client sent them; a follower forwards its proposals to the leader)."}),
		proposalsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_raft_proposals_dropped_total",
			Help: "Proposals Raft did not accept (no leader, leadership transfer)."}),
		readRounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_raft_read_index_rounds_total",
			Help: "ReadIndex rounds this node issued for linearizable reads (one per batch of reads that arrived together)."}),
		readWaiters: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_raft_read_index_waiters_total",
			Help: "Linearizable read waits the ReadIndex rounds served (a unary read, or the reads of one Batch request that share a consistency)."}),
		snapshotSends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nezha_raft_snapshot_sends_total",
			Help: "Raft snapshots this node streamed to a follower, by result."}, []string{"result"}),
		snapshotInstalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_raft_snapshot_installs_total",
			Help: "Raft snapshots this node received and installed."}),
		spanSends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nezha_raft_span_sends_total",
			Help: "Spans this leader offered its peers (lsm-raft), by result: the peer's verdict (ingested, skipped, gap, replayed, behind) or failure."}, []string{"result"}),
		spanSentBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_raft_span_sent_bytes_total",
			Help: "Span file bytes this leader sent its peers (lsm-raft)."}),
		writeStalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_write_stalls_total",
			Help: "Client writes held because the state machine stalls writes (nezha: GC debt at -gcStallGarbageBytes)."}),
		writeStallSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "nezha_write_stall_seconds_total",
			Help: "Time client writes waited in write stalls, summed over writes."}),
		diskRefusing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nezha_disk_refusing_writes",
			Help: "1 while this node refuses client writes for its disk (free space below -minFreeDiskBytes, or the disk full), else 0."}),
		diskTransfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nezha_disk_leadership_transfers_total",
			Help: "Searches of this leader, its disk refusing writes, for a voter to hand the leadership to, by result: transferred, not_taken (the voter did not take it within an election timeout), no_voter_with_space (it kept the leadership)."},
			[]string{"result"}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nezha_raftlog_append_duration_seconds",
			Help: "Duration of one Raft log write of a group of appends (its fdatasync is the flush's, counted in nezha_raftlog_fsync_duration_seconds).", Buckets: logLatencyBuckets()}),
		flushBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nezha_raftlog_flush_bytes",
			Help: "Entry bytes one flush (fdatasync) of the Raft log made durable: the size of a group commit.", Buckets: prometheus.ExponentialBuckets(4096, 2, 17)}),
		flushAppends: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nezha_raftlog_flush_appends",
			Help: "Appends (one per Raft Ready that had something to persist) one flush of the Raft log made durable.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		fsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nezha_raftlog_fsync_duration_seconds",
			Help: "Duration of one fdatasync of a Raft log segment.", Buckets: logLatencyBuckets()}),
	}
	m.batch = newBatchMetrics(m.reg)
	m.grpc = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets(prometheus.ExponentialBuckets(100e-6, 2, 18)))) // 100 µs to 13 s
	// Both results exist from the start, so that a rate over them is
	// defined before the first snapshot.
	m.snapshotSends.WithLabelValues("success")
	m.snapshotSends.WithLabelValues("failure")
	for _, r := range []string{"transferred", "not_taken", "no_voter_with_space"} {
		m.diskTransfers.WithLabelValues(r)
	}
	for _, v := range systems.SpanVerdicts() {
		m.spanSends.WithLabelValues(v.String())
	}
	m.spanSends.WithLabelValues("failure")
	m.reg.MustRegister(m.leaderChanges, m.proposals, m.proposalsDropped, m.readRounds, m.readWaiters, m.snapshotSends, m.snapshotInstalls,
		m.spanSends, m.spanSentBytes,
		m.writeStalls, m.writeStallSeconds, m.diskRefusing, m.diskTransfers,
		m.appendSeconds, m.fsyncSeconds, m.flushBytes, m.flushAppends, m.grpc)
	if process {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// serverOptions are the gRPC server options that count a server's RPCs
// in m.grpc; after registering its services, pass the server to
// m.grpc.InitializeMetrics so that every method has its series from the
// start.
func (m *metrics) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.grpc.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.grpc.StreamServerInterceptor()),
	}
}

// register adds the collectors that read n at scrape time: n's Raft state
// and storage, and the state machine's own metrics if it has any (it
// implements prometheus.Collector: the RocksDB baselines). Called once
// the state machine is open.
func (m *metrics) register(n *Node) error {
	if err := m.reg.Register(&nodeCollector{n: n, d: newNodeDescs()}); err != nil {
		return err
	}
	if c, ok := n.sm.(prometheus.Collector); ok {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("register %s metrics: %w", n.cfg.System.Name, err)
		}
	}
	return nil
}

// serve serves /metrics on lis and returns the address it listens on.
func (m *metrics) serve(lis net.Listener, n *Node) string {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{n}}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := m.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.logger.Warn("metrics server stopped", "err", err)
		}
	}()
	return lis.Addr().String()
}

// stop stops serving and waits (up to 2 s) for scrapes in flight, which
// read the storage that Stop closes next.
func (m *metrics) stop() {
	if m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		m.srv.Close()
	}
}

// slogPrinter passes promhttp's errors to the node's logger.
type slogPrinter struct{ n *Node }

func (p slogPrinter) Println(v ...any) { p.n.logger.Warn("metrics: " + fmt.Sprint(v...)) }

// nodeCollector reads the node's Raft state, its log and its state
// machine's storage at scrape time.
type nodeCollector struct {
	n *Node
	d nodeDescs
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// nodeDescs are the descriptors of nodeCollector.
type nodeDescs struct {
	info, term, leader, isLeader, commit, applied, first, last, logWritten, logDropped, logBytes *prometheus.Desc
	gcRounds, gcFailed, gcRead, gcWritten, gcReclaimed, gcSeconds                                *prometheus.Desc
	valueLog, sortedRuns, blobFiles, live, levelBytes, levelFiles, indexEntries                  *prometheus.Desc
}

func newNodeDescs() nodeDescs {
	return nodeDescs{
		info:       desc("nezha_node_info", "Constant 1, labelled with the node's system and Raft id.", "system", "node_id"),
		term:       desc("nezha_raft_term", "The node's current Raft term."),
		leader:     desc("nezha_raft_leader_id", "Raft id of the leader this node knows (0: none)."),
		isLeader:   desc("nezha_raft_is_leader", "1 if this node is the Raft leader, else 0."),
		commit:     desc("nezha_raft_commit_index", "The node's Raft commit index."),
		applied:    desc("nezha_raft_applied_index", "The Raft index the state machine has applied up to."),
		first:      desc("nezha_raftlog_first_index", "The first index in the node's Raft log (above the compaction point)."),
		last:       desc("nezha_raftlog_last_index", "The last index in the node's Raft log."),
		logWritten: desc("nezha_raftlog_written_bytes_total", "Record bytes written to Raft log segments since the node started."),
		logDropped: desc("nezha_raftlog_page_cache_dropped_bytes_total", "Synced Raft log bytes the node asked the kernel to drop from its page cache (-logPageCacheBytes)."),
		logBytes:   desc("nezha_raftlog_bytes", "Bytes in the node's Raft log segment files."),

		gcRounds:    desc("nezha_gc_rounds_total", "GC rounds since the node started (nezha: GC into sorted runs; RocksDB baselines: Raft log truncation)."),
		gcFailed:    desc("nezha_gc_failed_rounds_total", "GC rounds that failed."),
		gcRead:      desc("nezha_gc_read_bytes_total", "Bytes GC rounds read (values copied)."),
		gcWritten:   desc("nezha_gc_written_bytes_total", "Bytes GC rounds wrote (sorted runs)."),
		gcReclaimed: desc("nezha_gc_reclaimed_bytes_total", "Bytes of the log segments and runs GC rounds removed."),
		gcSeconds:   desc("nezha_gc_duration_seconds_total", "Wall time spent in GC rounds."),

		valueLog:     desc("nezha_storage_value_log_bytes", "Bytes of values still in Raft log segments (nezha)."),
		sortedRuns:   desc("nezha_storage_sorted_run_bytes", "Bytes in GC's sorted runs (nezha)."),
		blobFiles:    desc("nezha_storage_blob_file_bytes", "Bytes in RocksDB blob files (blobdb)."),
		live:         desc("nezha_storage_live_bytes", "Live value bytes the index points at (nezha with GC)."),
		levelBytes:   desc("nezha_storage_level_bytes", "Bytes per level: RocksDB LSM levels, or tiers of nezha's sorted runs.", "level"),
		levelFiles:   desc("nezha_storage_level_files", "Files per level: RocksDB LSM levels, or tiers of nezha's sorted runs.", "level"),
		indexEntries: desc("nezha_index_entries", "Keys in the index: nezha with GC, exact; RocksDB systems, RocksDB's estimate (rocksdb.estimate-num-keys of the data column family). Absent for nezha-nogc."),
	}
}

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.d
	for _, dd := range []*prometheus.Desc{d.info, d.term, d.leader, d.isLeader, d.commit, d.applied, d.first, d.last,
		d.logWritten, d.logDropped, d.logBytes, d.gcRounds, d.gcFailed, d.gcRead, d.gcWritten, d.gcReclaimed, d.gcSeconds,
		d.valueLog, d.sortedRuns, d.blobFiles, d.live, d.levelBytes, d.levelFiles, d.indexEntries} {
		ch <- dd
	}
}

// Collect implements prometheus.Collector.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n, d := c.n, &c.d
	gauge := func(dd *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(dd, prometheus.GaugeValue, v, labels...)
	}
	counter := func(dd *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(dd, prometheus.CounterValue, v)
	}
	gauge(d.info, 1, n.cfg.System.Name, strconv.FormatUint(n.id, 10))
	gauge(d.term, float64(n.term.Load()))
	gauge(d.leader, float64(n.lead.Load()))
	isLeader := 0.0
	if raft.StateType(n.raftState.Load()) == raft.StateLeader {
		isLeader = 1
	}
	gauge(d.isLeader, isLeader)
	gauge(d.commit, float64(n.commit.Load()))
	gauge(d.applied, float64(n.applied.Load()))
	gauge(d.first, float64(n.firstIndex.Load()))
	gauge(d.last, float64(n.lastIndex.Load()))
	ls := n.log.Stats()
	counter(d.logWritten, float64(ls.BytesWritten))
	counter(d.logDropped, float64(ls.PageCacheDroppedBytes))
	var logBytes int64
	for _, seg := range n.log.Segments() {
		logBytes += seg.SizeBytes
	}
	gauge(d.logBytes, float64(logBytes))
	if g, ok := n.sm.(systems.GCTotalsReporter); ok {
		t := g.GCTotals()
		counter(d.gcRounds, float64(t.Rounds))
		counter(d.gcFailed, float64(t.Errors))
		counter(d.gcRead, float64(t.BytesRead))
		counter(d.gcWritten, float64(t.BytesWritten))
		counter(d.gcReclaimed, float64(t.ReclaimedBytes))
		counter(d.gcSeconds, t.Duration.Seconds())
	}
	if sr, ok := n.sm.(systems.StorageReporter); ok {
		sh := sr.StorageShape()
		gauge(d.valueLog, float64(sh.ValueLogBytes))
		gauge(d.sortedRuns, float64(sh.SortedRunBytes))
		gauge(d.blobFiles, float64(sh.BlobFileBytes))
		gauge(d.live, float64(sh.LiveBytes))
		for _, l := range sh.Levels {
			lv := strconv.Itoa(l.Level)
			gauge(d.levelBytes, float64(l.Bytes), lv)
			gauge(d.levelFiles, float64(l.Files), lv)
		}
	}
	if ir, ok := n.sm.(systems.IndexEntriesReporter); ok {
		if v, ok := ir.IndexEntries(); ok {
			gauge(d.indexEntries, float64(v))
		}
	}
}
