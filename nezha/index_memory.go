package nezha

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"

	"github.com/nezha-harness/nezha/systems"
)

// MemoryIndex is the IndexMemory index. Nothing is persisted:
// AppliedIndex is 0 after NewMemoryIndex (or the GC checkpoint's, see
// checkpoint.go), and the node replays the Raft log above it on start.
//
// Point lookups: key -> Location lives in a hash table split into 256
// shards by the key's hash (MemoryIndex.hash, seeded per index). A shard is an
// open-addressing table with linear probing whose slots are one 64-byte
// cache line each: a meta word (state, key length, 42 bits of the hash),
// the key inline when it has at most 24 bytes (else the id of the key in
// the table's list of long keys), and the Location fields (a value with an
// expiry time, systems.Location.ExpiresUnixNano, keeps it in the table's
// list of expiry times, by an id in the high half of the length word). Readers
// take no lock: each shard has a sequence lock (seqlock), a counter the
// writer makes odd before it changes a slot in place and even again after;
// a reader retries when the counter was odd or changed while it read. A
// table that must grow or shed tombstones is rebuilt aside and published
// with an atomic pointer. Every shared word is read and written with
// sync/atomic, so the seqlock is well defined under the Go memory model
// and -race.
//
// Order: the set of keys is also kept in a B-tree (github.com/google/btree),
// changed only when a key is added or removed, not when its location
// changes. View clones the B-tree (a lazy copy-on-write clone, O(1)) under
// the lock Write holds per batch, so a view starts between batches and does
// not block Write afterwards. A view reads each key's location from the
// hash table; the writer, before it changes or deletes a key while views
// are open, records the key's previous location in each open view
// (pre-images), and the view prefers those, so it stays at its point in
// time.
//
// Write (one goroutine) applies a batch's changes in order; a concurrent
// Get sees each change whole and, per key, in order, and AppliedIndex
// moves only after the whole batch.
type MemoryIndex struct {
	// seed (keys longer than memoryInlineKeyBytes) and seeds (shorter
	// ones) are the random seeds of hash.
	seed   maphash.Seed
	seeds  [4]uint64
	shards [memoryShards]memoryShard

	applied atomic.Uint64

	mu   sync.Mutex             // held by Write per batch and by View to clone keys
	keys *btree.BTreeG[keyItem] // every live key (guarded by mu)
	// hashes and prefetched are Write's scratch (guarded by mu).
	hashes     []uint64
	prefetched uint64

	viewsMu sync.Mutex                    // serializes changes of views
	views   atomic.Pointer[[]*memoryView] // open views (replaced, never changed)
}

var _ Index = (*MemoryIndex)(nil)

// Memory index geometry.
const (
	// memoryShards is the number of hash table shards (a power of two; a
	// key's shard is given by its hash's low bits).
	memoryShards = 256
	// memorySlotWords is the size of one slot in 8-byte words (64 bytes).
	memorySlotWords = 8
	// memoryInlineKeyBytes is the longest key stored in its slot.
	memoryInlineKeyBytes = 24
	// memoryMinSlots is the smallest table of a shard.
	memoryMinSlots = 16
	// memoryMaxKeyBytes is the longest key the slot's 20-bit length field
	// holds (systems.MaxKeyBytes is well below it).
	memoryMaxKeyBytes = 1<<20 - 1
	// memoryBTreeDegree is the degree of the key B-tree.
	memoryBTreeDegree = 32
)

// Slot meta word: bits 0-1 state, bits 2-21 key length, bits 22-63 the
// same bits of the key's hash. A slot's home is bits 32+ of the hash.
const (
	slotEmpty   = 0
	slotFull    = 1
	slotDeleted = 2 // a tombstone: probing goes on past it
	slotState   = 3
	slotTagBits = 22
)

// memoryShard is one hash table shard, padded to a cache line.
type memoryShard struct {
	seq atomic.Uint64 // odd while the writer changes tab in place
	tab atomic.Pointer[memoryTable]
	// live and dead count full and deleted slots of tab (writer only).
	live, dead int
	_          [32]byte
}

