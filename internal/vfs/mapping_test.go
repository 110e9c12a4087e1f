package vfs

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A mapped read returns the file's bytes appended to dst, takes the FS's
// read faults as ReadAt does, refuses bytes outside the mapping, and turns
// a page that no longer exists (the file truncated under the mapping:
// SIGBUS) into ErrMappingFault instead of a crash.
func TestMapping(t *testing.T) {
	fs := New()
	f := create(t, fs, "m")
	want := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB: four pages
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	m, err := f.Map(int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Len() != int64(len(want)) {
		t.Fatalf("Len = %d, want %d", m.Len(), len(want))
	}
	got, err := m.AppendAt([]byte("x"), 5, 100)
	if err != nil || !bytes.Equal(got, append([]byte("x"), want[5:105]...)) {
		t.Fatalf("AppendAt = %q, %v", got, err)
	}
	for _, bad := range []struct{ off, n int64 }{{-1, 1}, {0, -1}, {int64(len(want)) - 1, 2}} {
		if _, err := m.AppendAt(nil, bad.off, int(bad.n)); err == nil {
			t.Errorf("AppendAt(off %d, n %d) outside the mapping did not fail", bad.off, bad.n)
		}
	}

	if err := fs.SetFaults(Fault{Kind: FaultReadError}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.AppendAt(nil, 0, 10); !errors.Is(err, syscall.EIO) || len(got) != 0 {
		t.Fatalf("mapped read under read-error = %q, %v, want EIO", got, err)
	}
	if err := fs.SetFaults(Fault{Kind: FaultReadCorrupt}); err != nil {
		t.Fatal(err)
	}
	got, err = m.AppendAt(nil, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	diff := 0
	for i := range got {
		if got[i] != want[i] {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("corrupt mapped read differs in %d bytes, want 1", diff)
	}
	if err := fs.SetFaults(); err != nil {
		t.Fatal(err)
	}

	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AppendAt(nil, 8192, 100); !errors.Is(err, ErrMappingFault) {
		t.Fatalf("read of a page truncated under the mapping = %v, want ErrMappingFault", err)
	}
	if got, err := m.AppendAt(nil, 0, 16); err != nil || !bytes.Equal(got, want[:16]) {
		t.Fatalf("read of a page still in the file after the fault = %q, %v", got, err)
	}
}

// LazyMapping maps once for concurrent first readers, returns nil for an
// empty file, and maps again after Close.
func TestLazyMapping(t *testing.T) {
	f := create(t, nil, "l")
	var l LazyMapping
	if m := l.Get(f, 0); m != nil {
		t.Fatal("a mapping of 0 bytes")
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	ms := make([]*Mapping, 8)
	var wg sync.WaitGroup
	for i := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[i] = l.Get(f, 5)
		}()
	}
	wg.Wait()
	for _, m := range ms {
		if m == nil || m != ms[0] {
			t.Fatalf("concurrent first Gets returned %v, want one mapping", ms)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	m := l.Get(f, 5)
	if m == nil || m == ms[0] {
		t.Fatal("Get after Close did not map again")
	}
	if got, err := m.AppendAt(nil, 0, 5); err != nil || string(got) != "hello" {
		t.Fatalf("read after remap = %q, %v", got, err)
	}
	l.Close()
}

// BenchmarkMappingAppendAt copies 256 KiB values at random offsets out of
// a 64 MiB mapping, into a new buffer per copy (as GET does: the caller
// owns the value) or into one reused buffer. The reused case is the cost
// of the mapped copy itself; the new-buffer case adds the Go heap's cost
// of a 256 KiB allocation per copy, which depends on the process's live
// heap: with a few MiB live, the collector runs every dozen or so copies
// and the scavenger returns the freed pages to the kernel, so each copy
// faults its buffer back in. With ballastMiB of live (untouched) heap the
// collector runs rarely and the pages stay resident.
func BenchmarkMappingAppendAt(b *testing.B) {
	const (
		fileBytes  = 64 << 20
		valueBytes = 256 << 10
	)
	f := create(b, nil, "m")
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for off := int64(0); off < fileBytes; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	m, err := f.Map(fileBytes)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		name       string
		reuse      bool
		ballastMiB int
	}{{"new-buffer", false, 0}, {"new-buffer/ballast128MiB", false, 128}, {"reused-buffer", true, 0}} {
		b.Run(c.name, func(b *testing.B) {
			ballast := make([]byte, c.ballastMiB<<20)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.SetBytes(valueBytes)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
				var buf []byte
				for pb.Next() {
					off := int64(rng.IntN(fileBytes/valueBytes)) * valueBytes
					var dst []byte
					if c.reuse {
						dst = buf[:0]
					}
					var err error
					if buf, err = m.AppendAt(dst, off, valueBytes); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.NumGC-before.NumGC)/float64(b.N), "GCs/op")
			runtime.KeepAlive(ballast)
		})
	}
}

// Mapping a file reads none of it: a read of a few bytes of a large file
// whose pages are not cached brings in about those pages, not the file.
// Before, Map populated the whole mapping (MAP_POPULATE: a synchronous
// read-ahead of the file), so the first GET of a cold 64 MiB segment or a
// run of gigabytes read all of it (tens of ms per segment; a run larger
// than memory would thrash).
func TestMapReadsOnlyWhatIsRead(t *testing.T) {
	const size = 64 << 20
	fs := New()
	f := create(t, fs, "big")
	chunk := bytes.Repeat([]byte{'v'}, 1<<20)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if !coldAfterDrop(t, f) {
		t.Skip("this file system keeps the file's pages cached (tmpfs?)")
	}
	m, err := f.Map(size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	resident := func() int {
		vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
		if err := mincore(m.b, vec); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n * os.Getpagesize()
	}
	got, err := m.AppendAt(nil, size/2, 100)
	if err != nil || !bytes.Equal(got, chunk[:100]) {
		t.Fatalf("AppendAt = %.20q, %v", got, err)
	}
	// The kernel reads around a fault (read-ahead, 128 KiB by default);
	// an eighth of the file is far more than any read-around.
	r := resident()
	if r > size/8 {
		t.Fatalf("after one read of 100 bytes, %d of the file's %d bytes are resident", r, size)
	}
	t.Logf("after one read of 100 bytes, %d of the file's %d bytes are resident", r, size)
}

// coldAfterDrop drops f's cached pages and reports whether its first page
// is then uncached (false on file systems that keep files in memory).
func coldAfterDrop(t *testing.T, f *File) bool {
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return false
	}
	b, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	vec := make([]byte, 1)
	if err := mincore(b, vec); err != nil {
		t.Fatal(err)
	}
	return vec[0]&1 == 0
}

// mincore fills vec with the residency of the pages of b (mincore(2)).
func mincore(b, vec []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}
