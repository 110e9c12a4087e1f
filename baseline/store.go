package baseline

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/google/btree"
	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/internal/activity"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

const (
	// dbDirName is the RocksDB directory under the node's data directory.
	dbDirName = "rocksdb"
	// metaCFName is the column family holding the applied index.
	metaCFName = "meta"
)

// appliedKey is the key of the applied index in the meta column family.
const appliedKey = "applied"

// ErrClosed is returned by the methods of a Store after Close.
var ErrClosed = errors.New("baseline: store is closed")

// Store is a state machine that applies committed writes into RocksDB. It
// implements systems.StateMachine, systems.StateHasher,
// systems.Snapshotter (snapshot.go) and systems.GCReporter (its Raft log
// truncation rounds, truncate.go). Get, Scan, StateHash and WriteSnapshot
// may run concurrently with each other and with Apply; Apply is called from
// one goroutine.
//
// Durability: writes use sync=false. In original and blobdb mode the
// RocksDB WAL is written but not fsynced, in pasv mode it is not written at
// all: the Raft log, fsynced by the node, is the durable copy, and on a
// restart the node replays it from AppliedIndex (docs/architecture.md section 5).
//
// The applied index on disk is never ahead of the user data on disk, so
// that a restart never skips an entry whose write was lost. In original
// and blobdb mode each Apply writes it in the same WriteBatch as the
// entries, and the WAL recovers both together. In pasv mode (no WAL, no
// atomic flush: see OpenStore) Apply writes user data only, and
// flushApplied writes the applied index after flushing the user data it
// covers; the user data on disk may then be ahead of the applied index,
// which replaying the log from there corrects.
type Store struct {
	mode   Mode
	dir    string // <data>/rocksdb
	root   string // <data>, the node's data directory
	logger *slog.Logger
	// ctl is the node's Raft log control; nil in unit tests without a log.
	ctl systems.LogControl
	// trunc truncates the Raft log in the background; nil when off.
	trunc *truncator
	// lr is the lsm-raft state (held entries, spans); nil in other modes.
	lr *lsmRaft
	// acts are RocksDB's compactions and write stalls (activity.go),
	// polled by watch.
	acts  activity.History
	watch *activityWatch
	// fs is the node's file layer. RocksDB writes its files itself (cgo),
	// so disk faults are injected, and outcomes watched, at the calls into
	// it (rocksIO, observe); nil in unit tests.
	fs *vfs.FS
	// jobs follows RocksDB's info log for its flushes and compactions
	// (Activities).
	jobs *rocksJobs

	// mu guards closed and the lifetime of the RocksDB handles below: every
	// method holds it shared while it uses them; Close and CommitRestore
	// (which swaps the database) hold it exclusively.
	mu     sync.RWMutex
	closed bool
	// applyMu serializes Apply (its RocksDB write and the update of
	// applied) with StateHash, which pairs a RocksDB snapshot with the
	// applied index.
	applyMu sync.Mutex
	// roundMu serializes the Raft log truncation rounds and TakeSnapshot,
	// which both roll, compact and remove segments.
	roundMu sync.Mutex
	// durableMu serializes flushApplied, so that the applied index a pasv
	// store writes into the meta column family moves in the order the
	// callers read it.
	durableMu sync.Mutex

	db         *grocksdb.DB
	data, meta *grocksdb.ColumnFamilyHandle
	dbOpts     *grocksdb.Options // DB-wide and default column family options
	metaOpts   *grocksdb.Options
	bbto       *grocksdb.BlockBasedTableOptions
	cache      *grocksdb.Cache
	ro         *grocksdb.ReadOptions
	wo         *grocksdb.WriteOptions

	applied atomic.Uint64
}

