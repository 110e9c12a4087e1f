package nezha

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// modelKey returns key i of a test key space that has short keys, keys of
// exactly 24 and 25 bytes (the inline limit), long keys, zero bytes and
// the empty key.
func modelKey(i int) string {
	switch i % 5 {
	case 0:
		return fmt.Sprintf("k%d", i)
	case 1:
		return fmt.Sprintf("%024d", i)
	case 2:
		return fmt.Sprintf("%025d", i)
	case 3:
		return fmt.Sprintf("long-key-%0100d", i)
	}
	if i == 4 {
		return ""
	}
	return fmt.Sprintf("z\x00%d\x00", i)
}

// viewPairs returns everything a view iterates over [start, end).
func viewPairs(t *testing.T, x Index, v IndexView, start, end []byte) map[string]systems.Location {
	t.Helper()
	got := make(map[string]systems.Location)
	var last []byte
	err := v.Iterate(start, end, func(key []byte, loc systems.Location) (bool, error) {
		if last != nil && bytes.Compare(last, key) >= 0 {
			return false, fmt.Errorf("keys out of order: %q then %q", last, key)
		}
		last = bytes.Clone(key)
		got[string(key)] = loc
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkIndexModel compares x (Get of every key of the space, a full view) with
// the model.
func checkIndexModel(t *testing.T, x *MemoryIndex, model map[string]systems.Location, space int) {
	t.Helper()
	for i := 0; i < space; i++ {
		k := modelKey(i)
		want, wantFound := model[k]
		got, found, err := x.Get([]byte(k))
		if err != nil || found != wantFound || got != want {
			t.Fatalf("Get(%q) = %v, %v, %v; want %v, %v", k, got, found, err, want, wantFound)
		}
	}
	// MultiGet of the whole space, in calls of every size from 1 to 130
	// keys (groups of memoryMultiGetGroup and a partial last group).
	keys := make([][]byte, space)
	for i := range keys {
		keys[i] = []byte(modelKey(i))
	}
	locs, found := make([]systems.Location, space), make([]bool, space)
	for i, n := 0, 1; i < space; i, n = i+n, n%130+1 {
		end := min(i+n, space)
		if err := x.MultiGet(keys[i:end], locs[i:end], found[i:end]); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		want, wantFound := model[string(k)]
		if found[i] != wantFound || locs[i] != want {
			t.Fatalf("MultiGet: key %q = %v, %v; want %v, %v", k, locs[i], found[i], want, wantFound)
		}
	}
	v, err := x.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	if got := viewPairs(t, x, v, nil, nil); !maps.Equal(got, model) {
		t.Fatalf("view holds %d keys, model %d", len(got), len(model))
	}
	if n := x.Len(); n != len(model) {
		t.Fatalf("Len = %d, model %d", n, len(model))
	}
}

// TestMemoryIndexModel drives the index with random puts and deletes
// (growing, shrinking and reusing tombstones) and compares it with a map
// after every few batches.
func TestMemoryIndexModel(t *testing.T) {
	const seed, space = 18, 3000
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	x := NewMemoryIndex()
	model := make(map[string]systems.Location)
	var b IndexBatch
	for round := 0; round < 60; round++ {
		b.Reset()
		// Phases: fill, churn, drain most keys (shrinks tables), refill.
		delP := []float64{0.05, 0.5, 0.95, 0.1}[round/15]
		for j := 0; j < 400; j++ {
			k := modelKey(rng.Intn(space))
			if rng.Float64() < delP {
				b.Delete([]byte(k))
				delete(model, k)
				continue
			}
			loc := systems.Location{Segment: rng.Uint64() >> rng.Intn(64), Offset: rng.Int63(), Length: rng.Uint32(), Index: uint64(round*1000 + j)}
			if rng.Intn(3) == 0 { // a TTL put: the expiry time is kept too
				loc.ExpiresUnixNano = rng.Int63()
			}
			b.Put([]byte(k), loc)
			model[k] = loc
		}
		b.SetApplied(uint64(round + 1))
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
		if x.AppliedIndex() != uint64(round+1) {
			t.Fatalf("AppliedIndex = %d after round %d", x.AppliedIndex(), round+1)
		}
		if round%5 == 4 {
			checkIndexModel(t, x, model, space)
		}
	}
	// Ranges: [start, end) in byte order.
	v, err := x.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	start, end := []byte("0000000000000000000001000"), []byte("k2")
	want := make(map[string]systems.Location)
	for k, l := range model {
		if k >= string(start) && k < string(end) {
			want[k] = l
		}
	}
	if got := viewPairs(t, x, v, start, end); !maps.Equal(got, want) || len(want) == 0 {
		t.Fatalf("range view: %d keys, want %d (> 0)", len(got), len(want))
	}
}

// TestMemoryIndexViewPointInTime: views opened between batches keep their
// point while later batches overwrite, delete, re-insert and add keys.
func TestMemoryIndexViewPointInTime(t *testing.T) {
	const seed, space = 7, 500
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	x := NewMemoryIndex()
	model := make(map[string]systems.Location)
	type opened struct {
		v    IndexView
		want map[string]systems.Location
	}
	var views []opened
	var b IndexBatch
	for round := 1; round <= 40; round++ {
		b.Reset()
		for j := 0; j < 100; j++ {
			k := modelKey(rng.Intn(space))
			if rng.Intn(3) == 0 {
				b.Delete([]byte(k))
				delete(model, k)
			} else {
				loc := systems.Location{Segment: uint64(round), Offset: int64(j), Length: 1, Index: uint64(round)}
				b.Put([]byte(k), loc)
				model[k] = loc
			}
		}
		b.SetApplied(uint64(round))
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
		if round%4 == 0 {
			v, err := x.View()
			if err != nil {
				t.Fatal(err)
			}
			if v.AppliedIndex() != uint64(round) {
				t.Fatalf("view applied index %d, want %d", v.AppliedIndex(), round)
			}
			views = append(views, opened{v, maps.Clone(model)})
		}
		if round%10 == 0 && len(views) > 0 { // release the oldest
			views[0].v.Release()
			views[0].v.Release() // twice is allowed
			if err := views[0].v.Iterate(nil, nil, func([]byte, systems.Location) (bool, error) { return true, nil }); err == nil {
				t.Fatal("Iterate after Release did not fail")
			}
			views = views[1:]
		}
		for _, o := range views {
			if got := viewPairs(t, x, o.v, nil, nil); !maps.Equal(got, o.want) {
				t.Fatalf("round %d: view at %d (%d keys) differs from the state at its point (%d keys)", round, o.v.AppliedIndex(), len(got), len(o.want))
			}
		}
	}
	for _, o := range views {
		o.v.Release()
	}
	if p := x.views.Load(); p == nil || len(*p) != 0 {
		t.Fatalf("views left open after Release: %v", p)
	}
	checkIndexModel(t, x, model, space)
}

// concurrentLoc is the location the concurrent test writes at batch v:
// every field derives from v, so a torn read shows.
func concurrentLoc(v uint64) systems.Location {
	return systems.Location{Segment: v, Offset: int64(v * 3), Length: uint32(v), Index: v}
}

// TestMemoryIndexConcurrentReaders runs Gets and views during writes
// (meant for -race). Batch v puts every key of the space at
// concurrentLoc(v), except that batches with v%3 == 0 delete the odd
// keys. Readers check that a Get returns an untorn location that never
// goes back for a key, and that a view is exactly the state after batch
// AppliedIndex.
func TestMemoryIndexConcurrentReaders(t *testing.T) {
	const seed, space, batches, readers = 3, 600, 150, 3
	t.Logf("seed %d", seed)
	x := NewMemoryIndex()
	keys := make([][]byte, space)
	for i := range keys {
		keys[i] = []byte(modelKey(i))
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, readers+1)
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(r)))
			last := make([]uint64, space)
			deadline := time.Now().Add(time.Minute)
			for n := 0; !done.Load() || n < 1000; n++ {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("reader %d: no end of writes within a minute", r)
					return
				}
				i := rng.Intn(space)
				loc, found, err := x.Get(keys[i])
				if r == 0 { // the same lookup through MultiGet, beside other keys
					locs, founds := make([]systems.Location, 3), make([]bool, 3)
					err = x.MultiGet([][]byte{keys[rng.Intn(space)], keys[i], keys[rng.Intn(space)]}, locs, founds)
					loc, found = locs[1], founds[1]
				}
				if err != nil {
					errs <- err
					return
				}
				if found && (loc != concurrentLoc(loc.Index) || loc.Index < last[i]) {
					errs <- fmt.Errorf("reader %d: key %q: %v after index %d", r, keys[i], loc, last[i])
					return
				}
				if found {
					last[i] = loc.Index
				}
				if n%500 == 0 {
					if err := checkConcurrentView(x, space); err != nil {
						errs <- fmt.Errorf("reader %d: %w", r, err)
						return
					}
				}
			}
		}(r)
	}
	var b IndexBatch
	for v := uint64(1); v <= batches; v++ {
		b.Reset()
		for i, k := range keys {
			if v%3 == 0 && i%2 == 1 {
				b.Delete(k)
			} else {
				b.Put(k, concurrentLoc(v))
			}
		}
		b.SetApplied(v)
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func checkConcurrentView(x *MemoryIndex, space int) error {
	v, err := x.View()
	if err != nil {
		return err
	}
	defer v.Release()
	a := v.AppliedIndex()
	n := 0
	err = v.Iterate(nil, nil, func(key []byte, loc systems.Location) (bool, error) {
		n++
		if loc != concurrentLoc(a) {
			return false, fmt.Errorf("view at %d: key %q at %v", a, key, loc)
		}
		return true, nil
	})
	want := space
	switch {
	case a == 0:
		want = 0
	case a%3 == 0:
		want = space / 2
	}
	if err == nil && n != want {
		err = fmt.Errorf("view at %d: %d keys, want %d", a, n, want)
	}
	return err
}

// TestMemoryIndexShardTables: tables grow to hold many keys and shrink
// back when most are deleted; a long-key churn in one slot does not grow
// the long-key list without bound.
func TestMemoryIndexShardTables(t *testing.T) {
	x := NewMemoryIndex()
	var b IndexBatch
	const n = 50000
	for i := 0; i < n; i++ {
		b.Put([]byte(modelKey(i)), systems.Location{Index: uint64(i)})
	}
	b.SetApplied(1)
	if err := x.Write(&b); err != nil {
		t.Fatal(err)
	}
	slots := func() (total int) {
		for i := range x.shards {
			total += len(x.shards[i].tab.Load().slots) / memorySlotWords
		}
		return total
	}
	if s := slots(); s < n*4/3 || s > n*4 {
		t.Fatalf("%d slots for %d keys", s, n)
	}
	b.Reset()
	for i := 10; i < n; i++ {
		b.Delete([]byte(modelKey(i)))
	}
	b.SetApplied(2)
	if err := x.Write(&b); err != nil {
		t.Fatal(err)
	}
	if s := slots(); s > memoryShards*memoryMinSlots*2 {
		t.Fatalf("%d slots after deleting all but 10 keys", s)
	}
	long := modelKey(3)
	for i := 0; i < 10000; i++ {
		b.Reset()
		b.Put([]byte(long), systems.Location{Index: uint64(i)})
		b.Delete([]byte(long))
		b.Put([]byte(long), systems.Location{Index: uint64(i)})
		b.SetApplied(uint64(i + 3))
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
	}
	maxLong := 0
	for i := range x.shards {
		maxLong = max(maxLong, len(*x.shards[i].tab.Load().long.Load()))
	}
	if maxLong > memoryMinSlots*4 {
		t.Fatalf("a long-key list holds %d keys", maxLong)
	}
	for i := 0; i < 10; i++ {
		if _, found, _ := x.Get([]byte(modelKey(i))); !found {
			t.Fatalf("key %d lost", i)
		}
	}
	if n := x.Len(); n != 10 {
		t.Fatalf("Len = %d, want 10", n)
	}
}

// TestKeyItemOrder: the B-tree's order is the keys' byte order, for keys
// made of few distinct bytes (zero among them) and of 0-12 bytes.
func TestKeyItemOrder(t *testing.T) {
	const seed = 5
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	key := func() string {
		b := make([]byte, rng.Intn(13))
		for i := range b {
			b[i] = []byte{0, 1, 'a', 0xff}[rng.Intn(4)]
		}
		return string(b)
	}
	for i := 0; i < 100000; i++ {
		a, b := key(), key()
		if got := lessKeyItem(newKeyItem(a), newKeyItem(b)); got != (a < b) {
			t.Fatalf("lessKeyItem(%q, %q) = %v", a, b, got)
		}
	}
}

// TestMemoryIndexHashSpread: the short-key hash (hash, wyhash's mixing
// over the packed key words) spreads keys evenly over the shards (the
// hash's low bits) and over home slots (its high bits), for keys that
// differ only in a few digits, and keys that pack alike ("a", "a\x00")
// hash apart. Fixed seeds keep it deterministic.
func TestMemoryIndexHashSpread(t *testing.T) {
	x := NewMemoryIndex()
	x.seeds = [4]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0x2545f4914f6cdd1d}
	const n, homes = 1 << 18, 1024
	for _, shape := range []func(i int) string{
		func(i int) string { return string(benchKey(i)) },
		func(i int) string { return fmt.Sprintf("%d", i) },
		func(i int) string { return fmt.Sprintf("%024d", i) },
	} {
		var shards [memoryShards]int
		var home [homes]int
		for i := 0; i < n; i++ {
			h, _, _, _ := x.hash(shape(i))
			shards[h%memoryShards]++
			home[h>>32%homes]++
		}
		for s, c := range shards {
			if mean := n / memoryShards; c < mean*8/10 || c > mean*12/10 {
				t.Fatalf("keys like %q: shard %d holds %d of %d keys (mean %d)", shape(1), s, c, n, mean)
			}
		}
		for s, c := range home {
			if mean := n / homes; c < mean*7/10 || c > mean*13/10 {
				t.Fatalf("keys like %q: home bucket %d holds %d of %d keys (mean %d)", shape(1), s, c, n, mean)
			}
		}
	}
	if a, b := func() uint64 { h, _, _, _ := x.hash("a"); return h }(), func() uint64 { h, _, _, _ := x.hash("a\x00"); return h }(); a == b {
		t.Fatal(`"a" and "a\x00" hash alike`)
	}
}

