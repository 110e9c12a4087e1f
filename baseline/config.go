package baseline

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// Mode selects what a Store does differently from the plain RocksDB baseline.
type Mode string

const (
	// ModeOriginal applies values into RocksDB with its WAL on.
	ModeOriginal Mode = "original"
	// ModePASV applies values into RocksDB with its WAL off; recovery
	// replays the Raft log from the applied index that reached SST files.
	ModePASV Mode = "pasv"
	// ModeBlobDB is ModeOriginal with RocksDB's integrated BlobDB on.
	ModeBlobDB Mode = "blobdb"
	// ModeLSMRaft is LSM-Raft: the leader applies as ModeOriginal and
	// ships its applied state to the followers as SST files (spans), which
	// they ingest instead of applying the entries (lsmraft.go).
	ModeLSMRaft Mode = "lsm-raft"
)

// Modes returns every mode, so that tools that give the RocksDB systems
// their geometry (the experiments) know them without naming each.
func Modes() []Mode { return []Mode{ModeOriginal, ModePASV, ModeBlobDB, ModeLSMRaft} }

// Defaults of Config and the fixed option of every mode.
const (
	// DefaultBlockCacheBytes is the default LRU block cache capacity
	// (64 MiB), shared by both column families.
	DefaultBlockCacheBytes = 64 << 20
	// DefaultWriteBufferBytes is the default memtable size (write_buffer_size,
	// 64 MiB, which is also RocksDB's own default), per column family.
	DefaultWriteBufferBytes = 64 << 20
	// DefaultCompression is "none": the harness writes random bytes as
	// values, which do not compress, so compression would only cost CPU.
	DefaultCompression = "none"
	// DefaultMinBlobBytes is blobdb's default min_blob_size (4 KiB): values
	// of at least this many bytes are stored in blob files.
	DefaultMinBlobBytes = 4096
	// MaxBackgroundJobs is max_background_jobs (flushes plus compactions),
	// fixed at 2 for the 2-core machine the experiments run on (it equals
	// RocksDB's default and is set explicitly so that it is recorded).
	MaxBackgroundJobs = 2
	// DefaultLogRetainBytes is the default of -rocksdb.logRetainBytes
	// (64 MiB): the Raft log is truncated once its segments hold more.
	DefaultLogRetainBytes = 64 << 20
	// DefaultLogTruncateInterval is the default of
	// -rocksdb.logTruncateInterval: how often the log size is checked.
	DefaultLogTruncateInterval = time.Second
	// DefaultSpanIdle is the default of -lsmraft.spanIdle: an lsm-raft
	// leader cuts a span once it applied nothing for this long.
	DefaultSpanIdle = time.Second
	// DefaultRetainSpans is the default of -lsmraft.retainSpans: the spans
	// an lsm-raft leader keeps for followers that fall behind.
	DefaultRetainSpans = 4
	// heldSpans and minHeldBytes give the default bound of what an
	// lsm-raft follower holds before it replays it itself
	// (-lsmraft.maxHeldBytes 0): four spans, and at least 64 MiB. A
	// follower holds what it applied while the span covering it is cut,
	// written, sent and ingested: goodput times that pipeline's latency.
	// Under the scaled geometry a span is a few hundred KiB, so four spans
	// were less than one Apply batch of 256 KiB values, and followers
	// replayed nearly everything they held (quick put-scale at 512 MiB
	// per node: 61 and 91 bound replays, one span ingested per follower),
	// which made lsm-raft original's path plus the leader's span files.
	// 64 MiB is one native memtable.
	heldSpans    = 4
	minHeldBytes = 64 << 20
	// minWriteBufferBytes is the smallest write_buffer_size RocksDB accepts
	// without silently raising it (64 KiB).
	minWriteBufferBytes = 64 << 10

	// RocksDB's own defaults of the LSM geometry (RocksDB 7.8.3,
	// include/rocksdb/advanced_options.h and options.h), set explicitly so
	// that every result records them and ScaleGeometry can scale them.
	//
	// DefaultMaxBytesForLevelBase is max_bytes_for_level_base, the target
	// size of level 1 (256 MiB); each further level is 10x larger
	// (max_bytes_for_level_multiplier, not changed here).
	DefaultMaxBytesForLevelBase = 256 << 20
	// DefaultTargetFileSizeBytes is target_file_size_base, the size of the
	// SST files compaction writes (64 MiB).
	DefaultTargetFileSizeBytes = 64 << 20
	// DefaultSoftPendingCompactionBytes is
	// soft_pending_compaction_bytes_limit (64 GiB): writes slow down once
	// compaction is this far behind.
	DefaultSoftPendingCompactionBytes = 64 << 30
	// DefaultHardPendingCompactionBytes is
	// hard_pending_compaction_bytes_limit (256 GiB): writes stop.
	DefaultHardPendingCompactionBytes = 256 << 30
	// DefaultBlobFileBytes is blob_file_size (256 MiB), blobdb only.
	DefaultBlobFileBytes = 256 << 20
	// minGeometryBytes is the floor of every scaled size parameter but the
	// write buffer (RocksDB needs a file to hold at least a few values).
	minGeometryBytes = 64 << 10
)

