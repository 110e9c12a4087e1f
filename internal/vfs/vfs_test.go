package vfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func create(t testing.TB, fs *FS, name string) *File {
	t.Helper()
	f, err := fs.OpenFile(filepath.Join(t.TempDir(), name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// A failed fsync is sticky: every later sync of any file fails with it,
// without asking the kernel again, and Failed is closed.
func TestFailedFsyncIsSticky(t *testing.T) {
	fs := New()
	a, b := create(t, fs, "a"), create(t, fs, "b")
	if _, err := a.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(); err != nil {
		t.Fatalf("sync before the fault: %v", err)
	}
	if err := fs.SetFaults(Fault{Kind: FaultFsyncError, PathContains: "/a"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Datasync(); err != nil {
		t.Fatalf("a fault on /a reached b: %v", err)
	}
	err := a.Datasync()
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("datasync under fsync-error = %v, want EIO", err)
	}
	select {
	case <-fs.Failed():
	default:
		t.Fatal("Failed not closed after a failed fsync")
	}
	if err := fs.SetFaults(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*File{a, b} {
		if err := f.Sync(); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "earlier fsync failed") {
			t.Fatalf("sync of %s after a failed fsync, faults healed = %v, want the sticky EIO", f.Name(), err)
		}
	}
}

// An injected full disk refuses writes with ENOSPC and marks the FS full;
// bytes freed (the ballast) make room that writes use up.
func TestDiskFullRoom(t *testing.T) {
	fs := New()
	f := create(t, fs, "f")
	if err := fs.SetFaults(Fault{Kind: FaultDiskFull}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 10)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk = %v, want ENOSPC", err)
	}
	if fs.Full() == nil {
		t.Fatal("Full() is nil after ENOSPC")
	}
	if err := f.Pwritev([][]byte{make([]byte, 4)}, 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("pwritev on a full disk = %v, want ENOSPC", err)
	}
	fs.Free(100)
	if err := f.Pwritev([][]byte{make([]byte, 60), make([]byte, 40)}, 0); err != nil {
		t.Fatalf("pwritev of 100 bytes in 100 bytes of room: %v", err)
	}
	if _, err := f.WriteAt([]byte{1}, 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past the room = %v, want ENOSPC", err)
	}
	if err := f.Preallocate(1 << 20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("preallocate on a full disk = %v, want ENOSPC", err)
	}
	if err := fs.SetFaults(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{1}, 0); err != nil {
		t.Fatalf("write after healing: %v", err)
	}
	if fs.Full() == nil {
		t.Fatal("Full() cleared by healing; only ClearFull (a probe that found space) may clear it")
	}
	fs.ClearFull()
	if fs.Full() != nil {
		t.Fatal("ClearFull did not clear")
	}
	if fs.Err() != nil {
		t.Fatalf("a full disk failed the FS: %v", fs.Err())
	}
}

// Read faults: EIO, or the right number of bytes with one flipped.
func TestReadFaults(t *testing.T) {
	fs := New()
	f := create(t, fs, "r")
	want := []byte("0123456789")
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(want))
	if err := fs.SetFaults(Fault{Kind: FaultReadError}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read under read-error = %v, want EIO", err)
	}
	if _, err := f.ReadAtUnfaulted(buf, 0); err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("unfaulted read = %q, %v", buf, err)
	}
	if err := fs.SetFaults(Fault{Kind: FaultReadCorrupt}); err != nil {
		t.Fatal(err)
	}
	n, err := f.ReadAt(buf, 0)
	if err != nil || n != len(want) {
		t.Fatalf("corrupt read returned %d, %v", n, err)
	}
	diff := 0
	for i := range buf {
		if buf[i] != want[i] {
			diff++
		}
	}
	if diff != 1 {
		t.Fatalf("corrupt read differs in %d bytes (%q), want 1", diff, buf)
	}
}

// A slow disk adds its latency to every fsync, and nothing else.
func TestSlowDisk(t *testing.T) {
	fs := New()
	f := create(t, fs, "s")
	const latency = 30 * time.Millisecond
	if err := fs.SetFaults(Fault{Kind: FaultSlowDisk, Latency: latency}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.Datasync(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < latency {
		t.Fatalf("fsync on a slow disk took %v, want at least %v", d, latency)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatalf("write on a slow disk: %v", err)
	}
}

func TestFaultValidate(t *testing.T) {
	fs := New()
	err := fs.SetFaults(Fault{Kind: "melt"}, Fault{Kind: FaultSlowDisk}, Fault{Kind: FaultDiskFull, Latency: time.Second})
	if err == nil {
		t.Fatal("bad faults accepted")
	}
	for _, want := range []string{`unknown disk fault "melt"`, "slow-disk latency 0s", "disk-full takes no latency"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if len(fs.Faults()) != 0 {
		t.Fatalf("a rejected SetFaults changed the faults: %v", fs.Faults())
	}
}

// A nil FS is plain files.
func TestNilFS(t *testing.T) {
	var fs *FS
	f, err := fs.OpenFile(filepath.Join(t.TempDir(), "n"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Datasync(), fs.Err(), fs.Full()); err != nil {
		t.Fatal(err)
	}
}
