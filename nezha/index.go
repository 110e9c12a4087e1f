package nezha

import (
	"fmt"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// Index kinds, the values of the -index flag.
const (
	// IndexLevelDB keeps key -> Location in LevelDB under <data>/index/, as
	// the paper's code does (dbfile/keyIndex). It survives restarts: the node
	// replays only the entries above the stored applied index.
	IndexLevelDB = "leveldb"
	// IndexMemory keeps key -> Location in memory (MemoryIndex: a sharded
	// hash table with lock-free reads beside an ordered B-tree of the keys).
	// It starts empty (applied index 0, or the GC checkpoint's) and is
	// rebuilt by replaying the Raft log on every start.
	IndexMemory = "memory"
)

// DefaultIndexCacheEntries is the default Config.IndexCacheEntries.
const DefaultIndexCacheEntries = 1 << 18

// IndexKinds returns the accepted -index values.
func IndexKinds() []string { return []string{IndexLevelDB, IndexMemory} }

// Index maps user keys to the Location of their latest value in the value
// log, and stores the applied index in the same atomic batches
// (docs/architecture.md section 4.2). Write is called by one goroutine (the apply
// goroutine); Get, View and AppliedIndex by any number of goroutines
// concurrently with it.
type Index interface {
	// Kind is IndexLevelDB or IndexMemory.
	Kind() string
	// Get returns the location of key's latest value; found is false if the
	// key is absent or deleted. Errors from a corrupt index entry wrap
	// systems.ErrCorrupt.
	Get(key []byte) (loc systems.Location, found bool, err error)
	// Write applies b atomically: a View sees all of it or none of it.
	Write(b *IndexBatch) error
	// AppliedIndex is the applied index of the last Write (or, after a
	// restart, the one stored in the index; always 0 for IndexMemory).
	AppliedIndex() uint64
	// View returns a consistent read-only view of the index. The caller
	// must Release it. Neither kind's view blocks Write until Release (an
	// IndexMemory View waits for a Write in progress to finish).
	View() (IndexView, error)
	// Sync makes every Write so far durable (IndexMemory: a no-op; its
	// durability is the checkpoint GC writes).
	Sync() error
	// Close releases the index. No other method may be called after it.
	Close() error
}

// IndexView is a consistent, point-in-time view of an Index.
type IndexView interface {
	// AppliedIndex is the applied index the view reflects.
	AppliedIndex() uint64
	// Iterate calls fn for every live user key in [start, end) in ascending
	// byte order (empty end: no upper bound) until fn returns false or an
	// error, which Iterate returns. key is valid only during the call.
	Iterate(start, end []byte, fn func(key []byte, loc systems.Location) (bool, error)) error
	// Release frees the view. It is safe to call more than once.
	Release()
}

// indexOp is one change of an IndexBatch. key is a copy that nothing
// modifies: an Index may keep it after Write.
type indexOp struct {
	key    string // user key
	loc    systems.Location
	delete bool
}

// IndexBatch collects the index changes of one Apply call: key -> Location
// puts, deletes (tombstones) and the applied index they bring the index to.
type IndexBatch struct {
	ops     []indexOp
	applied uint64
	// bytes is the sum of the lengths of the index keys and values.
	bytes int
}

// Put records key -> loc. key is copied.
func (b *IndexBatch) Put(key []byte, loc systems.Location) {
	b.ops = append(b.ops, indexOp{key: string(key), loc: loc})
	var enc [maxLocationBytes]byte
	b.bytes += 1 + len(key) + len(appendLocation(enc[:0], loc))
}

// Delete records the removal of key. key is copied.
func (b *IndexBatch) Delete(key []byte) {
	b.ops = append(b.ops, indexOp{key: string(key), delete: true})
	b.bytes += 1 + len(key)
}

// SetApplied sets the applied index stored with the batch.
func (b *IndexBatch) SetApplied(index uint64) { b.applied = index }

// Len is the number of puts and deletes in b.
func (b *IndexBatch) Len() int { return len(b.ops) }

// SizeBytes is about what writing the batch adds to the index's files.
func (b *IndexBatch) SizeBytes() int64 { return int64(b.bytes) + 16 }

// Reset empties b for reuse.
func (b *IndexBatch) Reset() {
	clear(b.ops)
	b.ops, b.applied, b.bytes = b.ops[:0], 0, 0
}

// OpenIndex opens the index of the given kind; dir is used by IndexLevelDB
// only (created if missing), with a location cache of
// DefaultIndexCacheEntries.
func OpenIndex(kind, dir string) (Index, error) {
	return openIndex(kind, dir, DefaultIndexCacheEntries)
}

// openIndex is OpenIndex with the LevelDB index's cache size
// (Config.IndexCacheEntries).
func openIndex(kind, dir string, cacheEntries int) (Index, error) {
	switch kind {
	case IndexLevelDB:
		return OpenLevelDBIndex(dir, cacheEntries)
	case IndexMemory:
		return NewMemoryIndex(), nil
	}
	return nil, cmdline.Usagef("-index %q: want one of %v", kind, IndexKinds())
}

// iterateError wraps an error from decoding an index entry with its key.
func iterateError(key []byte, err error) error {
	return fmt.Errorf("nezha: index entry of key %s: %w", keyString(key), err)
}
