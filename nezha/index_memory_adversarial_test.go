package nezha

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/nezha-harness/nezha/systems"
)

// collidingKeys is a key space built to collide in packKey's words: every
// length 0..30, keys that are prefixes of each other padded with zero
// bytes, keys that differ only in their last byte, only in a byte that
// packKey's overlapping reads cover twice (4..7, 8..15, 16..23), and
// long keys that share their first 24 bytes with a short one.
func collidingKeys() []string {
	seen := map[string]bool{}
	var ks []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			ks = append(ks, k)
		}
	}
	base := "abcdefghijklmnopqrstuvwxyz0123456789"
	for n := 0; n <= 30; n++ {
		add(base[:n])
		add(strings.Repeat("\x00", n))
		add(strings.Repeat("\xff", n))
		if n > 0 {
			b := []byte(base[:n])
			b[n-1] ^= 0x80
			add(string(b))
			b = []byte(base[:n])
			b[n/2] = 0
			add(string(b))
			b = []byte(strings.Repeat("\x00", n))
			b[n-1] = 1
			add(string(b))
			b = []byte(strings.Repeat("\x00", n))
			b[0] = 1
			add(string(b))
		}
	}
	add(strings.Repeat("a", 24) + "\x00")
	add(strings.Repeat("a", 24) + "b")
	add(strings.Repeat("a", 100))
	add(strings.Repeat("a", 1000))
	return ks
}

func locFor(keyID, version int, ttl bool) systems.Location {
	l := systems.Location{Segment: uint64(keyID)<<32 | uint64(version), Offset: int64(version) * 7, Index: uint64(version) + 1, Length: uint32(keyID)}
	if ttl {
		l.ExpiresUnixNano = int64(version)<<20 | int64(keyID) + 1
	}
	return l
}

// FuzzMemoryIndexModel drives a MemoryIndex and a map with the same
// operations (puts with and without TTL, deletes, batches, views opened
// and released between batches) and compares Get, views and Len.
func FuzzMemoryIndexModel(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(bytes.Repeat([]byte{0x10, 0x21, 0x35, 0x47}, 64))
	f.Add(bytes.Repeat([]byte{0xff, 0x00, 0x81}, 200))
	f.Fuzz(runModelProg)
}