// memoryTable is one shard's table. slots holds memorySlotWords words per
// slot: meta, three key words, Segment, Offset, Index, and Length in the
// low 32 bits of the last word with, in its high 32 bits, 0 or 1 + the id
// of the location's expiry time in expiries.
type memoryTable struct {
	slots []uint64
	mask  uint64 // number of slots - 1
	// long holds the keys over memoryInlineKeyBytes by the id in their
	// slot's first key word. Append-only until the table is rebuilt.
	long atomic.Pointer[[]string]
	// expiries holds the expiry times (Location.ExpiresUnixNano) of the
	// slots that have one. Append-only until the table is rebuilt.
	expiries atomic.Pointer[[]int64]
}

// NewMemoryIndex returns an empty in-memory index.
func NewMemoryIndex() *MemoryIndex {
	x := &MemoryIndex{seed: maphash.MakeSeed(), keys: btree.NewG[keyItem](memoryBTreeDegree, lessKeyItem)}
	for i := range x.seeds {
		x.seeds[i] = rand.Uint64()
	}
	for i := range x.shards {
		x.shards[i].tab.Store(newMemoryTable(memoryMinSlots))
	}
	return x
}

// keyItem is a key of the B-tree with its first 8 bytes as a number, so
// that most comparisons do not read the key's bytes (a cache miss each).
type keyItem struct {
	prefix uint64 // the key's first 8 bytes, big endian, zero-padded
	key    string
}

func newKeyItem(key string) keyItem {
	var b [8]byte
	copy(b[:], key)
	return keyItem{prefix: binary.BigEndian.Uint64(b[:]), key: key}
}

// lessKeyItem orders keys by their bytes: zero padding never reorders two
// prefixes, and equal prefixes fall back to the keys.
func lessKeyItem(a, b keyItem) bool {
	if a.prefix != b.prefix {
		return a.prefix < b.prefix
	}
	return a.key < b.key
}

func newMemoryTable(slots int) *memoryTable {
	t := &memoryTable{slots: make([]uint64, slots*memorySlotWords), mask: uint64(slots - 1)}
	t.long.Store(new([]string))
	t.expiries.Store(new([]int64))
	return t
}

// Kind returns IndexMemory.
func (x *MemoryIndex) Kind() string { return IndexMemory }

// Get implements Index; it takes no lock and never fails.
func (x *MemoryIndex) Get(key []byte) (loc systems.Location, found bool, err error) {
	var off, w uint64
	loc.Segment, off, loc.Index, w, loc.ExpiresUnixNano, found = x.lookupWords(unsafe.String(unsafe.SliceData(key), len(key)))
	loc.Offset, loc.Length = int64(off), uint32(w)
	return loc, found, nil
}

// get looks key up under its shard's seqlock.
func (x *MemoryIndex) get(key string) (loc systems.Location, found bool) {
	var off, w uint64
	loc.Segment, off, loc.Index, w, loc.ExpiresUnixNano, found = x.lookupWords(key)
	loc.Offset, loc.Length = int64(off), uint32(w)
	return loc, found
}

// lookupWords looks key up under its shard's seqlock and returns the
// location words of its slot (zero for an absent key) and its expiry time.
//
// A GET at 1M keys waits for one DRAM miss (its slot), and its speed is
// how many GETs the CPU works on while their misses are outstanding: the
// fewer instructions and mispredicted branches a GET has, the more of them
// overlap. So the location's words travel in registers (a Location is
// built only in the caller), and a key of at most memoryInlineKeyBytes
// first gets one straight-line attempt at its home slot, where about three
// keys in four are at a load of 1/2; a key elsewhere, or with an expiry
// time, or read while its shard changed, takes the full probe
// (slowLookup). The layouts measured and dropped are in
// docs/design/2026-12-05-memory-index.md.
func (x *MemoryIndex) lookupWords(key string) (seg, off, idx, w uint64, expires int64, found bool) {
	if len(key) > memoryInlineKeyBytes {
		return x.slowLookup(key)
	}
	k0, k1, k2 := packKey(key)
	h := x.hashWords(k0, k1, k2, len(key))
	sh := &x.shards[h%memoryShards]
	s1 := sh.seq.Load()
	t := sh.tab.Load()
	s := t.slotUnchecked(h >> 32 & t.mask)
	d := (atomic.LoadUint64(&s[0]) ^ slotMeta(h, len(key))) |
		(atomic.LoadUint64(&s[1]) ^ k0) | (atomic.LoadUint64(&s[2]) ^ k1) | (atomic.LoadUint64(&s[3]) ^ k2)
	seg, off, idx, w = atomic.LoadUint64(&s[4]), atomic.LoadUint64(&s[5]), atomic.LoadUint64(&s[6]), atomic.LoadUint64(&s[7])
	if d != 0 || w>>32 != 0 || s1&1 != 0 || sh.seq.Load() != s1 {
		return x.slowLookup(key)
	}
	return seg, off, idx, w, 0, true
}