// PaperDataBytes is the data each node of the paper's cluster holds
// (100 GB; docs/architecture.md section 8): the reference point of ScaleGeometry.
const PaperDataBytes = systems.PaperDataPerNodeBytes

// compressionType maps a -rocksdb.compression value to RocksDB's type.
func compressionType(name string) (grocksdb.CompressionType, bool) {
	switch name {
	case "none":
		return grocksdb.NoCompression, true
	case "snappy":
		return grocksdb.SnappyCompression, true
	case "lz4":
		return grocksdb.LZ4Compression, true
	case "zstd":
		return grocksdb.ZSTDCompression, true
	}
	return 0, false
}

const compressionNames = "none, snappy, lz4, zstd"

// Original returns the "original" system: Raft + RocksDB with its WAL on
// (the paper's baseline).
func Original() systems.System {
	return systems.System{
		Name:           string(ModeOriginal),
		Summary:        "Raft + RocksDB: every committed value is applied into RocksDB (WAL on)",
		Role:           systems.RoleBaseline,
		Reference:      true,
		LogDir:         "raftlog",
		NewConfig:      func() systems.SystemConfig { return NewConfig(ModeOriginal) },
		Geometry:       func(scale systems.GeometryScale) systems.Geometry { return geometry(ModeOriginal, scale) },
		ConditionFlags: conditionFlags,
		Compactions:    true,
	}
}

// PASV returns the "pasv" system: Raft + RocksDB with the RocksDB WAL off;
// recovery replays the Raft log from the applied index flushed to SST files.
func PASV() systems.System {
	return systems.System{
		Name:           string(ModePASV),
		Summary:        "PASV: Raft + RocksDB with the RocksDB WAL off; recovery replays the Raft log",
		Role:           systems.RoleBaseline,
		LogDir:         "raftlog",
		NewConfig:      func() systems.SystemConfig { return NewConfig(ModePASV) },
		Geometry:       func(scale systems.GeometryScale) systems.Geometry { return geometry(ModePASV, scale) },
		ConditionFlags: conditionFlags,
		Compactions:    true,
	}
}

// BlobDB returns the "blobdb" system: Raft + RocksDB with integrated BlobDB
// (values of at least -rocksdb.minBlobBytes in blob files, blob GC on).
func BlobDB() systems.System {
	return systems.System{
		Name:           string(ModeBlobDB),
		Summary:        "Raft + RocksDB with integrated BlobDB (KV separation that is not Raft-aware)",
		Role:           systems.RoleBaseline,
		LogDir:         "raftlog",
		NewConfig:      func() systems.SystemConfig { return NewConfig(ModeBlobDB) },
		Geometry:       func(scale systems.GeometryScale) systems.Geometry { return geometry(ModeBlobDB, scale) },
		ConditionFlags: conditionFlags,
		Compactions:    true,
	}
}

