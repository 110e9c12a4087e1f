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

// skiplistInitialBytes is the initial key/value buffer of a skiplistIndex
// (it grows as needed).
const skiplistInitialBytes = 1 << 20

// skiplistRebuildMinBytes: the skiplist's buffer is append-only (overwritten
// and deleted entries are not reclaimed), so once it holds more than this
// many bytes and over twice the live bytes, Write rebuilds it from the live
// entries (amortized O(1) per write).
const skiplistRebuildMinBytes = 4 << 20

// skiplistIndex is the IndexMemory index before MemoryIndex (kept for the
// benchmarks that compare the two): goleveldb's memdb, an ordered
// skiplist, behind a read-write lock that makes each Write atomic with
// respect to View; a view blocks Write until Release.
type skiplistIndex struct {
	mu sync.RWMutex // Write holds it exclusively; Get and views share it
	db *memdb.DB
	// written is the number of key/value bytes appended to db's buffer
	// since it was created (guarded by mu).
	written int
	applied atomic.Uint64
}

var _ Index = (*skiplistIndex)(nil)

// newSkiplistIndex returns an empty skiplist index.
func newSkiplistIndex() *skiplistIndex {
	return &skiplistIndex{db: memdb.New(comparer.DefaultComparer, skiplistInitialBytes)}
}

// Kind returns IndexMemory.
func (x *skiplistIndex) Kind() string { return IndexMemory }

// Get implements Index.
func (x *skiplistIndex) Get(key []byte) (systems.Location, bool, error) {
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
func (x *skiplistIndex) Write(b *IndexBatch) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, op := range b.ops {
		if op.delete {
			_ = x.db.Delete(userKey([]byte(op.key))) // ErrNotFound: already absent
			continue
		}
		k, v := userKey([]byte(op.key)), appendLocation(nil, op.loc)
		if err := x.db.Put(k, v); err != nil {
			return fmt.Errorf("nezha: memory index put: %w", err)
		}
		x.written += len(k) + len(v)
	}
	x.applied.Store(b.applied)
	if x.written > skiplistRebuildMinBytes && x.written > 2*x.db.Size() {
		x.rebuild()
	}
	return nil
}

// rebuild copies the live entries into a fresh skiplist. Caller holds mu.
func (x *skiplistIndex) rebuild() {
	live := x.db.Size()
	db := memdb.New(comparer.DefaultComparer, max(live+live/4, skiplistInitialBytes))
	it := x.db.NewIterator(nil)
	for it.Next() {
		_ = db.Put(it.Key(), it.Value())
	}
	it.Release()
	x.db, x.written = db, live
}

// AppliedIndex implements Index.
func (x *skiplistIndex) AppliedIndex() uint64 { return x.applied.Load() }

// View implements Index by holding the read lock until Release: Write waits
// meanwhile (and so, behind it, do new Gets).
func (x *skiplistIndex) View() (IndexView, error) {
	x.mu.RLock()
	return &skiplistView{x: x, applied: x.applied.Load()}, nil
}

// Sync implements Index: nothing to do.
func (x *skiplistIndex) Sync() error { return nil }

// Close implements Index.
func (x *skiplistIndex) Close() error { return nil }

type skiplistView struct {
	x        *skiplistIndex
	applied  uint64
	released atomic.Bool
}

func (v *skiplistView) AppliedIndex() uint64 { return v.applied }

func (v *skiplistView) Iterate(start, end []byte, fn func([]byte, systems.Location) (bool, error)) error {
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

func (v *skiplistView) Release() {
	if v.released.CompareAndSwap(false, true) {
		v.x.mu.RUnlock()
	}
}
