package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

var (
	// ErrNotFound is returned by Get for a key that is absent or deleted.
	ErrNotFound = errors.New("embedded: key not found")
	// ErrClosed is returned by calls on a closed DB; a write that returns
	// it was not committed.
	ErrClosed = errors.New("embedded: db closed")
	// ErrLocked is returned (wrapped) by Open when the directory is open
	// already, in this process or another.
	ErrLocked = vfs.ErrLocked
)

// KeyValue is one result of Scan.
type KeyValue = systems.KeyValue

// confState is the membership recorded in the value log's compaction
// markers: one voter, the DB itself (the log's format needs one).
var confState = raftpb.ConfState{Voters: []uint64{1}}

// term is the Raft term of every entry the DB appends (there is no
// election: the DB is the only writer of its log).
const term = 1

// DB is an open store. Its methods are safe for concurrent use; Close
// ends it (every later call returns ErrClosed).
type DB struct {
	dir   string
	opts  Options
	log   *raftlog.Log
	store *nezha.Store

	// logMu serializes the writers of the value log: the committer's
	// Append and GC's Roll and Compact (the node's Ready loop does the
	// same for a replicated store).
	logMu sync.Mutex
	// commitMu is held by the committer for each append-and-apply and by
	// Backup while it streams: a backup sees no Apply in between.
	commitMu sync.Mutex
	// applied is the index of the last entry applied (GC's compaction
	// bound: nothing above it may leave the log).
	applied atomic.Uint64

	// reading is held shared by each read and Backup while it uses the
	// store and the log, and exclusively by Close before it closes them:
	// a read that overlaps Close ends before the files close, or returns
	// ErrClosed (not an error of a closed file).
	reading sync.RWMutex

	reqc      chan *request
	quit      chan struct{} // closed by Close
	stopped   chan struct{} // closed when the committer has returned
	unlock    func()        // releases the directory's LOCK
	closeOnce sync.Once
	closeErr  error
	// failed holds the error that stopped the committer (a failed append
	// or apply: the state on disk is unknown, so no write is accepted).
	failed atomic.Pointer[error]
}

// request is one atomic write (a Put, a Delete or a Batch) waiting for the
// committer.
type request struct {
	cmds []systems.Command
	size int64
	done chan error
}

// Open opens the store in dir, creating it if needed, and recovers it: the
// value log cuts a torn tail (raftlog.Open), the index is opened (LevelDB
// under dir/index, or a memory index from its checkpoint) and every
// committed entry above the index's applied index is applied again, then
// GC starts. Layout: as a nezha node's data directory (nezha package doc).
// Errors: an invalid Options (every problem at once), corruption in the
// middle of the log, an index behind the log's compaction point.
func Open(dir string, opts Options) (*DB, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, errors.New("embedded: open: a directory is required")
	}
	if err := checkForeign(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded: open: %w", err)
	}
	unlock, err := vfs.OS().Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("embedded: open: %w (one DB per directory at a time)", err)
	}
	db, err := open(dir, opts)
	if err != nil {
		unlock()
		return nil, err
	}
	db.unlock = unlock
	return db, nil
}

// lockName is the file in the DB's directory that an open DB holds an
// exclusive flock(2) on.
const lockName = "LOCK"

// checkForeign refuses a directory that holds files but no value log: it
// is something else's (a RocksDB node's data, a user's files), and Open
// would add a store beside them. A missing or empty directory is a new
// DB.
func checkForeign(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil || len(des) == 0 {
		return nil // missing (created next) or unreadable (MkdirAll says)
	}
	for _, de := range des {
		if de.Name() == nezha.ValueLogDir {
			return nil
		}
	}
	return fmt.Errorf("embedded: open: %s holds %d entries but no %s/: not a store of this package (refusing to add one beside them; use an empty or new directory)", dir, len(des), nezha.ValueLogDir)
}