// LSMRaft returns the "lsm-raft" system: Raft + RocksDB where the leader
// applies as original and ships its applied state to the followers as SST
// files covering spans of log indexes, which they ingest (IngestExternalFile)
// instead of applying the entries (LSM-Raft, Zhang et al., Proc. ACM Manag.
// Data 3(6), 2025; lsmraft.go). A baseline of every experiment, beside
// original: the paper's other way of removing the replicas' duplicate LSM
// work.
func LSMRaft() systems.System {
	return systems.System{
		Name:           string(ModeLSMRaft),
		Summary:        "LSM-Raft: the leader applies into RocksDB and ships SST files of applied spans; followers ingest them",
		Role:           systems.RoleBaseline,
		LogDir:         "raftlog",
		NewConfig:      func() systems.SystemConfig { return NewConfig(ModeLSMRaft) },
		Geometry:       func(scale systems.GeometryScale) systems.Geometry { return geometry(ModeLSMRaft, scale) },
		ConditionFlags: conditionFlags,
		Compactions:    true,
		Conformance: []systems.Conformance{
			// Small spans, so that spans are cut by size and by idleness,
			// shipped and ingested within each test.
			{Name: string(ModeLSMRaft), Args: []string{"-lsmraft.spanBytes", "65536", "-lsmraft.spanIdle", "100ms"}},
			{Name: string(ModeLSMRaft) + "-defaults"},
		},
	}
}

// geometry is mode's RocksDB geometry scaled to scale (ScaleGeometry,
// GeometryFlags), or its defaults with scale's zero value.
func geometry(mode Mode, scale systems.GeometryScale) systems.Geometry {
	c := NewConfig(mode)
	var flags []string
	if scale.DataPerNodeBytes > 0 {
		c.ScaleGeometry(scale.Factor())
		flags = c.GeometryFlags()
	}
	return systems.Geometry{Flags: flags, WriteBufferBytes: c.WriteBufferBytes, LevelBaseBytes: c.MaxBytesForLevelBase,
		SoftPendingCompactionBytes: c.SoftPendingCompactionBytes}
}

// conditionFlags open RocksDB as the paper's code did under
// systems.CondCacheOff (default options: no block cache, Snappy). The
// other conditions concern the node, the workload or nezha.
func conditionFlags(cond string, _ int64) []string {
	if cond != systems.CondCacheOff {
		return nil
	}
	return []string{"-rocksdb.blockCacheBytes", "0", "-rocksdb.compression", "snappy"}
}

