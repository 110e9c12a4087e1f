package raftlog

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// FuzzRecoverSegment: a last segment of any bytes either fails to open
// with an error or opens (its torn tail cut) to a log whose every entry
// reads back or fails with an error; nothing panics.
func FuzzRecoverSegment(f *testing.F) {
	seed := func(n int) []byte {
		dir := f.TempDir()
		o := DefaultOptions(dir)
		o.Bootstrap = raftpb.ConfState{Voters: []uint64{1}}
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		l, err := Open(o)
		if err != nil {
			f.Fatal(err)
		}
		var ents []raftpb.Entry
		for i := 1; i <= n; i++ {
			ents = append(ents, putEntry(uint64(i), 1, "k", bytes.Repeat([]byte{byte(i)}, 10*i)))
		}
		if err := l.Append(raftpb.HardState{Term: 1, Commit: uint64(n)}, ents, true); err != nil {
			f.Fatal(err)
		}
		l.Close()
		b, err := os.ReadFile(filepath.Join(dir, segmentName(1)))
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(seed(3))
	f.Add(seed(1)[:40])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		o := DefaultOptions(dir)
		o.Bootstrap = raftpb.ConfState{Voters: []uint64{1}}
		o.Sync = false
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		l, err := Open(o)
		if err != nil {
			return
		}
		defer l.Close()
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		for i := first; i <= last && i < first+1000; i++ {
			_, _ = l.Entries(i, i+1, 1<<30)
		}
		_, _ = l.Term(last)
	})
}

// FuzzDecodeSegIndex: any sidecar either is refused or decodes to records
// that encode back to the same bytes; nothing panics.
func FuzzDecodeSegIndex(f *testing.F) {
	var raw [headerSize]byte
	rec := appendRecord(nil, kindHardState, 0, 0, []byte("hs"))
	copy(raw[:], rec)
	f.Add(encodeSegIndex(int64(len(rec)), []segIndexRecord{{h: parseHeader(raw[:]), raw: raw, payload: []byte("hs")}}), int64(len(rec)))
	f.Add(encodeSegIndex(0, nil), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		recs, err := decodeSegIndex(data, size)
		if err != nil {
			return
		}
		if again := encodeSegIndex(size, recs); !bytes.Equal(again, data) {
			t.Fatalf("decoded sidecar encodes to other bytes")
		}
	})
}
