package baseline

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

func forEachMode(t *testing.T, f func(t *testing.T, m Mode)) {
	for _, m := range allModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			f(t, m)
		})
	}
}

func TestApplyGet(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		s := openTest(t, testConfig(m), t.TempDir())
		defer s.Close()
		if got := s.AppliedIndex(); got != 0 {
			t.Fatalf("fresh store applied index %d, want 0", got)
		}
		big := strings.Repeat("v", 5000) // a blob in blobdb mode
		ents := []systems.AppliedEntry{
			put(1, "a", "1"),
			put(2, "b", "2"),
			put(3, "c", big),
			noop(4),
			put(5, "a", "one"), // overwrite
			del(6, "b"),
			del(7, "never-written"),
			put(8, "empty", ""),
		}
		mustApply(t, s, ents[:3]...)
		mustApply(t, s, ents[3:]...)
		if got := s.AppliedIndex(); got != 8 {
			t.Fatalf("applied index %d, want 8", got)
		}
		ref := model{}
		ref.apply(ents)
		checkState(t, s, ref, "b", "never-written", "zzz")

		v, found, err := s.Get([]byte("empty"))
		if err != nil || !found || v == nil || len(v) != 0 {
			t.Fatalf("Get(empty) = %q (nil=%v), %v, %v; want a non-nil empty value", v, v == nil, found, err)
		}
		// The caller owns the returned slice.
		v, _, _ = s.Get([]byte("a"))
		copy(v, "XXX")
		if v2, _, _ := s.Get([]byte("a")); string(v2) != "one" {
			t.Fatalf("Get after modifying a returned value = %q, want %q", v2, "one")
		}
		// A no-op batch advances the applied index only.
		mustApply(t, s, noop(9), noop(10))
		if got := s.AppliedIndex(); got != 10 {
			t.Fatalf("applied index after no-ops %d, want 10", got)
		}
		checkState(t, s, ref)
		if _, applied, err := s.StateHash(); err != nil || applied != 10 {
			t.Fatalf("StateHash applied = %d, %v; want 10", applied, err)
		}
	})
}

func TestScan(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		s := openTest(t, testConfig(m), t.TempDir())
		defer s.Close()
		// keys k0..k9 with values of 10 bytes: 12 bytes per pair.
		var ents []systems.AppliedEntry
		for i := range 10 {
			ents = append(ents, put(uint64(i+1), fmt.Sprintf("k%d", i), fmt.Sprintf("value%05d", i)))
		}
		mustApply(t, s, ents...)
		keys := func(kvs []systems.KeyValue) string {
			var ks []string
			for _, kv := range kvs {
				ks = append(ks, string(kv.Key))
			}
			return strings.Join(ks, ",")
		}
		for _, tc := range []struct {
			name       string
			start, end string
			limit, max int
			want       string
			more       bool
		}{
			{"all", "", "", 0, 0, "k0,k1,k2,k3,k4,k5,k6,k7,k8,k9", false},
			{"from start", "k5", "", 0, 0, "k5,k6,k7,k8,k9", false},
			{"start between keys", "k45", "", 0, 0, "k5,k6,k7,k8,k9", false},
			{"end exclusive", "k2", "k5", 0, 0, "k2,k3,k4", false},
			{"end between keys", "k2", "k45", 0, 0, "k2,k3,k4", false},
			{"limit", "k1", "", 3, 0, "k1,k2,k3", false},
			{"limit beyond range", "k8", "", 5, 0, "k8,k9", false},
			{"empty range start=end", "k3", "k3", 0, 0, "", false},
			{"empty range start>end", "k5", "k3", 0, 0, "", false},
			{"no keys in range", "k35", "k4", 0, 0, "", false},
			{"after last key", "z", "", 0, 0, "", false},
			{"maxBytes cut", "", "", 0, 25, "k0,k1,k2", true},
			{"maxBytes exact", "", "", 0, 24, "k0,k1", true},
			{"maxBytes 1 returns one pair", "k4", "", 0, 1, "k4", true},
			{"maxBytes cut at last key of range", "k7", "k9", 0, 24, "k7,k8", false},
			{"maxBytes cut at last key", "k8", "", 0, 24, "k8,k9", false},
			{"limit before maxBytes", "", "", 2, 24, "k0,k1", false},
			{"maxBytes and end", "k1", "k3", 0, 1000, "k1,k2", false},
		} {
			kvs, more, err := s.Scan([]byte(tc.start), []byte(tc.end), tc.limit, tc.max)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := keys(kvs); got != tc.want || more != tc.more {
				t.Errorf("%s: Scan(%q, %q, %d, %d) = [%s] more=%v; want [%s] more=%v",
					tc.name, tc.start, tc.end, tc.limit, tc.max, got, more, tc.want, tc.more)
			}
			for _, kv := range kvs {
				if want := "value0000" + string(kv.Key[1:]); string(kv.Value) != want {
					t.Errorf("%s: value of %q = %q, want %q", tc.name, kv.Key, kv.Value, want)
				}
			}
		}
		// Paging with maxBytes, as the client does, visits every key once.
		var got []string
		from := []byte{}
		for {
			kvs, more, err := s.Scan(from, []byte("k8"), 0, 30)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range kvs {
				got = append(got, string(kv.Key))
			}
			if !more {
				break
			}
			from = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
		}
		if strings.Join(got, ",") != "k0,k1,k2,k3,k4,k5,k6,k7" {
			t.Fatalf("paged scan = %v", got)
		}
		// Scanned slices are the caller's.
		kvs, _, _ := s.Scan(nil, nil, 1, 0)
		copy(kvs[0].Value, "XXXX")
		if v, _, _ := s.Get([]byte("k0")); string(v) != "value00000" {
			t.Fatalf("Get after modifying a scanned value = %q", v)
		}
	})
}