// Config configures one baseline system. It implements systems.SystemConfig.
// Every RocksDB option not named here is RocksDB's default; Describe lists
// every option this package sets.
type Config struct {
	mode Mode
	// BlockCacheBytes is the capacity of the LRU block cache shared by both
	// column families (-rocksdb.blockCacheBytes). Default 64 MiB; 0 turns
	// the block cache off (no_block_cache, as the paper's code ran).
	BlockCacheBytes int64
	// WriteBufferBytes is the memtable size, write_buffer_size, of each
	// column family (-rocksdb.writeBufferBytes). Default 64 MiB; at least
	// 64 KiB.
	WriteBufferBytes int64
	// Compression of SST files and (blobdb) blob files: none, snappy, lz4 or
	// zstd (-rocksdb.compression). Default none.
	Compression string
	// MinBlobBytes is blobdb's min_blob_size: values of at least this many
	// bytes go to blob files; 0 puts every value in blob files
	// (-rocksdb.minBlobBytes). Default 4096 for blobdb; must be 0 for the
	// other modes.
	MinBlobBytes int64
	// LogRetainBytes: once the Raft log's segments hold more than this many
	// bytes, the store makes its applied state durable and truncates the
	// log (compacts it and deletes whole sealed segments), as etcd and TiKV
	// do; a follower that needs truncated entries gets a Raft snapshot
	// (-rocksdb.logRetainBytes). 0 never truncates: the log grows without
	// bound (the harness's behaviour before truncation existed). Default
	// 64 MiB. See truncate.go for the policy.
	LogRetainBytes int64
	// LogTruncateInterval is how often the log size is checked
	// (-rocksdb.logTruncateInterval). Default 1s; must be positive.
	LogTruncateInterval time.Duration

	// LSM geometry (see ScaleGeometry). Defaults are RocksDB's own.
	//
	// MaxBytesForLevelBase is max_bytes_for_level_base, level 1's target
	// size (-rocksdb.maxBytesForLevelBase). Default 256 MiB.
	MaxBytesForLevelBase int64
	// TargetFileSizeBytes is target_file_size_base
	// (-rocksdb.targetFileSizeBytes). Default 64 MiB.
	TargetFileSizeBytes int64
	// MaxTotalWALBytes is max_total_wal_size (-rocksdb.maxTotalWalBytes).
	// Default 0: two write buffers (see OpenStore for why it is bounded).
	MaxTotalWALBytes int64
	// SoftPendingCompactionBytes and HardPendingCompactionBytes are
	// soft_/hard_pending_compaction_bytes_limit
	// (-rocksdb.softPendingCompactionBytes, -rocksdb.hardPendingCompactionBytes):
	// compaction debt at which writes slow down and stop. Defaults 64 GiB
	// and 256 GiB.
	SoftPendingCompactionBytes int64
	HardPendingCompactionBytes int64
	// BlobFileBytes is blobdb's blob_file_size (-rocksdb.blobFileBytes).
	// Default 256 MiB; ignored by the other modes.
	BlobFileBytes int64
	// GeometryScale records the factor ScaleGeometry applied (1: RocksDB's
	// native geometry). Informational: it is in Describe, the sizes above
	// already carry it (-rocksdb.geometryScale, set by the harness).
	GeometryScale float64

	// LSM-Raft (ModeLSMRaft only; lsmraft.go).
	//
	// SpanBytes: the leader cuts a span once the entries applied since
	// the last cut hold this many bytes of keys and values
	// (-lsmraft.spanBytes). 0 (default): WriteBufferBytes, so that the
	// files a follower ingests are as large as the flushes it no longer
	// makes.
	SpanBytes int64
	// SpanIdle: the leader cuts a span once it applied nothing for this
	// long (-lsmraft.spanIdle). Default 1s; must be positive.
	SpanIdle time.Duration
	// MaxHeldBytes: a follower that holds entries of more than this many
	// bytes (keys and values) that no span covers yet writes them into
	// RocksDB itself (-lsmraft.maxHeldBytes). 0 (default): four spans,
	// and at least 64 MiB.
	MaxHeldBytes int64
	// RetainSpans is how many spans the leader keeps for followers that
	// fall behind (-lsmraft.retainSpans). Default 4; at least 1.
	RetainSpans int
	// CrashPoint makes the node kill itself (SIGKILL) at a named point of
	// span handling (-lsmraft.crashPoint; tests only). See
	// LSMRaftCrashPoints.
	CrashPoint string

	// onTruncateRound, if set, is called by the background truncation
	// goroutine after every round that did something or failed (tests).
	onTruncateRound func(systems.GCRound)
}

// NewConfig returns the configuration of mode m holding the documented
// defaults. An unknown m is reported by Validate.
func NewConfig(m Mode) *Config {
	c := &Config{
		mode:             m,
		BlockCacheBytes:  DefaultBlockCacheBytes,
		WriteBufferBytes: DefaultWriteBufferBytes,
		Compression:      DefaultCompression,

		LogRetainBytes:      DefaultLogRetainBytes,
		LogTruncateInterval: DefaultLogTruncateInterval,

		MaxBytesForLevelBase:       DefaultMaxBytesForLevelBase,
		TargetFileSizeBytes:        DefaultTargetFileSizeBytes,
		SoftPendingCompactionBytes: DefaultSoftPendingCompactionBytes,
		HardPendingCompactionBytes: DefaultHardPendingCompactionBytes,
		BlobFileBytes:              DefaultBlobFileBytes,
		GeometryScale:              1,
	}
	if m == ModeBlobDB {
		c.MinBlobBytes = DefaultMinBlobBytes
	}
	if m == ModeLSMRaft {
		c.SpanIdle = DefaultSpanIdle
		c.RetainSpans = DefaultRetainSpans
	}
	return c
}

// Mode returns the configuration's mode.
func (c *Config) Mode() Mode { return c.mode }