func open(dir string, opts Options) (*DB, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	lo := raftlog.DefaultOptions(filepath.Join(dir, nezha.ValueLogDir))
	lo.SegmentSizeBytes = opts.SegmentSizeBytes
	lo.Sync = opts.Sync
	lo.Bootstrap = confState
	lo.EntryCacheBytes = 0 // entries are applied straight from Append
	lo.Logger = logger
	lo.MmapReads = opts.MmapReads
	// Writes go through the page cache and the kernel keeps what it likes
	// cached, as for Badger's and Pebble's files (a library does not bound
	// the caller's page cache, and mapped reads want the pages).
	lo.PageCacheBytes = -1
	lo.DirectIO = false
	l, err := raftlog.Open(lo)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	db := &DB{dir: dir, opts: opts, log: l, reqc: make(chan *request, 1024),
		quit: make(chan struct{}), stopped: make(chan struct{})}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	db.opts.Clock = opts.Clock
	cfg := *opts.Store
	cfg.Clock = opts.Clock
	cfg.MmapReads = opts.MmapReads
	s, err := cfg.OpenStore(systems.Env{Dir: dir, Log: l, Control: logControl{db}, Logger: logger, NodeID: 1, Nodes: 1})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("embedded: %w", err)
	}
	db.store = s
	if err := db.replay(); err != nil {
		s.Close()
		l.Close()
		return nil, err
	}
	go db.commitLoop()
	return db, nil
}

// replay applies the committed entries above the index's applied index.
// The commit index is the one the last complete group commit recorded
// (the HardState record written after its entries): entries of a group
// commit that a crash cut short are above it, were never acknowledged,
// and are replaced by the next append.
func (db *DB) replay() error {
	commit := db.log.HardState().Commit
	applied := max(db.store.AppliedIndex(), db.log.CompactedIndex())
	if applied > commit {
		// Only possible without fsync (Options.Sync false) and a crash of
		// the machine, which lost the log's tail but not the index's.
		return fmt.Errorf("embedded: the %s index is at applied index %d, beyond the value log's last complete commit %d: "+
			"the log lost acknowledged writes (a machine crash with Sync off?); remove %s to rebuild the index from the log",
			db.store.IndexKind(), applied, commit, filepath.Join(db.dir, nezha.IndexDir))
	}
	for lo := applied + 1; lo <= commit; {
		ents, err := db.log.Entries(lo, commit+1, 64<<20)
		if err != nil {
			return fmt.Errorf("embedded: replay entries %d..%d: %w", lo, commit, err)
		}
		if err := db.apply(ents); err != nil {
			return err
		}
		lo = ents[len(ents)-1].Index + 1
	}
	db.applied.Store(max(applied, commit))
	return nil
}

// apply hands appended entries to the store.
func (db *DB) apply(ents []raftpb.Entry) error {
	applied := make([]systems.AppliedEntry, len(ents))
	for i, e := range ents {
		c, err := systems.DecodeCommand(e.Data)
		if err != nil {
			return fmt.Errorf("embedded: entry %d: %w", e.Index, err)
		}
		loc, ok := db.log.Location(e.Index)
		if !ok {
			return fmt.Errorf("embedded: entry %d has no location in the log", e.Index)
		}
		applied[i] = systems.AppliedEntry{Index: e.Index, Term: e.Term, Command: c, Location: loc}
	}
	if err := db.store.Apply(applied); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	return nil
}

// Put sets key to value; it returns once the write is in the value log
// (fsynced with Options.Sync) and visible to Get and Scan. Errors: an
// empty or too long key (systems.MaxKeyBytes), a value over
// Options.MaxValueBytes, ErrClosed, or the error that stopped the DB.
func (db *DB) Put(key, value []byte) error {
	var b Batch
	b.Put(key, value)
	return db.Write(&b)
}

