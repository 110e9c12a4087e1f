package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

func testOptions(t *testing.T, dir string) Options {
	t.Helper()
	o := DefaultOptions(dir)
	o.SegmentSizeBytes = 4096
	o.Bootstrap = raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return o
}

func mustOpen(t *testing.T, o Options) *Log {
	t.Helper()
	l, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func putEntry(index, term uint64, key string, value []byte) raftpb.Entry {
	c := systems.Command{Op: systems.OpPut, RequestID: index, Key: []byte(key), Value: value}
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal, Data: systems.AppendCommand(nil, &c)}
}

// appendRange appends entries [lo, hi] at term with values of valueSize
// bytes derived from rng, and returns them.
func appendRange(t *testing.T, l *Log, lo, hi, term uint64, valueSize int, rng *rand.Rand) []raftpb.Entry {
	t.Helper()
	var ents []raftpb.Entry
	for i := lo; i <= hi; i++ {
		v := make([]byte, valueSize)
		rng.Read(v)
		ents = append(ents, putEntry(i, term, fmt.Sprintf("k%06d", i), v))
	}
	if err := l.Append(raftpb.HardState{Term: term, Commit: lo - 1}, ents, true); err != nil {
		t.Fatalf("Append [%d,%d]: %v", lo, hi, err)
	}
	return ents
}

func checkEntries(t *testing.T, l *Log, want []raftpb.Entry) {
	t.Helper()
	if len(want) == 0 {
		return
	}
	got, err := l.Entries(want[0].Index, want[len(want)-1].Index+1, 1<<40)
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("Entries returned %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Index != want[i].Index || got[i].Term != want[i].Term || got[i].Type != want[i].Type || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("entry %d differs: got index %d term %d, want index %d term %d", i, got[i].Index, got[i].Term, want[i].Index, want[i].Term)
		}
	}
}

func TestAppendReadBackAndRecover(t *testing.T) {
	const seed = 1
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	o := testOptions(t, dir)
	l := mustOpen(t, o)

	if _, cs, _ := l.InitialState(); len(cs.Voters) != 3 {
		t.Fatalf("bootstrap conf state = %v", cs)
	}
	var all []raftpb.Entry
	for lo := uint64(1); lo <= 200; lo += 10 {
		all = append(all, appendRange(t, l, lo, lo+9, 2, rng.Intn(700), rng)...)
	}
	hs := raftpb.HardState{Term: 2, Vote: 1, Commit: 150}
	if err := l.Append(hs, nil, true); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, l, all)
	if n := len(l.Segments()); n < 3 {
		t.Fatalf("expected the log to roll into several segments of 4 KiB, got %d", n)
	}
	// maxSize limits the result but returns at least one entry.
	if got, _ := l.Entries(1, 201, 1); len(got) != 1 {
		t.Fatalf("Entries with maxSize 1 returned %d entries, want 1", len(got))
	}
	loc, ok := l.Location(77)
	if !ok {
		t.Fatal("no location for entry 77")
	}
	c, err := l.ReadCommand(loc)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := systems.DecodeCommand(all[76].Data)
	if !bytes.Equal(c.Value, want.Value) || string(c.Key) != "k000077" {
		t.Fatalf("ReadCommand(77) = key %q, value of %d bytes", c.Key, len(c.Value))
	}
	l.Close()

	l2 := mustOpen(t, o)
	gotHS, cs, _ := l2.InitialState()
	if gotHS != hs || len(cs.Voters) != 3 {
		t.Fatalf("recovered hard state %v conf state %v, want %v", gotHS, cs, hs)
	}
	if li, _ := l2.LastIndex(); li != 200 {
		t.Fatalf("recovered last index %d, want 200", li)
	}
	checkEntries(t, l2, all)
	if tm, _ := l2.Term(0); tm != 0 {
		t.Fatalf("Term(0) = %d", tm)
	}
	if _, err := l2.Term(201); !errors.Is(err, raft.ErrUnavailable) {
		t.Fatalf("Term(201) error = %v, want ErrUnavailable", err)
	}
}