// memoryMultiGetGroup is how many keys MultiGet hashes and touches ahead
// of their lookups (two slots each: 128 cache lines, 8 KiB, in the L1
// cache); of the sizes measured, the largest was the fastest
// (docs/design/2026-12-05-memory-index.md).
const memoryMultiGetGroup = 64

// MultiGet looks up many keys in one call, as RocksDB's MultiGet: locs[i]
// and found[i] are what Get(keys[i]) returns, each lookup on its own (a
// change of the index between two lookups may be seen by the second and
// not the first). It takes no lock, allocates nothing, and fails only when
// the three slices' lengths differ, writing nothing.
//
// A GET at 1M keys waits for the DRAM miss of its slot (see lookupWords),
// and one Get after another overlaps only as many misses as the CPU's
// window holds GETs, two or three. MultiGet first hashes a group of keys
// and reads the first word of each key's home slot and of the slot after
// it (where most displaced keys are), reads whose addresses depend only on
// the key, so that their misses are outstanding together (as Write's
// prefetch does for puts, and as hash joins prefetch a group of probes:
// Chen, Ailamaki, Gibbons, Mowry, "Improving Hash Join Performance through
// Prefetching", ICDE 2004); then it looks each key up in full, in cache.
// It touches the slot after the home too, because that is where most
// displaced keys are. BenchmarkMemoryIndex's op=MultiGet measures it.
func (x *MemoryIndex) MultiGet(keys [][]byte, locs []systems.Location, found []bool) error {
	if len(locs) != len(keys) || len(found) != len(keys) {
		return fmt.Errorf("nezha: memory index: MultiGet of %d keys into %d locations and %d found flags",
			len(keys), len(locs), len(found))
	}
	for base := 0; base < len(keys); base += memoryMultiGetGroup {
		group := keys[base:min(base+memoryMultiGetGroup, len(keys))]
		// touched only gives the touching loads a use; their values are not
		// needed (the lookups below read the slots again, under the seqlock).
		var touched uint64
		for _, key := range group {
			if len(key) <= memoryInlineKeyBytes {
				k0, k1, k2 := packKey(unsafe.String(unsafe.SliceData(key), len(key)))
				h := x.hashWords(k0, k1, k2, len(key))
				t := x.shards[h%memoryShards].tab.Load()
				i := h >> 32 & t.mask
				touched += atomic.LoadUint64(&t.slotUnchecked(i)[0]) + atomic.LoadUint64(&t.slotUnchecked((i + 1) & t.mask)[0])
			}
		}
		for i, key := range group {
			var off, w uint64
			loc := &locs[base+i]
			loc.Segment, off, loc.Index, w, loc.ExpiresUnixNano, found[base+i] = x.lookupWords(unsafe.String(unsafe.SliceData(key), len(key)))
			loc.Offset, loc.Length = int64(off), uint32(w)
		}
		_ = touched
	}
	return nil
}

// slowLookup is the full lookup of key: a probe from its home slot under
// the shard's seqlock, retried while changes overlap it, with the slot's
// expiry time.
func (x *MemoryIndex) slowLookup(key string) (seg, off, idx, w uint64, expires int64, found bool) {
	if len(key) > memoryMaxKeyBytes {
		return
	}
	h, k0, k1, k2 := x.hash(key)
	sh := &x.shards[h%memoryShards]
	for spins := 0; ; spins++ {
		if spins >= 4 { // the writer may be descheduled mid-change
			runtime.Gosched()
		}
		if seg, off, idx, w, expires, found, ok := sh.read(key, h, k0, k1, k2); ok {
			return seg, off, idx, w, expires, found
		}
	}
}

// hash returns key's hash under the index's seed and, for a key of at
// most memoryInlineKeyBytes, its packed words (packKey; zero for a longer
// key). A short key is hashed from those words, which its slot compares
// anyway, with wyhash's mixing (64x64 -> 128-bit multiplications folded
// by xor, as the Go runtime's fallback hash); a longer one with
// hash/maphash. The mixing needs a fraction of maphash's calls and
// instructions, and a GET's instructions bound how many GETs the CPU
// works on while their cache misses are outstanding.
func (x *MemoryIndex) hash(key string) (h, k0, k1, k2 uint64) {
	if len(key) > memoryInlineKeyBytes {
		return maphash.String(x.seed, key), 0, 0, 0
	}
	k0, k1, k2 = packKey(key)
	return x.hashWords(k0, k1, k2, len(key)), k0, k1, k2
}

