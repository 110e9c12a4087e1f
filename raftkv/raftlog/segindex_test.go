package raftlog

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// sealedLog writes a log of many small segments with a compaction, a
// hard state and a conflicting suffix in it, closes it and returns its
// options and entries (seed logged by the caller's rng).
func sealedLog(t *testing.T, rng *rand.Rand) (Options, []raftpb.Entry) {
	t.Helper()
	o := testOptions(t, t.TempDir())
	l, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	var ents []raftpb.Entry
	batches := func(lo, hi, term uint64, size int) { // 5 entries per Append: a roll every few
		for i := lo; i <= hi; i += 5 {
			ents = append(ents[:i-ents0(ents)], appendRange(t, l, i, min(i+4, hi), term, size, rng)...)
		}
	}
	batches(1, 60, 1, 300)
	// A conflicting suffix from a new leader replaces entries 51..60.
	batches(51, 80, 2, 200)
	if err := l.Compact(20, o.Bootstrap); err != nil {
		t.Fatal(err)
	}
	ents = ents[20:]
	batches(81, 90, 2, 100)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return o, ents
}

// ents0 is the index of ents[0] (1 for none).
func ents0(ents []raftpb.Entry) uint64 {
	if len(ents) == 0 {
		return 1
	}
	return ents[0].Index
}

func segIDs(t *testing.T, dir string) []uint64 {
	t.Helper()
	ids, err := listSegments(vfs.OS(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// recovered opens o and returns what recovery rebuilt.
func recovered(t *testing.T, o Options, want []raftpb.Entry) (raftpb.HardState, uint64, uint64) {
	t.Helper()
	l := mustOpen(t, o)
	checkEntries(t, l, want)
	hs := l.HardState()
	first, _ := l.FirstIndex()
	last, _ := l.LastIndex()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return hs, first, last
}

func TestSegmentIndex(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	o, want := sealedLog(t, rng)
	ids := segIDs(t, o.Dir)
	if len(ids) < 5 {
		t.Fatalf("%d segments; the test needs several sealed ones", len(ids))
	}
	// Every sealed segment has its index once Close returns; the active
	// one has none.
	for _, id := range ids[:len(ids)-1] {
		if _, err := os.Stat(filepath.Join(o.Dir, segIndexName(id))); err != nil {
			t.Fatalf("sealed segment %d: %v", id, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.Dir, segIndexName(ids[len(ids)-1]))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("active segment has an index: %v", err)
	}
	hsIdx, firstIdx, lastIdx := recovered(t, o, want)

	// The same state from a full scan (no index files); the scan writes
	// them again.
	for _, id := range ids {
		os.Remove(filepath.Join(o.Dir, segIndexName(id)))
	}
	hsScan, firstScan, lastScan := recovered(t, o, want)
	if hsIdx != hsScan || firstIdx != firstScan || lastIdx != lastScan {
		t.Fatalf("from indexes: hs %v first %d last %d; from a scan: hs %v first %d last %d",
			hsIdx, firstIdx, lastIdx, hsScan, firstScan, lastScan)
	}
	for _, id := range ids[:len(ids)-1] {
		if _, err := os.Stat(filepath.Join(o.Dir, segIndexName(id))); err != nil {
			t.Fatalf("scan did not rewrite the index of segment %d: %v", id, err)
		}
	}

	// A torn, a corrupt and a stale index are each ignored (the segment
	// is scanned), and an orphan is deleted.
	idx2 := filepath.Join(o.Dir, segIndexName(ids[1]))
	b, err := os.ReadFile(idx2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(idx2, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	flipByte(t, filepath.Join(o.Dir, segIndexName(ids[2])), int64(len(segIndexMagic)+12))
	stale := encodeSegIndex(3, nil)
	if err := os.WriteFile(filepath.Join(o.Dir, segIndexName(ids[3])), stale, 0o644); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(o.Dir, segIndexName(ids[len(ids)-1]+7))
	if err := os.WriteFile(orphan, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if hs, first, last := recovered(t, o, want); hs != hsScan || first != firstScan || last != lastScan {
		t.Fatalf("with bad indexes: hs %v first %d last %d, want %v %d %d", hs, first, last, hsScan, firstScan, lastScan)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan index kept: %v", err)
	}
}

// With an index, recovery does not read a sealed segment's values: a
// corrupt value is reported by the read that meets it, naming the file
// and offset, and the other entries read back.
func TestSegmentIndexDefersValueChecks(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	o, want := sealedLog(t, rng)
	l := mustOpen(t, o)
	loc, ok := l.Location(want[0].Index)
	if !ok {
		t.Fatal("no location")
	}
	l.Close()
	path := filepath.Join(o.Dir, segmentName(loc.Segment))
	flipByte(t, path, loc.Offset+headerSize+5)
	l = mustOpen(t, o)
	_, err := l.Entries(want[0].Index, want[0].Index+1, 1<<30)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("reading the corrupt entry: %v, want an error naming %s", err, path)
	}
	if _, err := l.ReadCommand(loc); !errors.Is(err, systems.ErrCorrupt) && (err == nil || !strings.Contains(err.Error(), "checksum")) {
		t.Fatalf("ReadCommand of the corrupt value: %v", err)
	}
	checkEntries(t, l, want[1:])
}

// Removing a segment removes its index.
func TestSegmentIndexRemovedWithSegment(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	o, _ := sealedLog(t, rng)
	l := mustOpen(t, o)
	segs := l.Segments()
	if len(segs) < 2 || segs[0].LastIndex > l.CompactedIndex() {
		t.Fatalf("segment 1 not removable: %+v, compacted %d", segs[0], l.CompactedIndex())
	}
	if err := l.RemoveSegment(segs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, segIndexName(segs[0].ID))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("index of a removed segment: %v", err)
	}
}

func TestSegmentIndexCodec(t *testing.T) {
	var raw [headerSize]byte
	rec := appendRecord(nil, kindHardState, 0, 0, []byte("hs"))
	copy(raw[:], rec)
	recs := []segIndexRecord{{h: parseHeader(raw[:]), raw: raw, payload: []byte("hs")}}
	b := encodeSegIndex(int64(len(rec)), recs)
	got, err := decodeSegIndex(b, int64(len(rec)))
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].payload, []byte("hs")) {
		t.Fatalf("round trip: %v %+v", err, got)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 1
		if _, err := decodeSegIndex(c, int64(len(rec))); err == nil {
			t.Fatalf("a flipped byte at %d decoded", i)
		}
	}
	if _, err := decodeSegIndex(b, int64(len(rec))+1); err == nil {
		t.Fatal("decoded for another segment size")
	}
}