// TestPackKey: packKey's word reads give, for every key length up to
// memoryInlineKeyBytes, the words of the byte-by-byte definition (byte j
// of the key is byte j%8 of word j/8, the rest zero), also for a key that
// ends where its buffer ends (no read past it).
func TestPackKey(t *testing.T) {
	const seed = 7
	rng := rand.New(rand.NewSource(seed))
	for n := 0; n <= memoryInlineKeyBytes; n++ {
		for trial := 0; trial < 50; trial++ {
			buf := make([]byte, n) // the key is the whole buffer
			rng.Read(buf)
			var want [3]uint64
			for j, c := range buf {
				want[j/8] |= uint64(c) << (8 * (j % 8))
			}
			k0, k1, k2 := packKey(string(buf))
			if got := [3]uint64{k0, k1, k2}; got != want {
				t.Fatalf("seed %d: packKey(%x) = %x, want %x", seed, buf, got, want)
			}
		}
	}
}

// TestMemoryIndexHomeAndProbe: Get finds keys at their home slot (the
// fast path) and displaced from it (the full probe), keys with an expiry
// time (whose slot the fast path leaves to the full probe), long keys, and
// reports absent keys as absent, in tables at the load where about a
// quarter of the keys are displaced.
func TestMemoryIndexHomeAndProbe(t *testing.T) {
	const seed, n = 11, 20000
	rng := rand.New(rand.NewSource(seed))
	x := NewMemoryIndex()
	want := map[string]systems.Location{}
	var b IndexBatch
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%0*d", rng.Intn(20)+1, i) // 2..21 bytes, and some longer below
		if i%97 == 0 {
			key = strings.Repeat("L", memoryInlineKeyBytes+1) + key
		}
		loc := systems.Location{Segment: uint64(i + 1), Offset: int64(i) * 3, Length: uint32(i), Index: uint64(i + 7)}
		if i%5 == 0 {
			loc.ExpiresUnixNano = int64(i + 1000)
		}
		b.Put([]byte(key), loc)
		want[key] = loc
	}
	b.SetApplied(1)
	if err := x.Write(&b); err != nil {
		t.Fatal(err)
	}
	home, displaced := 0, 0
	for key, loc := range want {
		if len(key) <= memoryInlineKeyBytes {
			if atHome(x, key) {
				home++
			} else if loc.ExpiresUnixNano == 0 {
				displaced++
			}
		}
		got, found, err := x.Get([]byte(key))
		if err != nil || !found || got != loc {
			t.Fatalf("seed %d: Get(%q) = %+v, %v, %v; want %+v", seed, key, got, found, err, loc)
		}
		if _, found, _ := x.Get([]byte(key + "x")); found {
			t.Fatalf("seed %d: Get(%q) found an absent key", seed, key+"x")
		}
	}
	if home == 0 || displaced == 0 {
		t.Fatalf("seed %d: %d keys at home, %d displaced: both paths must be taken", seed, home, displaced)
	}
	t.Logf("seed %d: %d keys found at home, %d displaced (probed in full)", seed, home, displaced)
}