// OpenStore validates the configuration and opens (creating if needed) the
// RocksDB database in filepath.Join(env.Dir, "rocksdb"), with the column
// families "default" (user data) and "meta" (applied index). Usage errors
// from Validate are returned as they are; RocksDB errors are wrapped with
// the directory; a malformed applied index wraps systems.ErrCorrupt.
func (c *Config) OpenStore(env systems.Env) (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if env.Dir == "" {
		return nil, fmt.Errorf("%s: empty data directory", c.mode)
	}
	dir := filepath.Join(env.Dir, dbDirName)
	logger := env.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	comp, _ := compressionType(c.Compression) // checked by Validate

	s := &Store{mode: c.mode, dir: dir, root: env.Dir, logger: logger, ctl: env.Control, fs: env.FS,
		jobs: newRocksJobs(filepath.Join(dir, "LOG"))}
	s.bbto = grocksdb.NewDefaultBlockBasedTableOptions()
	if c.BlockCacheBytes > 0 {
		s.cache = grocksdb.NewLRUCache(uint64(c.BlockCacheBytes))
		s.bbto.SetBlockCache(s.cache)
	} else {
		s.bbto.SetNoBlockCache(true)
	}
	cfOptions := func(blob bool) *grocksdb.Options {
		o := grocksdb.NewDefaultOptions()
		o.SetBlockBasedTableFactory(s.bbto)
		o.SetWriteBufferSize(uint64(c.WriteBufferBytes))
		o.SetMaxBytesForLevelBase(uint64(c.MaxBytesForLevelBase))
		o.SetTargetFileSizeBase(uint64(c.TargetFileSizeBytes))
		o.SetSoftPendingCompactionBytesLimit(uint64(c.SoftPendingCompactionBytes))
		o.SetHardPendingCompactionBytesLimit(uint64(c.HardPendingCompactionBytes))
		o.SetCompression(comp)
		if blob {
			o.EnableBlobFiles(true)
			o.SetMinBlobSize(uint64(c.MinBlobBytes))
			o.SetBlobFileSize(uint64(c.BlobFileBytes))
			o.SetBlobCompressionType(comp)
			o.EnableBlobGC(true)
		}
		return o
	}
	// The meta column family holds one 8-byte value: never a blob.
	s.dbOpts = cfOptions(c.mode == ModeBlobDB)
	s.metaOpts = cfOptions(false)
	s.dbOpts.SetCreateIfMissing(true)
	s.dbOpts.SetCreateIfMissingColumnFamilies(true)
	s.dbOpts.SetMaxBackgroundJobs(MaxBackgroundJobs)
	// The meta column family's memtable (the applied index) never fills,
	// so it is never flushed on its own and pins every WAL file written
	// since its last flush: RocksDB keeps them until max_total_wal_size,
	// by default 4 x the write buffers of every column family (1 GiB
	// here). Bounding it makes RocksDB flush the meta column family and
	// delete obsolete WAL files once they exceed two write buffers (the
	// remedy of RocksDB's wiki, "Column Families" and "Write Ahead Log").
	s.dbOpts.SetMaxTotalWalSize(uint64(c.maxTotalWALBytes()))
	// atomic_flush stays off in every mode (RocksDB's default, set so
	// that it is explicit). pasv used it to keep the applied index on disk
	// from running ahead of the user data, but RocksDB 7.8.3 aborts
	// (assertion "cfd->GetFlushReason() == cfds[0]->GetFlushReason()" in
	// DBImpl::AtomicFlushMemTablesToOutputFiles) when a manual flush
	// overlaps a background atomic flush: the flush reason is kept per
	// column family, so a second flush request overwrites it and the
	// column families of one atomic flush carry different reasons
	// (kManualFlush, kWriteBufferFull). The family of flush races of
	// facebook/rocksdb issues #5126 and #7340; fixed upstream after 7.8 by
	// facebook/rocksdb pull request #11111, which moves the reason into
	// the flush request. pasv keeps the guarantee atomic flush gave it by
	// ordering instead (flushApplied).
	s.dbOpts.SetAtomicFlush(false)
	s.ro = grocksdb.NewDefaultReadOptions()
	s.wo = grocksdb.NewDefaultWriteOptions()
	s.wo.SetSync(false)
	s.wo.DisableWAL(c.mode == ModePASV)

	// A snapshot restore interrupted by a crash is finished or discarded
	// before the database is opened (snapshot.go).
	if err := s.recoverRestore(); err != nil {
		s.release()
		return nil, fmt.Errorf("%s: %w", c.mode, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.release()
		return nil, fmt.Errorf("%s: create %s: %w", c.mode, dir, err)
	}
	if err := s.openDB(); err != nil {
		s.release()
		return nil, err
	}
	if c.mode == ModeLSMRaft {
		lr, err := newLSMRaft(s, c)
		if err != nil {
			s.release()
			return nil, fmt.Errorf("%s: %w", c.mode, err)
		}
		s.lr = lr
		lr.start()
	}
	s.logger.Info("opened rocksdb state machine", "system", string(c.mode), "dir", dir,
		"applied", s.applied.Load(), "config", c.String())
	if env.Control != nil && c.LogRetainBytes > 0 {
		s.trunc = newTruncator(s, env.Control, c)
		s.trunc.start()
	}
	s.startActivityWatch()
	return s, nil
}

// openDB opens the database in s.dir with the store's options and loads
// the applied index. The caller holds mu exclusively or owns s alone.
func (s *Store) openDB() error {
	db, cfs, err := grocksdb.OpenDbColumnFamilies(s.dbOpts, s.dir,
		[]string{"default", metaCFName}, []*grocksdb.Options{s.dbOpts, s.metaOpts})
	if err != nil {
		return fmt.Errorf("%s: open rocksdb %s: %w", s.mode, s.dir, err)
	}
	s.db, s.data, s.meta = db, cfs[0], cfs[1]
	applied, err := s.readApplied(s.ro)
	if err != nil {
		s.closeDB()
		return fmt.Errorf("%s: open rocksdb %s: %w", s.mode, s.dir, err)
	}
	s.applied.Store(applied)
	if s.lr != nil {
		s.lr.stored.Store(applied)
	}
	return nil
}

// closeDB closes the database: column family handles first, as RocksDB
// requires. The options stay. The caller holds mu exclusively or owns s.
func (s *Store) closeDB() {
	if s.data != nil {
		s.data.Destroy()
		s.data = nil
	}
	if s.meta != nil {
		s.meta.Destroy()
		s.meta = nil
	}
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
}

// release frees every RocksDB object; the caller holds mu exclusively or
// owns s alone. Column family handles go before the DB, as RocksDB requires.
func (s *Store) release() {
	s.closeDB()
	for _, o := range []*grocksdb.Options{s.dbOpts, s.metaOpts} {
		if o != nil {
			o.Destroy()
		}
	}
	s.dbOpts, s.metaOpts = nil, nil
	if s.bbto != nil {
		s.bbto.Destroy()
		s.bbto = nil
	}
	if s.cache != nil {
		s.cache.Destroy()
		s.cache = nil
	}
	if s.ro != nil {
		s.ro.Destroy()
		s.ro = nil
	}
	if s.wo != nil {
		s.wo.Destroy()
		s.wo = nil
	}
}

// readApplied reads the applied index through ro (which may carry a
// snapshot). A missing key is index 0; a value that is not 8 bytes wraps
// systems.ErrCorrupt. In lsm-raft mode the index under the empty key of
// the data column family (lsmraft.go) comes first.
func (s *Store) readApplied(ro *grocksdb.ReadOptions) (uint64, error) {
	if s.mode == ModeLSMRaft {
		if _, last, ok, err := s.readSpanIndex(ro); err != nil || ok {
			return last, err
		}
	}
	h, err := s.db.GetPinnedCF(ro, s.meta, []byte(appliedKey))
	if err != nil {
		return 0, fmt.Errorf("read applied index: %w", err)
	}
	defer h.Destroy()
	if !h.Exists() {
		return 0, nil
	}
	v := h.Data()
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: applied index in column family %s is %d bytes, want 8", systems.ErrCorrupt, metaCFName, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Mode returns the store's mode.
func (s *Store) Mode() Mode { return s.mode }

// Dir returns the RocksDB directory.
func (s *Store) Dir() string { return s.dir }

// AppliedIndex returns the Raft index of the last entry applied (which
// moves back when the node replays from an older index). After
// opening it is the index stored in the meta column family: in original and
// blobdb mode the last index applied before the previous shutdown or crash
// whose WAL record reached the disk; in pasv mode the index of the last
// flushApplied (a truncation round, Flush, or a clean Close, which makes
// it the last index applied). In pasv mode the user data on disk reflects
// at least that index and possibly later entries (memtables that RocksDB
// flushed on its own); replaying the log from AppliedIndex converges to
// the same state. In lsm-raft mode it is the index RocksDB reflects
// (storedIndex), below which no entry is held in memory.
func (s *Store) AppliedIndex() uint64 { return s.storedIndex() }

// storedIndex is the index up to which RocksDB (its memtables, WAL and
// SST files) reflects the log: the applied index, except on an lsm-raft
// follower, which holds the entries above it in memory.
func (s *Store) storedIndex() uint64 {
	if s.lr != nil {
		return s.lr.stored.Load()
	}
	return s.applied.Load()
}

// Apply writes the Puts and Deletes of entries in one RocksDB WriteBatch;
// in original and blobdb mode the batch also holds the index of the last
// entry (meta column family), in pasv mode the applied index is only
// advanced in memory (flushApplied persists it). Entries with OpNone only
// advance the applied index. As the systems.StateMachine
// contract requires, every entry given is applied, also one at or below
// AppliedIndex: the node replays from the log's commit index after its log
// lost a tail, and replaying the same puts and deletes in order converges
// to the same state; the applied index then follows the replay. Indexes
// must increase within a call; an out-of-order index or an unknown Op is an
// error and nothing of the call is written. RocksDB errors are wrapped with
// the index range. In lsm-raft mode a leader applies so too (the index
// under the empty key of the data column family), while a follower holds
// the entries in memory until a span covers them (lsmraft.go).
func (s *Store) Apply(entries []systems.AppliedEntry) error {
	if len(entries) == 0 {
		return nil
	}
	return s.applying(func() error {
		if err := s.checkEntries(entries); err != nil {
			return err
		}
		if s.lr != nil {
			return s.lr.apply(entries)
		}
		if err := s.writeEntries(entries); err != nil {
			return err
		}
		// Only now: flushApplied relies on every entry at or below
		// applied being in RocksDB.
		s.applied.Store(entries[len(entries)-1].Index)
		return nil
	})
}

// applying runs f under mu (shared) and applyMu, unless the store is
// closed (ErrClosed).
func (s *Store) applying(f func() error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return f()
}

// checkEntries reports entries whose indexes do not increase or whose Op
// is unknown.
func (s *Store) checkEntries(entries []systems.AppliedEntry) error {
	for i := range entries {
		e := &entries[i]
		if i > 0 && e.Index <= entries[i-1].Index {
			return fmt.Errorf("%s: apply: entry index %d after %d: indexes must increase", s.mode, e.Index, entries[i-1].Index)
		}
		switch e.Command.Op {
		case systems.OpNone, systems.OpPut, systems.OpDelete:
		default:
			return fmt.Errorf("%s: apply: entry %d has unknown op %v", s.mode, e.Index, e.Command.Op)
		}
	}
	return nil
}

// writeEntries writes the Puts and Deletes of entries (checked by
// checkEntries) and the index of the last one (putIndex) in one
// WriteBatch. The caller holds mu shared and applyMu.
func (s *Store) writeEntries(entries []systems.AppliedEntry) error {
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for i := range entries {
		switch c := &entries[i].Command; c.Op {
		case systems.OpPut:
			wb.PutCF(s.data, c.Key, c.Value)
		case systems.OpDelete:
			wb.DeleteCF(s.data, c.Key)
		}
	}
	first, last := entries[0].Index, entries[len(entries)-1].Index
	s.putIndex(wb, first, last)
	return s.writeBatch(wb, first, last)
}

// putIndex adds the applied index last (of a batch that begins at entry
// first) to wb: in original and blobdb mode into the meta column family
// (the WAL recovers it with the entries), in lsm-raft mode under the empty
// key of the data column family (lsmraft.go), in pasv mode nowhere
// (flushApplied writes it).
func (s *Store) putIndex(wb *grocksdb.WriteBatch, first, last uint64) {
	switch s.mode {
	case ModePASV:
	case ModeLSMRaft:
		wb.PutCF(s.data, nil, spanIndexValue(first, last))
	default:
		wb.PutCF(s.meta, []byte(appliedKey), appliedValue(last))
	}
}

// writeBatch writes wb (entries first..last) into RocksDB, if it holds
// anything.
func (s *Store) writeBatch(wb *grocksdb.WriteBatch, first, last uint64) error {
	if wb.Count() == 0 {
		return nil
	}
	if s.fs.Injecting() {
		if err := s.rocksIO(vfs.OpWrite, rocksWAL, int64(len(wb.Data()))); err != nil {
			return fmt.Errorf("%s: rocksdb write of entries %d..%d: %w", s.mode, first, last, err)
		}
	}
	if err := s.db.Write(s.wo, wb); err != nil {
		return fmt.Errorf("%s: rocksdb write of entries %d..%d: %w", s.mode, first, last, s.observe(vfs.OpWrite, err))
	}
	return nil
}

// appliedValue encodes an applied index as stored in the meta column family.
func appliedValue(index uint64) []byte {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], index)
	return v[:]
}

