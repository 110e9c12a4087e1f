package nezha

import (
	"hash/maphash"
	"math/rand"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkRandomAccessFloor: the memory floors under BenchmarkMemoryIndex's
// GET on this machine, in one goroutine. An array of 64-byte
// slots of the memory index's table size at 1M keys (256 shards x 8192
// slots = 128 MiB at a load of 1/2: slots=2M) and of 1M slots (64 MiB), in
// 4 KiB pages or in transparent huge pages (madvise MADV_HUGEPAGE on an
// anonymous mapping: "-huge"), read at random slots:
//
//   - chase: each read's slot comes from the previous read (a dependent
//     chain): the full latency of one DRAM and TLB miss per read;
//   - independent: slots from a pre-generated random sequence: the CPU
//     overlaps the misses of successive reads as far as its window allows;
//   - hashed: the slot chosen by maphash of a 10-byte key from a lookup
//     buffer like the GET benchmark's, and its first word compared: a GET
//     without any of the index's own work.
//
// A GET of the index does more work per lookup than hashed (its seqlock,
// probe, key compare and the Location it returns), so fewer lookups fit in
// the CPU's window and their misses overlap less.
func BenchmarkRandomAccessFloor(b *testing.B) {
	const seed, lookups = 18, 1 << 20
	for _, size := range []struct {
		name  string
		slots int
		huge  bool
	}{{"slots=1M", 1 << 20, false}, {"slots=2M", 2 << 20, false}, {"slots=2M-huge", 2 << 20, true}} {
		b.Run(size.name, func(b *testing.B) {
			n := size.slots
			words := floorWords(b, n*memorySlotWords, size.huge)
			rng := rand.New(rand.NewSource(seed))
			perm := rng.Perm(n)
			for i := 0; i < n; i++ { // one cycle through every slot
				words[perm[i]*memorySlotWords] = uint64(perm[(i+1)%n])
			}
			seq := make([]uint32, lookups)
			for i := range seq {
				seq[i] = uint32(rng.Intn(n))
			}
			keys := make([][]byte, lookups)
			buf := make([]byte, 0, lookups*10)
			for i := range keys {
				buf = append(buf, benchKey(rng.Intn(1<<20))...)
				keys[i] = buf[len(buf)-10:]
			}
			hashSeed := maphash.MakeSeed()
			mask := uint64(n - 1)
			var sink atomic.Uint64
			for _, mode := range []struct {
				name string
				loop func(ops int) uint64
			}{
				{"chase", func(ops int) uint64 {
					p := uint64(perm[0])
					for range ops {
						p = words[p*memorySlotWords]
					}
					return p
				}},
				{"independent", func(ops int) uint64 {
					var sum uint64
					for i := range ops {
						sum += words[uint64(seq[i&(lookups-1)])*memorySlotWords]
					}
					return sum
				}},
				{"hashed", func(ops int) uint64 {
					var hits uint64
					for i := range ops {
						h := maphash.Bytes(hashSeed, keys[i&(lookups-1)])
						if atomic.LoadUint64(&words[(h>>32&mask)*memorySlotWords]) == h {
							hits++
						}
					}
					return hits
				}},
			} {
				b.Run("mode="+mode.name, func(b *testing.B) {
					b.ReportAllocs()
					b.ResetTimer()
					sink.Store(mode.loop(b.N))
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				})
			}
		})
	}
}

// floorWords returns n zeroed words: a Go slice, or with huge an anonymous
// mapping advised to use transparent huge pages (unmapped at the end).
func floorWords(b *testing.B, n int, huge bool) []uint64 {
	if !huge {
		return make([]uint64, n)
	}
	mem, err := unix.Mmap(-1, 0, n*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Munmap(mem) })
	if err := unix.Madvise(mem, unix.MADV_HUGEPAGE); err != nil {
		b.Fatal(err)
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), n)
}
