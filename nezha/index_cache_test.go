package nezha

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// TestLocationCacheRules: a read's insert is refused once a Write began
// after the read (or was under way during it), a Write removes its keys,
// and a full shard evicts to take a new key.
func TestLocationCacheRules(t *testing.T) {
	c := newLocationCache(locationCacheShards) // one key per shard
	k := []byte("k1")
	loc := systems.Location{Segment: 1, Offset: 10, Length: 5, Index: 7}
	_, ok, gen := c.get(k)
	if ok {
		t.Fatal("hit in an empty cache")
	}
	c.put(k, loc, gen)
	if got, ok, _ := c.get(k); !ok || got != loc {
		t.Fatalf("get after put: %v %v", got, ok)
	}
	var b IndexBatch
	b.Put(k, systems.Location{Segment: 2, Index: 8})
	_, _, before := c.get([]byte("k2"))
	c.beginWrite(&b)
	if _, ok, _ := c.get(k); ok {
		t.Fatal("a key of the Write under way is still cached")
	}
	_, _, during := c.get(k)
	c.put(k, loc, during) // read during the Write: refused
	c.put([]byte("k2"), loc, before)
	c.endWrite()
	if _, ok, _ := c.get(k); ok {
		t.Fatal("a read during a Write inserted")
	}
	if _, ok, _ := c.get([]byte("k2")); ok {
		t.Fatal("a read that began before a Write inserted after it began")
	}
	_, _, gen = c.get(k)
	c.put(k, loc, gen)
	if _, ok, _ := c.get(k); !ok {
		t.Fatal("a read after the Write did not insert")
	}
	// Fill one shard past its bound of one key.
	sh := c.shard("k1")
	var other []byte
	for i := 0; other == nil; i++ {
		if key := fmt.Sprintf("x%d", i); c.shard(key) == sh {
			other = []byte(key)
		}
	}
	_, _, gen = c.get(other)
	c.put(other, loc, gen)
	if _, ok, _ := c.get(other); !ok || len(sh.m) != 1 {
		t.Fatalf("full shard: new key cached %v, %d keys (want 1)", ok, len(sh.m))
	}
	if newLocationCache(0) != nil {
		t.Fatal("a cache of 0 entries is not nil")
	}
}

// TestLevelDBIndexCacheMonotonic: one writer overwrites a few keys with
// ever larger Index values (as applies do) while readers GET them through
// the location cache; no reader ever sees a key's Index go down, and a GET
// after a Write returned sees at least that Write. A cache that inserted
// what a read fetched before a Write replaced it fails this (seeded,
// under -race in the test suite).
func TestLevelDBIndexCacheMonotonic(t *testing.T) {
	const seed, keys, writes, readers = 31, 8, 3000, 4
	t.Logf("seed %d", seed)
	x, err := OpenLevelDBIndex(t.TempDir(), 4) // smaller than the key set: evictions too
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	key := func(i int) []byte { return []byte(fmt.Sprintf("key%02d", i)) }
	var written [keys]atomic.Uint64 // the last Index a returned Write put per key
	var stop atomic.Bool
	var hits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(r)))
			var seen [keys]uint64
			for !stop.Load() {
				i := rng.Intn(keys)
				floor := written[i].Load()
				if _, hit, _ := x.cache.get(key(i)); hit {
					hits.Add(1)
				}
				loc, found, err := x.Get(key(i))
				if err != nil {
					errs <- err
					return
				}
				if !found {
					continue // not written yet
				}
				if loc.Index < seen[i] || loc.Index < floor {
					errs <- fmt.Errorf("reader %d: key %d read index %d after seeing %d (last returned Write: %d)", r, i, loc.Index, seen[i], floor)
					return
				}
				seen[i] = loc.Index
			}
		}(r)
	}
	rng := rand.New(rand.NewSource(seed))
	var b IndexBatch
	for v := 1; v <= writes; v++ {
		b.Reset()
		touched := map[int]bool{}
		for n := 1 + rng.Intn(3); n > 0; n-- {
			i := rng.Intn(keys)
			touched[i] = true
			b.Put(key(i), systems.Location{Segment: 1, Offset: int64(v), Length: 1, Index: uint64(v)})
		}
		b.SetApplied(uint64(v))
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
		for i := range touched {
			written[i].Store(uint64(v))
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if hits.Load() == 0 {
		t.Error("no GET was served from the cache: the test checked nothing")
	}
	t.Logf("%d GETs found their key cached", hits.Load())
}
