// Package dwisckey is the paper's Dwisckey baseline (Nezha, ICDE 2026,
// section VI): the shared Raft layer with Badger
// (github.com/dgraph-io/badger, WiscKey in Go) as the state machine's
// engine. Values are separated from keys, as in Nezha, but stored a second
// time after the Raft log: in Badger's own value log, with the keys and
// value pointers in its LSM tree. Comparing it with nezha isolates what
// persisting values once, in the Raft log itself, gains over a WiscKey
// store under Raft.
//
// Durability follows pasv's argument: Badger writes without sync
// (SyncWrites off), the applied index is written in the same batch as the
// data, and after a crash the node replays the committed entries above the
// applied index Badger kept (Apply is idempotent). The Raft log is never
// compacted (as nezha-nogc's), so no follower ever needs a snapshot.
// Injected disk faults (internal/vfs) reach the Raft log, not Badger's files.
package dwisckey

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// Name is the -system name.
const Name = "dwisckey"

// Dir is the Badger directory under the node's data directory.
const Dir = "badger"

// Defaults of Config.
const (
	// DefaultValueThresholdBytes: values of at least this many bytes go to
	// Badger's value log, smaller ones stay in its LSM tree with their key
	// (Badger v4's own default is 1 MiB, which would keep every value of
	// the paper's 1-256 KiB workloads in the LSM tree: not WiscKey).
	DefaultValueThresholdBytes = 1 << 10
	// DefaultMemTableBytes is the size of one memtable (Badger's default).
	DefaultMemTableBytes = 64 << 20
	// DefaultBlockCacheBytes is the block cache (as the RocksDB baselines').
	DefaultBlockCacheBytes = 64 << 20
)

// System describes dwisckey for the registry. It is optional: registered
// (serve, -systems, the conformance suite) but not in the default system
// lists of the experiments, whose time budgets count the other systems.
func System() systems.System {
	return systems.System{Name: Name, Role: systems.RoleBaseline, Optional: true, LogDir: "raftlog", MapsDataFiles: true,
		Summary:   "Raft + Badger (WiscKey: values in Badger's value log, keys in its LSM tree), the paper's Dwisckey",
		NewConfig: func() systems.SystemConfig { return NewConfig() }, Geometry: geometry}
}

// geometry scales Badger's memory sizes to scale (ScaleGeometry,
// GeometryFlags); its defaults with scale's zero value.
func geometry(scale systems.GeometryScale) systems.Geometry {
	if scale.DataPerNodeBytes <= 0 {
		return systems.Geometry{}
	}
	c := NewConfig()
	c.ScaleGeometry(scale.Factor())
	return systems.Geometry{Flags: c.GeometryFlags()}
}

// Config configures a dwisckey store.
type Config struct {
	// ValueThresholdBytes (-badger.valueThresholdBytes): values of at least
	// this many bytes are separated into Badger's value log.
	ValueThresholdBytes int64
	// MemTableBytes (-badger.memTableBytes) is Badger's memtable size.
	MemTableBytes int64
	// BlockCacheBytes (-badger.blockCacheBytes) is Badger's block cache.
	BlockCacheBytes int64
}

var _ systems.SystemConfig = (*Config)(nil)

// NewConfig returns a Config with the documented defaults.
func NewConfig() *Config {
	return &Config{ValueThresholdBytes: DefaultValueThresholdBytes, MemTableBytes: DefaultMemTableBytes,
		BlockCacheBytes: DefaultBlockCacheBytes}
}

// Floors of ScaleGeometry: Badger's smallest memtable Validate accepts, and
// RocksDB's smallest geometry size (baseline), for the block cache.
const (
	minMemTableBytes   = 1 << 20
	minBlockCacheBytes = 64 << 10
)

// ScaleGeometry multiplies Badger's memory sizes (memtable, block cache) by
// f, as baseline.Config.ScaleGeometry does RocksDB's, so that a small run
// (f = data per node / 100 GB) holds as little of its data in memory as
// the paper's 100 GB did. Sizes are floored at minMemTableBytes and
// minBlockCacheBytes; a block cache that is off stays off. f must be
// positive.
func (c *Config) ScaleGeometry(f float64) {
	c.MemTableBytes = max(int64(float64(c.MemTableBytes)*f), minMemTableBytes)
	if c.BlockCacheBytes > 0 {
		c.BlockCacheBytes = max(int64(float64(c.BlockCacheBytes)*f), minBlockCacheBytes)
	}
}