// ScaleGeometry multiplies the size parameters of the LSM (write buffer,
// level-1 target, SST file size, WAL bound, pending-compaction limits, blob
// file size, block cache) by f, so that a store holding f x PaperDataBytes
// has the paper's LSM shape: the same number of levels, files per level
// and write amplification as RocksDB's defaults give at 100 GB. Sizes are
// floored at RocksDB's minimums (64 KiB); the block cache stays off if it
// is off. f must be positive; GeometryScale records the product of every
// factor applied.
func (c *Config) ScaleGeometry(f float64) {
	scale := func(v, floor int64) int64 { return max(int64(float64(v)*f), floor) }
	c.WriteBufferBytes = scale(c.WriteBufferBytes, minWriteBufferBytes)
	c.MaxBytesForLevelBase = scale(c.MaxBytesForLevelBase, minGeometryBytes)
	c.TargetFileSizeBytes = scale(c.TargetFileSizeBytes, minGeometryBytes)
	if c.MaxTotalWALBytes > 0 {
		c.MaxTotalWALBytes = scale(c.MaxTotalWALBytes, minGeometryBytes)
	}
	c.SoftPendingCompactionBytes = scale(c.SoftPendingCompactionBytes, minGeometryBytes)
	c.HardPendingCompactionBytes = scale(c.HardPendingCompactionBytes, minGeometryBytes)
	c.BlobFileBytes = scale(c.BlobFileBytes, minGeometryBytes)
	if c.BlockCacheBytes > 0 {
		c.BlockCacheBytes = scale(c.BlockCacheBytes, minGeometryBytes)
	}
	c.GeometryScale *= f
}

// GeometryFlags renders the geometry of c as -rocksdb.* flags for a node's
// command line (the harness passes a scaled geometry this way).
func (c *Config) GeometryFlags() []string {
	flags := []string{
		"-rocksdb.geometryScale", fmt.Sprint(c.GeometryScale),
		"-rocksdb.writeBufferBytes", fmt.Sprint(c.WriteBufferBytes),
		"-rocksdb.maxBytesForLevelBase", fmt.Sprint(c.MaxBytesForLevelBase),
		"-rocksdb.targetFileSizeBytes", fmt.Sprint(c.TargetFileSizeBytes),
		"-rocksdb.maxTotalWalBytes", fmt.Sprint(c.MaxTotalWALBytes),
		"-rocksdb.softPendingCompactionBytes", fmt.Sprint(c.SoftPendingCompactionBytes),
		"-rocksdb.hardPendingCompactionBytes", fmt.Sprint(c.HardPendingCompactionBytes),
		"-rocksdb.blockCacheBytes", fmt.Sprint(c.BlockCacheBytes),
	}
	if c.mode == ModeBlobDB {
		flags = append(flags, "-rocksdb.blobFileBytes", fmt.Sprint(c.BlobFileBytes))
	}
	return flags
}

// spanBytes is the span size in effect (lsm-raft).
func (c *Config) spanBytes() int64 {
	if c.SpanBytes > 0 {
		return c.SpanBytes
	}
	return c.WriteBufferBytes
}

// maxHeldBytes is the held-entries bound in effect (lsm-raft).
func (c *Config) maxHeldBytes() int64 {
	if c.MaxHeldBytes > 0 {
		return c.MaxHeldBytes
	}
	return max(heldSpans*c.spanBytes(), minHeldBytes)
}

// maxTotalWALBytes is the max_total_wal_size in effect.
func (c *Config) maxTotalWALBytes() int64 {
	if c.MaxTotalWALBytes > 0 {
		return c.MaxTotalWALBytes
	}
	return 2 * c.WriteBufferBytes
}

