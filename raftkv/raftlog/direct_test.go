package raftlog

import (
	"bytes"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// copyDir copies the regular files of src into a new directory, as a crash
// leaves them (the log is not closed).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// directLog opens a log with direct I/O in a new directory, or skips the
// test where the filesystem refuses O_DIRECT (tmpfs).
func directLog(t *testing.T, segmentBytes int64) (*Log, Options) {
	t.Helper()
	o := testOptions(t, t.TempDir())
	o.SegmentSizeBytes = segmentBytes
	o.DirectIO = true
	l := mustOpen(t, o)
	if !l.direct {
		t.Skipf("%s refuses O_DIRECT; direct I/O is not tested here", o.Dir)
	}
	return l, o
}

// TestDirectIOPaddingRecovers: a direct-written active segment is padded
// to a whole block; after a crash (files as they are), recovery takes the
// padding for the end of the data, not for a torn write, keeps every
// entry, and the log appends after it; a clean Close leaves no padding.
func TestDirectIOPaddingRecovers(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	l, o := directLog(t, 8<<20)
	var want []raftpb.Entry
	next := uint64(1)
	for _, size := range []int{10, 5000, 300 << 10, 1, 4096 - 2*headerSize, 70 << 10} {
		want = append(want, appendRange(t, l, next, next+2, 1, size, rng)...)
		next += 3
	}
	seg := l.active()
	st, err := os.Stat(seg.path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size()%directBlockBytes != 0 || st.Size() < seg.size.Load() || st.Size()-seg.size.Load() >= directBlockBytes {
		t.Fatalf("file of %d bytes for %d bytes of records, want them padded to a whole block", st.Size(), seg.size.Load())
	}
	var logs bytes.Buffer
	crashed := o
	crashed.Dir = copyDir(t, o.Dir)
	crashed.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l2 := mustOpen(t, crashed)
	checkEntries(t, l2, want)
	if strings.Contains(logs.String(), "torn") {
		t.Fatalf("recovery took the padding for a torn tail:\n%s", logs.String())
	}
	more := appendRange(t, l2, next, next+3, 1, 777, rng)
	want = append(want, more...)
	checkEntries(t, l2, want)
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(lastSegmentPath(t, crashed.Dir))
	if err != nil {
		t.Fatal(err)
	}
	crashed.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	l3 := mustOpen(t, crashed)
	checkEntries(t, l3, want)
	if st2.Size() != l3.active().size.Load() {
		t.Fatalf("after a clean close the segment file holds %d bytes for %d bytes of records", st2.Size(), l3.active().size.Load())
	}
}

// TestDirectIOSealedSegments: segments sealed by Roll hold exactly their
// records, and the sidecar index built from the records noted while
// writing is the one a scan of the file builds.
func TestDirectIOSealedSegments(t *testing.T) {
	rng := rand.New(rand.NewSource(32))
	l, o := directLog(t, 64<<10)
	var want []raftpb.Entry
	for i := uint64(0); i < 30; i++ {
		want = append(want, appendRange(t, l, 1+2*i, 2+2*i, 1, rng.Intn(20<<10), rng)...)
	}
	l.indexing.Wait()
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several sealed ones", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		st, err := os.Stat(s.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != s.SizeBytes {
			t.Fatalf("sealed %s: %d bytes on disk for %d bytes of records", s.Path, st.Size(), s.SizeBytes)
		}
		seg := l.byID[s.ID]
		fromFile, err := scanHeaders(seg, s.SizeBytes)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(o.Dir, segIndexName(s.ID)))
		if err != nil {
			t.Fatalf("sealed %s has no sidecar index: %v", s.Path, err)
		}
		if !bytes.Equal(got, encodeSegIndex(s.SizeBytes, fromFile)) {
			t.Fatalf("sidecar of %s differs from the one a scan of the file builds", s.Path)
		}
	}
	if len(l.active().recs) == 0 {
		t.Fatal("the active segment noted no records for its sidecar")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, mustOpen(t, o), want)
}

