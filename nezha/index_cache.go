package nezha

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/nezha-harness/nezha/systems"
)

// locationCache is a bounded cache of key -> Location in front of the
// LevelDB index, as RocksDB's row cache (ColumnFamilyOptions::row_cache)
// sits in front of its tables: a GET whose key is cached reads no LevelDB
// memtable or table. In a CPU profile of a nezha node serving stale GETs
// of 60,000 keys after a load and its GC round, LevelDB's Get (table
// block seeks, its block cache, memtable skiplist searches) was 45 % of
// the node's CPU.
//
// Only reads fill the cache; Write invalidates the keys it changes. A read
// that misses inserts what it read from LevelDB only if no Write began
// since the read did (gen): otherwise it could insert a location that
// Write has replaced, and a later GET would read a value older than one
// an earlier GET returned. While a Write is under way (gen odd), its keys
// are absent from the cache and no read inserts, so every GET of them
// reads LevelDB, which moves from the old batch to the new one at once.
//
// Eviction is random (Go's map iteration order) once a shard is full.
type locationCache struct {
	// gen is odd while a Write is under way; every Write adds 2.
	gen      atomic.Uint64
	seed     maphash.Seed // of the shard hash
	perShard int
	shards   [locationCacheShards]locationCacheShard
}

const locationCacheShards = 64

type locationCacheShard struct {
	mu sync.RWMutex
	m  map[string]systems.Location
	_  [24]byte // apart from the next shard's lock
}

// newLocationCache returns a cache of about entries keys (rounded up to
// a multiple of the shard count), or nil for entries <= 0 (no cache).
func newLocationCache(entries int) *locationCache {
	if entries <= 0 {
		return nil
	}
	c := &locationCache{seed: maphash.MakeSeed(), perShard: (entries + locationCacheShards - 1) / locationCacheShards}
	for i := range c.shards {
		c.shards[i].m = make(map[string]systems.Location)
	}
	return c
}

func (c *locationCache) shard(key string) *locationCacheShard {
	return &c.shards[maphash.String(c.seed, key)%locationCacheShards]
}

// get returns key's cached location, and the generation a read that
// misses must pass to put.
func (c *locationCache) get(key []byte) (loc systems.Location, ok bool, gen uint64) {
	gen = c.gen.Load()
	k := unsafe.String(unsafe.SliceData(key), len(key)) // not kept
	sh := c.shard(k)
	sh.mu.RLock()
	loc, ok = sh.m[k]
	sh.mu.RUnlock()
	return loc, ok, gen
}

// put caches loc, read from LevelDB after get returned gen, unless a
// Write began since (or was under way then).
func (c *locationCache) put(key []byte, loc systems.Location, gen uint64) {
	if gen&1 != 0 {
		return
	}
	sh := c.shard(unsafe.String(unsafe.SliceData(key), len(key)))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	if _, ok := sh.m[string(key)]; !ok && len(sh.m) >= c.perShard {
		for k := range sh.m {
			delete(sh.m, k)
			break
		}
	}
	sh.m[string(key)] = loc
}

// beginWrite makes gen odd and removes the keys of b: from here until
// endWrite no read inserts, and a read of one of b's keys reads LevelDB.
func (c *locationCache) beginWrite(b *IndexBatch) {
	c.gen.Add(1)
	for i := range b.ops {
		key := b.ops[i].key
		sh := c.shard(key)
		sh.mu.Lock()
		delete(sh.m, key)
		sh.mu.Unlock()
	}
}

// endWrite makes gen even again, once LevelDB holds the batch.
func (c *locationCache) endWrite() { c.gen.Add(1) }