// GeometryFlags renders c's memory sizes as -badger.* flags for a node's
// command line (the harness passes a scaled geometry this way).
func (c *Config) GeometryFlags() []string {
	return []string{"-badger.memTableBytes", fmt.Sprint(c.MemTableBytes), "-badger.blockCacheBytes", fmt.Sprint(c.BlockCacheBytes)}
}

// RegisterFlags implements systems.SystemConfig.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.ValueThresholdBytes, "badger.valueThresholdBytes", c.ValueThresholdBytes, "dwisckey: values of at least this many bytes go to Badger's value log")
	fs.Int64Var(&c.MemTableBytes, "badger.memTableBytes", c.MemTableBytes, "dwisckey: Badger's memtable size in bytes")
	fs.Int64Var(&c.BlockCacheBytes, "badger.blockCacheBytes", c.BlockCacheBytes, "dwisckey: Badger's block cache in bytes")
}

// Validate implements systems.SystemConfig: every problem at once.
func (c *Config) Validate() error {
	var errs []error
	// Badger refuses thresholds above its maximum of 1 MiB.
	if c.ValueThresholdBytes < 1 || c.ValueThresholdBytes > 1<<20 {
		errs = append(errs, cmdline.Usagef("-badger.valueThresholdBytes %d is not in [1, 1048576]", c.ValueThresholdBytes))
	}
	if c.MemTableBytes < 1<<20 {
		errs = append(errs, cmdline.Usagef("-badger.memTableBytes %d is below 1 MiB", c.MemTableBytes))
	}
	if c.BlockCacheBytes < 0 {
		errs = append(errs, cmdline.Usagef("-badger.blockCacheBytes %d must not be negative", c.BlockCacheBytes))
	}
	return errors.Join(errs...)
}

// Describe implements systems.SystemConfig.
func (c *Config) Describe() map[string]any {
	return map[string]any{
		"engine":                "badger v4 (WiscKey)",
		"badger_dir":            Dir,
		"value_threshold_bytes": c.ValueThresholdBytes,
		"mem_table_bytes":       c.MemTableBytes,
		"block_cache_bytes":     c.BlockCacheBytes,
		"sync_writes":           false,
	}
}

// Open implements systems.SystemConfig.
func (c *Config) Open(env systems.Env) (systems.StateMachine, error) { return c.OpenStore(env) }

// Store is a dwisckey state machine: user data and the applied index in
// one Badger database. Apply runs on one goroutine; Get, Scan and
// StateHash on any.
type Store struct {
	db      *badger.DB
	applied atomic.Uint64
	// applyMu orders Apply against StateHash's read of the applied index.
	applyMu sync.Mutex
	closed  atomic.Bool
}

var (
	_ systems.StateMachine = (*Store)(nil)
	_ systems.StateHasher  = (*Store)(nil)
)

// Key spaces: user keys under userPrefix, the applied index at metaApplied.
var (
	userPrefix  = []byte{'u'}
	metaApplied = []byte("m/applied")
)

func userKey(k []byte) []byte { return append(append(make([]byte, 0, 1+len(k)), userPrefix...), k...) }

// OpenStore opens (creating if needed) the Badger database under env.Dir.
func (c *Config) OpenStore(env systems.Env) (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	dir := filepath.Join(env.Dir, Dir)
	o := badger.DefaultOptions(dir).
		WithSyncWrites(false).
		WithValueThreshold(c.ValueThresholdBytes).
		WithMemTableSize(c.MemTableBytes).
		WithBlockCacheSize(c.BlockCacheBytes).
		WithLogger(badgerLogger{env.Logger})
	db, err := badger.Open(o)
	if err != nil {
		return nil, fmt.Errorf("dwisckey: open badger %s: %w", dir, err)
	}
	s := &Store{db: db}
	err = db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaApplied)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("applied index of %d bytes, want 8: %w", len(v), systems.ErrCorrupt)
			}
			s.applied.Store(binary.BigEndian.Uint64(v))
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("dwisckey: read the applied index: %w", err)
	}
	return s, nil
}

// AppliedIndex implements systems.StateMachine.
func (s *Store) AppliedIndex() uint64 { return s.applied.Load() }