// RegisterFlags adds the -rocksdb.* flags to fs, with the configuration's
// current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.BlockCacheBytes, "rocksdb.blockCacheBytes", c.BlockCacheBytes,
		"RocksDB LRU block cache capacity in bytes, shared by all column families; 0: no block cache")
	fs.Int64Var(&c.WriteBufferBytes, "rocksdb.writeBufferBytes", c.WriteBufferBytes,
		"RocksDB memtable size (write_buffer_size) in bytes, per column family; at least 65536")
	fs.StringVar(&c.Compression, "rocksdb.compression", c.Compression,
		"RocksDB compression of SST and blob files: "+compressionNames)
	fs.Int64Var(&c.LogRetainBytes, "rocksdb.logRetainBytes", c.LogRetainBytes,
		"truncate the Raft log (compact it, delete whole sealed segments) once it holds more than this many bytes; 0: never truncate")
	fs.DurationVar(&c.LogTruncateInterval, "rocksdb.logTruncateInterval", c.LogTruncateInterval,
		"how often the Raft log size is checked against -rocksdb.logRetainBytes")
	fs.Int64Var(&c.MaxBytesForLevelBase, "rocksdb.maxBytesForLevelBase", c.MaxBytesForLevelBase,
		"RocksDB max_bytes_for_level_base: level 1's target size in bytes (each further level is 10x)")
	fs.Int64Var(&c.TargetFileSizeBytes, "rocksdb.targetFileSizeBytes", c.TargetFileSizeBytes,
		"RocksDB target_file_size_base: SST file size in bytes")
	fs.Int64Var(&c.MaxTotalWALBytes, "rocksdb.maxTotalWalBytes", c.MaxTotalWALBytes,
		"RocksDB max_total_wal_size in bytes; 0: two write buffers")
	fs.Int64Var(&c.SoftPendingCompactionBytes, "rocksdb.softPendingCompactionBytes", c.SoftPendingCompactionBytes,
		"RocksDB soft_pending_compaction_bytes_limit: compaction debt (bytes) that slows writes")
	fs.Int64Var(&c.HardPendingCompactionBytes, "rocksdb.hardPendingCompactionBytes", c.HardPendingCompactionBytes,
		"RocksDB hard_pending_compaction_bytes_limit: compaction debt (bytes) that stops writes")
	fs.Float64Var(&c.GeometryScale, "rocksdb.geometryScale", c.GeometryScale,
		"informational: the factor the harness scaled the geometry flags by (data per node / 100 GB), recorded with results")
	if c.mode == ModeBlobDB {
		fs.Int64Var(&c.MinBlobBytes, "rocksdb.minBlobBytes", c.MinBlobBytes,
			"BlobDB min_blob_size in bytes: values at least this large go to blob files (0: all values)")
		fs.Int64Var(&c.BlobFileBytes, "rocksdb.blobFileBytes", c.BlobFileBytes,
			"BlobDB blob_file_size in bytes")
	}
	if c.mode == ModeLSMRaft {
		fs.Int64Var(&c.SpanBytes, "lsmraft.spanBytes", c.SpanBytes,
			"the leader cuts a span (an SST file followers ingest) once the entries applied since the last cut hold this many bytes; 0: -rocksdb.writeBufferBytes")
		fs.DurationVar(&c.SpanIdle, "lsmraft.spanIdle", c.SpanIdle,
			"the leader cuts a span once it applied nothing for this long")
		fs.Int64Var(&c.MaxHeldBytes, "lsmraft.maxHeldBytes", c.MaxHeldBytes,
			"a follower writes the entries it holds (no span covers them yet) into RocksDB itself once they hold more than this many bytes; 0: four spans, at least 64 MiB")
		fs.IntVar(&c.RetainSpans, "lsmraft.retainSpans", c.RetainSpans,
			"spans the leader keeps for followers that fall behind (at least 1)")
		fs.StringVar(&c.CrashPoint, "lsmraft.crashPoint", c.CrashPoint,
			"TESTING: kill the node at this point of span handling: "+strings.Join(LSMRaftCrashPoints(), ", "))
	}
}