// runModelProg is FuzzMemoryIndexModel's body.
func runModelProg(t *testing.T, prog []byte) {
	keys := collidingKeys()
	x := NewMemoryIndex()
	model := map[string]systems.Location{}
	type openView struct {
		v     IndexView
		state map[string]systems.Location
	}
	var views []openView
	version := 0
	var b IndexBatch
	flush := func() {
		if b.Len() == 0 {
			return
		}
		version++
		b.SetApplied(uint64(version))
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
		b.Reset()
	}
	for i := 0; i+1 < len(prog); i += 2 {
		op, arg := prog[i], int(prog[i+1])
		k := keys[(int(op>>3)*256+arg)%len(keys)]
		id := (int(op>>3)*256 + arg) % len(keys)
		version++
		switch op & 7 {
		case 0, 1, 2:
			loc := locFor(id, version, false)
			b.Put([]byte(k), loc)
			model[k] = loc
		case 3:
			loc := locFor(id, version, true)
			b.Put([]byte(k), loc)
			model[k] = loc
		case 4:
			b.Delete([]byte(k))
			delete(model, k)
		case 5:
			flush()
		case 6:
			flush()
			if len(views) < 4 {
				v, err := x.View()
				if err != nil {
					t.Fatal(err)
				}
				views = append(views, openView{v, maps.Clone(model)})
			} else {
				j := arg % len(views)
				views[j].v.Release()
				views = append(views[:j], views[j+1:]...)
			}
		case 7:
			// Bulk: many new keys then their deletion, to grow and
			// shrink the tables.
			flush()
			for j := 0; j < 200; j++ {
				kk := fmt.Sprintf("bulk-%d-%d", arg, j)
				b.Put([]byte(kk), locFor(1<<20+j, version, j%3 == 0))
			}
			flush()
			for j := 0; j < 200; j++ {
				b.Delete([]byte(fmt.Sprintf("bulk-%d-%d", arg, j)))
			}
			flush()
		}
	}
	flush()
	for id, k := range keys {
		want, wantFound := model[k]
		got, found, err := x.Get([]byte(k))
		if err != nil || found != wantFound || got != want {
			t.Fatalf("Get(%q) [id %d] = %+v, %v, %v; want %+v, %v", k, id, got, found, err, want, wantFound)
		}
		// The key inside a larger buffer: nothing past its end may matter.
		buf := append([]byte(k), 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE)
		got, found, _ = x.Get(buf[:len(k)])
		if found != wantFound || got != want {
			t.Fatalf("Get(%q in a larger buffer) = %+v, %v; want %+v, %v", k, got, found, want, wantFound)
		}
	}
	if x.Len() != len(model) {
		t.Fatalf("Len = %d, model %d", x.Len(), len(model))
	}
	for _, ov := range views {
		got := map[string]systems.Location{}
		if err := ov.v.Iterate(nil, nil, func(key []byte, loc systems.Location) (bool, error) {
			got[string(key)] = loc
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, ov.state) {
			t.Fatalf("view: %d keys, want %d (%v vs %v)", len(got), len(ov.state), got, ov.state)
		}
		ov.v.Release()
	}
}

// TestPackKeyAtPageEnd: keys of every length 0..24 whose last byte is the
// last byte of a mapped page followed by an unmapped (PROT_NONE) page. A
// read past the key's end faults.
func TestPackKeyAtPageEnd(t *testing.T) {
	page, guard := guardPage(t)
	x := NewMemoryIndex()
	var b IndexBatch
	for n := 0; n <= 30; n++ {
		k := strings.Repeat("q", n)
		b.Put([]byte(k), locFor(n, 1, false))
	}
	b.SetApplied(1)
	if err := x.Write(&b); err != nil {
		t.Fatal(err)
	}
	_ = guard
	for n := 0; n <= 30; n++ {
		key := page[len(page)-n:]
		for i := range key {
			key[i] = 'q'
		}
		loc, found, _ := x.Get(key)
		if !found || loc != locFor(n, 1, false) {
			t.Fatalf("len %d: %+v %v", n, loc, found)
		}
		if n <= memoryInlineKeyBytes {
			packKey(unsafe.String(unsafe.SliceData(key), len(key)))
		}
	}
}

// TestMemoryIndexConcurrentWriterReaders: one writer puts (some with TTLs),
// overwrites, deletes and re-adds keys of every length (growing and
// shrinking the shard tables), while readers check that every Get of a
// key returns a location written for that key, with versions that never
// go backwards per reader, and with the expiry time that belongs to it.
func TestMemoryIndexConcurrentWriterReaders(t *testing.T) {
	keys := collidingKeys()
	x := NewMemoryIndex()
	var stop atomic.Bool
	var errs sync.Map
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	readers := 4
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			last := make([]uint64, len(keys))
			rng := rand.New(rand.NewSource(int64(r)))
			for !stop.Load() {
				id := rng.Intn(len(keys))
				loc, found, _ := x.Get([]byte(keys[id]))
				if !found {
					continue
				}
				if int(loc.Segment>>32) != id || loc.Length != uint32(id) {
					errs.Store(fmt.Sprintf("reader %d: key %d (%q) got location of key %d: %+v", r, id, keys[id], loc.Segment>>32, loc), true)
					return
				}
				v := loc.Segment & 0xffffffff
				if loc.Offset != int64(v)*7 || loc.Index != v+1 {
					errs.Store(fmt.Sprintf("reader %d: torn location %+v", r, loc), true)
					return
				}
				if loc.ExpiresUnixNano != 0 && loc.ExpiresUnixNano != int64(v)<<20|int64(id)+1 {
					errs.Store(fmt.Sprintf("reader %d: key %d: wrong expiry %d for version %d", r, id, loc.ExpiresUnixNano, v), true)
					return
				}
				if v < last[id] {
					errs.Store(fmt.Sprintf("reader %d: key %d: version went back %d -> %d", r, id, last[id], v), true)
					return
				}
				last[id] = v
			}
		}(r)
	}
	rng := rand.New(rand.NewSource(1))
	version := 0
	var b IndexBatch
	rounds := 0
	for time.Now().Before(deadline) {
		rounds++
		n := 1 + rng.Intn(64)
		for i := 0; i < n; i++ {
			id := rng.Intn(len(keys))
			version++
			switch rng.Intn(5) {
			case 0:
				b.Delete([]byte(keys[id]))
			case 1:
				b.Put([]byte(keys[id]), locFor(id, version, true))
			default:
				b.Put([]byte(keys[id]), locFor(id, version, false))
			}
		}
		if rounds%50 == 0 { // grow, then shrink, every shard
			for j := 0; j < 3000; j++ {
				b.Put([]byte(fmt.Sprintf("fill%06d", j)), systems.Location{Segment: 1 << 62})
			}
			b.SetApplied(uint64(version))
			x.Write(&b)
			b.Reset()
			for j := 0; j < 3000; j++ {
				b.Delete([]byte(fmt.Sprintf("fill%06d", j)))
			}
		}
		b.SetApplied(uint64(version))
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
		b.Reset()
		if rounds%7 == 0 {
			v, _ := x.View()
			if err := v.Iterate(nil, nil, func(k []byte, l systems.Location) (bool, error) { return true, nil }); err != nil {
				t.Fatal(err)
			}
			v.Release()
		}
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
	errs.Range(func(k, _ any) bool { t.Error(k); return true })
	t.Logf("%d rounds, %d versions", rounds, version)
}

