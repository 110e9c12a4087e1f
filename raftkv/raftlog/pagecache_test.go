package raftlog

import (
	"math/rand"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident returns how many of the first n bytes of path's pages are in
// the page cache (mincore over a read-only mapping).
func resident(t *testing.T, path string, n int64) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (n+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	var in int64
	for _, v := range vec {
		if v&1 != 0 {
			in += page
		}
	}
	return in
}

// TestPageCacheWindow: with Sync, the log drops its synced data older than
// the newest PageCacheBytes from the page cache, across segments; a
// negative window and Sync=false drop nothing.
func TestPageCacheWindow(t *testing.T) {
	const window = 256 << 10
	rng := rand.New(rand.NewSource(21))
	dir := t.TempDir()
	o := testOptions(t, dir)
	o.SegmentSizeBytes = 1 << 20
	o.PageCacheBytes = window
	l := mustOpen(t, o)
	for i := uint64(0); i < 40; i++ {
		appendRange(t, l, 1+i*4, 4+i*4, 1, 16<<10, rng) // 64 KiB and a little per Append
	}
	// The sealed segments' sidecar indexes are built from their pages;
	// once they are, the next Append drops what it could not before.
	l.indexing.Wait()
	appendRange(t, l, 161, 164, 1, 16<<10, rng)
	var total int64
	segs := l.Segments()
	for _, s := range segs {
		total += s.SizeBytes
	}
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several for the window to span", len(segs))
	}
	// The count includes pages dropped again after a sidecar indexer read
	// them back.
	if dropped := l.Stats().PageCacheDroppedBytes; dropped < total-window-(64<<10) {
		t.Fatalf("dropped %d of %d bytes, want at least all but the newest %d (within one Append)", dropped, total, window)
	}
	var statfs unix.Statfs_t
	if err := unix.Statfs(dir, &statfs); err != nil {
		t.Fatal(err)
	}
	if statfs.Type == unix.TMPFS_MAGIC {
		t.Log("the test directory is on tmpfs, whose pages cannot be dropped; residency not checked")
	} else {
		// Every segment but the last two lies wholly outside the window.
		for _, s := range segs[:len(segs)-2] {
			if in := resident(t, s.Path, s.SizeBytes); in != 0 {
				t.Errorf("segment %s: %d of %d bytes still in the page cache, want 0", s.Path, in, s.SizeBytes)
			}
		}
	}

	for _, c := range []struct {
		name string
		opts func(*Options)
	}{
		{"no limit", func(o *Options) { o.PageCacheBytes = -1 }},
		{"no sync", func(o *Options) { o.Sync = false }},
	} {
		o := testOptions(t, t.TempDir())
		o.SegmentSizeBytes = 1 << 20
		o.PageCacheBytes = 0
		c.opts(&o)
		l := mustOpen(t, o)
		appendRange(t, l, 1, 100, 1, 16<<10, rng)
		if d := l.Stats().PageCacheDroppedBytes; d != 0 {
			t.Errorf("%s: dropped %d bytes, want 0", c.name, d)
		}
	}
}
