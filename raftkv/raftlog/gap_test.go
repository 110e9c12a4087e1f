package raftlog

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingMiddleSegmentRefusesToStart: a sealed segment in the middle
// of the log, above the compaction point, is gone (deleted by hand, a bad
// restore). Its entries were acknowledged; Open must refuse ("gap in the
// log"), not take the entries after the hole for the whole log as if the
// ones before and in it had been compacted.
func TestMissingMiddleSegmentRefusesToStart(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	dir := t.TempDir()
	o := testOptions(t, dir)
	l := mustOpen(t, o)
	for lo := uint64(1); lo <= 100; lo += 5 {
		appendRange(t, l, lo, lo+4, 3, 300, rng)
	}
	segs := l.Segments()
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	mid := segs[len(segs)/2]
	l.Close()
	name := filepath.Join(dir, segmentName(mid.ID))
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	os.Remove(strings.TrimSuffix(name, ".log") + ".idx")
	l2, err := Open(o)
	if err == nil {
		fi, _ := l2.FirstIndex()
		li, _ := l2.LastIndex()
		l2.Close()
		t.Fatalf("Open succeeded without segment %d (entries %d..%d): the log now holds %d..%d, the entries before the hole are silently dropped",
			mid.ID, mid.FirstIndex, mid.LastIndex, fi, li)
	}
	if !strings.Contains(err.Error(), "gap") {
		t.Fatalf("Open: %v, want a gap error", err)
	}
}
