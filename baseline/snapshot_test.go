package baseline

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// compactedAt is a LogControl whose log's compaction point is fixed: what
// Open consults to decide about a pending restore.
type compactedAt uint64

func (c compactedAt) Segments() []systems.SegmentInfo       { return nil }
func (c compactedAt) Roll(context.Context) error            { return nil }
func (c compactedAt) Compact(context.Context, uint64) error { return errors.New("stub") }
func (c compactedAt) CompactedIndex() uint64                { return uint64(c) }
func (c compactedAt) CompactBound() uint64                  { return 0 }
func (c compactedAt) RemoveSegment(uint64) error            { return errors.New("stub") }

// snapshotOf writes s's snapshot stream into a buffer.
func snapshotOf(t testing.TB, s *Store) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	w := systems.NewSnapshotWriter(&buf)
	if err := s.WriteSnapshot(w); err != nil {
		t.Fatalf("write snapshot: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func mustHash(t testing.TB, s *Store) ([]byte, uint64) {
	t.Helper()
	sum, applied, err := s.StateHash()
	if err != nil {
		t.Fatalf("state hash: %v", err)
	}
	return sum, applied
}

// restoreLeftovers lists the restore files and directories under dir.
func restoreLeftovers(dir string) []string {
	var out []string
	for _, n := range []string{stagedDirName, oldDirName, restoreMarkerName, restoreMarkerName + ".tmp"} {
		if exists(filepath.Join(dir, n)) {
			out = append(out, n)
		}
	}
	return out
}

// twoStores returns a leader store with seeded data at index 300 and its
// model, and a follower store (its own directory) at index 80 of a
// different history.
func twoStores(t *testing.T, m Mode, seed uint64) (leader, follower *Store, ref model, followerRef model, followerDir string) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 41))
	leader = openTest(t, testConfig(m), t.TempDir())
	t.Cleanup(func() { leader.Close() })
	ents := randomEntries(r, 0, 300, 80, 300)
	applyInBatches(t, r, leader, ents, 16)
	ref = model{}
	ref.apply(ents)
	followerDir = t.TempDir()
	follower = openTest(t, testConfig(m), followerDir)
	fents := randomEntries(r, 0, 80, 80, 300)
	applyInBatches(t, r, follower, fents, 16)
	followerRef = model{}
	followerRef.apply(fents)
	return leader, follower, ref, followerRef, followerDir
}

func TestSnapshotRoundTrip(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		seed := testSeed(t)
		leader, follower, ref, fref, fdir := twoStores(t, m, seed)
		defer func() { follower.Close() }()
		buf := snapshotOf(t, leader)
		const index = 300

		if err := follower.PrepareRestore(index, systems.NewSnapshotReader(buf)); err != nil {
			t.Fatalf("prepare restore: %v", err)
		}
		// Staged, not visible.
		if follower.AppliedIndex() != 80 {
			t.Fatalf("applied index %d after PrepareRestore, want 80", follower.AppliedIndex())
		}
		checkState(t, follower, fref)
		if got := restoreLeftovers(fdir); len(got) != 2 {
			t.Fatalf("after PrepareRestore: %v, want the staged database and the marker", got)
		}
		if err := follower.CommitRestore(index); err != nil {
			t.Fatalf("commit restore: %v", err)
		}
		if follower.AppliedIndex() != index {
			t.Fatalf("applied index %d after CommitRestore, want %d", follower.AppliedIndex(), index)
		}
		if got := restoreLeftovers(fdir); len(got) != 0 {
			t.Fatalf("after CommitRestore: %v left", got)
		}
		lsum, lidx := mustHash(t, leader)
		fsum, fidx := mustHash(t, follower)
		if lidx != index || fidx != index || !bytes.Equal(lsum, fsum) {
			t.Fatalf("hashes differ: leader %x at %d, follower %x at %d", lsum, lidx, fsum, fidx)
		}
		checkState(t, follower, ref)

		// Both go on from the same index to the same state.
		more := randomEntries(rand.New(rand.NewPCG(seed, 42)), index, 50, 80, 300)
		mustApply(t, leader, more...)
		mustApply(t, follower, more...)
		ref.apply(more)
		checkState(t, follower, ref)
		lsum, _ = mustHash(t, leader)
		fsum, _ = mustHash(t, follower)
		if !bytes.Equal(lsum, fsum) {
			t.Fatal("hashes differ after applying the same entries")
		}
		// And the restored state survives a reopen.
		if err := follower.Close(); err != nil {
			t.Fatal(err)
		}
		follower = openTest(t, testConfig(m), fdir)
		if got := follower.AppliedIndex(); got < index {
			t.Fatalf("reopened applied index %d, want at least %d", got, index)
		}
		mustApply(t, follower, more...)
		checkState(t, follower, ref)
	})
}

// An empty store snapshots to an empty stream that restores.
func TestSnapshotEmpty(t *testing.T) {
	a := openTest(t, testConfig(ModeOriginal), t.TempDir())
	defer a.Close()
	b := openTest(t, testConfig(ModeOriginal), t.TempDir())
	defer b.Close()
	mustApply(t, b, put(1, "k", "v"))
	buf := snapshotOf(t, a)
	if err := b.PrepareRestore(7, systems.NewSnapshotReader(buf)); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitRestore(7); err != nil {
		t.Fatal(err)
	}
	if b.AppliedIndex() != 7 {
		t.Fatalf("applied %d", b.AppliedIndex())
	}
	checkState(t, b, model{}, "k")
}