func TestReopenAndIdempotentReplay(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		seed := testSeed(t)
		r := rand.New(rand.NewPCG(seed, uint64(len(m))))
		dir := t.TempDir()
		c := testConfig(m)
		s := openTest(t, c, dir)
		ents := randomEntries(r, 0, 300, 40, 200)
		applyInBatches(t, r, s, ents, 16)
		ref := model{}
		ref.apply(ents)
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		if _, _, err := s.Get([]byte("key0000")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Get after Close: %v, want ErrClosed", err)
		}
		if err := s.Apply([]systems.AppliedEntry{put(301, "x", "y")}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Apply after Close: %v, want ErrClosed", err)
		}

		s = openTest(t, c, dir)
		defer func() { s.Close() }()
		if got := s.AppliedIndex(); got != 300 {
			t.Fatalf("applied index after reopen %d, want 300", got)
		}
		checkState(t, s, ref)

		// Replaying the same entries from an older index (the node's
		// rewind to its commit index) converges to the same state, and the
		// applied index follows the replay.
		for _, from := range []int{0, 150, 299} {
			mustApply(t, s, ents[from:from+1]...)
			if got := s.AppliedIndex(); got != uint64(from+1) {
				t.Fatalf("applied index after re-applying entry %d: %d", from+1, got)
			}
			applyInBatches(t, r, s, ents[from+1:], 16)
			if got := s.AppliedIndex(); got != 300 {
				t.Fatalf("applied index after replay from %d: %d, want 300", from, got)
			}
			checkState(t, s, ref)
		}

		// Every entry given is applied, also one at or below the applied
		// index (the contract: after a rewind the node's entries win).
		mustApply(t, s, put(150, "key0000", "rewritten"), del(151, "key0001"))
		ref2 := maps.Clone(ref)
		ref2.apply([]systems.AppliedEntry{put(150, "key0000", "rewritten"), del(151, "key0001")})
		if got := s.AppliedIndex(); got != 151 {
			t.Fatalf("applied index after applying entries 150..151: %d, want 151", got)
		}
		checkState(t, s, ref2)
		applyInBatches(t, r, s, ents[151:], 16)
		ref2.apply(ents[151:])
		checkState(t, s, ref2)

		// Reopen after the replay: the applied index is the replay's last.
		more := randomEntries(r, 300, 20, 40, 200)
		mustApply(t, s, more...)
		ref2.apply(more)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, c, dir)
		if got := s.AppliedIndex(); got != 320 {
			t.Fatalf("applied index after reopen %d, want 320", got)
		}
		checkState(t, s, ref2)
	})
}

