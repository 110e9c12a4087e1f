package raftlog

import (
	"bytes"
	"math/rand"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// entriesFromDisk reads [lo, hi] through a log opened without a cache on the
// same directory: the records as written.
func entriesFromDisk(t *testing.T, o Options, lo, hi uint64) []raftpb.Entry {
	t.Helper()
	o.EntryCacheBytes = 0
	l := mustOpen(t, o)
	defer l.Close()
	ents, err := l.Entries(lo, hi+1, 1<<40)
	if err != nil {
		t.Fatalf("Entries from disk: %v", err)
	}
	return ents
}

func sameEntries(t *testing.T, what string, got, want []raftpb.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Index != want[i].Index || got[i].Term != want[i].Term || got[i].Type != want[i].Type || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("%s: entry %d is index %d term %d, want index %d term %d (or data differs)",
				what, i, got[i].Index, got[i].Term, want[i].Index, want[i].Term)
		}
	}
}

func TestEntryCacheServesRecentEntries(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	o := testOptions(t, t.TempDir())
	o.SegmentSizeBytes = 1 << 20
	o.EntryCacheBytes = 10 * 1000 // about ten 1000-byte values
	l := mustOpen(t, o)
	all := appendRange(t, l, 1, 40, 1, 1000, rng)

	before := l.Stats()
	checkEntries(t, l, all[35:]) // the newest entries: in the cache
	if s := l.Stats(); s.CacheHits != before.CacheHits+1 || s.CacheMisses != before.CacheMisses {
		t.Fatalf("recent entries: %d hits, %d misses; want one hit", s.CacheHits-before.CacheHits, s.CacheMisses-before.CacheMisses)
	}
	before = l.Stats()
	checkEntries(t, l, all[:20]) // evicted long ago: read from the segments
	if s := l.Stats(); s.CacheMisses != before.CacheMisses+1 {
		t.Fatalf("old entries were not read from the segments")
	}
	// maxSize applies to cached entries too, and at least one is returned.
	if got, _ := l.Entries(38, 41, 1); len(got) != 1 || got[0].Index != 38 {
		t.Fatalf("Entries(38, 41, maxSize 1) = %d entries", len(got))
	}
	// Raft may append to the slice it gets: that must not touch the cache.
	got, _ := l.Entries(38, 40, 1<<40)
	_ = append(got, raftpb.Entry{Index: 99, Term: 9})
	checkEntries(t, l, all[37:])
	l.Close()
	sameEntries(t, "disk", entriesFromDisk(t, o, 1, 40), all)
}

// A new leader overwrites a suffix: the cache must never serve the old
// entries at those indexes, whichever way the overwrite lands.
func TestEntryCacheNeverServesOverwrittenEntries(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cacheBytes      int64
		newLo, newHi    uint64
		wantLast        uint64
		readLo, readHi  uint64
		newerTermRounds int
	}{
		{name: "overwrite inside the cache", cacheBytes: 1 << 20, newLo: 21, newHi: 25, wantLast: 25, readLo: 1, readHi: 25},
		{name: "overwrite below the cached range", cacheBytes: 5 * 200, newLo: 10, newHi: 12, wantLast: 12, readLo: 1, readHi: 12},
		{name: "overwrite at the cache's first index", cacheBytes: 5 * 200, newLo: 26, newHi: 27, wantLast: 27, readLo: 20, readHi: 27},
		{name: "two leaders in a row", cacheBytes: 1 << 20, newLo: 15, newHi: 18, wantLast: 18, readLo: 1, readHi: 18, newerTermRounds: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(4))
			o := testOptions(t, t.TempDir())
			o.SegmentSizeBytes = 1 << 20
			o.EntryCacheBytes = tc.cacheBytes
			l := mustOpen(t, o)
			want := appendRange(t, l, 1, 30, 1, 200, rng)
			// Read everything once so the cache holds what it can.
			checkEntries(t, l, want)
			newer := appendRange(t, l, tc.newLo, tc.newHi, 2, 200, rng)
			want = append(want[:tc.newLo-1], newer...)
			if tc.newerTermRounds > 0 {
				newest := appendRange(t, l, tc.newHi-1, tc.newHi, 3, 200, rng)
				want = append(want[:tc.newHi-2], newest...)
			}
			if last, _ := l.LastIndex(); last != tc.wantLast {
				t.Fatalf("last index %d, want %d", last, tc.wantLast)
			}
			for lo := tc.readLo; lo <= tc.readHi; lo++ {
				got, err := l.Entries(lo, tc.readHi+1, 1<<40)
				if err != nil {
					t.Fatalf("Entries(%d, %d): %v", lo, tc.readHi+1, err)
				}
				sameEntries(t, "after overwrite", got, want[lo-1:tc.readHi])
				for _, e := range got {
					if tm, _ := l.Term(e.Index); tm != e.Term {
						t.Fatalf("entry %d has term %d, Term says %d", e.Index, e.Term, tm)
					}
				}
			}
			if _, err := l.Entries(tc.wantLast, tc.wantLast+2, 1<<40); err == nil {
				t.Fatalf("Entries past the new last index %d succeeded (an overwritten entry served?)", tc.wantLast)
			}
			l.Close()
			sameEntries(t, "disk", entriesFromDisk(t, o, 1, tc.wantLast), want)
		})
	}
}

func TestEntryCacheDropsCompactedAndSnapshottedEntries(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	o := testOptions(t, t.TempDir())
	o.SegmentSizeBytes = 1 << 20
	l := mustOpen(t, o)
	all := appendRange(t, l, 1, 20, 1, 100, rng)
	if err := l.Compact(10, raftpb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Entries(10, 12, 1<<40); err == nil {
		t.Fatal("Entries below the compaction point succeeded")
	}
	checkEntries(t, l, all[10:])
	if err := l.ApplySnapshot(raftpb.SnapshotMetadata{Index: 50, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	newer := appendRange(t, l, 51, 55, 3, 100, rng)
	checkEntries(t, l, newer)
	if _, err := l.Entries(15, 20, 1<<40); err == nil {
		t.Fatal("Entries below the snapshot succeeded")
	}
}

// Payloads at and above vectorMinBytes go out as their own iovecs: the
// records must be the same bytes as the copied ones (CRCs checked on
// recovery and on reads from the segments).
func TestVectoredAppendWritesSameRecords(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	o := testOptions(t, t.TempDir())
	o.SegmentSizeBytes = 1 << 20
	l := mustOpen(t, o)
	var all []raftpb.Entry
	sizes := []int{0, 10, vectorMinBytes - 30, vectorMinBytes, 3 * vectorMinBytes, 100, 64 << 10}
	for i, sz := range sizes {
		all = append(all, appendRange(t, l, uint64(3*i+1), uint64(3*i+3), 1, sz, rng)...)
	}
	hs := raftpb.HardState{Term: 1, Vote: 2, Commit: 9}
	if err := l.Append(hs, nil, true); err != nil {
		t.Fatal(err)
	}
	l.Close()
	o.EntryCacheBytes = 0
	l2 := mustOpen(t, o)
	if got, _, _ := l2.InitialState(); got != hs {
		t.Fatalf("recovered hard state %v, want %v", got, hs)
	}
	checkEntries(t, l2, all)
	for _, e := range all {
		loc, _ := l2.Location(e.Index)
		if _, err := l2.ReadCommand(loc); err != nil {
			t.Fatalf("ReadCommand(%d): %v", e.Index, err)
		}
	}
}