// Get returns a copy of key's value, which the caller owns (non-nil when
// found, also for an empty value).
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	if s.lr != nil {
		// A held write is newer than RocksDB's value (lsmraft.go).
		if op, ok := s.lr.heldGet(key); ok {
			if op.del {
				return nil, false, nil
			}
			return clone(op.value), true, nil
		}
	}
	if err := s.rocksRead(); err != nil {
		return nil, false, fmt.Errorf("%s: rocksdb get: %w", s.mode, err)
	}
	h, err := s.db.GetPinnedCF(s.ro, s.data, key)
	if err != nil {
		return nil, false, fmt.Errorf("%s: rocksdb get: %w", s.mode, err)
	}
	defer h.Destroy()
	if !h.Exists() {
		return nil, false, nil
	}
	return clone(h.Data()), true, nil
}

// Scan returns the pairs with start <= key < end in ascending key order
// (empty end: no upper bound), read from one RocksDB iterator (a consistent
// view), with keys and values the caller owns. It returns at most limit
// pairs (limit <= 0: no limit). Once the pairs collected hold maxBytes or
// more bytes of keys and values (maxBytes <= 0: no cap) it stops, with
// more=true if the range holds another key; so it returns at least one pair
// whenever the range is not empty. A range with start >= end is empty.
func (s *Store) Scan(start, end []byte, limit int, maxBytes int) ([]systems.KeyValue, bool, error) {
	if len(end) > 0 && string(start) >= string(end) {
		return nil, false, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false, ErrClosed
	}
	if err := s.rocksRead(); err != nil {
		return nil, false, fmt.Errorf("%s: rocksdb scan: %w", s.mode, err)
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	if len(end) > 0 {
		// RocksDB keeps a pointer to the bound: give it a copy nobody
		// else can change while the iterator lives.
		ro.SetIterateUpperBound(clone(end))
	}
	it, held := s.view(func() *grocksdb.Iterator { return s.db.NewIteratorCF(ro, s.data) })
	defer it.Close()

	var kvs []systems.KeyValue
	more := false
	n := 0
	m := newMergedIter(it, held, end)
	for m.seek(start); m.valid; {
		k, v := m.key, m.value
		kvs = append(kvs, systems.KeyValue{Key: clone(k), Value: clone(v)})
		n += len(k) + len(v)
		if limit > 0 && len(kvs) >= limit {
			break
		}
		m.next()
		if maxBytes > 0 && n >= maxBytes {
			more = m.valid
			break
		}
	}
	if err := it.Err(); err != nil {
		return nil, false, fmt.Errorf("%s: rocksdb scan from %q: %w", s.mode, truncate(start), err)
	}
	return kvs, more, nil
}

// StateHash returns SHA-256 over every user key and value in key order,
// taken from one RocksDB snapshot, and the applied index at that snapshot
// (taken with Apply held off, so the two match in every mode). Each pair
// contributes
//
//	len(key) (8 bytes, big-endian) | key | len(value) (8 bytes, big-endian) | value
//
// so that replicas with equal data return equal sums whatever the system.
// The scan does not fill the block cache.
func (s *Store) StateHash() ([]byte, uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, 0, ErrClosed
	}
	s.applyMu.Lock()
	var release func()
	it, held := s.view(func() *grocksdb.Iterator {
		var ro *grocksdb.ReadOptions
		ro, release = s.snapshotReads()
		return s.db.NewIteratorCF(ro, s.data)
	})
	applied := s.applied.Load()
	s.applyMu.Unlock()
	defer release()
	defer it.Close()
	h := sha256.New()
	var lb [8]byte
	m := newMergedIter(it, held, nil)
	for m.seek(nil); m.valid; m.next() {
		k, v := m.key, m.value
		binary.BigEndian.PutUint64(lb[:], uint64(len(k)))
		h.Write(lb[:])
		h.Write(k)
		binary.BigEndian.PutUint64(lb[:], uint64(len(v)))
		h.Write(lb[:])
		h.Write(v)
	}
	if err := it.Err(); err != nil {
		return nil, 0, fmt.Errorf("%s: state hash: rocksdb iterate: %w", s.mode, err)
	}
	return h.Sum(nil), applied, nil
}

