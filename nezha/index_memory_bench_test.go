package nezha

import (
	"math/rand"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/systems"
)

// The memory index benchmarks: GET, PUT (Write of batches of
// overwrites) and Load (Write of batches of new keys into an empty index)
// on 1k, 1M and 10M keys, for MemoryIndex ("sharded") and the skiplist index
// it replaced ("skiplist"), in one run. Keys are the paper's 10-byte keys
// (benchKey); every random choice comes from a seeded generator and is
// made before the timer starts. GET runs b.RunParallel (one goroutine per
// GOMAXPROCS: run with -cpu 1,2 for one and two goroutines); PUT and Load
// have the one writer the Index interface allows. 10M keys are skipped
// with -short (about 3 GB of memory and a minute of loading per run).
// ops/s is b.N over the elapsed time of all goroutines together.
//
// The sizes are two regimes. With 1k keys the table stays in the CPU's
// caches: that is the regime of Zeno's published figures (10.71M GET/s and
// 14.75M PUT/s in one thread, on 1,000 rotating keys; seeds/zeno). With
// 1M and 10M keys the tables (64-byte slots) are far larger than a cache,
// and one random GET waits for one DRAM miss of its slot.
//
//	go test ./nezha -run XXX -bench BenchmarkMemoryIndex -cpu 1,2 -count 5 | tee new.txt
//	benchstat -col /impl new.txt
func BenchmarkMemoryIndex(b *testing.B) {
	const (
		seed        = 18
		lookups     = 1 << 20 // pre-generated random lookups, reused cyclically
		batchOps    = 100     // ops per Write in PUT and Load
		putBatches  = 1 << 13 // pre-built PUT batches, reused cyclically
		loadBatches = 1000    // keys per Write in Load
	)
	impls := []struct {
		name string
		open func() Index
	}{
		{"sharded", func() Index { return NewMemoryIndex() }},
		{"skiplist", func() Index { return newSkiplistIndex() }},
	}
	for _, size := range []struct {
		name string
		n    int
	}{{"1k", 1000}, {"1M", 1 << 20}, {"10M", 10 << 20}} {
		b.Run("keys="+size.name, func(b *testing.B) {
			if size.n > 1<<20 && testing.Short() {
				b.Skip("10M keys skipped with -short")
			}
			n := size.n
			b.Logf("seed %d, %d keys", seed, n)
			rng := rand.New(rand.NewSource(seed))
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = benchKey(i)
			}
			loadOrder := rng.Perm(n)
			// The lookup keys are copies in one buffer, in lookup order, as
			// keys arriving in requests are: reading them is not a cache
			// miss of its own.
			get := make([][]byte, lookups)
			buf := make([]byte, 0, lookups*len(keys[0]))
			for i := range get {
				buf = append(buf, keys[rng.Intn(n)]...)
				get[i] = buf[len(buf)-len(keys[0]):]
			}
			puts := make([]IndexBatch, putBatches)
			for i := range puts {
				for j := 0; j < batchOps; j++ {
					v := uint64(i*batchOps + j)
					puts[i].Put(keys[rng.Intn(n)], systems.Location{Segment: 1 + v>>16, Offset: int64(v) << 10, Length: 1 << 10, Index: v + 1})
				}
			}
			load := func(x Index) {
				var batch IndexBatch
				for i := 0; i < n; i += loadBatches {
					batch.Reset()
					for _, k := range loadOrder[i:min(i+loadBatches, n)] {
						batch.Put(keys[k], systems.Location{Segment: 1, Offset: int64(k) << 10, Length: 1 << 10, Index: uint64(k + 1)})
					}
					batch.SetApplied(uint64(i + 1))
					if err := x.Write(&batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			loaded := make(map[string]Index)
			loadedIndex := func(b *testing.B, impl int) Index {
				name := impls[impl].name
				if loaded[name] == nil {
					x := impls[impl].open()
					load(x)
					loaded[name] = x
					runtime.GC() // the load's garbage is not collected in a timed loop
				}
				return loaded[name]
			}
			b.Run("op=Get", func(b *testing.B) {
				for impl := range impls {
					b.Run("impl="+impls[impl].name, func(b *testing.B) {
						x := loadedIndex(b, impl)
						var next, missed atomic.Int64
						b.ReportAllocs()
						cpu0 := processCPUTime(b)
						b.ResetTimer()
						b.RunParallel(func(pb *testing.PB) {
							i := int(next.Add(1)) * 104729 // apart in the lookup sequence
							for pb.Next() {
								if _, found, err := x.Get(get[i&(lookups-1)]); !found || err != nil {
									missed.Add(1)
								}
								i++
							}
						})
						reportOpsPerSec(b, cpu0)
						if missed.Load() != 0 {
							b.Fatalf("%d lookups of present keys missed", missed.Load())
						}
					})
				}
			})
			// MultiGet: the same lookups through MemoryIndex.MultiGet, 64 keys
			// a call (a batch of GETs in one request); one op is one key.
			b.Run("op=MultiGet", func(b *testing.B) {
				const perCall = 64
				x := loadedIndex(b, 0).(*MemoryIndex)
				var next, missed atomic.Int64
				b.ReportAllocs()
				cpu0 := processCPUTime(b)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					locs, found := make([]systems.Location, perCall), make([]bool, perCall)
					i := int(next.Add(1)) * 104729 &^ (perCall - 1) // apart in the lookup sequence
					pending := 0
					lookup := func() {
						keys := get[i&(lookups-1):][:pending]
						if err := x.MultiGet(keys, locs[:pending], found[:pending]); err != nil {
							b.Error(err)
						}
						for _, ok := range found[:pending] {
							if !ok {
								missed.Add(1)
							}
						}
						i, pending = i+pending, 0
					}
					for pb.Next() {
						if pending++; pending == perCall {
							lookup()
						}
					}
					if pending > 0 {
						lookup()
					}
				})
				reportOpsPerSec(b, cpu0)
				if missed.Load() != 0 {
					b.Fatalf("%d lookups of present keys missed", missed.Load())
				}
			})
			b.Run("op=Put", func(b *testing.B) {
				for impl := range impls {
					b.Run("impl="+impls[impl].name, func(b *testing.B) {
						x := loadedIndex(b, impl)
						b.ReportAllocs()
						cpu0 := processCPUTime(b)
						b.ResetTimer()
						for done, i := 0, 0; done < b.N; done, i = done+batchOps, i+1 {
							batch := &puts[i%putBatches]
							batch.SetApplied(uint64(n + i))
							if err := x.Write(batch); err != nil {
								b.Fatal(err)
							}
						}
						reportOpsPerSec(b, cpu0)
					})
				}
			})
			clear(loaded)
			runtime.GC()
			b.Run("op=Load", func(b *testing.B) {
				for impl := range impls {
					b.Run("impl="+impls[impl].name, func(b *testing.B) {
						b.ReportAllocs()
						cpu0 := processCPUTime(b)
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							load(impls[impl].open())
						}
						b.ReportMetric(float64(b.N)*float64(n)/b.Elapsed().Seconds(), "keys/s")
						b.ReportMetric(float64(processCPUTime(b)-cpu0)/float64(b.N*n), "cpu-ns/key")
					})
				}
			})
		})
	}
}