func TestConflictingSuffixIsReplaced(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	o := testOptions(t, t.TempDir())
	l := mustOpen(t, o)
	old := appendRange(t, l, 1, 30, 1, 100, rng)
	// A new leader at term 2 overwrites from index 21.
	newer := appendRange(t, l, 21, 25, 2, 100, rng)
	want := append(append([]raftpb.Entry(nil), old[:20]...), newer...)
	checkEntries(t, l, want)
	if li, _ := l.LastIndex(); li != 25 {
		t.Fatalf("last index %d after overwrite, want 25", li)
	}
	l.Close()
	l2 := mustOpen(t, o)
	checkEntries(t, l2, want)
	if li, _ := l2.LastIndex(); li != 25 {
		t.Fatalf("recovered last index %d, want 25", li)
	}
}

func lastSegmentPath(t *testing.T, dir string) string {
	t.Helper()
	ids, err := listSegments(vfs.OS(), dir)
	if err != nil || len(ids) == 0 {
		t.Fatalf("listSegments: %v %v", ids, err)
	}
	return filepath.Join(dir, segmentName(ids[len(ids)-1]))
}

func TestTornTailIsTruncated(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(t *testing.T, path string, lastRecordOff int64)
	}{
		{"cut mid-record", func(t *testing.T, path string, off int64) {
			st, _ := os.Stat(path)
			if err := os.Truncate(path, off+(st.Size()-off)/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut mid-header", func(t *testing.T, path string, off int64) {
			if err := os.Truncate(path, off+7); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage in the last record", func(t *testing.T, path string, off int64) {
			// The last record of the batch is its HardState.
			st, _ := os.Stat(path)
			flipByte(t, path, st.Size()-3)
		}},
		{"zero-filled tail", func(t *testing.T, path string, off int64) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(make([]byte, 8192))
			f.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(3))
			dir := t.TempDir()
			o := testOptions(t, dir)
			o.SegmentSizeBytes = 1 << 20
			l := mustOpen(t, o)
			ents := appendRange(t, l, 1, 9, 1, 200, rng)
			loc, _ := l.Location(9)
			ents = append(ents, appendRange(t, l, 10, 10, 1, 200, rng)...)
			loc10, _ := l.Location(10)
			_ = loc
			l.Close()
			tc.tear(t, lastSegmentPath(t, dir), loc10.Offset)

			l2 := mustOpen(t, o)
			li, _ := l2.LastIndex()
			if tc.name == "zero-filled tail" || tc.name == "garbage in the last record" {
				if li != 10 {
					t.Fatalf("last index %d, want 10 (zero tail holds no record)", li)
				}
				checkEntries(t, l2, ents)
			} else {
				if li != 9 {
					t.Fatalf("last index %d after torn tail, want 9", li)
				}
				checkEntries(t, l2, ents[:9])
			}
			// The log is writable again at the truncation point.
			more := appendRange(t, l2, li+1, li+3, 1, 50, rng)
			l2.Close()
			l3 := mustOpen(t, o)
			checkEntries(t, l3, more)
		})
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptMiddleRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segment func(dir string) string // which file to corrupt
		bigSegs bool
	}{
		{"middle of last segment", func(dir string) string { return "" }, true},
		// Without its index file a sealed segment is scanned, and its
		// corruption found, at Open (with one, see TestSegmentIndex).
		{"sealed segment", func(dir string) string { return filepath.Join(dir, segmentName(1)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(4))
			dir := t.TempDir()
			o := testOptions(t, dir)
			if tc.bigSegs {
				o.SegmentSizeBytes = 1 << 20
			}
			l := mustOpen(t, o)
			appendRange(t, l, 1, 40, 1, 300, rng)
			path := tc.segment(dir)
			if path == "" {
				path = lastSegmentPath(t, dir)
			}
			loc, _ := l.Location(3)
			if path != lastSegmentPath(t, dir) {
				// First entry of segment 1 is at index 1.
				loc, _ = l.Location(1)
			}
			l.Close() // waits for the sidecar writers: remove sidecars after it
			os.Remove(filepath.Join(dir, segIndexName(1)))
			flipByte(t, path, loc.Offset+headerSize+5)
			_, err := Open(o)
			if err == nil {
				t.Fatal("Open succeeded on a log corrupted in the middle")
			}
			want := fmt.Sprintf("%s at offset %d", path, loc.Offset)
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not name %q", err, want)
			}
		})
	}
}