func TestApplyRejects(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		s := openTest(t, testConfig(m), t.TempDir())
		defer s.Close()
		mustApply(t, s, put(1, "a", "1"))
		bad := []struct {
			name string
			ents []systems.AppliedEntry
		}{
			{"decreasing index", []systems.AppliedEntry{put(3, "b", "2"), put(2, "c", "3")}},
			{"repeated index", []systems.AppliedEntry{put(2, "b", "2"), put(2, "c", "3")}},
			{"unknown op", []systems.AppliedEntry{put(2, "b", "2"), {Index: 3, Command: systems.Command{Op: 9, Key: []byte("d")}}}},
		}
		for _, tc := range bad {
			if err := s.Apply(tc.ents); err == nil {
				t.Errorf("%s: Apply accepted %d entries", tc.name, len(tc.ents))
			}
		}
		// Nothing of a rejected call was written.
		if got := s.AppliedIndex(); got != 1 {
			t.Fatalf("applied index after rejected calls %d, want 1", got)
		}
		checkState(t, s, model{"a": []byte("1")}, "b", "c", "d")
		if err := s.Apply(nil); err != nil {
			t.Fatalf("Apply(nil): %v", err)
		}
	})
}

func TestStateHash(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		seed := testSeed(t)
		ents := randomEntries(rand.New(rand.NewPCG(seed, 7)), 0, 400, 60, 300)
		// Two replicas apply the same entries in different batchings.
		a := openTest(t, testConfig(m), t.TempDir())
		defer a.Close()
		b := openTest(t, testConfig(m), t.TempDir())
		defer b.Close()
		applyInBatches(t, rand.New(rand.NewPCG(seed, 1)), a, ents, 1)
		applyInBatches(t, rand.New(rand.NewPCG(seed, 2)), b, ents, 50)
		if err := b.Flush(); err != nil { // different on-disk shape, same data
			t.Fatal(err)
		}
		ha, ia, err := a.StateHash()
		if err != nil {
			t.Fatal(err)
		}
		hb, ib, err := b.StateHash()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ha, hb) || ia != 400 || ib != 400 {
			t.Fatalf("replicas differ: %x@%d vs %x@%d", ha, ia, hb, ib)
		}
		ref := model{}
		ref.apply(ents)
		if !bytes.Equal(ha, ref.hash()) {
			t.Fatalf("hash %x is not the documented format's %x", ha, ref.hash())
		}
		// Diverge at index 401.
		mustApply(t, a, put(401, "key0001", "x"))
		mustApply(t, b, put(401, "key0001", "y"))
		ha, _, _ = a.StateHash()
		hb, _, _ = b.StateHash()
		if bytes.Equal(ha, hb) {
			t.Fatalf("replicas with different values hash equal: %x", ha)
		}
		// Converge again.
		mustApply(t, b, put(402, "key0001", "x"))
		mustApply(t, a, noop(402))
		ha, ia, _ = a.StateHash()
		hb, ib, _ = b.StateHash()
		if !bytes.Equal(ha, hb) || ia != ib {
			t.Fatalf("replicas with equal data differ: %x@%d vs %x@%d", ha, ia, hb, ib)
		}
	})
}

// TestRandomAgainstModel applies random batches, some values above blobdb's
// threshold and some above the memtable size fraction that forces flushes,
// reopening now and then, and compares everything with a map.
func TestRandomAgainstModel(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		seed := testSeed(t)
		r := rand.New(rand.NewPCG(seed, 11))
		dir := t.TempDir()
		c := testConfig(m)
		c.WriteBufferBytes = 256 << 10 // several flushes in this test
		s := openTest(t, c, dir)
		defer func() { s.Close() }()
		ref := model{}
		var next uint64
		for round := range 6 {
			ents := randomEntries(r, next, 250, 80, 8<<10)
			applyInBatches(t, r, s, ents, 20)
			ref.apply(ents)
			next += uint64(len(ents))
			checkState(t, s, ref, "key0000", "key0079", "nokey")
			if round%2 == 1 {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openTest(t, c, dir)
				if got := s.AppliedIndex(); got != next {
					t.Fatalf("round %d: applied index after reopen %d, want %d", round, got, next)
				}
				checkState(t, s, ref)
			}
		}
	})
}