// reportOpsPerSec reports b.N over the elapsed time as ops/s, and the
// process's CPU time (user and system, all threads, the Go GC's included)
// since cpu0 per op as cpu-ns/op: on a shared machine, wall time also
// counts the time other processes held the CPUs.
func reportOpsPerSec(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(processCPUTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPUTime is the CPU time the process used so far (getrusage).
func processCPUTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMemoryIndexScan: a view over 1M keys iterated from a random
// start for 100 keys (a SCAN's index part), per implementation.
func BenchmarkMemoryIndexScan(b *testing.B) {
	const seed, n, scanKeys = 19, 1 << 20, 100
	for _, impl := range []struct {
		name string
		x    Index
	}{{"sharded", NewMemoryIndex()}, {"skiplist", newSkiplistIndex()}} {
		rng := rand.New(rand.NewSource(seed))
		var batch IndexBatch
		for _, i := range rng.Perm(n) {
			batch.Put(benchKey(i), systems.Location{Segment: 1, Offset: int64(i) << 10, Length: 1 << 10, Index: uint64(i + 1)})
		}
		batch.SetApplied(1)
		if err := impl.x.Write(&batch); err != nil {
			b.Fatal(err)
		}
		b.Run("impl="+impl.name, func(b *testing.B) {
			rng := rand.New(rand.NewSource(seed + 1))
			starts := make([][]byte, 1<<16)
			for i := range starts {
				starts[i] = benchKey(rng.Intn(n - scanKeys))
			}
			b.ReportAllocs()
			cpu0 := processCPUTime(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				v, err := impl.x.View()
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				err = v.Iterate(starts[i%len(starts)], nil, func([]byte, systems.Location) (bool, error) {
					got++
					return got < scanKeys, nil
				})
				v.Release()
				if err != nil || got != scanKeys {
					b.Fatalf("scan: %d keys, %v", got, err)
				}
			}
			reportOpsPerSec(b, cpu0)
		})
	}
}