// hashWords is hash of a key of n <= memoryInlineKeyBytes bytes packed
// into k0-k2 (packKey).
func (x *MemoryIndex) hashWords(k0, k1, k2 uint64, n int) uint64 {
	return mix64(mix64(k0^x.seeds[0], k1^x.seeds[1])^k2^x.seeds[2], uint64(n)^x.seeds[3])
}

// mix64 is wyhash's mixing step: the high and low halves of a*b, xored.
func mix64(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// read is one attempt at key's lookup in sh (see lookupWords) with key's
// hash and packed words (hash); ok is false if a change of the shard
// overlapped it.
func (sh *memoryShard) read(key string, h, k0, k1, k2 uint64) (seg, off, idx, w uint64, expires int64, found, ok bool) {
	want := slotMeta(h, len(key))
	s1 := sh.seq.Load()
	t := sh.tab.Load()
	s := t.lookup(key, h, want, k0, k1, k2)
	if s == nil {
		return 0, 0, 0, 0, 0, false, s1&1 == 0 && sh.seq.Load() == s1
	}
	seg, off, idx, w = atomic.LoadUint64(&s[4]), atomic.LoadUint64(&s[5]), atomic.LoadUint64(&s[6]), atomic.LoadUint64(&s[7])
	consistent := true
	if id := w >> 32; id != 0 {
		expires, consistent = t.expiry(id)
	}
	return seg, off, idx, w, expires, true, s1&1 == 0 && consistent && sh.seq.Load() == s1
}

// slotMeta is the meta word of a full slot holding a key of n bytes with
// hash h.
func slotMeta(h uint64, n int) uint64 {
	return h>>slotTagBits<<slotTagBits | uint64(n)<<2 | slotFull
}

// packKey returns a key of at most memoryInlineKeyBytes as three
// little-endian words, zero-padded: byte j of the key is byte j%8 of word
// j/8. It reads the key in whole words that never go past its end: the
// last word of a key of 8 bytes or more is the word ending at the key's
// end, shifted down over the bytes the previous word holds (a shift by 64
// gives zero in Go), and a key of 4 to 7 bytes is two overlapping 4-byte
// reads. TestPackKey checks it against the byte-by-byte definition.
func packKey(key string) (k0, k1, k2 uint64) {
	n := len(key)
	b := unsafe.Slice(unsafe.StringData(key), n)
	switch {
	case n >= 16:
		k0 = binary.LittleEndian.Uint64(b)
		k1 = binary.LittleEndian.Uint64(b[8:])
		k2 = binary.LittleEndian.Uint64(b[n-8:]) >> (8 * (24 - n))
	case n >= 8:
		k0 = binary.LittleEndian.Uint64(b)
		k1 = binary.LittleEndian.Uint64(b[n-8:]) >> (8 * (16 - n))
	case n >= 4:
		k0 = uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<(8*(n-4))
	default:
		for j := 0; j < n; j++ {
			k0 |= uint64(b[j]) << (8 * j)
		}
	}
	return k0, k1, k2
}

func (t *memoryTable) slot(i uint64) *[memorySlotWords]uint64 {
	return (*[memorySlotWords]uint64)(t.slots[i*memorySlotWords:])
}

// slotUnchecked is slot without bounds checks, for GET's first attempt:
// i must be at most t.mask (i & t.mask is), and t.slots holds t.mask+1
// slots for the table's lifetime.
func (t *memoryTable) slotUnchecked(i uint64) *[memorySlotWords]uint64 {
	return (*[memorySlotWords]uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(t.slots)), i*memorySlotWords*8))
}

// longKey returns the long key with the given id ("" for an id out of
// range, which only a torn read gives).
func (t *memoryTable) longKey(id uint64) string {
	l := *t.long.Load()
	if id >= uint64(len(l)) {
		return ""
	}
	return l[id]
}