// TestDirectIORollFailsToCreate: a roll whose next segment cannot be
// created (ENOSPC on the create, out of inodes, say: Append then keeps
// the active segment) leaves the active segment written as before, and
// the sidecar built when it is finally sealed holds every record of it:
// a restart recovers every entry from it. The failed roll used to close
// the segment's direct descriptor without reopening it, so the appends
// after it were buffered writes (through the page cache) that the noted
// records did not include: the sidecar did not cover the segment, and
// every later recovery warned "ignoring a segment index" and scanned it.
func TestDirectIORollFailsToCreate(t *testing.T) {
	rng := rand.New(rand.NewSource(33))
	l, o := directLog(t, 64<<10)
	want := appendRange(t, l, 1, 2, 1, 1000, rng)
	seg := l.active()
	// Something in the way of the next segment's file makes its create
	// fail (O_EXCL).
	blocker := filepath.Join(o.Dir, segmentName(seg.id+1))
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.Roll(); err == nil {
		t.Fatal("roll with the next segment's file in the way succeeded")
	}
	if l.active() != seg {
		t.Fatal("a failed roll changed the active segment")
	}
	if seg.dw == nil {
		t.Error("a failed roll left the active segment without its direct descriptor")
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	// Appends to the same segment, past its size, then a roll that works.
	for i := uint64(0); i < 6; i++ {
		want = append(want, appendRange(t, l, 3+2*i, 4+2*i, 1, 20<<10, rng)...)
	}
	if l.active() == seg {
		t.Fatal("the log did not roll once the next segment could be created")
	}
	l.indexing.Wait()
	fromFile, err := scanHeaders(seg, seg.size.Load())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(o.Dir, segIndexName(seg.id)))
	if err != nil {
		t.Fatalf("sealed segment has no sidecar index: %v", err)
	}
	if !bytes.Equal(got, encodeSegIndex(seg.size.Load(), fromFile)) {
		t.Error("sidecar of the sealed segment differs from the one a scan of the file builds")
	}
	checkEntries(t, l, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, mustOpen(t, o), want)
}

// TestDirectIOSidecarAfterRestart: a segment that was active across a
// restart (a crash, or a clean close) and is sealed afterwards gets a
// sidecar that covers all of it, and the next recovery uses it. Its
// records from before the restart used to be missing from the ones noted
// for the sidecar: the sidecar covered only what was written after the
// restart, and every later recovery warned "ignoring a segment index:
// records cover X of Y bytes" and scanned the segment (seen on every
// node of a 3-node cluster killed with -9 under 256 KiB puts).
func TestDirectIOSidecarAfterRestart(t *testing.T) {
	rng := rand.New(rand.NewSource(34))
	for _, crash := range []bool{true, false} {
		l, o := directLog(t, 64<<10)
		want := appendRange(t, l, 1, 3, 1, 5000, rng)
		seg := l.active().id
		if crash {
			o.Dir = copyDir(t, o.Dir)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l2 := mustOpen(t, o)
		// Past the segment's size: it is sealed, and its sidecar written.
		for i := uint64(0); i < 8; i++ {
			want = append(want, appendRange(t, l2, 4+i, 4+i, 1, 10<<10, rng)...)
		}
		if l2.active().id == seg {
			t.Fatalf("crash=%v: the segment active across the restart was not sealed", crash)
		}
		l2.indexing.Wait()
		s := l2.byID[seg]
		fromFile, err := scanHeaders(s, s.size.Load())
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(o.Dir, segIndexName(seg)))
		if err != nil {
			t.Fatalf("crash=%v: sealed segment has no sidecar index: %v", crash, err)
		}
		if !bytes.Equal(got, encodeSegIndex(s.size.Load(), fromFile)) {
			t.Errorf("crash=%v: sidecar of the segment active across the restart differs from the one a scan of the file builds", crash)
		}
		if err := l2.Close(); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		checkEntries(t, mustOpen(t, o), want)
		if strings.Contains(logs.String(), "ignoring a segment index") {
			t.Errorf("crash=%v: recovery ignored a sidecar:\n%s", crash, logs.String())
		}
	}
}