// Flush writes the memtables of both column families to SST files and
// waits for it (flushApplied): after Flush a store of any mode restarts at
// an applied index at least the AppliedIndex read when Flush started, with
// the user data of every entry up to it. Apply may run meanwhile.
func (s *Store) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	_, err := s.flushApplied()
	return err
}

// flushApplied makes the applied state durable by flushing memtables and
// returns an applied index A whose entries are all on SST files. It reads A,
// flushes the user data column family and waits (a flush with wait=true
// persists every write made before it started, and every entry at or below
// A was written before: Apply stores the applied index after its write),
// then, in pasv mode, writes A into the meta column family, and flushes
// that. Either column family may also be flushed by RocksDB on its own at
// any time, but the meta column family only ever holds an index whose user
// data was flushed before it was written, so the applied index on disk is
// never ahead of the user data on disk, without atomic_flush (see
// OpenStore for why pasv cannot use it). In original and blobdb mode the
// meta column family already holds the index in the WAL; the flush only
// moves both to SST files. Apply may run meanwhile. The caller holds mu
// (shared or exclusively).
func (s *Store) flushApplied() (uint64, error) {
	s.durableMu.Lock()
	defer s.durableMu.Unlock()
	a := s.storedIndex()
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	// A flush writes an SST file and fsyncs it.
	if err := errors.Join(s.rocksIO(vfs.OpWrite, rocksSST, rocksFlushBytes), s.rocksIO(vfs.OpSync, rocksSST, 0)); err != nil {
		return 0, fmt.Errorf("%s: rocksdb flush of column family default: %w", s.mode, err)
	}
	if err := s.db.FlushCF(s.data, fo); err != nil {
		return 0, fmt.Errorf("%s: rocksdb flush of column family default: %w", s.mode, s.observe(vfs.OpWrite, err))
	}
	if s.mode == ModePASV {
		if err := s.db.PutCF(s.wo, s.meta, []byte(appliedKey), appliedValue(a)); err != nil {
			return 0, fmt.Errorf("%s: rocksdb write of the applied index %d: %w", s.mode, a, err)
		}
	}
	if err := s.db.FlushCF(s.meta, fo); err != nil {
		return 0, fmt.Errorf("%s: rocksdb flush of column family %s: %w", s.mode, metaCFName, err)
	}
	return a, nil
}

