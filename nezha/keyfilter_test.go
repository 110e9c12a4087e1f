package nezha

import (
	"context"
	"fmt"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// countingIndex counts the Gets of the index it wraps.
type countingIndex struct {
	Index
	gets int
}

func (x *countingIndex) Get(key []byte) (systems.Location, bool, error) {
	x.gets++
	return x.Index.Get(key)
}

// countGets makes the store's index count its Gets; call before any
// concurrent use.
func countGets(f *gcFixture) *countingIndex {
	c := &countingIndex{Index: f.s.index}
	f.s.index = c
	return c
}

// checkLiveExact compares the collector's live bytes per file with a
// recount from the index.
func checkLiveExact(t *testing.T, f *gcFixture, when string) {
	t.Helper()
	want := map[uint64]int64{}
	if err := f.s.iterateChunks(4096, func(_ [][]byte, locs []systems.Location) error {
		for _, l := range locs {
			want[l.Segment] += int64(l.Length)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.s.applyMu.Lock()
	defer f.s.applyMu.Unlock()
	for id, n := range f.s.gc.live {
		if n != want[id] {
			t.Fatalf("%s: file %#x: the accounting says %d live bytes, the index %d", when, id, n, want[id])
		}
	}
	for id, n := range want {
		if f.s.gc.live[id] != n {
			t.Fatalf("%s: file %#x: the accounting says %d live bytes, the index %d", when, id, f.s.gc.live[id], n)
		}
	}
}

// The key filter lets GC's live-byte accounting skip the index lookup of
// keys it has never seen, and never changes a count: after new keys,
// overwrites, deletes, a GC round and a restart (the filter is refilled from
// the index), the live bytes per file equal a recount from the index, and
// a batch of new keys costs no lookup once the filter is filled.
func TestKeyFilterKeepsLiveBytesExact(t *testing.T) {
	ctx := context.Background()
	f := newGCFixture(t, IndexLevelDB, StrategyTiered, 11)
	if err := f.s.gc.fillKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if f.s.gc.keys == nil {
		t.Fatal("no key filter after fillKeys")
	}
	gets := countGets(f)
	f.putRange(0, 200, 100)
	if gets.gets != 0 {
		t.Fatalf("200 puts of new keys looked the index up %d times, want 0", gets.gets)
	}
	checkLiveExact(t, f, "after new keys")
	f.write(400, 200) // overwrites and deletes of k000..k199 (other names)
	f.putRange(0, 100, 120)
	if gets.gets == 0 {
		t.Fatal("overwrites never looked the index up: the filter answered 'absent' for present keys")
	}
	checkLiveExact(t, f, "after overwrites and deletes")
	f.round()
	checkLiveExact(t, f, "after a GC round")

	// Restart: the filter is rebuilt from the index before it is trusted;
	// until then every put looks up.
	f.s.Close()
	f.open(IndexLevelDB, StrategyTiered)
	if f.s.gc.keys != nil && f.s.gc.filling != nil {
		t.Fatal("both a trusted and a filling filter")
	}
	if err := f.s.gc.fillKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if f.s.gc.keys == nil {
		t.Fatal("no key filter after a restart")
	}
	gets = countGets(f)
	f.putRange(0, 100, 140) // every key exists: each must be looked up
	if gets.gets < 100 {
		t.Fatalf("100 overwrites after a restart looked the index up %d times: keys present at open are missing from the filter", gets.gets)
	}
	checkLiveExact(t, f, "after overwrites following a restart")
	before := gets.gets
	var cmds []systems.Command
	for i := 0; i < 50; i++ {
		cmds = append(cmds, put(fmt.Sprintf("new%03d", i), randValue(f.rng, 80)))
	}
	f.apply(cmds)
	if n := gets.gets - before; n > 5 {
		t.Fatalf("50 new keys after a restart looked the index up %d times (1%% false positives expected)", n)
	}
	checkLiveExact(t, f, "after new keys following a restart")
	f.check()
}

// GC debt stalls writes: WriteStall reports an error once the garbage not
// yet reclaimed reaches -gcStallGarbageBytes, and none once a GC round has
// reclaimed it.
func TestWriteStallOnGarbage(t *testing.T) {
	f := newGCFixture(t, IndexLevelDB, StrategyTiered, 13)
	f.s.gc.cfg.GCStallGarbageBytes = 64 << 10
	f.putRange(0, 100, 1000) // 100 KB live, no garbage
	if err := f.s.WriteStall(); err != nil {
		t.Fatalf("stall with no garbage: %v", err)
	}
	f.putRange(0, 100, 1000) // the first copies become 100 KB of garbage
	if err := f.s.WriteStall(); err == nil {
		t.Fatalf("no stall with %d bytes of garbage (limit %d)", f.s.gc.garbage.Load(), f.s.gc.cfg.GCStallGarbageBytes)
	}
	r := f.round()
	if err := f.s.WriteStall(); err != nil {
		t.Fatalf("stall after a round that reclaimed %d bytes: %v", r.ReclaimedBytes, err)
	}
	f.check()
	f.s.gc.cfg.GCStallGarbageBytes = 0
	f.putRange(0, 100, 1000)
	f.putRange(0, 100, 1000)
	if err := f.s.WriteStall(); err != nil {
		t.Fatalf("-gcStallGarbageBytes 0 stalled: %v", err)
	}
}
