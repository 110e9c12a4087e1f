package vfs

import (
	"bytes"
	"errors"
	"sync"
	"syscall"
	"testing"
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