// Validate reports every problem with the configuration at once, as
// errors.Join of *cmdline.UsageError values; nil if there is none.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, cmdline.Usagef(format, args...)) }
	if !slices.Contains(Modes(), c.mode) {
		bad("baseline: unknown mode %q (known: %s, %s, %s, %s)", c.mode, ModeOriginal, ModePASV, ModeBlobDB, ModeLSMRaft)
	}
	if c.BlockCacheBytes < 0 {
		bad("-rocksdb.blockCacheBytes %d must not be negative (0: no block cache)", c.BlockCacheBytes)
	}
	for _, g := range []struct {
		flag string
		v    int64
	}{
		{"maxBytesForLevelBase", c.MaxBytesForLevelBase}, {"targetFileSizeBytes", c.TargetFileSizeBytes},
		{"softPendingCompactionBytes", c.SoftPendingCompactionBytes}, {"hardPendingCompactionBytes", c.HardPendingCompactionBytes},
		{"blobFileBytes", c.BlobFileBytes},
	} {
		if g.v < minGeometryBytes {
			bad("-rocksdb.%s %d must be at least %d", g.flag, g.v, minGeometryBytes)
		}
	}
	if c.MaxTotalWALBytes < 0 {
		bad("-rocksdb.maxTotalWalBytes %d must not be negative (0: two write buffers)", c.MaxTotalWALBytes)
	}
	if c.SoftPendingCompactionBytes > c.HardPendingCompactionBytes {
		bad("-rocksdb.softPendingCompactionBytes %d exceeds -rocksdb.hardPendingCompactionBytes %d", c.SoftPendingCompactionBytes, c.HardPendingCompactionBytes)
	}
	if c.GeometryScale <= 0 {
		bad("-rocksdb.geometryScale %v must be positive", c.GeometryScale)
	}
	if c.WriteBufferBytes < minWriteBufferBytes {
		bad("-rocksdb.writeBufferBytes %d must be at least %d", c.WriteBufferBytes, minWriteBufferBytes)
	}
	if _, ok := compressionType(c.Compression); !ok {
		bad("-rocksdb.compression %q is not one of %s", c.Compression, compressionNames)
	}
	if c.LogRetainBytes < 0 {
		bad("-rocksdb.logRetainBytes %d must not be negative (0: never truncate)", c.LogRetainBytes)
	}
	if c.LogTruncateInterval <= 0 {
		bad("-rocksdb.logTruncateInterval %v must be positive", c.LogTruncateInterval)
	}
	if c.mode == ModeBlobDB {
		if c.MinBlobBytes < 0 {
			bad("-rocksdb.minBlobBytes %d must not be negative", c.MinBlobBytes)
		}
	} else if c.MinBlobBytes != 0 {
		bad("MinBlobBytes %d is set but only the %s system stores blobs", c.MinBlobBytes, ModeBlobDB)
	}
	if c.mode == ModeLSMRaft {
		if c.SpanBytes < 0 {
			bad("-lsmraft.spanBytes %d must not be negative (0: -rocksdb.writeBufferBytes)", c.SpanBytes)
		}
		if c.SpanIdle <= 0 {
			bad("-lsmraft.spanIdle %v must be positive", c.SpanIdle)
		}
		if c.MaxHeldBytes < 0 {
			bad("-lsmraft.maxHeldBytes %d must not be negative (0: four spans)", c.MaxHeldBytes)
		}
		if c.RetainSpans < 1 {
			bad("-lsmraft.retainSpans %d must be at least 1", c.RetainSpans)
		}
		if c.CrashPoint != "" && !slices.Contains(LSMRaftCrashPoints(), c.CrashPoint) {
			bad("-lsmraft.crashPoint %q: want one of %s", c.CrashPoint, strings.Join(LSMRaftCrashPoints(), ", "))
		}
	} else if c.SpanBytes != 0 || c.SpanIdle != 0 || c.MaxHeldBytes != 0 || c.RetainSpans != 0 || c.CrashPoint != "" {
		bad("the span settings (SpanBytes, SpanIdle, MaxHeldBytes, RetainSpans, CrashPoint) are set but only the %s system cuts spans", ModeLSMRaft)
	}
	return errors.Join(errs...)
}