// Property returns the RocksDB property name (e.g. "rocksdb.stats",
// "rocksdb.total-sst-files-size") of the user data column family, or "" if
// it is unknown or the store is closed.
func (s *Store) Property(name string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ""
	}
	return s.db.GetPropertyCF(name, s.data)
}

// StorageShape implements systems.StorageReporter: the files and bytes of
// every LSM level of the user data column family (RocksDB's column family
// metadata) and, for blobdb, the bytes in blob files
// (rocksdb.total-blob-file-size). Empty once the store is closed.
func (s *Store) StorageShape() systems.StorageShape {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var sh systems.StorageShape
	if s.closed || s.db == nil {
		return sh
	}
	if m := s.db.GetColumnFamilyMetadataCF(s.data); m != nil {
		for _, l := range m.LevelMetas() {
			sh.Levels = append(sh.Levels, systems.LevelShape{Level: l.Level(), Files: int64(len(l.SstMetas())), Bytes: int64(l.Size())})
		}
	}
	if v, err := strconv.ParseInt(s.db.GetPropertyCF("rocksdb.total-blob-file-size", s.data), 10, 64); err == nil {
		sh.BlobFileBytes = v
	}
	return sh
}

// IndexEntries implements systems.IndexEntriesReporter: RocksDB's
// estimate of the keys in the data column family (rocksdb.estimate-num-keys:
// exact in the memtables, while overwritten and deleted keys not yet
// compacted away in the SST files still count); ok is false while the
// store is closed or swapped for a snapshot restore.
func (s *Store) IndexEntries() (n int64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(s.db.GetPropertyCF("rocksdb.estimate-num-keys", s.data), 10, 64)
	return v, err == nil
}

