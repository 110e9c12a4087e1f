package systems

// PaperDataPerNodeBytes is the data each node of the paper's cluster held
// (100 GB; docs/architecture.md section 8): the reference point a scaled
// geometry is scaled against.
const PaperDataPerNodeBytes = 100e9

// GeometryScale is the size a system's size parameters are scaled to (the
// experiments' scaled geometry): with less data per node than the paper's,
// a store keeps the paper's shape (LSM levels, GC threshold over data).
type GeometryScale struct {
	// DataPerNodeBytes is the data each node will hold (above 0).
	DataPerNodeBytes int64
	// SegmentSizeBytes is the nodes' Raft log segment size
	// (-segmentSizeBytes), a floor for sizes counted in log bytes.
	SegmentSizeBytes int64
}

// Factor is DataPerNodeBytes over the paper's data per node.
func (s GeometryScale) Factor() float64 {
	return float64(s.DataPerNodeBytes) / PaperDataPerNodeBytes
}

// Geometry is a system's size parameters under the experiments' geometry:
// the serve flags that set them and the figures the experiments report.
type Geometry struct {
	// Flags are the system's serve flags for the scaled geometry (none
	// for the system's defaults).
	Flags []string
	// WriteBufferBytes is what a node may hold in memory before it
	// flushes (RocksDB's memtable); 0: not reported.
	WriteBufferBytes int64
	// LevelBaseBytes is the target size of level 1 of the engine's
	// leveled LSM tree (RocksDB's max_bytes_for_level_base); 0: not
	// reported.
	LevelBaseBytes int64
	// SoftPendingCompactionBytes is the pending compaction at which the
	// engine starts to slow writes down (RocksDB's soft limit); 0: none.
	SoftPendingCompactionBytes int64
}

// The paper's conditions a system may run under (System.ConditionFlags),
// each one way in which the paper's code ran differently from ours.
const (
	// CondNoFsync: nothing is fsynced (the paper's code never fsyncs).
	// The node's -sync=false; systems add nothing of their own.
	CondNoFsync = "no-fsync"
	// CondCacheOff: the storage engine opened as the paper's code opened
	// RocksDB (default options: no block cache, Snappy compression).
	CondCacheOff = "cache-off"
	// CondLowercase: values of random lowercase letters (the workload's;
	// systems add nothing of their own).
	CondLowercase = "lowercase"
	// CondPaperGC: the paper's GC (merge rounds at 40 % of the data per
	// node, unpaced, all nodes at once).
	CondPaperGC = "paper-gc"
)

// PaperGCThresholdRatio is the paper's GC threshold over its data per
// node: 40 GB / 100 GB.
const PaperGCThresholdRatio = 0.4