// Apply implements systems.StateMachine: one Badger write batch with every
// put and delete and, last, the new applied index. A batch too large for
// one Badger transaction is committed as several, in order: after a crash
// Badger holds a prefix of them, and the applied index (in the last) is
// never ahead of the data.
func (s *Store) Apply(entries []systems.AppliedEntry) error {
	if len(entries) == 0 {
		return nil
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for i := range entries {
		c := &entries[i].Command
		var err error
		switch c.Op {
		case systems.OpPut:
			err = wb.Set(userKey(c.Key), c.Value)
		case systems.OpDelete:
			err = wb.Delete(userKey(c.Key))
		case systems.OpNone:
		default:
			err = fmt.Errorf("entry %d has unknown op %s", entries[i].Index, c.Op)
		}
		if err != nil {
			return fmt.Errorf("dwisckey: apply entry %d: %w", entries[i].Index, err)
		}
	}
	last := entries[len(entries)-1].Index
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], last)
	if err := wb.Set(metaApplied, v[:]); err != nil {
		return fmt.Errorf("dwisckey: apply: %w", err)
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("dwisckey: apply up to %d: %w", last, err)
	}
	s.applied.Store(last)
	return nil
}

// Get implements systems.StateMachine.
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	var out []byte
	found := false
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(userKey(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		out, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("dwisckey: get: %w", err)
	}
	return out, found, nil
}

// Scan implements systems.StateMachine, with the baselines' semantics:
// up to limit pairs with start <= key < end, more=true when maxBytes cut
// the range short.
func (s *Store) Scan(start, end []byte, limit int, maxBytes int) ([]systems.KeyValue, bool, error) {
	if len(end) > 0 && string(start) >= string(end) {
		return nil, false, nil
	}
	var kvs []systems.KeyValue
	more := false
	err := s.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Prefix = userPrefix
		if limit > 0 {
			o.PrefetchSize = min(limit, 100)
		}
		it := txn.NewIterator(o)
		defer it.Close()
		n := 0
		for it.Seek(userKey(start)); it.Valid(); {
			item := it.Item()
			k := item.Key()[len(userPrefix):]
			if len(end) > 0 && string(k) >= string(end) {
				break
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			kvs = append(kvs, systems.KeyValue{Key: append([]byte(nil), k...), Value: v})
			n += len(k) + len(v)
			if limit > 0 && len(kvs) >= limit {
				break
			}
			it.Next()
			if maxBytes > 0 && n >= maxBytes {
				more = it.Valid() && (len(end) == 0 || string(it.Item().Key()[len(userPrefix):]) < string(end))
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("dwisckey: scan: %w", err)
	}
	return kvs, more, nil
}

// StateHash implements systems.StateHasher with the baselines' encoding
// (len(key) | key | len(value) | value, lengths 8 bytes big-endian, in key
// order), over one Badger read transaction that also reads the applied
// index, so the two match.
func (s *Store) StateHash() ([]byte, uint64, error) {
	h := sha256.New()
	var applied uint64
	s.applyMu.Lock()
	txn := s.db.NewTransaction(false)
	applied = s.applied.Load()
	s.applyMu.Unlock()
	defer txn.Discard()
	o := badger.DefaultIteratorOptions
	o.Prefix = userPrefix
	it := txn.NewIterator(o)
	defer it.Close()
	var lb [8]byte
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()[len(userPrefix):]
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, 0, fmt.Errorf("dwisckey: state hash: %w", err)
		}
		binary.BigEndian.PutUint64(lb[:], uint64(len(k)))
		h.Write(lb[:])
		h.Write(k)
		binary.BigEndian.PutUint64(lb[:], uint64(len(v)))
		h.Write(lb[:])
		h.Write(v)
	}
	return h.Sum(nil), applied, nil
}

// Close implements systems.StateMachine.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	return s.db.Close()
}

// badgerLogger sends Badger's warnings and errors to the node's logger and
// drops its info and debug lines (one per memtable flush and compaction).
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) { b.log(slog.LevelError, f, a...) }
func (b badgerLogger) Warningf(f string, a ...any) {
	b.log(slog.LevelWarn, f, a...)
}
func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}

func (b badgerLogger) log(level slog.Level, f string, a ...any) {
	if b.l != nil {
		b.l.Log(context.Background(), level, "badger: "+fmt.Sprintf(f, a...))
	}
}
