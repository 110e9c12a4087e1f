package raftlog

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkAppend measures the segment append path: one Append of `batch`
// entries of `value` bytes (one write, one fdatasync if sync), as the Ready
// loop does per Ready. SetBytes makes `go test -bench` print MB/s.
//
//	go test -run xxx -bench Append ./raftkv/raftlog/
func BenchmarkAppend(b *testing.B) {
	for _, tc := range []struct {
		value, batch int
		sync         bool
	}{
		{100, 1, true}, {100, 64, true}, {4096, 1, true}, {4096, 16, true},
		{256 << 10, 1, true}, {256 << 10, 4, true}, {256 << 10, 4, false},
	} {
		b.Run(fmt.Sprintf("value=%d/batch=%d/sync=%v", tc.value, tc.batch, tc.sync), func(b *testing.B) {
			o := DefaultOptions(b.TempDir())
			o.Sync = tc.sync
			o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			l, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			v := make([]byte, tc.value)
			rand.New(rand.NewSource(1)).Read(v)
			ents := make([]raftpb.Entry, tc.batch)
			b.SetBytes(int64(tc.value * tc.batch))
			b.ResetTimer()
			next := uint64(1)
			for i := 0; i < b.N; i++ {
				for j := range ents {
					ents[j] = putEntry(next, 1, "key", v)
					next++
				}
				if err := l.Append(raftpb.HardState{Term: 1, Commit: next - 1}, ents, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadCommand measures one positioned, CRC-checked read of a
// value back from a segment (the nezha GET path below the index).
func BenchmarkReadCommand(b *testing.B) {
	for _, size := range []int{100, 4096, 256 << 10} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			o := DefaultOptions(b.TempDir())
			o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			l, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			v := make([]byte, size)
			var ents []raftpb.Entry
			for i := uint64(1); i <= 64; i++ {
				ents = append(ents, putEntry(i, 1, "key", v))
			}
			if err := l.Append(raftpb.HardState{Term: 1, Commit: 64}, ents, true); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				loc, _ := l.Location(uint64(i%64) + 1)
				if _, err := l.ReadCommand(loc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpen measures recovery of a log of many sealed segments (every
// one restates the compaction point, and has its index sidecar) holding
// one entry per 4 KiB: recovery was quadratic in segments x entries before
// the compaction marker of an unchanged point stopped copying the entries'
// metadata.
//
//	go test -run xxx -bench Open ./raftkv/raftlog/
func BenchmarkOpen(b *testing.B) {
	for _, segs := range []int{100, 1000} {
		b.Run(fmt.Sprintf("segments=%d", segs), func(b *testing.B) {
			o := DefaultOptions(b.TempDir())
			o.SegmentSizeBytes = 4096
			o.Sync = false
			o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			l, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			v := make([]byte, 3000)
			for i := 1; len(l.Segments()) < segs; i++ {
				e := putEntry(uint64(i), 1, "k", v)
				if err := l.Append(raftpb.HardState{Term: 1, Commit: uint64(i)}, []raftpb.Entry{e}, false); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				l, err := Open(o)
				if err != nil {
					b.Fatal(err)
				}
				l.Close()
			}
		})
	}
}
