package baseline

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

var allModes = []Mode{ModeOriginal, ModePASV, ModeBlobDB}

// testSeed returns the seed of this test's randomness (BASELINE_TEST_SEED,
// default 1) and logs it.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(1)
	if v := os.Getenv("BASELINE_TEST_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BASELINE_TEST_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d (set BASELINE_TEST_SEED to change)", seed)
	return seed
}

// testConfig returns a configuration of mode m with small memtables and
// cache, so tests exercise flushes and stay light.
func testConfig(m Mode) *Config {
	c := NewConfig(m)
	c.BlockCacheBytes = 1 << 20
	c.WriteBufferBytes = 1 << 20
	if m == ModeBlobDB {
		c.MinBlobBytes = 64 // small, so test values of both kinds exist
	}
	return c
}

func openTest(t testing.TB, c *Config, dir string) *Store {
	t.Helper()
	s, err := c.OpenStore(systems.Env{Dir: dir})
	if err != nil {
		t.Fatalf("open %s in %s: %v", c.Mode(), dir, err)
	}
	return s
}

func put(idx uint64, k, v string) systems.AppliedEntry {
	return systems.AppliedEntry{Index: idx, Term: 1, Command: systems.Command{Op: systems.OpPut, Key: []byte(k), Value: []byte(v)}}
}

func del(idx uint64, k string) systems.AppliedEntry {
	return systems.AppliedEntry{Index: idx, Term: 1, Command: systems.Command{Op: systems.OpDelete, Key: []byte(k)}}
}

func noop(idx uint64) systems.AppliedEntry {
	return systems.AppliedEntry{Index: idx, Term: 1}
}

func mustApply(t testing.TB, s *Store, ents ...systems.AppliedEntry) {
	t.Helper()
	if err := s.Apply(ents); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// model is the reference state: key -> value.
type model map[string][]byte

func (m model) apply(ents []systems.AppliedEntry) {
	for _, e := range ents {
		switch e.Command.Op {
		case systems.OpPut:
			m[string(e.Command.Key)] = e.Command.Value
		case systems.OpDelete:
			delete(m, string(e.Command.Key))
		}
	}
}

func (m model) sortedKeys() []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// hash computes the documented StateHash format over m.
func (m model) hash() []byte {
	h := sha256.New()
	var lb [8]byte
	for _, k := range m.sortedKeys() {
		v := m[k]
		binary.BigEndian.PutUint64(lb[:], uint64(len(k)))
		h.Write(lb[:])
		h.Write([]byte(k))
		binary.BigEndian.PutUint64(lb[:], uint64(len(v)))
		h.Write(lb[:])
		h.Write(v)
	}
	return h.Sum(nil)
}

// checkState compares every Get and a full Scan of s with m.
func checkState(t testing.TB, s *Store, m model, extraKeys ...string) {
	t.Helper()
	for k, want := range m {
		got, found, err := s.Get([]byte(k))
		if err != nil || !found || !bytes.Equal(got, want) {
			t.Fatalf("Get(%q) = %d bytes, %v, %v; want %d bytes", k, len(got), found, err, len(want))
		}
	}
	for _, k := range extraKeys {
		if _, ok := m[k]; ok {
			continue
		}
		if got, found, err := s.Get([]byte(k)); err != nil || found {
			t.Fatalf("Get(%q) of a missing key = %q, %v, %v", k, got, found, err)
		}
	}
	kvs, more, err := s.Scan(nil, nil, 0, 0)
	if err != nil || more {
		t.Fatalf("full scan: more=%v err=%v", more, err)
	}
	keys := m.sortedKeys()
	if len(kvs) != len(keys) {
		t.Fatalf("full scan returned %d pairs, want %d", len(kvs), len(keys))
	}
	for i, kv := range kvs {
		if string(kv.Key) != keys[i] || !bytes.Equal(kv.Value, m[keys[i]]) {
			t.Fatalf("full scan pair %d = %q (%d bytes), want %q (%d bytes)", i, kv.Key, len(kv.Value), keys[i], len(m[keys[i]]))
		}
	}
	sum, _, err := s.StateHash()
	if err != nil {
		t.Fatalf("state hash: %v", err)
	}
	if !bytes.Equal(sum, m.hash()) {
		t.Fatalf("state hash %x differs from the model's %x", sum, m.hash())
	}
}

// randomEntries returns n entries with indexes from+1..from+n over a key
// space of keys keys: puts (values of 0..maxValue random bytes, overwrites
// included), deletes and no-ops.
func randomEntries(r *rand.Rand, from uint64, n, keys, maxValue int) []systems.AppliedEntry {
	ents := make([]systems.AppliedEntry, n)
	for i := range ents {
		idx := from + uint64(i) + 1
		k := fmt.Sprintf("key%04d", r.IntN(keys))
		switch p := r.IntN(10); {
		case p < 7:
			v := make([]byte, r.IntN(maxValue+1))
			for j := range v {
				v[j] = byte(r.Uint32())
			}
			ents[i] = systems.AppliedEntry{Index: idx, Term: 1, Command: systems.Command{Op: systems.OpPut, Key: []byte(k), Value: v}}
		case p < 9:
			ents[i] = del(idx, k)
		default:
			ents[i] = noop(idx)
		}
	}
	return ents
}

// applyInBatches applies ents in batches of 1..maxBatch entries.
func applyInBatches(t testing.TB, r *rand.Rand, s *Store, ents []systems.AppliedEntry, maxBatch int) {
	t.Helper()
	for len(ents) > 0 {
		n := min(1+r.IntN(maxBatch), len(ents))
		mustApply(t, s, ents[:n]...)
		ents = ents[n:]
	}
}