func TestReadCommandRejectsBadLocations(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.SegmentSizeBytes = 1 << 20
	l := mustOpen(t, o)
	appendRange(t, l, 1, 5, 1, 100, rng)
	loc, _ := l.Location(3)

	past := loc
	past.Offset = 1 << 20
	if _, err := l.ReadCommand(past); !errors.Is(err, systems.ErrCorrupt) || !strings.Contains(err.Error(), "past the end") {
		t.Fatalf("location past the end: error %v", err)
	}
	wrongIndex := loc
	wrongIndex.Index = 4
	if _, err := l.ReadCommand(wrongIndex); !errors.Is(err, systems.ErrCorrupt) {
		t.Fatalf("location with the wrong index: error %v", err)
	}
	noSeg := loc
	noSeg.Segment = 99
	if _, err := l.ReadCommand(noSeg); !errors.Is(err, systems.ErrSegmentRemoved) {
		t.Fatalf("location in a missing segment: error %v", err)
	}
	flipByte(t, lastSegmentPath(t, dir), loc.Offset+headerSize+2)
	_, err := l.ReadCommand(loc)
	if !errors.Is(err, systems.ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", loc.Offset)) {
		t.Fatalf("record with a bad CRC: error %v", err)
	}
	// Other records stay readable.
	loc4, _ := l.Location(4)
	if _, err := l.ReadCommand(loc4); err != nil {
		t.Fatalf("neighbouring record: %v", err)
	}
}

func TestCompactAndRemoveSegments(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	dir := t.TempDir()
	o := testOptions(t, dir)
	l := mustOpen(t, o)
	var all []raftpb.Entry
	for lo := uint64(1); lo <= 100; lo += 5 {
		all = append(all, appendRange(t, l, lo, lo+4, 3, 300, rng)...)
	}
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := l.Compact(60, cs); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(50, cs); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Compact below the compaction point: %v", err)
	}
	if fi, _ := l.FirstIndex(); fi != 61 {
		t.Fatalf("first index %d, want 61", fi)
	}
	if _, err := l.Entries(60, 62, 1<<30); !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("Entries below first index: %v", err)
	}
	if tm, err := l.Term(60); err != nil || tm != 3 {
		t.Fatalf("Term(60) = %d, %v", tm, err)
	}
	// Remove every sealed segment below the point before anything else is
	// appended: RemoveSegment must make the marker durable itself.
	removed := 0
	for _, s := range l.Segments() {
		if !s.Active && s.LastIndex <= 60 {
			if err := l.RemoveSegment(s.ID); err != nil {
				t.Fatal(err)
			}
			removed++
		} else if !s.Active && s.LastIndex > 60 {
			if err := l.RemoveSegment(s.ID); err == nil {
				t.Fatalf("removed segment %d holding entry %d above the compaction point", s.ID, s.LastIndex)
			}
		}
	}
	if removed == 0 {
		t.Fatal("no segment was removable")
	}
	more := appendRange(t, l, 101, 110, 3, 300, rng)
	l.Close()
	l2 := mustOpen(t, o)
	if fi, _ := l2.FirstIndex(); fi != 61 {
		t.Fatalf("recovered first index %d, want 61", fi)
	}
	checkEntries(t, l2, append(all[60:], more...))
	if _, cs2, _ := l2.InitialState(); len(cs2.Voters) != 3 {
		t.Fatalf("recovered conf state %v", cs2)
	}
}

