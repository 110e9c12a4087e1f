package nezha

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nezha-harness/nezha/internal/vfs"
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

// TestRunFormats: runs of both record checksums (format 2, xxh3, written
// now; format 1, CRC32C, written by earlier versions) open with the
// checksum their footer's magic names, and every read path (readValue,
// appendValue, forValues with and without a reused buffer, iterate)
// returns each record whole, with or without an expiry time, while a
// flipped value byte is an error wrapping systems.ErrCorrupt on each.
func TestRunFormats(t *testing.T) {
	for _, sum := range []runChecksum{runXXH3, runCRC32C} {
		for _, mapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("magic=%x/mmap=%v", sum.magic(), mapped), func(t *testing.T) {
				rng := newRand(t, 43)
				dir := t.TempDir()
				w, err := newRunWriter(osCreate, dir, 7)
				if err != nil {
					t.Fatal(err)
				}
				w.sum = sum
				var keys, values [][]byte
				var locs []systems.Location
				for i, size := range []int{0, 5, 300, 100 << 10, 17} {
					k := []byte(fmt.Sprintf("key%02d", i))
					v := randValue(rng, size)
					loc, err := w.Add(k, v, uint64(100+i), int64(i%2)*1e18)
					if err != nil {
						t.Fatal(err)
					}
					keys, values, locs = append(keys, k), append(values, v), append(locs, loc)
				}
				if _, err := w.Finish(); err != nil {
					t.Fatal(err)
				}
				r, err := openRun(vfs.New(), dir, 7)
				if err != nil {
					t.Fatal(err)
				}
				if r.sum != sum {
					t.Fatalf("opened with checksum %d, written with %d", r.sum, sum)
				}
				rs := newRunSet(vfs.OS(), dir, mapped)
				rs.add(r)
				defer rs.closeAll()
				// check reads every record; corrupt is the one with a flipped
				// byte (-1: none), whose reads must fail with ErrCorrupt, as
				// must the passes over all records.
				check := func(corrupt int) {
					t.Helper()
					ok := func(err error, i int) bool {
						if corrupt >= 0 && (i == corrupt || i < 0) {
							return errors.Is(err, systems.ErrCorrupt)
						}
						return err == nil
					}
					for i := range keys {
						v, err := rs.readValue(keys[i], locs[i])
						if !ok(err, i) || err == nil && !bytes.Equal(v, values[i]) {
							t.Fatalf("readValue %d: %d bytes, %v", i, len(v), err)
						}
						v, err = rs.appendValue([]byte("dst"), keys[i], locs[i])
						if !ok(err, i) || err == nil && !bytes.Equal(v, append([]byte("dst"), values[i]...)) {
							t.Fatalf("appendValue %d: %d bytes, %v", i, len(v), err)
						}
					}
					for _, reuse := range []bool{false, true} {
						got := 0
						err := rs.forValues(keys, locs, 1<<10, reuse, func(i int, v []byte) error {
							if !bytes.Equal(v, values[i]) {
								return fmt.Errorf("value %d: %d bytes", i, len(v))
							}
							got++
							return nil
						})
						if !ok(err, -1) || err == nil && got != len(keys) {
							t.Fatalf("forValues (reuse %v): %d values, %v", reuse, got, err)
						}
					}
					got := 0
					err := r.iterate(nil, func(k, v []byte, loc systems.Location) (bool, error) {
						if !bytes.Equal(k, keys[got]) || !bytes.Equal(v, values[got]) || loc != locs[got] {
							return false, fmt.Errorf("record %d: %q, %d bytes, %v", got, k, len(v), loc)
						}
						got++
						return true, nil
					})
					if !ok(err, -1) || err == nil && got != len(keys) {
						t.Fatalf("iterate: %d records, %v", got, err)
					}
				}
				check(-1)
				flipByte(t, r.path, locs[3].Offset+int64(locs[3].Length)-1)
				check(3)
			})
		}
	}
}
