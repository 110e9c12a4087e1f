package dwisckey

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

func put(i uint64, k, v string) systems.AppliedEntry {
	return systems.AppliedEntry{Index: i, Command: systems.Command{Op: systems.OpPut, Key: []byte(k), Value: []byte(v)}}
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := NewConfig().OpenStore(systems.Env{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Puts, deletes, ordered scans with limit, end and byte bounds, and the
// applied index kept across a reopen.
func TestStore(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	var ents []systems.AppliedEntry
	for i := 0; i < 10; i++ {
		ents = append(ents, put(uint64(i+1), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)))
	}
	ents = append(ents, systems.AppliedEntry{Index: 11, Command: systems.Command{Op: systems.OpDelete, Key: []byte("k3")}},
		systems.AppliedEntry{Index: 12})
	if err := s.Apply(ents); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get([]byte("k2")); err != nil || !ok || string(v) != "v2" {
		t.Fatalf("get k2 = %q %v %v", v, ok, err)
	}
	if _, ok, err := s.Get([]byte("k3")); err != nil || ok {
		t.Fatalf("deleted k3: found %v, err %v", ok, err)
	}
	kvs, more, err := s.Scan([]byte("k1"), []byte("k6"), 0, 0)
	if err != nil || more || len(kvs) != 4 || string(kvs[0].Key) != "k1" || string(kvs[3].Key) != "k5" {
		t.Fatalf("scan [k1, k6) = %v more %v err %v, want k1 k2 k4 k5", kvs, more, err)
	}
	if kvs, _, _ := s.Scan(nil, nil, 3, 0); len(kvs) != 3 || string(kvs[0].Key) != "k0" {
		t.Fatalf("scan limit 3 = %v", kvs)
	}
	if kvs, more, _ := s.Scan(nil, []byte("k5"), 0, 4); len(kvs) != 1 || !more {
		t.Fatalf("scan with maxBytes 4 = %v more %v, want one pair and more", kvs, more)
	}
	if kvs, more, _ := s.Scan([]byte("k8"), nil, 0, 4); len(kvs) != 1 || !more {
		t.Fatalf("scan from k8 with maxBytes 4 = %v more %v", kvs, more)
	}
	if kvs, more, _ := s.Scan([]byte("k9"), nil, 0, 4); len(kvs) != 1 || more {
		t.Fatalf("scan of the last key = %v more %v, want no more", kvs, more)
	}
	sum1, applied, err := s.StateHash()
	if err != nil || applied != 12 {
		t.Fatalf("state hash at %d, err %v", applied, err)
	}
	if s.AppliedIndex() != 12 {
		t.Fatalf("applied %d, want 12", s.AppliedIndex())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	if s.AppliedIndex() != 12 {
		t.Fatalf("applied %d after reopening, want 12", s.AppliedIndex())
	}
	sum2, _, err := s.StateHash()
	if err != nil || string(sum1) != string(sum2) {
		t.Fatalf("state hash changed across a reopen (err %v)", err)
	}
	// Replaying entries at or below the applied index is idempotent.
	if err := s.Apply(ents); err != nil {
		t.Fatal(err)
	}
	if sum3, _, _ := s.StateHash(); string(sum3) != string(sum1) {
		t.Fatal("replaying the same entries changed the state")
	}
}

func TestConfigValidate(t *testing.T) {
	c := NewConfig()
	c.ValueThresholdBytes, c.MemTableBytes, c.BlockCacheBytes = 0, 10, -1
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"valueThresholdBytes", "memTableBytes", "blockCacheBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// TestScaleGeometry: sizes scale by f, are floored, and stay valid; a
// block cache that is off stays off.
func TestScaleGeometry(t *testing.T) {
	c := NewConfig()
	c.ScaleGeometry(0.5)
	if c.MemTableBytes != DefaultMemTableBytes/2 || c.BlockCacheBytes != DefaultBlockCacheBytes/2 {
		t.Fatalf("x0.5: memtable %d, block cache %d", c.MemTableBytes, c.BlockCacheBytes)
	}
	c = NewConfig()
	c.ScaleGeometry(1e-6)
	if c.MemTableBytes != minMemTableBytes || c.BlockCacheBytes != minBlockCacheBytes {
		t.Fatalf("x1e-6: memtable %d, block cache %d, want the floors", c.MemTableBytes, c.BlockCacheBytes)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("scaled config invalid: %v", err)
	}
	c = NewConfig()
	c.BlockCacheBytes = 0
	c.ScaleGeometry(1e-6)
	if c.BlockCacheBytes != 0 {
		t.Fatalf("a block cache that was off is %d after scaling", c.BlockCacheBytes)
	}
	got := c.GeometryFlags()
	if len(got) != 4 || got[0] != "-badger.memTableBytes" || got[2] != "-badger.blockCacheBytes" {
		t.Fatalf("GeometryFlags = %v", got)
	}
}
