package nezha

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// benchKey returns the 10-byte key of i (the paper uses 10 B keys).
func benchKey(i int) []byte { return []byte(fmt.Sprintf("k%09d", i)) }

func benchIndex(b *testing.B, kind string) Index {
	b.Helper()
	x, err := OpenIndex(kind, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Close() })
	return x
}

// BenchmarkIndexPut: one Write of one key -> location (one Apply of one
// entry), random keys among 1M.
func BenchmarkIndexPut(b *testing.B) {
	for _, kind := range IndexKinds() {
		b.Run(kind, func(b *testing.B) {
			x := benchIndex(b, kind)
			rng := rand.New(rand.NewSource(1))
			var batch IndexBatch
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch.Reset()
				batch.Put(benchKey(rng.Intn(1<<20)), systems.Location{Segment: 7, Offset: int64(i) << 10, Length: 1 << 10, Index: uint64(i + 1)})
				batch.SetApplied(uint64(i + 1))
				if err := x.Write(&batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIndexGet: index lookups of random existing keys among 100k.
func BenchmarkIndexGet(b *testing.B) {
	const n = 100000
	for _, kind := range IndexKinds() {
		b.Run(kind, func(b *testing.B) {
			x := benchIndex(b, kind)
			var batch IndexBatch
			for i := 0; i < n; i += 1000 {
				batch.Reset()
				for j := i; j < i+1000; j++ {
					batch.Put(benchKey(j), systems.Location{Segment: 1, Offset: int64(j) << 10, Length: 1 << 10, Index: uint64(j + 1)})
				}
				batch.SetApplied(uint64(i + 1000))
				if err := x.Write(&batch); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewSource(2))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, found, err := x.Get(benchKey(rng.Intn(n))); !found || err != nil {
					b.Fatalf("Get: found %v, err %v", found, err)
				}
			}
		})
	}
}

// BenchmarkGet256KiB: Store.Get of 256 KiB values (the paper's largest
// value size): leveldb index lookup, one positioned read of the record
// (page cache), CRC check, copy. 64 values (16 MiB) over 64 MiB segments.
func BenchmarkGet256KiB(b *testing.B) {
	const n, size = 64, 256 << 10
	dir := b.TempDir()
	l := openLogSegments(b, dir, 64<<20)
	s := openStore(b, IndexLevelDB, dir, l)
	rng := rand.New(rand.NewSource(3))
	for i := 0; i < n; i++ {
		v := make([]byte, size)
		rng.Read(v)
		mustApply(b, s, appendCommands(b, l, put(string(benchKey(i)), v)))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, found, err := s.Get(benchKey(rng.Intn(n)))
		if err != nil || !found || len(v) != size {
			b.Fatalf("Get: %d bytes, found %v, err %v", len(v), found, err)
		}
	}
}

// BenchmarkIndexWriteBatch: Writes of batches of 32 random keys among 1M
// (an Apply of 32 PUTs), ops/s and process CPU per key (LevelDB's
// compactions included), after 200k keys: LevelDB's
// memtable then holds tens of thousands of entries, as under a PUT load.
func BenchmarkIndexWriteBatch(b *testing.B) {
	const batchKeys, preload = 32, 200000
	for _, kind := range IndexKinds() {
		b.Run(kind, func(b *testing.B) {
			x := benchIndex(b, kind)
			rng := rand.New(rand.NewSource(3))
			keys := make([][]byte, 1<<20) // made before the timer starts
			for i := range keys {
				keys[i] = benchKey(i)
			}
			var batch IndexBatch
			applied := uint64(0)
			write := func() {
				batch.Reset()
				for j := 0; j < batchKeys; j++ {
					batch.Put(keys[rng.Intn(len(keys))], systems.Location{Segment: 7, Offset: int64(applied) << 10, Length: 1 << 10, Index: applied + 1})
				}
				applied += batchKeys
				batch.SetApplied(applied)
				if err := x.Write(&batch); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < preload/batchKeys; i++ {
				write()
			}
			b.ReportAllocs()
			cpu0 := processCPUTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i += batchKeys {
				write()
			}
			reportOpsPerSec(b, cpu0)
		})
	}
}