// Close stops the Raft log truncation goroutine and releases the store;
// later calls return nil. In pasv mode it first flushes the memtables and
// the applied index (flushApplied), so that a clean restart replays
// nothing; the other modes do not flush (their WAL covers the memtable).
// The RocksDB objects are released even if the flush fails, and the flush
// error is returned.
func (s *Store) Close() error {
	if s.trunc != nil {
		// Before taking mu: a round may be waiting for it.
		s.trunc.stop()
	}
	if s.lr != nil {
		s.lr.stop() // before mu, as the truncator
	}
	s.stopActivityWatch() // before mu: a poll may be waiting for it
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.mode == ModePASV {
		_, err = s.flushApplied()
	}
	if s.lr != nil {
		s.lr.release()
	}
	s.release()
	return err
}

// clone copies b into a new non-nil slice.
func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}

// truncate shortens a key for an error message.
func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// Interface checks.
var (
	_ systems.StateMachine         = (*Store)(nil)
	_ systems.StateHasher          = (*Store)(nil)
	_ systems.Snapshotter          = (*Store)(nil)
	_ systems.GCReporter           = (*Store)(nil)
	_ systems.IndexEntriesReporter = (*Store)(nil)
	_ systems.SystemConfig         = (*Config)(nil)
	_ systems.StorageReporter      = (*Store)(nil)
)

