package baseline

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/systems"
)

// The crash tests run the test binary again as a child (TestCrashChild) that
// applies entries and exits without closing the store: RocksDB's memtables
// and anything not yet written to a file die with the process, as in a
// kill -9. The parent then reopens the directory.

const (
	crashModeEnv     = "BASELINE_CRASH_MODE"
	crashDirEnv      = "BASELINE_CRASH_DIR"
	crashExitCode    = 3
	crashEntries     = 200 // entries the child applies
	crashFlushAt     = 120 // the child flushes (Store.Flush) after this many entries
	crashDataFlushAt = 160 // the child flushes the user data column family alone after this many
)

func crashEntriesFor(seed uint64) []systems.AppliedEntry {
	return randomEntries(rand.New(rand.NewPCG(seed, 21)), 0, crashEntries, 30, 6<<10)
}

// TestCrashChild is the child process; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	mode, dir := os.Getenv(crashModeEnv), os.Getenv(crashDirEnv)
	if mode == "" || dir == "" {
		t.Skip("only runs as the child of the crash tests")
	}
	seed := testSeed(t)
	ents := crashEntriesFor(seed)
	r := rand.New(rand.NewPCG(seed, 22))
	s := openTest(t, testConfig(Mode(mode)), dir)
	applyInBatches(t, r, s, ents[:crashFlushAt], 7)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// Then the flushes RocksDB may run on its own at any time: the user
	// data column family alone (its write buffer filled), later the meta
	// column family alone. Without atomic_flush neither may leave the
	// applied index on disk ahead of the user data on disk.
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	applyInBatches(t, r, s, ents[crashFlushAt:crashDataFlushAt], 7)
	if err := s.db.FlushCF(s.data, fo); err != nil {
		t.Fatal(err)
	}
	applyInBatches(t, r, s, ents[crashDataFlushAt:], 7)
	if err := s.db.FlushCF(s.meta, fo); err != nil {
		t.Fatal(err)
	}
	os.Exit(crashExitCode) // no Close, no flush: a crash
}

// runCrashChild runs TestCrashChild for mode in dir and checks that it got
// to the crash.
func runCrashChild(t *testing.T, m Mode, dir string, seed uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashModeEnv+"="+string(m), crashDirEnv+"="+dir,
		"BASELINE_TEST_SEED="+strconv.FormatUint(seed, 10))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != crashExitCode {
		t.Fatalf("crash child: %v, want exit code %d; output:\n%s", err, crashExitCode, out)
	}
}

// matchingPrefixes returns every k in 0..len(ents) for which the user data
// of s is exactly the effect of ents[:k], in increasing order.
func matchingPrefixes(t testing.TB, s *Store, ents []systems.AppliedEntry) []uint64 {
	t.Helper()
	kvs, more, err := s.Scan(nil, nil, 0, 0)
	if err != nil || more {
		t.Fatalf("full scan: more=%v err=%v", more, err)
	}
	disk := model{}
	for _, kv := range kvs {
		disk[string(kv.Key)] = kv.Value
	}
	// differ holds the keys whose value differs between disk and ref,
	// the effect of the entries so far; only the key of the entry just
	// applied can change.
	ref := model{}
	differ := map[string]bool{}
	for k := range disk {
		differ[k] = true
	}
	var ks []uint64
	if len(differ) == 0 {
		ks = append(ks, 0)
	}
	for i := range ents {
		ref.apply(ents[i : i+1])
		if ents[i].Command.Op != systems.OpNone {
			k := string(ents[i].Command.Key)
			v, ok := ref[k]
			d, dok := disk[k]
			if ok == dok && bytes.Equal(v, d) {
				delete(differ, k)
			} else {
				differ[k] = true
			}
		}
		if len(differ) == 0 {
			ks = append(ks, uint64(i+1))
		}
	}
	return ks
}

// recoveredPrefix checks the crash guarantee of a reopened store: its user
// data is exactly the effect of ents[:k] for some k at or above its applied
// index (so replaying from the applied index loses nothing), and returns
// the largest such k. In original and blobdb mode (applied index and data
// in one WAL record) the applied index is such a k; pasv's data may be
// ahead of it.
func recoveredPrefix(t testing.TB, s *Store, ents []systems.AppliedEntry) uint64 {
	t.Helper()
	applied := s.AppliedIndex()
	ks := matchingPrefixes(t, s, ents)
	if len(ks) == 0 || ks[len(ks)-1] < applied {
		t.Fatalf("%s: the user data is no prefix of the entries at or above the applied index %d (prefixes it matches: %v): entries were lost",
			s.Mode(), applied, ks)
	}
	if s.Mode() != ModePASV && !slices.Contains(ks, applied) {
		t.Fatalf("%s: the user data is the effect of entries 1..k for k in %v, not of 1..%d, the applied index", s.Mode(), ks, applied)
	}
	return ks[len(ks)-1]
}