// A bad stream or a wrong index leaves the store as it was, and usable.
func TestRestoreRejects(t *testing.T) {
	forEachMode(t, func(t *testing.T, m Mode) {
		leader, follower, ref, fref, fdir := twoStores(t, m, testSeed(t))
		defer follower.Close()
		buf := snapshotOf(t, leader)
		trunc := bytes.NewReader(buf.Bytes()[:buf.Len()/2])
		err := follower.PrepareRestore(300, systems.NewSnapshotReader(trunc))
		if !errors.Is(err, systems.ErrSnapshotCorrupt) {
			t.Fatalf("truncated stream: %v, want ErrSnapshotCorrupt", err)
		}
		if got := restoreLeftovers(fdir); len(got) != 0 {
			t.Fatalf("failed PrepareRestore left %v", got)
		}
		if err := follower.CommitRestore(300); err == nil {
			t.Fatal("CommitRestore without a staged snapshot succeeded")
		}
		if err := follower.PrepareRestore(300, systems.NewSnapshotReader(bytes.NewReader(buf.Bytes()))); err != nil {
			t.Fatal(err)
		}
		if err := follower.CommitRestore(299); err == nil {
			t.Fatal("CommitRestore at another index succeeded")
		}
		checkState(t, follower, fref)
		// The staged snapshot is still committable.
		if err := follower.CommitRestore(300); err != nil {
			t.Fatal(err)
		}
		checkState(t, follower, ref)
	})
}

// A crash between PrepareRestore and CommitRestore (or in the middle of
// the swap) restarts into the old state if the log did not record the
// snapshot, and into the new one if it did.
func TestRestoreCrash(t *testing.T) {
	const index = 300
	cases := []struct {
		name string
		// control is the log control at reopen (nil: none, as in unit
		// tests: "not recorded").
		control systems.LogControl
		// swap simulates how far CommitRestore got before the crash:
		// 0 not started, 1 live renamed away, 2 staged renamed in.
		swap    int
		wantNew bool
	}{
		{"not-recorded", compactedAt(index - 1), 0, false},
		{"no-control", nil, 0, false},
		{"recorded", compactedAt(index), 0, true},
		{"recorded-later-compaction", compactedAt(index + 50), 0, true},
		{"recorded-live-renamed", compactedAt(index), 1, true},
		{"recorded-staged-renamed", compactedAt(index), 2, true},
	}
	for _, m := range allModes {
		for _, tc := range cases {
			t.Run(string(m)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				leader, follower, ref, fref, fdir := twoStores(t, m, testSeed(t))
				buf := snapshotOf(t, leader)
				if err := follower.PrepareRestore(index, systems.NewSnapshotReader(buf)); err != nil {
					t.Fatal(err)
				}
				// The crash: the process goes away without CommitRestore
				// (Close releases the handles; for this test it is the
				// same as dying, since every staged file is durable).
				if err := follower.Close(); err != nil {
					t.Fatal(err)
				}
				live := filepath.Join(fdir, dbDirName)
				if tc.swap >= 1 {
					mustRename(t, live, filepath.Join(fdir, oldDirName))
				}
				if tc.swap >= 2 {
					mustRename(t, filepath.Join(fdir, stagedDirName), live)
				}
				c := testConfig(m)
				c.LogRetainBytes = 0 // the control is a stub
				s, err := c.OpenStore(systems.Env{Dir: fdir, Control: tc.control, Logger: quietLogger()})
				if err != nil {
					t.Fatalf("reopen: %v", err)
				}
				defer s.Close()
				if got := restoreLeftovers(fdir); len(got) != 0 {
					t.Fatalf("reopen left %v", got)
				}
				if tc.wantNew {
					if s.AppliedIndex() != index {
						t.Fatalf("applied %d, want the snapshot's %d", s.AppliedIndex(), index)
					}
					checkState(t, s, ref)
				} else {
					if s.AppliedIndex() != 80 {
						t.Fatalf("applied %d, want the old 80", s.AppliedIndex())
					}
					checkState(t, s, fref)
				}
			})
		}
	}
}

// Leftovers without a marker (a crash inside PrepareRestore, or after the
// marker was removed) are deleted; a corrupt marker refuses to open.
func TestRestoreLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, testConfig(ModeOriginal), dir)
	mustApply(t, s, put(1, "a", "1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{stagedDirName, oldDirName} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "000001.sst"), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = openTest(t, testConfig(ModeOriginal), dir)
	if got := restoreLeftovers(dir); len(got) != 0 {
		t.Fatalf("open left %v", got)
	}
	checkState(t, s, model{"a": []byte("1")})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, restoreMarkerName), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := testConfig(ModeOriginal).OpenStore(systems.Env{Dir: dir}); !errors.Is(err, systems.ErrCorrupt) {
		t.Fatalf("open with a corrupt marker: %v, want ErrCorrupt", err)
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}