// TestConcurrentReads runs Get, Scan and StateHash concurrently with Apply
// (for the race detector and RocksDB's thread safety) and then with Close.
func TestConcurrentReads(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		seed := testSeed(t)
		c := testConfig(m)
		c.WriteBufferBytes = 256 << 10
		s := openTest(t, c, t.TempDir())
		ents := randomEntries(rand.New(rand.NewPCG(seed, 3)), 0, 600, 50, 4<<10)
		// Values name their key's number so that readers can check them.
		for i := range ents {
			if ents[i].Command.Op == systems.OpPut {
				ents[i].Command.Value = append(append([]byte{}, ents[i].Command.Key...), ents[i].Command.Value...)
			}
		}
		var wg sync.WaitGroup
		done := make(chan struct{})
		errs := make(chan error, 8)
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(100+g)))
				for {
					select {
					case <-done:
						return
					default:
					}
					k := []byte(fmt.Sprintf("key%04d", r.IntN(50)))
					if v, found, err := s.Get(k); err != nil {
						errs <- err
						return
					} else if found && !bytes.HasPrefix(v, k) {
						errs <- fmt.Errorf("Get(%q) returned a value of another key", k)
						return
					}
					kvs, _, err := s.Scan(k, []byte("key0040"), 5, 8<<10)
					if err != nil {
						errs <- err
						return
					}
					for i, kv := range kvs {
						if string(kv.Key) < string(k) || string(kv.Key) >= "key0040" || (i > 0 && string(kv.Key) <= string(kvs[i-1].Key)) || !bytes.HasPrefix(kv.Value, kv.Key) {
							errs <- fmt.Errorf("Scan(%q) pair %d %q out of order or range", k, i, kv.Key)
							return
						}
					}
					if g == 0 {
						if _, _, err := s.StateHash(); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		applyInBatches(t, rand.New(rand.NewPCG(seed, 4)), s, ents, 10)
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}

		// Readers racing with Close get ErrClosed or a result, never a crash.
		var wg2 sync.WaitGroup
		start := make(chan struct{})
		for range 4 {
			wg2.Add(1)
			go func() {
				defer wg2.Done()
				<-start
				for range 50 {
					if _, _, err := s.Get([]byte("key0001")); err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("Get during Close: %v", err)
						return
					}
					if _, _, err := s.Scan(nil, nil, 3, 0); err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("Scan during Close: %v", err)
						return
					}
				}
			}()
		}
		close(start)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg2.Wait()
	})
}

// TestStorageShapeReportsLevels: with a geometry scaled far down, a few
// MiB of writes build an LSM with levels below level 0, StorageShape
// reports them (files and bytes), and reads still work with the block
// cache off (the paper's condition).
func TestStorageShapeReportsLevels(t *testing.T) {
	for _, m := range allModes {
		t.Run(string(m), func(t *testing.T) {
			c := NewConfig(m)
			c.BlockCacheBytes = 0
			c.ScaleGeometry(1e-9) // every size at its 64 KiB floor
			if m == ModeBlobDB {
				c.MinBlobBytes = 1 << 20 // keep values in the LSM: levels to see
			}
			s := openTest(t, c, t.TempDir())
			defer s.Close()
			val := bytes.Repeat([]byte("v"), 4<<10)
			rng := rand.New(rand.NewPCG(testSeed(t), 2))
			want := model{}
			idx := uint64(0)
			for b := 0; b < 64; b++ {
				var ents []systems.AppliedEntry
				for i := 0; i < 16; i++ {
					idx++
					k := fmt.Sprintf("k%06d", rng.IntN(2000))
					ents = append(ents, put(idx, k, string(val)))
				}
				mustApply(t, s, ents...)
				want.apply(ents)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			sh := s.StorageShape()
			var files, bytesTotal int64
			deepest := -1
			for _, l := range sh.Levels {
				files += l.Files
				bytesTotal += l.Bytes
				if l.Files > 0 {
					deepest = l.Level
				}
			}
			if files == 0 || bytesTotal == 0 || deepest < 1 {
				t.Fatalf("shape %+v: want files beyond level 0 after 4 MiB through 64 KiB memtables", sh)
			}
			checkState(t, s, want)
			s.Close()
			if sh := s.StorageShape(); len(sh.Levels) != 0 {
				t.Errorf("closed store reports %+v", sh)
			}
		})
	}
}