// expiry returns the expiry time of id (1 + its position in t's list);
// ok is false for an id out of range, which only a torn read gives.
func (t *memoryTable) expiry(id uint64) (expiresUnixNano int64, ok bool) {
	e := *t.expiries.Load()
	if id > uint64(len(e)) {
		return 0, false
	}
	return e[id-1], true
}

// lookup is a reader's probe for key (hash h, meta want, packed k0-k2):
// the slot holding it, or nil.
func (t *memoryTable) lookup(key string, h, want, k0, k1, k2 uint64) *[memorySlotWords]uint64 {
	mask := t.mask
	i := h >> 32 & mask
	for n := uint64(0); n <= mask; n++ {
		s := t.slot(i)
		m := atomic.LoadUint64(&s[0])
		if m == want {
			if len(key) <= memoryInlineKeyBytes {
				if atomic.LoadUint64(&s[1]) == k0 && atomic.LoadUint64(&s[2]) == k1 && atomic.LoadUint64(&s[3]) == k2 {
					return s
				}
			} else if t.longKey(atomic.LoadUint64(&s[1])) == key {
				return s
			}
		} else if m&slotState == slotEmpty {
			return nil
		}
		i = (i + 1) & mask
	}
	return nil
}

// find is the writer's probe: the slot holding key, or, if key is absent,
// the first tombstone or empty slot on its probe path. The table always
// has an empty slot.
func (t *memoryTable) find(key string, h, want uint64) (at uint64, found bool) {
	i := h >> 32 & t.mask
	var free uint64
	hasFree := false
	for {
		s := t.slot(i)
		switch m := s[0]; {
		case m == want && t.holds(s, key):
			return i, true
		case m&slotState == slotEmpty:
			if hasFree {
				return free, false
			}
			return i, false
		case m&slotState == slotDeleted && !hasFree:
			free, hasFree = i, true
		}
		i = (i + 1) & t.mask
	}
}

// holds reports whether full slot s (of the right meta) holds key.
func (t *memoryTable) holds(s *[memorySlotWords]uint64, key string) bool {
	if len(key) > memoryInlineKeyBytes {
		return t.longKey(s[1]) == key
	}
	k0, k1, k2 := packKey(key)
	return s[1] == k0 && s[2] == k1 && s[3] == k2
}

