package enginebench

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"
)

// benchConfig: fsync on, as the experiment's headline; run with
// -benchtime to size the load, e.g.
//
//	go test ./nezha/embedded/enginebench -run XXX -bench . -benchtime 2000x
func benchConfig() EngineConfig { return DefaultOptions("").Engine }

var benchSizes = []int{100, 4 << 10, 256 << 10}

// BenchmarkPut: b.N puts of distinct keys from 8 goroutines per CPU
// (group commit shares fsyncs), per engine and value size, with fsync.
func BenchmarkPut(b *testing.B) {
	for _, size := range benchSizes {
		for _, name := range Engines() {
			b.Run(fmt.Sprintf("%s/%dB", name, size), func(b *testing.B) {
				e := openBench(b, name)
				base := make([]byte, size)
				fill(base, 1)
				var next atomic.Uint64
				b.SetBytes(int64(size + 16))
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					v := append([]byte(nil), base...)
					for pb.Next() {
						i := next.Add(1)
						binary.LittleEndian.PutUint64(v, i)
						if err := e.Put(key(i), v); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// loadBench writes n keys of size bytes (no fsync) for the read benchmarks.
func loadBench(b *testing.B, name string, size, n int) Engine {
	b.Helper()
	c := benchConfig()
	c.Sync = false
	e, err := Open(name, b.TempDir(), c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	v := make([]byte, size)
	fill(v, 2)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(v, uint64(i))
		if err := e.Put(key(uint64(i)), v); err != nil {
			b.Fatal(err)
		}
	}
	// As Run does: nezha's reads start once its idle GC round has sorted
	// the load into a run, so that the round does not run (copying the
	// whole load) inside the timed reads.
	if ne, ok := e.(nezhaEngine); ok {
		deadline := time.Now().Add(time.Minute)
		for !ne.idleSorted() {
			if time.Now().After(deadline) {
				b.Fatal("nezha: no idle GC round within a minute of the load")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return e
}

func openBench(b *testing.B, name string) Engine {
	b.Helper()
	e, err := Open(name, b.TempDir(), benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// readKeys is how many keys the read benchmarks load: 16 MiB of values,
// at least 1000 keys.
func readKeys(size int) int { return max(1000, (16<<20)/size) }

// BenchmarkGet: uniformly random GETs of loaded keys (page cache warm),
// each goroutine copying values into one buffer it reuses.
func BenchmarkGet(b *testing.B) {
	benchRead(b, 1, func(e Engine, k []byte, buf *[]byte) error {
		v, found, err := e.Get(*buf, k)
		if err != nil || !found {
			return fmt.Errorf("get %s: found %v, %v", k, found, err)
		}
		*buf = v
		return nil
	})
}

// BenchmarkScan: SCANs of 100 pairs from uniformly random loaded keys.
func BenchmarkScan(b *testing.B) {
	benchRead(b, 100, func(e Engine, k []byte, _ *[]byte) error {
		_, _, err := e.Scan(k, 100)
		return err
	})
}

// benchRead runs op from random loaded keys in parallel, per engine and
// value size; pairs is how many pairs one op reads (for SetBytes).
//
// Each goroutine passes op one buffer that GETs reuse, and every engine's
// SCAN reuses one buffer per scan (Engine): with a new buffer per value,
// the 256 KiB numbers depended on the process's live heap as much as on
// the engine (an engine holding a few MiB made the collector run every
// dozen or so GETs and the scavenger hand the freed pages back to the
// kernel, so each GET faulted its buffer back in; internal/vfs
// BenchmarkMappingAppendAt shows the effect without any engine).
func benchRead(b *testing.B, pairs int64, op func(e Engine, k []byte, buf *[]byte) error) {
	for _, size := range benchSizes {
		for _, name := range Engines() {
			b.Run(fmt.Sprintf("%s/%dB", name, size), func(b *testing.B) {
				n := readKeys(size)
				e := loadBench(b, name, size, n)
				b.SetBytes(pairs * int64(size+16))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewSource(rand.Int63()))
					var buf []byte
					for pb.Next() {
						if err := op(e, key(uint64(rng.Intn(n))), &buf); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
