package nezha

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/syndtr/goleveldb/leveldb/comparer"
	"github.com/syndtr/goleveldb/leveldb/memdb"
	"github.com/syndtr/goleveldb/leveldb/util"

	"github.com/nezha-harness/nezha/systems"
)

// memoryInitialBytes is the initial key/value buffer of a MemoryIndex
// (it grows as needed).
const memoryInitialBytes = 1 << 20

// memoryRebuildMinBytes: the skiplist's buffer is append-only (overwritten
// and deleted entries are not reclaimed), so once it holds more than this
// many bytes and over twice the live bytes, Write rebuilds it from the live
// entries (amortized O(1) per write).
const memoryRebuildMinBytes = 4 << 20

// MemoryIndex is the IndexMemory index: goleveldb's memdb, an ordered
// skiplist, behind a read-write lock that makes each Write atomic with
// respect to View. Nothing is persisted: AppliedIndex is 0 after
// NewMemoryIndex, so the node replays the whole Raft log and the index is
// rebuilt on every start.
type MemoryIndex struct {
	mu sync.RWMutex // Write holds it exclusively; Get and views share it
	db *memdb.DB
	// written is the number of key/value bytes appended to db's buffer
	// since it was created (guarded by mu).
	written int
	applied atomic.Uint64
}

var _ Index = (*MemoryIndex)(nil)

// NewMemoryIndex returns an empty in-memory index.
func NewMemoryIndex() *MemoryIndex {
	return &MemoryIndex{db: memdb.New(comparer.DefaultComparer, memoryInitialBytes)}
}

// Kind returns IndexMemory.
func (x *MemoryIndex) Kind() string { return IndexMemory }

// Get implements Index.
func (x *MemoryIndex) Get(key []byte) (systems.Location, bool, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	v, err := x.db.Get(userKey(key))
	if err != nil { // memdb.ErrNotFound is its only error
		return systems.Location{}, false, nil
	}
	loc, err := decodeLocation(v)
	if err != nil {
		return systems.Location{}, false, iterateError(key, err)
	}
	return loc, true, nil
}

// Write implements Index.
func (x *MemoryIndex) Write(b *IndexBatch) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, op := range b.ops {
		if op.delete {
			_ = x.db.Delete(op.key) // ErrNotFound: already absent
			continue
		}
		if err := x.db.Put(op.key, op.value); err != nil {
			return fmt.Errorf("nezha: memory index put: %w", err)
		}
		x.written += len(op.key) + len(op.value)
	}
	x.applied.Store(b.applied)
	if x.written > memoryRebuildMinBytes && x.written > 2*x.db.Size() {
		x.rebuild()
	}
	return nil
}

// rebuild copies the live entries into a fresh skiplist. Caller holds mu.
func (x *MemoryIndex) rebuild() {
	live := x.db.Size()
	db := memdb.New(comparer.DefaultComparer, max(live+live/4, memoryInitialBytes))
	it := x.db.NewIterator(nil)
	for it.Next() {
		_ = db.Put(it.Key(), it.Value())
	}
	it.Release()
	x.db, x.written = db, live
}

// AppliedIndex implements Index.
func (x *MemoryIndex) AppliedIndex() uint64 { return x.applied.Load() }

// View implements Index by holding the read lock until Release: Write waits
// meanwhile (and so, behind it, do new Gets).
func (x *MemoryIndex) View() (IndexView, error) {
	x.mu.RLock()
	return &memoryView{x: x, applied: x.applied.Load()}, nil
}

// Sync implements Index: nothing to do (see WriteCheckpoint).
func (x *MemoryIndex) Sync() error { return nil }

// Close implements Index.
func (x *MemoryIndex) Close() error { return nil }

type memoryView struct {
	x        *MemoryIndex
	applied  uint64
	released atomic.Bool
}

func (v *memoryView) AppliedIndex() uint64 { return v.applied }

func (v *memoryView) Iterate(start, end []byte, fn func([]byte, systems.Location) (bool, error)) error {
	if v.released.Load() {
		return fmt.Errorf("nezha: memory index view used after Release")
	}
	lo, hi := userRange(start, end)
	it := v.x.db.NewIterator(&util.Range{Start: lo, Limit: hi})
	defer it.Release()
	for it.Next() {
		key := it.Key()[1:]
		loc, err := decodeLocation(it.Value())
		if err != nil {
			return iterateError(key, err)
		}
		if ok, err := fn(key, loc); err != nil || !ok {
			return err
		}
	}
	return nil
}

func (v *memoryView) Release() {
	if v.released.CompareAndSwap(false, true) {
		v.x.mu.RUnlock()
	}
}