// Write implements Index. It fails, changing nothing, if a key is longer
// than 1 MiB - 1.
func (x *MemoryIndex) Write(b *IndexBatch) error {
	for i := range b.ops {
		if n := len(b.ops[i].key); n > memoryMaxKeyBytes {
			return fmt.Errorf("nezha: memory index: key of %d bytes is over the maximum of %d", n, memoryMaxKeyBytes)
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var views []*memoryView // no view opens during the batch: View takes mu
	if p := x.views.Load(); p != nil {
		views = *p
	}
	for base := 0; base < len(b.ops); base += memoryPrefetchOps {
		ops := b.ops[base:min(base+memoryPrefetchOps, len(b.ops))]
		hashes := x.prefetch(ops)
		for i := range ops {
			op, h := &ops[i], hashes[i]
			sh := &x.shards[h%memoryShards]
			if op.delete {
				x.delete(sh, op.key, h, views)
			} else {
				x.put(sh, op.key, h, op.loc, views)
			}
		}
	}
	x.applied.Store(b.applied)
	return nil
}

// memoryPrefetchOps is how many ops of a batch Write hashes and prefetches
// ahead (their home slots fit in the L1 cache).
const memoryPrefetchOps = 64

// prefetch returns the hashes of ops' keys and reads the first word of
// each key's home slot, so that the cache misses of the ops overlap: the
// changes that follow are ordered by atomic read-modify-writes (fences on
// amd64), which would otherwise serialize one miss per op.
func (x *MemoryIndex) prefetch(ops []indexOp) []uint64 {
	hashes := x.hashes[:0]
	var sum uint64
	for i := range ops {
		h, _, _, _ := x.hash(ops[i].key)
		hashes = append(hashes, h)
		t := x.shards[h%memoryShards].tab.Load()
		sum += t.slots[(h>>32&t.mask)*memorySlotWords]
	}
	x.hashes, x.prefetched = hashes, sum
	return hashes
}

func (x *MemoryIndex) put(sh *memoryShard, key string, h uint64, loc systems.Location, views []*memoryView) {
	t := sh.tab.Load()
	want := slotMeta(h, len(key))
	i, found := t.find(key, h, want)
	if found {
		if loc.ExpiresUnixNano != 0 && len(*t.expiries.Load()) >= len(t.slots)/memorySlotWords {
			t = sh.rebuild(0) // sheds the expiry times of overwritten locations
			i, _ = t.find(key, h, want)
		}
		s := t.slot(i)
		for _, v := range views {
			v.record(key, t.slotLocation(s))
		}
		sh.seq.Add(1)
		t.storeLocation(s, loc)
		sh.seq.Add(1)
		return
	}
	if (sh.live+sh.dead+1)*4 > len(t.slots)/memorySlotWords*3 ||
		len(key) > memoryInlineKeyBytes && len(*t.long.Load()) >= len(t.slots)/memorySlotWords ||
		loc.ExpiresUnixNano != 0 && len(*t.expiries.Load()) >= len(t.slots)/memorySlotWords {
		t = sh.rebuild(1)
		i, _ = t.find(key, h, want)
	}
	s := t.slot(i)
	if s[0]&slotState == slotDeleted {
		sh.dead--
	}
	var k [3]uint64
	if len(key) <= memoryInlineKeyBytes {
		k[0], k[1], k[2] = packKey(key)
	} else {
		k[0] = t.addLong(key)
	}
	sh.seq.Add(1)
	atomic.StoreUint64(&s[1], k[0])
	atomic.StoreUint64(&s[2], k[1])
	atomic.StoreUint64(&s[3], k[2])
	t.storeLocation(s, loc)
	atomic.StoreUint64(&s[0], want)
	sh.seq.Add(1)
	sh.live++
	x.keys.ReplaceOrInsert(newKeyItem(key))
}

func (x *MemoryIndex) delete(sh *memoryShard, key string, h uint64, views []*memoryView) {
	t := sh.tab.Load()
	i, found := t.find(key, h, slotMeta(h, len(key)))
	if !found {
		return
	}
	s := t.slot(i)
	for _, v := range views {
		v.record(key, t.slotLocation(s))
	}
	sh.seq.Add(1)
	atomic.StoreUint64(&s[0], slotDeleted)
	sh.seq.Add(1)
	sh.live--
	sh.dead++
	x.keys.Delete(newKeyItem(key))
	if slots := len(t.slots) / memorySlotWords; slots > memoryMinSlots && sh.live*8 < slots {
		sh.rebuild(0) // shrink
	}
}

// slotLocation reads a slot of t's location (writer only).
func (t *memoryTable) slotLocation(s *[memorySlotWords]uint64) systems.Location {
	loc := systems.Location{Segment: s[4], Offset: int64(s[5]), Index: s[6], Length: uint32(s[7])}
	if id := s[7] >> 32; id != 0 {
		loc.ExpiresUnixNano = (*t.expiries.Load())[id-1]
	}
	return loc
}

// storeLocation writes loc into slot s of t (writer only, under the
// shard's seqlock). An expiry time is appended to t's list first, so that
// a reader that sees the new length word also sees the list holding it.
func (t *memoryTable) storeLocation(s *[memorySlotWords]uint64, loc systems.Location) {
	w := uint64(loc.Length)
	if loc.ExpiresUnixNano != 0 {
		e := append(*t.expiries.Load(), loc.ExpiresUnixNano)
		t.expiries.Store(&e)
		w |= uint64(len(e)) << 32
	}
	atomic.StoreUint64(&s[4], loc.Segment)
	atomic.StoreUint64(&s[5], uint64(loc.Offset))
	atomic.StoreUint64(&s[6], loc.Index)
	atomic.StoreUint64(&s[7], w)
}

// addLong appends key to t's long keys and returns its id. Readers holding
// the previous list never index past its length.
func (t *memoryTable) addLong(key string) uint64 {
	l := append(*t.long.Load(), key)
	t.long.Store(&l)
	return uint64(len(l) - 1)
}

// rebuild copies the shard's full slots into a new table sized for
// live+extra keys at a load of at most 1/2 (dropping tombstones and dead
// long keys) and publishes it. Readers of the old table still see a
// consistent state: the writer does not change it any more.
func (sh *memoryShard) rebuild(extra int) *memoryTable {
	old := sh.tab.Load()
	n := memoryMinSlots
	for n < 2*(sh.live+extra) {
		n *= 2
	}
	t := newMemoryTable(n)
	var long []string
	var expiries []int64
	oldExpiries := *old.expiries.Load()
	for i := uint64(0); i <= old.mask; i++ {
		s := old.slot(i)
		if s[0]&slotState != slotFull {
			continue
		}
		j := s[0] >> 32 & t.mask
		for t.slot(j)[0] != slotEmpty {
			j = (j + 1) & t.mask
		}
		d := t.slot(j)
		*d = *s
		if s[0]>>2&memoryMaxKeyBytes > memoryInlineKeyBytes {
			long = append(long, old.longKey(s[1]))
			d[1] = uint64(len(long) - 1)
		}
		if id := s[7] >> 32; id != 0 {
			expiries = append(expiries, oldExpiries[id-1])
			d[7] = uint64(uint32(s[7])) | uint64(len(expiries))<<32
		}
	}
	t.long.Store(&long)
	t.expiries.Store(&expiries)
	sh.tab.Store(t)
	sh.dead = 0
	return t
}

// AppliedIndex implements Index.
func (x *MemoryIndex) AppliedIndex() uint64 { return x.applied.Load() }

// View implements Index: it waits for a Write in progress, clones the key
// B-tree and registers the view for pre-images; Write goes on meanwhile.
func (x *MemoryIndex) View() (IndexView, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	v := &memoryView{x: x, applied: x.applied.Load(), keys: x.keys.Clone(), pre: make(map[string]systems.Location)}
	x.viewsMu.Lock()
	var views []*memoryView
	if p := x.views.Load(); p != nil {
		views = append(views, *p...)
	}
	views = append(views, v)
	x.views.Store(&views)
	x.viewsMu.Unlock()
	return v, nil
}

// Sync implements Index: nothing to do (see writeCheckpoint).
func (x *MemoryIndex) Sync() error { return nil }

// Close implements Index.
func (x *MemoryIndex) Close() error { return nil }

// Len returns the number of live keys.
func (x *MemoryIndex) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.keys.Len()
}

// memoryView is a MemoryIndex view: the keys at its point (a B-tree clone)
// and the previous locations of keys changed since (pre).
type memoryView struct {
	x        *MemoryIndex
	applied  uint64
	keys     *btree.BTreeG[keyItem]
	npre     atomic.Int64 // len(pre), read without mu
	mu       sync.Mutex   // guards pre
	pre      map[string]systems.Location
	released atomic.Bool
}

// record keeps key's location at the view's point: the location before
// the first change after it. The writer calls it before the change.
func (v *memoryView) record(key string, loc systems.Location) {
	v.mu.Lock()
	if _, ok := v.pre[key]; !ok {
		v.pre[key] = loc
		v.npre.Add(1)
	}
	v.mu.Unlock()
}

func (v *memoryView) AppliedIndex() uint64 { return v.applied }

// Iterate implements IndexView. A key's location is read from the hash
// table first and then replaced by its pre-image if it has one: a change
// the read saw was recorded before it was made.
func (v *memoryView) Iterate(start, end []byte, fn func([]byte, systems.Location) (bool, error)) error {
	if v.released.Load() {
		return fmt.Errorf("nezha: memory index view used after Release")
	}
	var (
		err error
		buf []byte
	)
	visit := func(item keyItem) bool {
		key := item.key
		loc, found := v.x.get(key)
		if v.npre.Load() > 0 {
			v.mu.Lock()
			if p, ok := v.pre[key]; ok {
				loc, found = p, true
			}
			v.mu.Unlock()
		}
		if !found { // a bug: a key removed after the view has a pre-image
			err = fmt.Errorf("nezha: memory index view at applied index %d: key %s neither present nor recorded", v.applied, keyString([]byte(key)))
			return false
		}
		buf = append(buf[:0], key...)
		var more bool
		more, err = fn(buf, loc)
		return more && err == nil
	}
	if len(end) == 0 {
		v.keys.AscendGreaterOrEqual(newKeyItem(string(start)), visit)
	} else {
		v.keys.AscendRange(newKeyItem(string(start)), newKeyItem(string(end)), visit)
	}
	return err
}

// Release implements IndexView: the writer stops recording for the view.
func (v *memoryView) Release() {
	if !v.released.CompareAndSwap(false, true) {
		return
	}
	x := v.x
	x.viewsMu.Lock()
	defer x.viewsMu.Unlock()
	var views []*memoryView
	for _, w := range *x.views.Load() {
		if w != v {
			views = append(views, w)
		}
	}
	x.views.Store(&views)
}
