package baseline

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/linxGnu/grocksdb"

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
)

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
	// minWriteBufferBytes is the smallest write_buffer_size RocksDB accepts
	// without silently raising it (64 KiB).
	minWriteBufferBytes = 64 << 10
)

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
		Name:      string(ModeOriginal),
		Summary:   "Raft + RocksDB: every committed value is applied into RocksDB (WAL on)",
		LogDir:    "raftlog",
		NewConfig: func() systems.SystemConfig { return NewConfig(ModeOriginal) },
	}
}

// PASV returns the "pasv" system: Raft + RocksDB with the RocksDB WAL off;
// recovery replays the Raft log from the applied index flushed to SST files.
func PASV() systems.System {
	return systems.System{
		Name:      string(ModePASV),
		Summary:   "PASV: Raft + RocksDB with the RocksDB WAL off; recovery replays the Raft log",
		LogDir:    "raftlog",
		NewConfig: func() systems.SystemConfig { return NewConfig(ModePASV) },
	}
}

// BlobDB returns the "blobdb" system: Raft + RocksDB with integrated BlobDB
// (values of at least -rocksdb.minBlobBytes in blob files, blob GC on).
func BlobDB() systems.System {
	return systems.System{
		Name:      string(ModeBlobDB),
		Summary:   "Raft + RocksDB with integrated BlobDB (KV separation that is not Raft-aware)",
		LogDir:    "raftlog",
		NewConfig: func() systems.SystemConfig { return NewConfig(ModeBlobDB) },
	}
}

// Config configures one baseline system. It implements systems.SystemConfig.
// Every RocksDB option not named here is RocksDB's default; Describe lists
// every option this package sets.
type Config struct {
	mode Mode
	// BlockCacheBytes is the capacity of the LRU block cache shared by both
	// column families (-rocksdb.blockCacheBytes). Default 64 MiB.
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
	}
	if m == ModeBlobDB {
		c.MinBlobBytes = DefaultMinBlobBytes
	}
	return c
}

// Mode returns the configuration's mode.
func (c *Config) Mode() Mode { return c.mode }

// RegisterFlags adds the -rocksdb.* flags to fs, with the configuration's
// current values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.BlockCacheBytes, "rocksdb.blockCacheBytes", c.BlockCacheBytes,
		"RocksDB LRU block cache capacity in bytes, shared by all column families")
	fs.Int64Var(&c.WriteBufferBytes, "rocksdb.writeBufferBytes", c.WriteBufferBytes,
		"RocksDB memtable size (write_buffer_size) in bytes, per column family; at least 65536")
	fs.StringVar(&c.Compression, "rocksdb.compression", c.Compression,
		"RocksDB compression of SST and blob files: "+compressionNames)
	fs.Int64Var(&c.LogRetainBytes, "rocksdb.logRetainBytes", c.LogRetainBytes,
		"truncate the Raft log (compact it, delete whole sealed segments) once it holds more than this many bytes; 0: never truncate")
	fs.DurationVar(&c.LogTruncateInterval, "rocksdb.logTruncateInterval", c.LogTruncateInterval,
		"how often the Raft log size is checked against -rocksdb.logRetainBytes")
	if c.mode == ModeBlobDB {
		fs.Int64Var(&c.MinBlobBytes, "rocksdb.minBlobBytes", c.MinBlobBytes,
			"BlobDB min_blob_size in bytes: values at least this large go to blob files (0: all values)")
	}
}

// Validate reports every problem with the configuration at once, as
// errors.Join of *systems.UsageError values; nil if there is none.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, systems.Usagef(format, args...)) }
	switch c.mode {
	case ModeOriginal, ModePASV, ModeBlobDB:
	default:
		bad("baseline: unknown mode %q (known: %s, %s, %s)", c.mode, ModeOriginal, ModePASV, ModeBlobDB)
	}
	if c.BlockCacheBytes <= 0 {
		bad("-rocksdb.blockCacheBytes %d must be positive", c.BlockCacheBytes)
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
	return errors.Join(errs...)
}

// Describe returns every RocksDB option this package sets (and the facts
// that define the mode), for the harness to record with its results.
// Option names are RocksDB's; sizes are in bytes.
func (c *Config) Describe() map[string]any {
	d := map[string]any{
		"system":                    string(c.mode),
		"dir":                       dbDirName,
		"column_families":           []string{"default", metaCFName},
		"applied_index":             "column family " + metaCFName + ", key " + string(appliedKey) + ", 8-byte big-endian, written in the same WriteBatch as the entries",
		"create_if_missing":         true,
		"create_missing_cfs":        true,
		"max_background_jobs":       MaxBackgroundJobs,
		"block_cache_bytes":         c.BlockCacheBytes,
		"write_buffer_size":         c.WriteBufferBytes,
		"compression":               c.Compression,
		"write_options.sync":        false,
		"write_options.disable_wal": c.mode == ModePASV,
		"atomic_flush":              c.mode == ModePASV,
		"enable_blob_files":         c.mode == ModeBlobDB,
		"other_options":             "RocksDB defaults",
		// Raft log truncation (not a RocksDB option; recorded because it
		// decides how much of the Raft log counts in space amplification).
		"raft_log_retain_bytes":      c.LogRetainBytes,
		"raft_log_truncate_interval": c.LogTruncateInterval.String(),
		"raft_log_truncation":        truncationDescription(c.mode, c.LogRetainBytes),
	}
	if c.mode == ModeBlobDB {
		d["min_blob_size"] = c.MinBlobBytes
		d["blob_file_size"] = uint64(256 << 20) // RocksDB's default, not set
		d["blob_compression_type"] = c.Compression
		d["enable_blob_garbage_collection"] = true
		d["blob_garbage_collection_age_cutoff"] = 0.25 // RocksDB's default, not set
	}
	return d
}

// Open validates the configuration and opens (creating if needed) the
// RocksDB database in filepath.Join(env.Dir, "rocksdb"). It returns a *Store.
func (c *Config) Open(env systems.Env) (systems.StateMachine, error) {
	s, err := c.OpenStore(env)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// String names the mode and its main options, for logs.
func (c *Config) String() string {
	s := fmt.Sprintf("%s(blockCache=%d writeBuffer=%d compression=%s logRetain=%d logTruncateInterval=%v",
		c.mode, c.BlockCacheBytes, c.WriteBufferBytes, c.Compression, c.LogRetainBytes, c.LogTruncateInterval)
	if c.mode == ModeBlobDB {
		s += fmt.Sprintf(" minBlob=%d", c.MinBlobBytes)
	}
	return s + ")"
}
