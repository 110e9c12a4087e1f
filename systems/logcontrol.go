package systems

import (
	"context"
	"errors"
	"sync"
	"time"
)

// SegmentInfo describes one segment file of the Raft log.
type SegmentInfo struct {
	ID   uint64
	Path string
	// SizeBytes is the number of bytes written to it.
	SizeBytes int64
	// FirstIndex and LastIndex are the lowest and highest entry indexes
	// written to it (0 if none).
	FirstIndex, LastIndex uint64
	// Active is true for the segment being appended.
	Active bool
}

// LogControl lets a state machine that lives in the Raft log (nezha) reclaim
// it: freeze the active segment, compact the log (entries at or below an
// index stop being Raft entries; a follower that needs them gets a
// snapshot), and delete segments. Implemented by the node.
type LogControl interface {
	// Segments lists the log's segments in ascending id order.
	Segments() []SegmentInfo
	// Roll seals the active segment and starts a new one (the paper's
	// "freeze the active storage"). It runs on the node's Ready loop.
	Roll(ctx context.Context) error
	// Compact makes entries at or below index unavailable to Raft, durably
	// (it runs on the Ready loop). The state machine must already have made
	// every entry at or below index durable in its own storage.
	Compact(ctx context.Context, index uint64) error
	// CompactedIndex is the current compaction point (0 if none).
	CompactedIndex() uint64
	// CompactBound is the highest index the state machine may compact to
	// now: the applied index, and on the leader also the lowest match index
	// of the recently active followers (Raft-aware GC: entries a live
	// follower still needs stay in the log).
	CompactBound() uint64
	// RemoveSegment deletes a sealed segment whose entries are all at or
	// below the compaction point, after in-flight reads of it finish.
	RemoveSegment(id uint64) error
}

// Snapshotter is implemented by state machines that can ship their state to
// a follower whose log is behind the leader's compaction point.
//
// The stream is written with SnapshotWriter and read with SnapshotReader
// (key-ordered pairs). A snapshot may be fuzzy: it reflects some applied
// index S >= the snapshot's Raft index C; the follower replays entries C+1..S
// again, which is idempotent for puts and deletes replayed in order.
type Snapshotter interface {
	// WriteSnapshot writes every live key and value, in key order.
	WriteSnapshot(w *SnapshotWriter) error
	// PrepareRestore stages the pairs of r as the state at Raft index, without
	// making them visible; the node then records the snapshot in its log and
	// calls CommitRestore. A crash in between must restart into either the
	// old state (if the log did not record the snapshot) or the new one.
	PrepareRestore(index uint64, r *SnapshotReader) error
	// CommitRestore makes the staged state current; AppliedIndex becomes index.
	CommitRestore(index uint64) error
}

// SnapshotTaker is implemented by state machines that compact the Raft
// log when asked (raftpico's TakeSnapshot on the JSON-RPC API, kvpb.Admin's
// TakeSnapshot, `nezha cluster compact`), beside the compaction they run by
// themselves. The node offers it only with Snapshotter: a follower that
// needs the compacted entries gets a snapshot instead.
type SnapshotTaker interface {
	// TakeSnapshot makes the state applied so far durable in the state
	// machine's own storage, compacts the Raft log up to it (at most to
	// LogControl.CompactBound: entries a live follower still needs stay),
	// removes the log files no longer needed, and returns the log's
	// compaction point. An error wrapping ErrSnapshotUnsupported: this
	// configuration never compacts its log.
	TakeSnapshot(ctx context.Context) (index uint64, err error)
}

// ErrSnapshotUnsupported marks a TakeSnapshot that the configuration
// refuses (nezha-nogc: its log only grows).
var ErrSnapshotUnsupported = errors.New("not supported")

// LogTruncationStrategy is the GCRound Strategy of a round that only
// truncated the Raft log (the RocksDB baselines keep their values in the
// engine, not in the log): reports tell such rounds from GC of values.
const LogTruncationStrategy = "raft-log-truncation"