// checkRecovered checks the crash guarantee (recoveredPrefix), replays the
// entries above the applied index as the node does, checks the full state,
// and checks that replaying everything again changes nothing. It returns
// the entries the user data held before the replay.
func checkRecovered(t *testing.T, s *Store, ents []systems.AppliedEntry) uint64 {
	t.Helper()
	applied := s.AppliedIndex()
	k := recoveredPrefix(t, s, ents)
	if _, idx, err := s.StateHash(); err != nil || idx != applied {
		t.Fatalf("StateHash applied %d, %v; want %d", idx, err, applied)
	}
	if applied < uint64(len(ents)) {
		mustApply(t, s, ents[applied:]...)
	}
	ref := model{}
	ref.apply(ents)
	if got := s.AppliedIndex(); got != uint64(len(ents)) {
		t.Fatalf("applied index after replay %d, want %d", got, len(ents))
	}
	checkState(t, s, ref)
	mustApply(t, s, ents...)
	checkState(t, s, ref)
	return k
}

func TestCrash(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		seed := testSeed(t)
		dir := t.TempDir()
		runCrashChild(t, m, dir, seed)
		ents := crashEntriesFor(seed)
		c := testConfig(m)
		s := openTest(t, c, dir)
		applied := s.AppliedIndex()
		k := checkRecovered(t, s, ents)
		t.Logf("%s: after the crash: applied index %d, user data of entries 1..%d (child applied %d, flushed at %d, the user data alone at %d)",
			m, applied, k, crashEntries, crashFlushAt, crashDataFlushAt)
		switch m {
		case ModePASV:
			// The applied index is what Flush wrote (a flush of the
			// meta column family alone adds nothing: Apply does not
			// write it); the user data is what reached SST files, at
			// least the flush of the data column family alone; the
			// memtable is lost.
			if applied != crashFlushAt || k < crashDataFlushAt {
				t.Fatalf("applied index %d, user data up to entry %d after a crash; want %d and at least %d",
					applied, k, crashFlushAt, crashDataFlushAt)
			}
		default:
			// The WAL was written (not fsynced) before each Apply
			// returned; a process crash keeps the OS page cache.
			if applied != crashEntries {
				t.Fatalf("applied index %d after a process crash with the WAL on, want %d", applied, crashEntries)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, c, dir)
		defer s.Close()
		if got := s.AppliedIndex(); got != crashEntries {
			t.Fatalf("applied index after replay and a clean close %d, want %d", got, crashEntries)
		}
	})
}

// TestPASVCloseWithoutFlush releases the RocksDB handles without the
// flushApplied that Close does in pasv mode, after a Flush part way.
// RocksDB itself flushes memtables holding unpersisted (WAL-less) data when
// the DB is closed, unless avoid_flush_during_shutdown is set
// (rocksdb/options.h, default false), so the user data is all there; the
// applied index is the one Flush wrote (Apply does not write it in pasv
// mode), and replaying the log from it converges.
func TestPASVCloseWithoutFlush(t *testing.T) {
	seed := testSeed(t)
	ents := randomEntries(rand.New(rand.NewPCG(seed, 31)), 0, 150, 30, 2<<10)
	dir := t.TempDir()
	c := testConfig(ModePASV)
	s := openTest(t, c, dir)
	r := rand.New(rand.NewPCG(seed, 32))
	applyInBatches(t, r, s, ents[:100], 9)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	applyInBatches(t, r, s, ents[100:], 9)
	s.mu.Lock()
	s.closed = true
	s.release() // rocksdb_close without flushApplied
	s.mu.Unlock()

	s = openTest(t, c, dir)
	defer s.Close()
	applied := s.AppliedIndex()
	k := checkRecovered(t, s, ents)
	t.Logf("after closing without an explicit flush: applied index %d, user data of entries 1..%d of %d", applied, k, len(ents))
	if applied != 100 || k != uint64(len(ents)) {
		t.Errorf("applied index %d, user data up to entry %d; want 100 (the Flush) and %d (RocksDB flushes WAL-less memtables on close)",
			applied, k, len(ents))
	}
}

// TestPASVCleanClose: after Close a pasv store restarts at its last applied
// index with nothing to replay, and its data is on SST files (no WAL).
func TestPASVCleanClose(t *testing.T) {
	seed := testSeed(t)
	ents := randomEntries(rand.New(rand.NewPCG(seed, 41)), 0, 100, 20, 1<<10)
	dir := t.TempDir()
	c := testConfig(ModePASV)
	s := openTest(t, c, dir)
	applyInBatches(t, rand.New(rand.NewPCG(seed, 42)), s, ents, 5)
	h1, _, err := s.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, c, dir)
	defer s.Close()
	h2, applied, err := s.StateHash()
	if err != nil {
		t.Fatal(err)
	}
	if applied != 100 || s.AppliedIndex() != 100 || !bytes.Equal(h1, h2) {
		t.Fatalf("after a clean close: applied %d/%d, hash equal %v; want 100, true", applied, s.AppliedIndex(), bytes.Equal(h1, h2))
	}
}