// PutWithTTL sets key to value until ttl from now (Options.Clock): from
// then on Get, Scan and Backup treat the key as absent and GC drops it.
// The expiry time is stored with the write, so it survives restarts and
// backups. ttl must be positive and at most systems.MaxTTL (100 years),
// and the expiry time must fall before 2262 (systems.ExpiryUnixNano).
func (db *DB) PutWithTTL(key, value []byte, ttl time.Duration) error {
	var b Batch
	if err := b.PutWithTTL(key, value, ttl); err != nil {
		return err
	}
	return db.Write(&b)
}

// Delete removes key (no error if it is absent), durably as Put.
func (db *DB) Delete(key []byte) error {
	var b Batch
	b.Delete(key)
	return db.Write(&b)
}

// Write commits the operations of b atomically: after a crash either all
// of them are recovered or none (they share one group commit, whose
// HardState record follows them), and readers see all or none (one index
// batch). b may be reused after Write returns. An empty batch is a no-op.
func (db *DB) Write(b *Batch) error {
	if len(b.cmds) == 0 {
		return nil
	}
	if b.size > db.opts.MaxBatchBytes {
		return fmt.Errorf("embedded: a batch of %d bytes is over Options.MaxBatchBytes (%d); split it", b.size, db.opts.MaxBatchBytes)
	}
	now := db.opts.Clock()
	for i := range b.cmds {
		c := &b.cmds[i]
		if b.ttls != nil && b.ttls[i] > 0 {
			exp, err := systems.ExpiryUnixNano(now, b.ttls[i])
			if err != nil {
				return fmt.Errorf("embedded: key %.40q: %w", c.Key, err)
			}
			c.ExpiresUnixNano = exp
		}
		if err := systems.CheckKey(c.Key); err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
		if err := systems.CheckValue(c.Value, db.opts.MaxValueBytes); err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
	}
	if err := db.err(); err != nil {
		return err
	}
	r := &request{cmds: b.cmds, size: b.size, done: make(chan error, 1)}
	select {
	case db.reqc <- r:
	case <-db.stopped:
		return db.stoppedErr()
	}
	select {
	case err := <-r.done:
		return err
	case <-db.stopped:
		select {
		case err := <-r.done:
			return err
		default:
			return db.stoppedErr()
		}
	}
}

func (db *DB) err() error {
	if p := db.failed.Load(); p != nil {
		return *p
	}
	select {
	case <-db.quit:
		return ErrClosed
	default:
		return nil
	}
}

func (db *DB) stoppedErr() error {
	if p := db.failed.Load(); p != nil {
		return *p
	}
	return ErrClosed
}

// commitLoop is the committer: it gathers the waiting requests (group
// commit), appends them with one vectored write and one fdatasync, applies
// them to the store and answers them.
func (db *DB) commitLoop() {
	defer close(db.stopped)
	next := db.applied.Load() + 1
	var group []*request
	for {
		group = group[:0]
		select {
		case r := <-db.reqc:
			group = append(group, r)
		case <-db.quit:
			return
		}
		size := group[0].size
	gather:
		for size < db.opts.MaxCommitBytes {
			select {
			case r := <-db.reqc:
				group = append(group, r)
				size += r.size
			default:
				break gather
			}
		}
		if !db.waitStall() {
			for _, r := range group {
				r.done <- ErrClosed
			}
			return
		}
		err := db.commit(group, next)
		for _, r := range group {
			r.done <- err
		}
		if err != nil {
			db.failed.Store(&err)
			db.logf("embedded: commit failed; the DB accepts no more writes", "err", err)
			return
		}
		next = db.applied.Load() + 1
	}
}

// waitStall holds the committer while GC's debt is over its limit
// (systems.WriteStaller); false if the DB closed meanwhile.
func (db *DB) waitStall() bool {
	if db.store.WriteStall() == nil {
		return true
	}
	t := time.NewTicker(db.opts.StallPollInterval)
	defer t.Stop()
	for db.store.WriteStall() != nil {
		select {
		case <-t.C:
		case <-db.quit:
			return false
		}
	}
	return true
}