// GCRound is the record of one garbage collection round, for reports.
type GCRound struct {
	Strategy string    `json:"strategy"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	// BytesRead and BytesWritten by the round (values copied, runs written).
	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
	// LiveBytes kept: the size of the runs the round wrote.
	LiveBytes int64 `json:"live_bytes"`
	// ReclaimedBytes: the size of the segments and runs the round removed.
	ReclaimedBytes  int64  `json:"reclaimed_bytes"`
	SegmentsRemoved int    `json:"segments_removed"`
	RunsRemoved     int    `json:"runs_removed"`
	KeysMoved       int64  `json:"keys_moved"`
	CompactedIndex  uint64 `json:"compacted_index"`
	Error           string `json:"error,omitempty"`
	// Trigger says why the round ran (e.g. "size", "garbage", "idle";
	// the GC's own vocabulary, documented where the rounds are started).
	Trigger string `json:"trigger,omitempty"`
	// Throttled is the time the round waited for the GC I/O rate limiter.
	Throttled time.Duration `json:"throttled_ns,omitempty"`
}

// LevelShape is one level of a store's on-disk layout: an LSM level of
// RocksDB (level 0 first), or a tier of nezha's sorted runs.
type LevelShape struct {
	Level int   `json:"level"`
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
}

// StorageShape is a state machine's on-disk shape at one moment, for
// reports: how many levels an LSM has and how full they are (the paper's
// regime depends on it), and where a KV-separated store keeps its values.
type StorageShape struct {
	Levels []LevelShape `json:"levels,omitempty"`
	// ValueLogBytes: values still in Raft log segments (nezha).
	ValueLogBytes int64 `json:"value_log_bytes,omitempty"`
	// SortedRunBytes: bytes in GC's sorted runs (nezha).
	SortedRunBytes int64 `json:"sorted_run_bytes,omitempty"`
	// BlobFileBytes: bytes in RocksDB blob files (blobdb).
	BlobFileBytes int64 `json:"blob_file_bytes,omitempty"`
	// LiveBytes: live value bytes the index points at (nezha).
	LiveBytes int64 `json:"live_bytes,omitempty"`
}

// StorageReporter is implemented by state machines that can describe
// their on-disk shape cheaply (it is polled by `cluster status` and the
// experiments).
type StorageReporter interface {
	StorageShape() StorageShape
}

// IndexEntriesReporter is implemented by state machines that know, cheaply,
// how many keys their index holds (the node's nezha_index_entries metric):
// nezha with GC counts them exactly, the RocksDB systems report RocksDB's
// estimate (rocksdb.estimate-num-keys). ok is false when the count is
// unknown (nezha-nogc, a closed store).
type IndexEntriesReporter interface {
	IndexEntries() (n int64, ok bool)
}

// WriteStaller is implemented by state machines whose background work can
// fall behind the writes (RocksDB's pending-compaction write stall, applied
// to nezha's GC debt). Before proposing a put or a delete, the node asks
// WriteStall; while it returns an error the node holds the write (up to the
// request's deadline, then refuses it with codes.ResourceExhausted and the
// error's text), so that a load above the background work's pace cannot
// grow the storage without bound. Safe for concurrent use; called once per
// write, so it must be cheap (an atomic load).
type WriteStaller interface {
	WriteStall() error
}

// TTLStore is implemented by state machines that honour the expiry time of
// a put (Command.ExpiresUnixNano): an expired key reads as absent on
// every path. The node refuses a put with a TTL (codes.Unimplemented) for
// a state machine that does not implement it, instead of storing the
// value forever.
type TTLStore interface {
	// SupportsTTL reports whether expiry times are honoured.
	SupportsTTL() bool
}

// GCReporter is implemented by state machines with a GC.
type GCReporter interface {
	// GCRounds returns the most recent rounds, oldest first.
	GCRounds() []GCRound
}

// GCTotals are cumulative sums over every GC round since the state
// machine opened (not only the rounds GCRounds still keeps), for counters
// such as Prometheus's that must never go down.
type GCTotals struct {
	Rounds int64
	// Errors counts rounds that failed (GCRound.Error set).
	Errors                                  int64
	BytesRead, BytesWritten, ReclaimedBytes int64
	// Duration is the summed wall time of the rounds (End - Start).
	Duration time.Duration
}

// GCTotalsReporter is implemented by state machines with a GC that keep
// GCTotals (through GCHistory.Totals).
type GCTotalsReporter interface {
	GCTotals() GCTotals
}

// GCHistoryRounds is how many rounds a GCHistory keeps.
const GCHistoryRounds = 64

// GCHistory keeps the most recent GCHistoryRounds rounds for GCRounds. Its
// zero value is ready; it is safe for concurrent use.
type GCHistory struct {
	mu     sync.Mutex
	rounds []GCRound
	totals GCTotals
}

// Record appends r, dropping the oldest round beyond GCHistoryRounds.
func (h *GCHistory) Record(r GCRound) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rounds = append(h.rounds, r)
	h.totals.Rounds++
	if r.Error != "" {
		h.totals.Errors++
	}
	h.totals.BytesRead += r.BytesRead
	h.totals.BytesWritten += r.BytesWritten
	h.totals.ReclaimedBytes += r.ReclaimedBytes
	if d := r.End.Sub(r.Start); d > 0 {
		h.totals.Duration += d
	}
	if len(h.rounds) > GCHistoryRounds {
		h.rounds = h.rounds[len(h.rounds)-GCHistoryRounds:]
	}
}

// Totals returns the sums over every round recorded so far.
func (h *GCHistory) Totals() GCTotals {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.totals
}

// Rounds returns a copy of the kept rounds, oldest first.
func (h *GCHistory) Rounds() []GCRound {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]GCRound(nil), h.rounds...)
}