// atHome reports whether key (of at most memoryInlineKeyBytes) is in its
// home slot, where lookupWords's first attempt finds it.
func atHome(x *MemoryIndex, key string) bool {
	h, k0, k1, k2 := x.hash(key)
	t := x.shards[h%memoryShards].tab.Load()
	s := t.slot(h >> 32 & t.mask)
	return s[0] == slotMeta(h, len(key)) && s[1] == k0 && s[2] == k1 && s[3] == k2
}

// TestMemoryIndexMultiGetLengths: MultiGet refuses slices of different
// lengths and writes nothing; an empty call is a no-op.
func TestMemoryIndexMultiGetLengths(t *testing.T) {
	x := NewMemoryIndex()
	var b IndexBatch
	b.Put([]byte("a"), systems.Location{Segment: 1, Index: 1})
	b.SetApplied(1)
	if err := x.Write(&b); err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{[]byte("a"), []byte("b")}
	for _, c := range []struct{ locs, found int }{{1, 2}, {2, 1}, {3, 3}} {
		locs, found := make([]systems.Location, c.locs), make([]bool, c.found)
		err := x.MultiGet(keys, locs, found)
		if err == nil || !strings.Contains(err.Error(), "MultiGet of 2 keys") {
			t.Fatalf("MultiGet of 2 keys into %d locations and %d flags: err %v, want a length error", c.locs, c.found, err)
		}
		if slices.Contains(found, true) || slices.ContainsFunc(locs, func(l systems.Location) bool { return l != systems.Location{} }) {
			t.Fatalf("MultiGet wrote results on a length error: %v %v", locs, found)
		}
	}
	if err := x.MultiGet(nil, nil, nil); err != nil {
		t.Fatalf("empty MultiGet: %v", err)
	}
	locs, found := make([]systems.Location, 2), make([]bool, 2)
	if err := x.MultiGet(keys, locs, found); err != nil || !found[0] || found[1] || locs[0].Segment != 1 {
		t.Fatalf("MultiGet = %v %v %v; want a found, b absent", locs, found, err)
	}
}