// commit appends the commands of group as entries next, next+1, ... with a
// HardState whose commit index is the last of them, then applies them.
func (db *DB) commit(group []*request, next uint64) error {
	n := 0
	for _, r := range group {
		n += len(r.cmds)
	}
	ents := make([]raftpb.Entry, 0, n)
	idx := next
	for _, r := range group {
		for i := range r.cmds {
			c := &r.cmds[i]
			ents = append(ents, raftpb.Entry{Term: term, Index: idx, Type: raftpb.EntryNormal,
				Data: systems.AppendCommand(make([]byte, 0, c.EncodedSize()), c)})
			idx++
		}
	}
	last := idx - 1
	db.commitMu.Lock()
	defer db.commitMu.Unlock()
	db.logMu.Lock()
	err := db.log.Append(raftpb.HardState{Term: term, Vote: 1, Commit: last}, ents, true)
	db.logMu.Unlock()
	if err != nil {
		return fmt.Errorf("embedded: append entries %d..%d: %w", next, last, err)
	}
	if err := db.apply(ents); err != nil {
		return err
	}
	db.applied.Store(last)
	return nil
}

func (db *DB) logf(msg string, args ...any) {
	l := db.opts.Logger
	if l == nil {
		l = slog.Default()
	}
	l.Error(msg, args...)
}

// Get returns the value of key (the caller owns it), or ErrNotFound.
// A read error (a record that fails its checksum, wrapping systems.ErrCorrupt)
// concerns this key only.
func (db *DB) Get(key []byte) ([]byte, error) {
	if err := db.beginRead(); err != nil {
		return nil, err
	}
	defer db.reading.RUnlock()
	v, found, err := db.store.Get(key)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNotFound
	}
	return v, nil
}

// GetAppend appends the value of key to dst and returns the result, or
// ErrNotFound (with dst). It is Get for callers that reuse a buffer: a
// value in a sorted run (where GC puts every value that stays) is copied
// straight into dst's room, so passing the same buffer again, e.g.
// buf, err = db.GetAppend(buf[:0], key), allocates nothing per GET, as
// Badger's Item.ValueCopy(dst) does. Errors as Get's.
func (db *DB) GetAppend(dst, key []byte) ([]byte, error) {
	if err := db.beginRead(); err != nil {
		return dst, err
	}
	defer db.reading.RUnlock()
	out, found, err := db.store.GetAppend(dst, key)
	if err != nil {
		return dst, err
	}
	if !found {
		return dst, ErrNotFound
	}
	return out, nil
}

// ScanFunc calls fn with the pairs Scan(start, end, limit) would return,
// in ascending key order, until fn returns false or an error (which
// ScanFunc returns). key and value are valid only during the call: the
// values are read into one buffer that the scan reuses, so a scan does not
// allocate a buffer per value. Errors as Scan's.
func (db *DB) ScanFunc(start, end []byte, limit int, fn func(key, value []byte) (bool, error)) error {
	if limit < 0 {
		return fmt.Errorf("embedded: scan limit %d must not be negative", limit)
	}
	if err := db.beginRead(); err != nil {
		return err
	}
	defer db.reading.RUnlock()
	return db.store.ScanFunc(start, end, limit, fn)
}

// Scan returns the pairs with start <= key < end in ascending key order
// (empty end: no upper bound), at most limit of them (0: all, held in
// memory), from one consistent view of the index.
func (db *DB) Scan(start, end []byte, limit int) ([]KeyValue, error) {
	if limit < 0 {
		return nil, fmt.Errorf("embedded: scan limit %d must not be negative", limit)
	}
	if err := db.beginRead(); err != nil {
		return nil, err
	}
	defer db.reading.RUnlock()
	kvs, _, err := db.store.Scan(start, end, limit, 0)
	return kvs, err
}