func TestApplySnapshotDiscardsLog(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	o := testOptions(t, t.TempDir())
	l := mustOpen(t, o)
	appendRange(t, l, 1, 50, 1, 100, rng)
	md := raftpb.SnapshotMetadata{Index: 40, Term: 5, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}
	if err := l.ApplySnapshot(md); err != nil {
		t.Fatal(err)
	}
	if li, _ := l.LastIndex(); li != 40 {
		t.Fatalf("last index after snapshot %d, want 40", li)
	}
	next := appendRange(t, l, 41, 45, 5, 100, rng)
	l.Close()
	l2 := mustOpen(t, o)
	if fi, _ := l2.FirstIndex(); fi != 41 {
		t.Fatalf("first index %d, want 41", fi)
	}
	if li, _ := l2.LastIndex(); li != 45 {
		t.Fatalf("last index %d, want 45 (entries 46..50 of the old log must stay discarded)", li)
	}
	checkEntries(t, l2, next)
	if tm, _ := l2.Term(40); tm != 5 {
		t.Fatalf("Term(40) = %d, want 5", tm)
	}
}

func TestAppendRejectsGap(t *testing.T) {
	l := mustOpen(t, testOptions(t, t.TempDir()))
	err := l.Append(raftpb.HardState{}, []raftpb.Entry{putEntry(5, 1, "k", nil)}, true)
	if err == nil || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("append with a gap: %v", err)
	}
}

func TestOptionsValidateReportsEverything(t *testing.T) {
	o := Options{SegmentSizeBytes: 10, EntryCacheBytes: -1}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "Dir") || !strings.Contains(err.Error(), "SegmentSizeBytes") ||
		!strings.Contains(err.Error(), "EntryCacheBytes") {
		t.Fatalf("Validate = %v, want both problems", err)
	}
}

func TestSyncCounts(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	o := testOptions(t, t.TempDir())
	o.SegmentSizeBytes = 1 << 20
	l := mustOpen(t, o)
	before := l.Stats().Fsyncs
	appendRange(t, l, 1, 10, 1, 10, rng)
	if got := l.Stats().Fsyncs - before; got != 1 {
		t.Fatalf("one Append of 10 entries used %d fsyncs, want 1", got)
	}
	o2 := testOptions(t, t.TempDir())
	o2.Sync = false
	l2 := mustOpen(t, o2)
	appendRange(t, l2, 1, 10, 1, 10, rng)
	if got := l2.Stats().Fsyncs; got != 0 {
		t.Fatalf("Sync=false used %d fsyncs", got)
	}
}

// After GC removed the older segments, the newest segment may hold nothing
// but the compaction marker and the HardState written by Roll. If a torn
// tail takes that HardState, recovery must not hand raft a commit index
// below the compaction point (raft panics on it).
func TestTornHardStateAfterCompaction(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.SegmentSizeBytes = 1 << 20
	l := mustOpen(t, o)
	appendRange(t, l, 1, 20, 3, 100, rng)
	if err := l.Append(raftpb.HardState{Term: 3, Vote: 2, Commit: 20}, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(20, raftpb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Segments() {
		if !s.Active {
			if err := l.RemoveSegment(s.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Close()
	path := lastSegmentPath(t, dir)
	st, _ := os.Stat(path)
	if err := os.Truncate(path, st.Size()-5); err != nil {
		t.Fatal(err)
	}
	l2 := mustOpen(t, o)
	hs, _, _ := l2.InitialState()
	if hs.Commit < 20 || hs.Term < 3 {
		t.Fatalf("recovered hard state %v below the compaction point 20 (term 3)", hs)
	}
	if fi, _ := l2.FirstIndex(); fi != 21 {
		t.Fatalf("first index %d, want 21", fi)
	}
}
