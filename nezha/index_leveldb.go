package nezha

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"

	"github.com/nezha-harness/nezha/systems"
)

// LevelDBIndex is the IndexLevelDB index: a goleveldb database at
// <data>/index/ (the paper's dbfile/keyIndex).
//
// Durability: batches are written without fsync. This is safe because the
// Raft log, not the index, is the source of truth: a LevelDB batch is one
// journal record, so after a crash the index holds the effect of a prefix
// of the batches together with the applied index of that prefix, and the
// node replays the committed entries above that applied index from the Raft
// log (Apply is idempotent). Losing recent index writes costs replay time,
// never data. The same argument is the paper's PASV/Nezha one
// (docs/architecture.md sections 3 and 4.2).
type LevelDBIndex struct {
	db      *leveldb.DB
	dir     string
	applied atomic.Uint64
	wo      opt.WriteOptions
	lb      leveldb.Batch  // reused by Write (one writer goroutine)
	kbuf    []byte         // index key scratch of Write
	vbuf    []byte         // index value scratch of Write
	cache   *locationCache // nil: none (Config.IndexCacheEntries 0)
}

var _ Index = (*LevelDBIndex)(nil)

// OpenLevelDBIndex opens or creates the LevelDB index in dir and reads its
// applied index. cacheEntries bounds the location cache in front of
// LevelDB (locationCache; 0: none).
func OpenLevelDBIndex(dir string, cacheEntries int) (*LevelDBIndex, error) {
	db, err := leveldb.OpenFile(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("nezha: open leveldb index %s: %w", dir, err)
	}
	x := &LevelDBIndex{db: db, dir: dir, wo: opt.WriteOptions{Sync: false}, cache: newLocationCache(cacheEntries)}
	v, err := db.Get(metaApplied, nil)
	switch {
	case errors.Is(err, leveldb.ErrNotFound):
	case err != nil:
		db.Close()
		return nil, fmt.Errorf("nezha: leveldb index %s: read applied index: %w", dir, err)
	default:
		a, err := decodeApplied(v)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("nezha: leveldb index %s: %w", dir, err)
		}
		x.applied.Store(a)
	}
	return x, nil
}

// Kind returns IndexLevelDB.
func (x *LevelDBIndex) Kind() string { return IndexLevelDB }

// Get implements Index: from the location cache, or from LevelDB.
func (x *LevelDBIndex) Get(key []byte) (systems.Location, bool, error) {
	if x.cache == nil {
		return x.get(key)
	}
	loc, ok, gen := x.cache.get(key)
	if ok {
		return loc, true, nil
	}
	loc, found, err := x.get(key)
	if found && err == nil {
		x.cache.put(key, loc, gen)
	}
	return loc, found, err
}

// get reads key's location from LevelDB.
func (x *LevelDBIndex) get(key []byte) (systems.Location, bool, error) {
	v, err := x.db.Get(userKey(key), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return systems.Location{}, false, nil
	}
	if err != nil {
		return systems.Location{}, false, fmt.Errorf("nezha: leveldb index get %s: %w", keyString(key), err)
	}
	loc, err := decodeLocation(v)
	if err != nil {
		return systems.Location{}, false, iterateError(key, err)
	}
	return loc, true, nil
}

// Write implements Index: one LevelDB batch, not fsynced. The batch's
// keys leave the location cache first.
func (x *LevelDBIndex) Write(b *IndexBatch) error {
	if x.cache != nil {
		x.cache.beginWrite(b)
		defer x.cache.endWrite()
	}
	x.lb.Reset()
	for _, op := range b.ops {
		x.kbuf = append(append(x.kbuf[:0], userPrefix), op.key...)
		if op.delete {
			x.lb.Delete(x.kbuf) // the batch copies key and value
		} else {
			x.vbuf = appendLocation(x.vbuf[:0], op.loc)
			x.lb.Put(x.kbuf, x.vbuf)
		}
	}
	var a [8]byte
	x.lb.Put(metaApplied, appendApplied(a[:0], b.applied))
	if err := x.db.Write(&x.lb, &x.wo); err != nil {
		return fmt.Errorf("nezha: leveldb index %s: write batch up to index %d: %w", x.dir, b.applied, err)
	}
	x.applied.Store(b.applied)
	return nil
}

// AppliedIndex implements Index.
func (x *LevelDBIndex) AppliedIndex() uint64 { return x.applied.Load() }

// Sync implements Index: a synced write of the applied index makes the
// journal, and so every earlier batch, durable.
func (x *LevelDBIndex) Sync() error {
	var b leveldb.Batch
	var a [8]byte
	b.Put(metaApplied, appendApplied(a[:0], x.applied.Load()))
	if err := x.db.Write(&b, &opt.WriteOptions{Sync: true}); err != nil {
		return fmt.Errorf("nezha: leveldb index %s: sync: %w", x.dir, err)
	}
	return nil
}

// View implements Index with a LevelDB snapshot; it does not block Write.
func (x *LevelDBIndex) View() (IndexView, error) {
	s, err := x.db.GetSnapshot()
	if err != nil {
		return nil, fmt.Errorf("nezha: leveldb index %s: snapshot: %w", x.dir, err)
	}
	v := &levelDBView{s: s}
	raw, err := s.Get(metaApplied, nil)
	switch {
	case errors.Is(err, leveldb.ErrNotFound):
	case err != nil:
		s.Release()
		return nil, fmt.Errorf("nezha: leveldb index %s: read applied index: %w", x.dir, err)
	default:
		if v.applied, err = decodeApplied(raw); err != nil {
			s.Release()
			return nil, fmt.Errorf("nezha: leveldb index %s: %w", x.dir, err)
		}
	}
	return v, nil
}

// Close implements Index.
func (x *LevelDBIndex) Close() error { return x.db.Close() }

type levelDBView struct {
	s       *leveldb.Snapshot
	applied uint64
	once    atomic.Bool
}

func (v *levelDBView) AppliedIndex() uint64 { return v.applied }

func (v *levelDBView) Iterate(start, end []byte, fn func([]byte, systems.Location) (bool, error)) error {
	lo, hi := userRange(start, end)
	it := v.s.NewIterator(&util.Range{Start: lo, Limit: hi}, nil)
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
	if err := it.Error(); err != nil {
		return fmt.Errorf("nezha: leveldb index iterate: %w", err)
	}
	return nil
}

func (v *levelDBView) Release() {
	if v.once.CompareAndSwap(false, true) {
		v.s.Release()
	}
}