// beginRead holds reading shared for a read of the store and the log
// (the caller releases it with reading.RUnlock), or returns ErrClosed.
func (db *DB) beginRead() error {
	db.reading.RLock()
	select {
	case <-db.quit:
		db.reading.RUnlock()
		return ErrClosed
	default:
		return nil
	}
}

// GCRounds returns the most recent GC rounds, oldest first (none without
// GC).
func (db *DB) GCRounds() []systems.GCRound { return db.store.GCRounds() }

// StorageShape describes the files: value log bytes, sorted runs and
// their tiers, live bytes.
func (db *DB) StorageShape() systems.StorageShape { return db.store.StorageShape() }

// Close stops the committer (writes still waiting return ErrClosed), waits
// for the reads and the Backup under way, stops GC, fsyncs the value log
// (Options.Sync) and closes the files. It is safe to call more than once
// and concurrently with every other method; later calls return the first
// one's error.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		close(db.quit)
		<-db.stopped
		db.reading.Lock() // later reads see quit closed
		db.closeErr = errors.Join(db.store.Close(), db.log.Sync(), db.log.Close())
		db.unlock()
		db.reading.Unlock()
	})
	return db.closeErr
}

// Batch collects puts and deletes that DB.Write commits atomically. The
// zero value is an empty batch; keys and values are not copied, so they
// must not change until Write returns.
type Batch struct {
	cmds []systems.Command
	// ttls[i] is the TTL of cmds[i] (0: none); nil when no op has one.
	ttls []time.Duration
	size int64
}

// Put adds key = value to b.
func (b *Batch) Put(key, value []byte) { b.add(systems.OpPut, key, value, 0) }

// PutWithTTL adds key = value to b, expiring ttl after DB.Write is called
// (see DB.PutWithTTL). ttl must pass systems.CheckTTL.
func (b *Batch) PutWithTTL(key, value []byte, ttl time.Duration) error {
	if err := systems.CheckTTL(ttl); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	b.add(systems.OpPut, key, value, ttl)
	return nil
}

// Delete adds the removal of key to b.
func (b *Batch) Delete(key []byte) { b.add(systems.OpDelete, key, nil, 0) }

func (b *Batch) add(op systems.Op, key, value []byte, ttl time.Duration) {
	b.cmds = append(b.cmds, systems.Command{Op: op, Key: key, Value: value})
	if ttl > 0 && b.ttls == nil {
		b.ttls = make([]time.Duration, len(b.cmds)-1, cap(b.cmds))
	}
	if b.ttls != nil {
		b.ttls = append(b.ttls, ttl)
	}
	b.size += int64(len(key) + len(value))
}

// Len is the number of operations in b.
func (b *Batch) Len() int { return len(b.cmds) }

// Reset empties b for reuse.
func (b *Batch) Reset() {
	clear(b.cmds)
	b.cmds, b.ttls, b.size = b.cmds[:0], nil, 0
}

// logControl implements systems.LogControl for the store's GC over the
// DB's log, as the node does (raftkv/node/control.go) with the Ready loop
// replaced by logMu.
type logControl struct{ db *DB }

func (c logControl) Segments() []systems.SegmentInfo { return c.db.log.Segments() }

func (c logControl) Roll(context.Context) error {
	c.db.logMu.Lock()
	defer c.db.logMu.Unlock()
	return c.db.log.Roll()
}

func (c logControl) Compact(_ context.Context, index uint64) error {
	c.db.logMu.Lock()
	defer c.db.logMu.Unlock()
	return c.db.log.Compact(index, confState)
}

func (c logControl) CompactedIndex() uint64 { return c.db.log.CompactedIndex() }

// CompactBound is the applied index: no follower needs older entries.
func (c logControl) CompactBound() uint64 { return c.db.applied.Load() }

func (c logControl) RemoveSegment(id uint64) error { return c.db.log.RemoveSegment(id) }
