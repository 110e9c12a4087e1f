package baseline

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// BenchmarkStoreGet: the state machine's cost of one GET on `original`,
// in the shape of the peer table's GET phases: the default
// configuration (64 MiB memtable), 150,000 keys of 100 B applied in
// batches of 100 as the Raft layer applies them, then GETs of keys drawn
// uniformly from the first 60,000 (seeded, drawn before the timer). Either
// with the keys all in the active memtable, as after the peer table's PUT
// phase (flushed=false), or flushed into one L0 file read through the block
// cache (flushed=true). Run with -cpu 1,2 for one and two goroutines;
// ops/s is b.N over the elapsed time of all goroutines together.
//
// A memtable GET walks RocksDB's skiplist: about log2(150,000) = 17
// dependent pointer loads over 20 MB, most of them cache misses. On the
// shared 2-vCPU machine one GET took 3.0-4.2 us in one goroutine from the
// memtable and 3.5-5.5 us flushed, and about 2 us each in two goroutines.
// In a CPU profile of an `original` leader under the peer table's stale
// GETs (about 115,000/s), RocksDB's Get took 45 % of the leader's CPU,
// about 3.3 us per GET.
//
//	go test ./baseline -run XXX -bench BenchmarkStoreGet -cpu 1,2 -count 5
func BenchmarkStoreGet(b *testing.B) {
	const keys, getKeys, batch, lookups = 150000, 60000, 100, 1 << 16
	seed := testSeed(b)
	key := func(i int) []byte { return fmt.Appendf(nil, "k%09d", i) }
	r := rand.New(rand.NewPCG(seed, 13))
	gets := make([][]byte, lookups)
	for i := range gets {
		gets[i] = key(r.IntN(getKeys))
	}
	for _, flushed := range []bool{false, true} {
		// Loaded once per case: b.Run calls its function once per b.N it tries.
		s := openTest(b, NewConfig(ModeOriginal), b.TempDir())
		defer s.Close()
		value := make([]byte, 100)
		idx := uint64(0)
		for i := 0; i < keys; i += batch {
			es := make([]systems.AppliedEntry, 0, batch)
			for j := i; j < i+batch; j++ {
				idx++
				es = append(es, systems.AppliedEntry{Index: idx, Term: 1, Command: systems.Command{Op: systems.OpPut, Key: key(j), Value: value}})
			}
			if err := s.Apply(es); err != nil {
				b.Fatal(err)
			}
		}
		if flushed {
			if err := s.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("flushed=%v: L0 files %s, memtable entries %s", flushed, s.db.GetPropertyCF("rocksdb.num-files-at-level0", s.data),
			s.db.GetPropertyCF("rocksdb.num-entries-active-mem-table", s.data))
		b.Run(fmt.Sprintf("flushed=%v", flushed), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, found, err := s.Get(gets[i&(lookups-1)]); !found || err != nil {
						b.Errorf("get %s: found %v, %v", gets[i&(lookups-1)], found, err)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