// view creates a RocksDB iterator with newIter and, on an lsm-raft
// follower, takes the entries it holds at the same moment (a copy-on-write
// clone; nil when none), so that together they are one state (lsmraft.go
// lsmRaft.view). The caller closes the iterator.
func (s *Store) view(newIter func() *grocksdb.Iterator) (*grocksdb.Iterator, *btree.BTreeG[keyOp]) {
	if s.lr == nil {
		return newIter(), nil
	}
	return s.lr.view(newIter)
}

// snapshotReads returns read options pinned to a new RocksDB snapshot that
// do not fill the block cache (whole-store scans: state hash, snapshot
// streaming). Call release when done.
func (s *Store) snapshotReads() (ro *grocksdb.ReadOptions, release func()) {
	snap := s.db.NewSnapshot()
	ro = grocksdb.NewDefaultReadOptions()
	ro.SetSnapshot(snap)
	ro.SetFillCache(false)
	return ro, func() {
		ro.Destroy()
		s.db.ReleaseSnapshot(snap)
	}
}

// The paths of the operations at the RocksDB boundary (rocksIO), under
// <data>/rocksdb: a write batch (WAL and memtable; the WAL's sync in a
// truncation round) and a flush or a read (SST files). A fault's
// PathContains can tell them apart ("rocksdb/sst": only flushes and
// reads).
const (
	rocksWAL = "wal"
	rocksSST = "sst"
	// rocksFlushBytes is what a flush is taken to add to a full disk.
	rocksFlushBytes = 1 << 20
)

// rocksIO injects the disk faults of s.fs at a call into RocksDB that does
// an operation of kind, adding size bytes, on its files under what
// (rocksWAL, rocksSST; RocksDB's own file I/O is C++ and does not pass
// through the FS): ENOSPC or EIO before a write, EIO or a slow disk's
// latency before a sync. An injected sync failure fails the FS, as a real
// one would.
func (s *Store) rocksIO(kind vfs.OpKind, what string, size int64) error {
	if !s.fs.Injecting() {
		return nil
	}
	op := vfs.Op{Kind: kind, Path: filepath.Join(s.dir, what), SizeBytes: size}
	if err := s.fs.MaybeError(op); err != nil {
		return s.fs.Observe(op, err)
	}
	return nil
}

// rocksRead injects read faults before a RocksDB read: EIO, or a corrupt
// read, reported as RocksDB reports a block that fails its checksum (an
// error, never the bytes).
func (s *Store) rocksRead() error {
	if !s.fs.Injecting() {
		return nil
	}
	if err := s.rocksIO(vfs.OpRead, rocksSST, 0); err != nil {
		return err
	}
	if s.fs.CorruptRead(filepath.Join(s.dir, rocksSST)) {
		return fmt.Errorf("%w: %w", systems.ErrCorrupt, vfs.ErrCorruptRead)
	}
	return nil
}

// observe reports the outcome of a RocksDB call to the FS. RocksDB's
// errors are strings; a full disk ("No space left on device", RocksDB's
// IOError NoSpace) is wrapped as syscall.ENOSPC so that the node refuses
// writes until space returns.
func (s *Store) observe(kind vfs.OpKind, err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "No space left on device") {
		err = fmt.Errorf("%w (%w)", err, syscall.ENOSPC)
	}
	return s.fs.Observe(vfs.Op{Kind: kind, Path: s.dir}, err)
}
