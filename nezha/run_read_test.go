package nezha

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// TestRunAppendReads: values in a sorted run, read with GetAppend and
// ScanFunc (mapped and with positioned reads): they match the model,
// values of every size (empty, shorter than a record head, spanning many
// pages) arrive after dst's bytes, a GET into a buffer with room allocates
// nothing, and a flipped byte anywhere in a record (CRC, header, key,
// value) or a location of another key's record is an error wrapping
// systems.ErrCorrupt that leaves dst as it was, while the other keys read
// on.
func TestRunAppendReads(t *testing.T) {
	for _, mapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("mmap=%v", mapped), func(t *testing.T) {
			f := newGCFixture(t, IndexMemory, StrategyTiered, 41)
			f.s.runs.mmap = mapped
			sizes := []int{0, 1, 7, 8, 9, 100, 4 << 10, 70 << 10}
			for i := 0; i < 40; i++ {
				k := fmt.Sprintf("k%05d", i)
				f.apply([]systems.Command{put(k, randValue(f.rng, sizes[i%len(sizes)]))})
			}
			f.round()
			locs := scanLocs(t, f.s)
			for _, l := range locs {
				if !isRun(l) {
					t.Fatalf("a value at %s is not in a run after the round", locString(l))
				}
			}
			f.check() // Get, Scan, GetAppend, ScanFunc against the model

			// A GET into a buffer with room allocates nothing.
			key := []byte("k00006") // a 4 KiB value
			buf := make([]byte, 0, 8<<10)
			if allocs := testing.AllocsPerRun(100, func() {
				v, found, err := f.s.GetAppend(buf[:0], key)
				if err != nil || !found || len(v) != 4<<10 {
					t.Fatalf("GetAppend: %d bytes, %v, %v", len(v), found, err)
				}
			}); allocs != 0 {
				t.Fatalf("GetAppend into a buffer with room: %.1f allocations per call, want 0", allocs)
			}

			// Corrupt one record at a time: the CRC, the Raft index in the
			// header, a key byte, the value's first and last bytes.
			loc := locs[6] // k00006, 4 KiB
			path := filepath.Join(f.dir, "sorted", runName(loc.Segment&^runFlag))
			headKey := int64(runHeaderSize) // no expiry time
			for _, at := range []int64{0, 8, headKey + 2, headKey + 6, int64(loc.Length) - 1} {
				flipByte(t, path, loc.Offset+at)
				dst := []byte("dst")
				got, found, err := f.s.GetAppend(dst, key)
				if !errors.Is(err, systems.ErrCorrupt) || found || !bytes.Equal(got, dst) {
					t.Fatalf("byte %d flipped: GetAppend = %q, found %v, err %v; want dst and ErrCorrupt", at, got, found, err)
				}
				err = f.s.ScanFunc([]byte("k00005"), []byte("k00008"), 0, func([]byte, []byte) (bool, error) { return true, nil })
				if !errors.Is(err, systems.ErrCorrupt) {
					t.Fatalf("byte %d flipped: ScanFunc over it: %v", at, err)
				}
				if v, found, err := f.s.GetAppend(nil, []byte("k00007")); err != nil || !found || !bytes.Equal(v, f.m["k00007"]) {
					t.Fatalf("byte %d flipped: GetAppend of another key: %d bytes, %v, %v", at, len(v), found, err)
				}
				flipByte(t, path, loc.Offset+at) // back
			}
			// A key pointing at another key's record.
			var b IndexBatch
			b.Put([]byte("other"), locs[7])
			b.Put([]byte("k0000"), locs[8]) // a prefix of the record's key
			b.SetApplied(f.s.AppliedIndex())
			if err := f.s.index.Write(&b); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"other", "k0000"} {
				if got, found, err := f.s.GetAppend(nil, []byte(k)); !errors.Is(err, systems.ErrCorrupt) || found || got != nil {
					t.Fatalf("GetAppend(%q) of another key's record = %d bytes, found %v, err %v; want ErrCorrupt", k, len(got), found, err)
				}
			}
		})
	}
}

// flipByte inverts the byte at off of the file at path.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var one [1]byte
	if _, err := f.ReadAt(one[:], off); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0xff
	if _, err := f.WriteAt(one[:], off); err != nil {
		t.Fatal(err)
	}
}
