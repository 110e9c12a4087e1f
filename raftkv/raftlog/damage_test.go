package raftlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// writeLog creates a Raft log with entries 1..n (and a HardState) in dir
// (one record per Append, each synced).
func writeLog(t *testing.T, dir string, n int) {
	t.Helper()
	o := DefaultOptions(dir)
	o.Bootstrap = raftpb.ConfState{Voters: []uint64{1}}
	l, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := l.LastIndex()
	var ents []raftpb.Entry
	for i := 1; i <= n; i++ {
		ents = append(ents, raftpb.Entry{Term: 1, Index: first + uint64(i), Data: []byte(strings.Repeat("v", 40+i))})
		if err := l.Append(raftpb.HardState{}, ents[len(ents)-1:], true); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func reopen(t *testing.T, dir string) (last uint64, err error) {
	t.Helper()
	o := DefaultOptions(dir)
	o.Bootstrap = raftpb.ConfState{Voters: []uint64{1}}
	l, err := Open(o)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.LastIndex()
}

// padSegment appends to the newest segment under data the zero padding, up
// to the next 4096-byte block, that a node killed while writing with direct
// I/O leaves after its last record.
func padSegment(t *testing.T, data string) {
	t.Helper()
	seg, err := LastSegment(data)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size()%4096 == 0 {
		t.Fatalf("%s has %d bytes, block-aligned already: no room for padding", seg, st.Size())
	}
	if err := os.Truncate(seg, st.Size()+4096-st.Size()%4096); err != nil {
		t.Fatal(err)
	}
}

func TestTearTailIsRecovered(t *testing.T) {
	for _, padded := range []bool{false, true} {
		for _, mode := range []string{TearCut, TearCorrupt} {
			// Pick 33 cuts off only the last byte of the segment's first
			// record (35 bytes: the bootstrap's compact record), a zero: over
			// zero padding such a cut would still read as the whole record.
			for _, pick := range []uint64{0, 7, 14, 21, 28, 33, 35} {
				t.Run(fmt.Sprintf("padded=%v/%s-%d", padded, mode, pick), func(t *testing.T) {
					data := t.TempDir()
					dir := filepath.Join(data, "valuelog")
					writeLog(t, dir, 5)
					want, err := reopen(t, dir)
					if err != nil {
						t.Fatal(err)
					}
					seg, _ := LastSegment(data)
					records, _ := os.Stat(seg)
					if padded {
						padSegment(t, data)
					}
					if end, err := SegmentDataBytes(seg); err != nil || end != records.Size() {
						t.Fatalf("SegmentDataBytes = %d, %v; want %d", end, err, records.Size())
					}
					before, _ := os.ReadFile(seg)
					what, err := TearTail(data, mode, pick)
					if err != nil {
						t.Fatal(err)
					}
					after, _ := os.ReadFile(seg)
					if bytes.Equal(after, before) {
						t.Fatalf("%s: segment unchanged", what)
					}
					if testing.Verbose() {
						t.Log(what)
					}
					if !bytes.Equal(after[:records.Size()], before[:records.Size()]) {
						t.Fatalf("%s: the records before the torn one changed", what)
					}
					got, err := reopen(t, dir)
					if err != nil || got != want {
						t.Fatalf("after %s: reopen gives last index %d, %v; want %d", what, got, err, want)
					}
					if st, _ := os.Stat(seg); st.Size() != records.Size() {
						t.Fatalf("torn record not truncated: %d bytes, want %d", st.Size(), records.Size())
					}
				})
			}
		}
	}
}

func TestLoseSyncedTail(t *testing.T) {
	for _, padded := range []bool{false, true} {
		t.Run(fmt.Sprintf("padded=%v", padded), func(t *testing.T) {
			data := t.TempDir()
			dir := filepath.Join(data, "raftlog")
			writeLog(t, dir, 5)
			want, _ := reopen(t, dir)
			if padded {
				// Cutting the padding alone would lose nothing.
				padSegment(t, data)
			}
			what, err := LoseSyncedTail(data, TearCut, 3)
			if err != nil {
				t.Fatal(err)
			}
			got, err := reopen(t, dir)
			if err != nil || got != want-1 {
				t.Fatalf("after %s: last index %d, %v; want %d (one synced entry lost)", what, got, err, want-1)
			}
		})
	}
	data := t.TempDir()
	dir := filepath.Join(data, "raftlog")
	writeLog(t, dir, 5)
	if _, err := LoseSyncedTail(data, TearCut, MaxLoseBytes+1); err == nil {
		t.Fatal("damage past one record header accepted")
	}
	// An index LevelDB's *.log files are never taken for the Raft log.
	if err := os.MkdirAll(filepath.Join(data, "index"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(data, "index", "999999.log"), []byte("leveldb"), 0o644)
	if seg, _ := LastSegment(data); !strings.Contains(seg, "raftlog") {
		t.Fatalf("last segment %s", seg)
	}
}
