package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// FileSystem is where the files of an FS live: the operating system's (OS,
// the default) or memory (MemFS, for deterministic tests that crash a node
// and keep only what it synced). Its methods are those of package os; an
// FS adds fault injection and the watching of syncs on top of the files it
// opens.
type FileSystem interface {
	// OpenFile opens name as os.OpenFile does.
	OpenFile(name string, flag int, perm os.FileMode) (BaseFile, error)
	// CreateTemp creates a new file in dir named from pattern (its last
	// "*" replaced by a string that makes it unique), as os.CreateTemp.
	CreateTemp(dir, pattern string) (BaseFile, error)
	Remove(name string) error
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	MkdirAll(name string, perm os.FileMode) error
	// ReadDir returns the entries of a directory sorted by name.
	ReadDir(name string) ([]os.DirEntry, error)
	Stat(name string) (os.FileInfo, error)
	// Lock creates name if needed and takes an exclusive lock on it,
	// released by unlock or by the end of the process that holds it (a
	// crash). A held lock is an error wrapping ErrLocked.
	Lock(name string) (unlock func(), err error)
}

// BaseFile is an open file of a FileSystem: the methods of *os.File that
// an FS uses, and the Linux calls it makes on a file descriptor.
type BaseFile interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Closer
	Name() string
	// Fd is the file descriptor (^uintptr(0) if the file has none).
	Fd() uintptr
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	// Sync is fsync; on a directory it makes its entries durable.
	Sync() error
	// Datasync is fdatasync.
	Datasync() error
	// Pwritev writes the concatenation of bufs at off (it may modify bufs).
	Pwritev(bufs [][]byte, off int64) error
	// Allocate makes the file at least size bytes long, the new bytes
	// zeros (fallocate, mode 0).
	Allocate(size int64) error
	// DropCache and StartWriteback are hints about the page cache
	// (posix_fadvise DONTNEED, sync_file_range WRITE): no durability.
	DropCache(off, n int64) error
	StartWriteback(off, n int64) error
	// Map maps the first size bytes read-only (an error if the file
	// system cannot: the caller reads instead).
	Map(size int) ([]byte, error)
}

// ErrLocked is wrapped by the error of FileSystem.Lock when another open
// file description (this process or another) holds the lock.
var ErrLocked = errors.New("locked by another process or handle")

// OS returns the operating system's file system.
func OS() FileSystem { return osFS{} }

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (BaseFile, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) CreateTemp(dir, pattern string) (BaseFile, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                  { return os.RemoveAll(name) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Stat(name string) (os.FileInfo, error)        { return os.Stat(name) }

// Lock takes an exclusive, non-blocking flock(2), which ends with the
// process however it ends (even by SIGKILL).
func (osFS) Lock(name string) (unlock func(), err error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", name, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// osFile is a file of the OS. A one-pointer struct: storing it in a
// BaseFile allocates nothing.
type osFile struct{ *os.File }

func (f osFile) Datasync() error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

func (f osFile) Pwritev(bufs [][]byte, off int64) error { return pwritev(int(f.Fd()), bufs, off) }

func (f osFile) Allocate(size int64) error {
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}

func (f osFile) DropCache(off, n int64) error {
	if err := unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED); err != nil {
		return &os.PathError{Op: "fadvise", Path: f.Name(), Err: err}
	}
	return nil
}

func (f osFile) StartWriteback(off, n int64) error {
	return unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

func (f osFile) Map(size int) ([]byte, error) {
	return unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
}

// ReadFile reads the whole file name of fsys, as os.ReadFile.
func ReadFile(fsys FileSystem, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// WriteFile writes data to the file name of fsys, creating or truncating
// it, without syncing, as os.WriteFile.
func WriteFile(fsys FileSystem, name string, data []byte, perm os.FileMode) error {
	f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// SyncDir fsyncs the directory dir of fsys, making the creation, renaming
// and removal of its entries durable. Unlike FS.SyncDir it injects no
// fault and is not watched.
func SyncDir(fsys FileSystem, dir string) error {
	d, err := fsys.OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// MkdirAllSynced creates dir and any missing parents, as os.MkdirAll, and
// fsyncs the directory holding each one it created, so that a crash keeps
// them: a new directory's entry is durable only once its parent is synced
// (a log directory lost with its synced segments in it would be a node
// that forgot what it acknowledged).
func MkdirAllSynced(fsys FileSystem, dir string, perm os.FileMode) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.Stat(d); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := SyncDir(fsys, filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}
