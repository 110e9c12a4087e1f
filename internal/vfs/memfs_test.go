package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"testing"
)

func memWrite(t *testing.T, m *MemFS, name string, data []byte, sync bool) {
	t.Helper()
	f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// memRead returns the bytes of name, or nil if it does not exist.
func memRead(t *testing.T, m *MemFS, name string) []byte {
	t.Helper()
	b, err := ReadFile(m, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func memNames(t *testing.T, m *MemFS, dir string) []string {
	t.Helper()
	des, err := m.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// The operations behave as the os package's: offsets, positioned reads
// and writes past the end, truncation, O_EXCL, sorted listings, errors
// that errors.Is recognises.
func TestMemFSFileOperations(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("!"), 7); err != nil {
		t.Fatal(err)
	}
	if err := f.Pwritev([][]byte{[]byte("ab"), []byte("c")}, 10); err != nil {
		t.Fatal(err)
	}
	want := []byte("hello\x00\x00!\x00\x00abc")
	buf := make([]byte, 20)
	n, err := f.ReadAt(buf, 0)
	if n != len(want) || !errors.Is(err, io.EOF) || !bytes.Equal(buf[:n], want) {
		t.Fatalf("ReadAt = %d %q %v, want %q and EOF", n, buf[:n], err, want)
	}
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() != 3 || st.IsDir() {
		t.Fatalf("after truncate: size %d dir %v", st.Size(), st.IsDir())
	}
	if err := f.Allocate(8); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := memRead(t, m, "/d/f"); !bytes.Equal(got, []byte("hel\x00\x00\x00\x00\x00")) {
		t.Fatalf("after allocate: %q", got)
	}
	if _, err := m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("O_EXCL on an existing file: %v", err)
	}
	if _, err := m.OpenFile("/d/missing", os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open of a missing file: %v", err)
	}
	if _, err := m.OpenFile("/d/f", os.O_WRONLY|syscall.O_DIRECT, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("O_DIRECT: %v, want EINVAL (as tmpfs)", err)
	}
	g, _ := m.OpenFile("/d/f", os.O_RDONLY, 0)
	if _, err := g.Map(4); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Map: %v, want ErrUnsupported", err)
	}
	if _, err := g.Write([]byte("x")); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("write to a read-only file: %v", err)
	}
	g.Close()
	tmp, err := m.CreateTemp("/d", "x.*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Close()
	if err := m.Rename(tmp.Name(), "/d/e/y"); err != nil {
		t.Fatal(err)
	}
	if got := memNames(t, m, "/d"); !slices.Equal(got, []string{"e", "f"}) {
		t.Fatalf("ReadDir(/d) = %v", got)
	}
	if err := m.Remove("/d/e"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("remove of a non-empty directory: %v", err)
	}
	if err := m.RemoveAll("/d/e"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stat("/d/e/y"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat after RemoveAll: %v", err)
	}
	if _, err := m.Stat("relative"); err == nil {
		t.Fatal("a relative path was accepted")
	}
}

// A file removed while open stays readable through its open handle, as
// an unlinked file does.
func TestMemFSUnlinkedFileStaysReadable(t *testing.T) {
	m := NewMem()
	memWrite(t, m, "/f", []byte("data"), false)
	f, err := m.OpenFile("/f", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := m.Remove("/f"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "data" {
		t.Fatalf("read after unlink = %q %v", b, err)
	}
}

// A crash keeps a file's synced bytes and drops the rest; a new name is
// durable only once its directory is synced (creation, rename, removal
// alike); the crashed file system goes on independently of the clone.
func TestMemFSCrashKeepsOnlySynced(t *testing.T) {
	m := NewMem()
	if err := MkdirAllSynced(m, "/data/log", 0o755); err != nil {
		t.Fatal(err)
	}
	memWrite(t, m, "/data/log/a", []byte("synced"), true)
	memWrite(t, m, "/data/log/b", []byte("unsynced file, unsynced name"), false)
	if err := SyncDir(m, "/data/log"); err != nil {
		t.Fatal(err)
	}
	// After the directory sync: c's name is not durable, b's is (its
	// bytes are not); a's later bytes are not synced.
	memWrite(t, m, "/data/log/c", []byte("synced file, unsynced name"), true)
	f, _ := m.OpenFile("/data/log/a", os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte(" and more"))
	f.Close()

	c := m.CrashClone(CrashOptions{})
	if got := memNames(t, c, "/data/log"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after the crash /data/log holds %v, want [a b]", got)
	}
	if got := memRead(t, c, "/data/log/a"); string(got) != "synced" {
		t.Fatalf("a after the crash = %q, want its synced bytes", got)
	}
	if got := memRead(t, c, "/data/log/b"); len(got) != 0 {
		t.Fatalf("b after the crash = %q, want empty (never synced)", got)
	}

	// Renames and removals need the directory sync too.
	if err := m.Rename("/data/log/a", "/data/log/renamed"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove("/data/log/b"); err != nil {
		t.Fatal(err)
	}
	c = m.CrashClone(CrashOptions{})
	if got := memNames(t, c, "/data/log"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("unsynced rename and removal: %v, want [a b]", got)
	}
	if err := SyncDir(m, "/data/log"); err != nil {
		t.Fatal(err)
	}
	c = m.CrashClone(CrashOptions{})
	if got := memNames(t, c, "/data/log"); !slices.Equal(got, []string{"c", "renamed"}) {
		t.Fatalf("synced rename and removal: %v, want [c renamed]", got)
	}
	if got := memRead(t, c, "/data/log/renamed"); string(got) != "synced" {
		t.Fatalf("renamed file = %q", got)
	}

	// The clone is on its own: the old file system's writes (a crashed
	// node being stopped) do not reach it.
	memWrite(t, m, "/data/log/c", []byte("late"), true)
	if got := memRead(t, c, "/data/log/c"); string(got) != "synced file, unsynced name" {
		t.Fatalf("a write after the crash reached the clone: %q", got)
	}

	// A directory made without syncing its parent is lost.
	if err := m.MkdirAll("/data/lost", 0o755); err != nil {
		t.Fatal(err)
	}
	memWrite(t, m, "/data/lost/x", []byte("x"), true)
	if err := SyncDir(m, "/data/lost"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CrashClone(CrashOptions{}).Stat("/data/lost"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a directory whose parent was never synced survived the crash: %v", err)
	}
}

// With TornTailPercent a crash keeps a random prefix of the bytes
// appended since the last sync (a torn write), never bytes that were not
// appended, and draws the same prefixes from the same seed.
func TestMemFSCrashTornTail(t *testing.T) {
	m := NewMem()
	memWrite(t, m, "/f", []byte("synced|"), true)
	f, _ := m.OpenFile("/f", os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("0123456789"))
	f.Close()
	memWrite(t, m, "/g", []byte("overwritten"), true)
	g, _ := m.OpenFile("/g", os.O_WRONLY, 0)
	g.Write([]byte("OVER")) // not an append: the synced bytes stay
	g.Close()
	if err := SyncDir(m, "/"); err != nil {
		t.Fatal(err)
	}
	lengths := map[int]bool{}
	for seed := range uint64(50) {
		c := m.CrashClone(CrashOptions{TornTailPercent: 100, RNG: rand.New(rand.NewPCG(seed, 0))})
		got := memRead(t, c, "/f")
		if len(got) <= len("synced|") || !bytes.HasPrefix([]byte("synced|0123456789"), got) {
			t.Fatalf("seed %d: torn file = %q, want synced| and a non-empty prefix of the rest", seed, got)
		}
		lengths[len(got)] = true
		if got := memRead(t, c, "/g"); string(got) != "overwritten" {
			t.Fatalf("seed %d: overwritten file = %q, want its synced bytes", seed, got)
		}
		again := m.CrashClone(CrashOptions{TornTailPercent: 100, RNG: rand.New(rand.NewPCG(seed, 0))})
		if !bytes.Equal(memRead(t, again, "/f"), got) {
			t.Fatalf("seed %d: two crashes from one seed differ", seed)
		}
	}
	if len(lengths) < 5 {
		t.Fatalf("torn tails of only %d lengths in 50 crashes", len(lengths))
	}
}

// A lock is exclusive until released; a crash releases it.
func TestMemFSLock(t *testing.T) {
	m := NewMem()
	unlock, err := m.Lock("/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock("/LOCK"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	c := m.CrashClone(CrashOptions{})
	u2, err := c.Lock("/LOCK")
	if err != nil {
		t.Fatalf("lock after a crash: %v", err)
	}
	u2()
	unlock()
	if u3, err := m.Lock("/LOCK"); err != nil {
		t.Fatalf("lock after unlock: %v", err)
	} else {
		u3()
	}
}

// An FS over a MemFS injects faults and watches syncs as over the OS.
func TestFSOnMemFSInjectsFaults(t *testing.T) {
	fsys := NewOn(NewMem())
	f, err := fsys.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Pwritev([][]byte{[]byte("abc")}, 0); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SetFaults(Fault{Kind: FaultFsyncError}); err != nil {
		t.Fatal(err)
	}
	if err := f.Datasync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("datasync under fsync-error = %v", err)
	}
	if fsys.Err() == nil {
		t.Fatal("a failed fsync on a MemFS file did not fail the FS")
	}
	if fsys.Base() == nil || fsys.Base() == OS() {
		t.Fatal("Base is not the MemFS")
	}
}