// TestMemoryIndexTTLOverwriteChurn: a key overwritten many times with
// TTL locations (each appends to the table's list of expiry times) keeps
// returning its newest expiry time; readers never see another's.
func TestMemoryIndexTTLOverwriteChurn(t *testing.T) {
	keys := collidingKeys()
	x := NewMemoryIndex()
	var b IndexBatch
	for v := 1; v <= 20000; v++ {
		id := v % 7
		key := []byte(keys[id])
		b.Put(key, locFor(id, v, v%2 == 0))
		if v%13 == 0 {
			b.Delete(key)
		}
		b.SetApplied(uint64(v))
		if err := x.Write(&b); err != nil {
			t.Fatal(err)
		}
		b.Reset()
		got, found, _ := x.Get(key)
		want := locFor(id, v, v%2 == 0)
		if v%13 == 0 {
			if found {
				t.Fatalf("v %d: deleted key found", v)
			}
			continue
		}
		if !found || got != want {
			t.Fatalf("v %d: Get = %+v %v, want %+v", v, got, found, want)
		}
	}
	// Every shard's expiry list is bounded by its slots.
	for i := range x.shards {
		tb := x.shards[i].tab.Load()
		if e := len(*tb.expiries.Load()); e > int(tb.mask+1) {
			t.Fatalf("shard %d: %d expiry times for %d slots", i, e, tb.mask+1)
		}
	}
}

// TestMemoryIndexViewSortedAcrossPrefixes: keys that share their first 8
// bytes (keyItem's prefix) and keys with zero bytes come out of a view in
// byte order.
func TestMemoryIndexViewSortedAcrossPrefixes(t *testing.T) {
	x := NewMemoryIndex()
	keys := collidingKeys()
	var b IndexBatch
	for i, k := range keys {
		b.Put([]byte(k), locFor(i, 1, false))
	}
	b.SetApplied(1)
	x.Write(&b)
	v, _ := x.View()
	defer v.Release()
	var got []string
	v.Iterate(nil, nil, func(k []byte, _ systems.Location) (bool, error) {
		got = append(got, string(k))
		return true, nil
	})
	want := append([]string(nil), keys...)
	sort.Strings(want)
	if len(got) != len(want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("position %d: %q, want %q", i, got[i], want[i])
		}
	}
	// A range starting and ending at keys with zero padding.
	var sub []string
	v.Iterate([]byte("a"), []byte("a\x00\x01"), func(k []byte, _ systems.Location) (bool, error) {
		sub = append(sub, string(k))
		return true, nil
	})
	for _, k := range sub {
		if k < "a" || k >= "a\x00\x01" {
			t.Fatalf("key %q outside [a, a\\x00\\x01)", k)
		}
	}
	_ = binary.LittleEndian
}

// guardPage maps two pages and makes the second inaccessible; it returns
// the first.
func guardPage(t *testing.T) (page []byte, all []byte) {
	t.Helper()
	ps := syscall.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 2*ps, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(m[ps:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	return m[:ps], m
}

// TestMemoryIndexRandomPrograms runs FuzzMemoryIndexModel's body on
// seeded random programs (BREAKER_PROGRAMS of them, default 50).
func TestMemoryIndexRandomPrograms(t *testing.T) {
	// 15 programs take about 5 s under -race (50, 17 s);
	// NEZHA_INDEX_PROGRAMS=N runs N.
	n := 15
	if v := os.Getenv("NEZHA_INDEX_PROGRAMS"); v != "" {
		fmt.Sscan(v, &n)
	}
	const seed = 99
	t.Logf("%d programs, seed %d", n, seed)
	rng := rand.New(rand.NewSource(seed))
	for i := 0; i < n; i++ {
		prog := make([]byte, 2*(1+rng.Intn(1500)))
		rng.Read(prog)
		// Bias toward puts and deletes of few keys, so that keys are
		// overwritten and deleted often.
		for j := 0; j+1 < len(prog); j += 2 {
			if rng.Intn(2) == 0 {
				prog[j] = prog[j] &^ 0xf8
				prog[j+1] %= 40
			}
		}
		runModelProg(t, prog)
	}
}