// Describe returns every RocksDB option this package sets (and the facts
// that define the mode), for the harness to record with its results.
// Option names are RocksDB's; sizes are in bytes.
func (c *Config) Describe() map[string]any {
	d := map[string]any{
		"system":                               string(c.mode),
		"dir":                                  dbDirName,
		"column_families":                      []string{"default", metaCFName},
		"applied_index":                        appliedIndexDescription(c.mode),
		"create_if_missing":                    true,
		"create_missing_cfs":                   true,
		"max_background_jobs":                  MaxBackgroundJobs,
		"block_cache_bytes":                    c.BlockCacheBytes,
		"no_block_cache":                       c.BlockCacheBytes == 0,
		"write_buffer_size":                    c.WriteBufferBytes,
		"max_bytes_for_level_base":             c.MaxBytesForLevelBase,
		"max_bytes_for_level_multiplier":       10,    // RocksDB's default, not set
		"level_compaction_dynamic_level_bytes": false, // RocksDB 7.8.3's default, not set
		"target_file_size_base":                c.TargetFileSizeBytes,
		"max_total_wal_size":                   c.maxTotalWALBytes(),
		"soft_pending_compaction_bytes_limit":  c.SoftPendingCompactionBytes,
		"hard_pending_compaction_bytes_limit":  c.HardPendingCompactionBytes,
		"geometry_scale":                       c.GeometryScale,
		"compression":                          c.Compression,
		"write_options.sync":                   false,
		"write_options.disable_wal":            c.mode == ModePASV,
		"atomic_flush":                         false, // set explicitly in every mode; see OpenStore
		"enable_blob_files":                    c.mode == ModeBlobDB,
		"other_options":                        "RocksDB defaults",
		// Raft log truncation (not a RocksDB option; recorded because it
		// decides how much of the Raft log counts in space amplification).
		"raft_log_retain_bytes":      c.LogRetainBytes,
		"raft_log_truncate_interval": c.LogTruncateInterval.String(),
		"raft_log_truncation":        truncationDescription(c.mode, c.LogRetainBytes),
	}
	if c.mode == ModeLSMRaft {
		d["lsmraft_span_bytes"] = c.spanBytes()
		d["lsmraft_span_idle"] = c.SpanIdle.String()
		d["lsmraft_max_held_bytes"] = c.maxHeldBytes()
		d["lsmraft_retain_spans"] = c.RetainSpans
		d["lsmraft_follower_apply"] = "held in memory until a span covers them; spans are SST files written with SstFileWriter " +
			"and ingested with IngestExternalFile (move_files; no WAL, no memtable); the leader applies as original"
		d["ingest_external_file.move_files"] = true
	}
	if c.mode == ModeBlobDB {
		d["min_blob_size"] = c.MinBlobBytes
		d["blob_file_size"] = c.BlobFileBytes
		d["blob_compression_type"] = c.Compression
		d["enable_blob_garbage_collection"] = true
		d["blob_garbage_collection_age_cutoff"] = 0.25 // RocksDB's default, not set
	}
	return d
}

// appliedIndexDescription says where and when m stores the applied index,
// for Describe.
func appliedIndexDescription(m Mode) string {
	if m == ModeLSMRaft {
		return "column family default, the empty key (no client key is empty), 16 bytes: first and last Raft index " +
			"(big-endian); written in every WriteBatch of entries and carried inside every span file, so that data and " +
			"index move together; column family " + metaCFName + " holds it only after a snapshot restore"
	}
	where := "column family " + metaCFName + ", key " + string(appliedKey) + ", 8-byte big-endian, "
	if m == ModePASV {
		return where + "written only after a flush of the user data column family it covers, then flushed " +
			"(truncation rounds and Close; no atomic flush: RocksDB 7.8.3 aborts when a manual flush overlaps " +
			"a background atomic flush, facebook/rocksdb #5126, #7340, fixed after 7.8 by #11111)"
	}
	return where + "written in the same WriteBatch as the entries (recovered from the WAL with them)"
}

// Open validates the configuration and opens (creating if needed) the
// RocksDB database in filepath.Join(env.Dir, "rocksdb"). It returns a
// *Store, or in lsm-raft mode an LSMRaftStore.
func (c *Config) Open(env systems.Env) (systems.StateMachine, error) {
	s, err := c.OpenStore(env)
	if err != nil {
		return nil, err
	}
	if s.lr != nil {
		return LSMRaftStore{s}, nil
	}
	return s, nil
}

// String names the mode and its main options, for logs.
func (c *Config) String() string {
	s := fmt.Sprintf("%s(blockCache=%d writeBuffer=%d levelBase=%d fileSize=%d geometryScale=%g compression=%s logRetain=%d logTruncateInterval=%v",
		c.mode, c.BlockCacheBytes, c.WriteBufferBytes, c.MaxBytesForLevelBase, c.TargetFileSizeBytes, c.GeometryScale,
		c.Compression, c.LogRetainBytes, c.LogTruncateInterval)
	if c.mode == ModeBlobDB {
		s += fmt.Sprintf(" minBlob=%d", c.MinBlobBytes)
	}
	if c.mode == ModeLSMRaft {
		s += fmt.Sprintf(" spanBytes=%d spanIdle=%v maxHeldBytes=%d retainSpans=%d", c.spanBytes(), c.SpanIdle, c.maxHeldBytes(), c.RetainSpans)
		if c.CrashPoint != "" {
			s += " crashPoint=" + c.CrashPoint
		}
	}
	return s + ")"
}
