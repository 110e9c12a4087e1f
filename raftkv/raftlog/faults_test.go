package raftlog

import (
	"errors"
	"math/rand"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// ENOSPC on an append (and on the roll to the next segment) changes
// nothing: the same append succeeds once there is space, and the log
// recovers every entry.
func TestAppendOnFullDiskCanBeRetried(t *testing.T) {
	const seed = 7
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	o := testOptions(t, dir)
	// The room freed below is counted in record bytes; a direct write
	// writes whole blocks.
	o.DirectIO = false
	fs := vfs.New()
	o.FS = fs
	l := mustOpen(t, o)
	want := appendRange(t, l, 1, 10, 1, 300, rng)
	segsBefore := len(l.Segments())
	if err := fs.SetFaults(vfs.Fault{Kind: vfs.FaultDiskFull}); err != nil {
		t.Fatal(err)
	}
	more := []raftpb.Entry{putEntry(11, 1, "k11", make([]byte, 5000))}
	for try := 0; try < 3; try++ {
		if err := l.Append(raftpb.HardState{Term: 1, Commit: 10}, more, true); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append on a full disk = %v, want ENOSPC", err)
		}
	}
	if last, _ := l.LastIndex(); last != 10 {
		t.Fatalf("a failed append moved the last index to %d", last)
	}
	// Room for the append but not for the next segment: the append is
	// durable, the roll fails and is retried later.
	hs := raftpb.HardState{Term: 1, Commit: 10}
	fs.Free(int64(2*headerSize + len(more[0].Data) + hs.Size()))
	if err := l.Append(hs, more, true); err != nil {
		t.Fatalf("append with room: %v", err)
	}
	if n := len(l.Segments()); n != segsBefore {
		t.Fatalf("a failed roll left %d segments, want %d", n, segsBefore)
	}
	if err := fs.SetFaults(); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	want = append(want, appendRange(t, l, 12, 20, 1, 300, rng)...)
	if len(l.Segments()) <= segsBefore {
		t.Fatal("the log did not roll once the disk had space")
	}
	checkEntries(t, l, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	o.FS = nil
	checkEntries(t, mustOpen(t, o), want)
}

// After a failed fdatasync the log writes nothing more, even once the
// fault is gone: no retry past a failed fsync.
func TestNoWritePastFailedFsync(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	o := testOptions(t, t.TempDir())
	fs := vfs.New()
	o.FS = fs
	l := mustOpen(t, o)
	appendRange(t, l, 1, 3, 1, 100, rng)
	if err := fs.SetFaults(vfs.Fault{Kind: vfs.FaultFsyncError}); err != nil {
		t.Fatal(err)
	}
	err := l.Append(raftpb.HardState{Term: 1, Commit: 3}, []raftpb.Entry{putEntry(4, 1, "k4", []byte("v"))}, true)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("append with a failing fdatasync = %v, want EIO", err)
	}
	if err := fs.SetFaults(); err != nil {
		t.Fatal(err)
	}
	err = l.Append(raftpb.HardState{Term: 1, Commit: 3}, []raftpb.Entry{putEntry(4, 1, "k4", []byte("v"))}, true)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after a failed fdatasync = %v, want the first failure", err)
	}
	if err := l.Sync(); err == nil {
		t.Fatal("Sync after a failed fdatasync succeeded")
	}
}

// Injected read faults fail a value read (EIO, or a CRC mismatch for a
// corrupt read), never return wrong bytes, and spare raft's own reads.
func TestValueReadFaults(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	o := testOptions(t, t.TempDir())
	o.EntryCacheBytes = 0
	fs := vfs.New()
	o.FS = fs
	l := mustOpen(t, o)
	ents := appendRange(t, l, 1, 3, 1, 100, rng)
	loc, ok := l.Location(2)
	if !ok {
		t.Fatal("no location for entry 2")
	}
	if err := fs.SetFaults(vfs.Fault{Kind: vfs.FaultReadError}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadCommand(loc); !errors.Is(err, syscall.EIO) {
		t.Fatalf("value read under read-error = %v, want EIO", err)
	}
	if err := fs.SetFaults(vfs.Fault{Kind: vfs.FaultReadCorrupt}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadCommand(loc); !errors.Is(err, systems.ErrCorrupt) {
		t.Fatalf("value read under read-corrupt = %v, want ErrCorrupt", err)
	}
	checkEntries(t, l, ents)
}
