// Package vfs is the file layer of a node: every file of the Raft log
// (raftkv/raftlog) and of nezha's state machine (sorted runs, manifest,
// index checkpoint) is opened through an FS, which
//
//   - injects disk faults set at run time (SetFaults: the node's DiskFaults
//     RPC, tests): fsync returns EIO, write returns EIO or ENOSPC, read
//     returns EIO or corrupt bytes, fsync takes longer (a slow disk). Go's
//     file I/O does not go through libc, so LD_PRELOAD tools cannot reach
//     it; the faults are injected in-process, in the style of Pebble's
//     vfs/errorfs (an operation kind and a path are checked against the
//     active faults before the system call);
//   - watches the outcome of every write and sync, real or injected: a
//     failed fsync is sticky (Err, Failed): every later Sync and Datasync
//     returns the first failure without calling the kernel, because after a
//     failed fsync the kernel may have dropped the dirty pages and a retry
//     can report success for data that never reached the disk (PostgreSQL's
//     "fsyncgate", 2018). The node stops on it. ENOSPC marks the disk full
//     (Full) until ClearFull; the node refuses writes meanwhile.
//
// Files a library writes itself (RocksDB through cgo, LevelDB) do not pass
// through an FS; their callers inject at the boundary they control
// (MaybeError before a call) and report the outcome (Observe).
//
// The files live in a FileSystem (backend.go): the operating system's by
// default (New), or memory (NewOn(NewMem()): memfs.go), where a test
// crashes a node and keeps only what it synced. Operations an FS does not
// fault (listing, renaming, removing, whole-file reads and writes) are
// those of its FileSystem, Base.
//
// A nil *FS is valid: plain os files, no faults, nothing watched.
package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// OpKind is the kind of a file operation.
type OpKind int

// Operation kinds that faults apply to.
const (
	// OpCreate: creating a file (O_CREATE).
	OpCreate OpKind = iota
	// OpWrite: write, pwrite, pwritev.
	OpWrite
	// OpPreallocate: fallocate.
	OpPreallocate
	// OpSync: fsync and fdatasync (and, at a library boundary, a flush that
	// ends in one).
	OpSync
	// OpRead: read and pread.
	OpRead
)

func (k OpKind) String() string {
	switch k {
	case OpCreate:
		return "create"
	case OpWrite:
		return "write"
	case OpPreallocate:
		return "fallocate"
	case OpSync:
		return "fsync"
	case OpRead:
		return "read"
	}
	return fmt.Sprintf("op(%d)", int(k))
}

// Op is one file operation: its kind, the path of its file, and for
// OpWrite and OpPreallocate the bytes it adds (a full disk refuses what
// does not fit).
type Op struct {
	Kind      OpKind
	Path      string
	SizeBytes int64
}

// Fault kinds (the values of Fault.Kind, the -nemesis vocabulary of the
// disk nemeses, and the DiskFaults RPC's).
const (
	// FaultFsyncError: fsync and fdatasync return EIO.
	FaultFsyncError = "fsync-error"
	// FaultWriteError: writes return EIO.
	FaultWriteError = "write-error"
	// FaultDiskFull: the file system has no free space: writes and
	// preallocations return ENOSPC, except within the room that files
	// deleted since made (FS.Free: the node's ballast), which they use up.
	// Creating an empty file still works, as on a real full disk.
	FaultDiskFull = "disk-full"
	// FaultReadError: reads return EIO.
	FaultReadError = "read-error"
	// FaultReadCorrupt: reads return their bytes with one byte flipped.
	FaultReadCorrupt = "read-corrupt"
	// FaultSlowDisk: every fsync and fdatasync takes Fault.Latency longer.
	FaultSlowDisk = "slow-disk"
)

// FaultKinds lists every fault kind, for usage texts.
func FaultKinds() []string {
	return []string{FaultFsyncError, FaultWriteError, FaultDiskFull, FaultReadError, FaultReadCorrupt, FaultSlowDisk}
}

// BallastName is the file under a node's data directory that holds its
// disk ballast (space reserved for a full disk, not data: disk usage
// reports leave it out).
const BallastName = "DISK_BALLAST"

// MaxLatency bounds Fault.Latency (a slow disk, not a hung one).
const MaxLatency = 10 * time.Second

// Fault is one injected disk fault.
type Fault struct {
	// Kind is one of the Fault* constants.
	Kind string `json:"kind"`
	// Latency is added to every fsync (FaultSlowDisk only), at most
	// MaxLatency.
	Latency time.Duration `json:"latency_ns,omitempty"`
	// PathContains limits the fault to files whose path contains it (e.g.
	// "/sorted/" for nezha's runs, "/valuelog/" or "/raftlog/" for the
	// Raft log); empty: every file.
	PathContains string `json:"path_contains,omitempty"`
}

func (f Fault) String() string {
	s := f.Kind
	if f.Kind == FaultSlowDisk {
		s += fmt.Sprintf("(+%v per fsync)", f.Latency)
	}
	if f.PathContains != "" {
		s += fmt.Sprintf(" on paths containing %q", f.PathContains)
	}
	return s
}

// Validate reports every problem with f at once.
func (f Fault) Validate() error {
	var errs []error
	known := false
	for _, k := range FaultKinds() {
		known = known || k == f.Kind
	}
	if !known {
		errs = append(errs, fmt.Errorf("unknown disk fault %q (want one of %s)", f.Kind, strings.Join(FaultKinds(), ", ")))
	}
	if f.Kind == FaultSlowDisk && (f.Latency <= 0 || f.Latency > MaxLatency) {
		errs = append(errs, fmt.Errorf("slow-disk latency %v is outside (0, %v]", f.Latency, MaxLatency))
	}
	if f.Kind != FaultSlowDisk && f.Latency != 0 {
		errs = append(errs, fmt.Errorf("%s takes no latency (got %v)", f.Kind, f.Latency))
	}
	return errors.Join(errs...)
}

func (f Fault) matches(path string) bool {
	return f.PathContains == "" || strings.Contains(path, f.PathContains)
}

// InjectedError is the error of an injected fault. It wraps its errno, so
// errors.Is(err, syscall.ENOSPC) holds for an injected full disk as for a
// real one.
type InjectedError struct {
	Op    Op
	Errno syscall.Errno
}

func (e *InjectedError) Error() string {
	return fmt.Sprintf("%s %s: %v (injected)", e.Op.Kind, e.Op.Path, e.Errno)
}

func (e *InjectedError) Unwrap() error { return e.Errno }

// ErrCorruptRead is wrapped by the error a library boundary returns for an
// injected corrupt read it cannot deliver as bytes (RocksDB would fail its
// block checksum).
var ErrCorruptRead = errors.New("checksum mismatch (injected corrupt read)")

// FS is a node's file layer. Its zero value is not ready; use New. A nil
// *FS is valid (see the package doc).
type FS struct {
	mu     sync.Mutex
	faults []Fault
	active atomic.Bool // len(faults) > 0, read without mu
	// room is the free space of a full disk (FaultDiskFull): 0 when the
	// fault is set, grown by Free, used up by writes. Under mu.
	room int64

	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	full atomic.Pointer[error]

	corruptions atomic.Uint64 // picks the flipped byte

	base FileSystem
}

// New returns an FS of the operating system's files, with no faults.
func New() *FS { return NewOn(OS()) }

// NewOn returns an FS of the files of base, with no faults.
func NewOn(base FileSystem) *FS { return &FS{failed: make(chan struct{}), base: base} }

// Base returns the FileSystem of fs (OS for a nil FS): its files without
// injected faults, for the operations an FS does not fault.
func (fs *FS) Base() FileSystem {
	if fs == nil {
		return OS()
	}
	return fs.base
}

// SetFaults replaces the active faults (none: heal). Every fault is
// validated first; on an error nothing changes.
func (fs *FS) SetFaults(faults ...Fault) error {
	var errs []error
	for _, f := range faults {
		errs = append(errs, f.Validate())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = append([]Fault(nil), faults...)
	fs.active.Store(len(faults) > 0)
	fs.room = 0
	return nil
}

// Free tells the FS that n bytes were freed (a deleted file): under an
// injected full disk, writes may use them.
func (fs *FS) Free(n int64) {
	if fs == nil || !fs.active.Load() {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.room += n
}

// Faults returns the active faults.
func (fs *FS) Faults() []Fault {
	if fs == nil {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]Fault(nil), fs.faults...)
}

// Failed is closed once a sync failed (see Err); nil for a nil FS.
func (fs *FS) Failed() <-chan struct{} {
	if fs == nil {
		return nil
	}
	return fs.failed
}

// Err returns the first failed sync, if any: from then on the files of this
// FS cannot be trusted to hold what was written.
func (fs *FS) Err() error {
	if fs == nil {
		return nil
	}
	select {
	case <-fs.failed:
		return fs.failErr
	default:
		return nil
	}
}

// Full returns the ENOSPC that marked the disk full, or nil.
func (fs *FS) Full() error {
	if fs == nil {
		return nil
	}
	if p := fs.full.Load(); p != nil {
		return *p
	}
	return nil
}

// ClearFull forgets that the disk was full (the caller saw space return).
func (fs *FS) ClearFull() {
	if fs != nil {
		fs.full.Store(nil)
	}
}

// Injecting reports whether any fault is set (a cheap check before
// building an Op on a hot path).
func (fs *FS) Injecting() bool { return fs != nil && fs.active.Load() }

// MaybeError returns the injected error for op, or nil. For OpSync it
// first sleeps the latency of a slow disk. Callers that do the operation
// themselves (a library boundary) report its outcome with Observe.
func (fs *FS) MaybeError(op Op) error {
	if fs == nil || !fs.active.Load() {
		return nil
	}
	var latency time.Duration
	var errno syscall.Errno
	fs.mu.Lock()
	for _, f := range fs.faults {
		if !f.matches(op.Path) {
			continue
		}
		switch {
		case f.Kind == FaultSlowDisk && op.Kind == OpSync:
			latency += f.Latency
		case errno != 0:
		case f.Kind == FaultFsyncError && op.Kind == OpSync,
			f.Kind == FaultWriteError && op.Kind == OpWrite,
			f.Kind == FaultReadError && op.Kind == OpRead:
			errno = syscall.EIO
		case f.Kind == FaultDiskFull && (op.Kind == OpWrite || op.Kind == OpPreallocate):
			if op.SizeBytes > fs.room {
				errno = syscall.ENOSPC
			} else {
				fs.room -= op.SizeBytes
			}
		}
	}
	fs.mu.Unlock()
	if latency > 0 {
		time.Sleep(min(latency, MaxLatency))
	}
	if errno != 0 {
		return &InjectedError{Op: op, Errno: errno}
	}
	return nil
}

// corruptReads reports whether reads of path return corrupt bytes.
func (fs *FS) corruptReads(path string) bool {
	if fs == nil || !fs.active.Load() {
		return false
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.faults {
		if f.Kind == FaultReadCorrupt && f.matches(path) {
			return true
		}
	}
	return false
}

// CorruptRead reports whether a read of path is to return corrupt bytes
// (FaultReadCorrupt), for library boundaries that cannot flip a byte of
// what they read and return an error wrapping ErrCorruptRead instead.
func (fs *FS) CorruptRead(path string) bool { return fs.corruptReads(path) }

// corrupt flips one byte of b.
func (fs *FS) corrupt(b []byte) {
	if len(b) > 0 {
		b[fs.corruptions.Add(1)%uint64(len(b))] ^= 0xff
	}
}

// Observe records the outcome err of op, done by the caller, and returns
// err: a failed sync fails the FS for good (Err), ENOSPC marks it full.
func (fs *FS) Observe(op Op, err error) error {
	if fs == nil || err == nil {
		return err
	}
	switch {
	case op.Kind == OpSync:
		fs.failOnce.Do(func() {
			fs.failErr = err
			close(fs.failed)
		})
	case errors.Is(err, syscall.ENOSPC):
		fs.full.Store(&err)
	}
	return err
}

// syncCheck returns the sticky sync failure, or the injected error for op,
// after a slow disk's latency.
func (fs *FS) syncCheck(op Op) error {
	if err := fs.Err(); err != nil {
		return fmt.Errorf("%s %s: an earlier fsync failed, nothing written since can be trusted: %w", op.Kind, op.Path, err)
	}
	return fs.MaybeError(op)
}

// OpenFile opens path as os.OpenFile does; with O_CREATE it is an OpCreate.
func (fs *FS) OpenFile(path string, flag int, perm os.FileMode) (*File, error) {
	if flag&os.O_CREATE != 0 {
		op := Op{Kind: OpCreate, Path: path}
		if err := fs.MaybeError(op); err != nil {
			return nil, fs.Observe(op, err)
		}
	}
	f, err := fs.Base().OpenFile(path, flag, perm)
	if err != nil {
		if flag&os.O_CREATE != 0 {
			fs.Observe(Op{Kind: OpCreate, Path: path}, err)
		}
		return nil, err
	}
	return &File{f: f, fs: fs, path: path}, nil
}

// Open opens path for reading.
func (fs *FS) Open(path string) (*File, error) { return fs.OpenFile(path, os.O_RDONLY, 0) }

// SyncDir fsyncs a directory (after creating, renaming or removing files
// in it).
func (fs *FS) SyncDir(dir string) error {
	d, err := fs.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// File is an open file of an FS. Its methods are those of *os.File, plus
// Datasync, Pwritev and Preallocate.
type File struct {
	f    BaseFile
	fs   *FS
	path string
}

// Name returns the path the file was opened with.
func (f *File) Name() string { return f.path }

// Fd returns the file descriptor.
func (f *File) Fd() uintptr { return f.f.Fd() }

// Stat returns the file's information.
func (f *File) Stat() (os.FileInfo, error) { return f.f.Stat() }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Truncate changes the file's size.
func (f *File) Truncate(size int64) error { return f.f.Truncate(size) }

// DropCache asks the kernel to drop the cached pages wholly inside
// [off, off+n) (n 0: to the end of the file) that are clean
// (posix_fadvise POSIX_FADV_DONTNEED): a hint, not a fault point; dirty
// pages are left (written back first by the kernel's own schedule).
func (f *File) DropCache(off, n int64) error { return f.f.DropCache(off, n) }

// StartWriteback asks the kernel to start writing back the dirty pages in
// [off, off+n) (sync_file_range SYNC_FILE_RANGE_WRITE): a hint that
// spreads the writeback of a long write, not a fault point; the final
// fsync makes the data durable.
func (f *File) StartWriteback(off, n int64) error { return f.f.StartWriteback(off, n) }

func (f *File) beforeWrite(size int) error {
	op := Op{Kind: OpWrite, Path: f.path, SizeBytes: int64(size)}
	if err := f.fs.MaybeError(op); err != nil {
		return f.fs.Observe(op, err)
	}
	return nil
}

func (f *File) afterWrite(err error) error {
	return f.fs.Observe(Op{Kind: OpWrite, Path: f.path}, err)
}

// Write writes b at the file offset.
func (f *File) Write(b []byte) (int, error) {
	if err := f.beforeWrite(len(b)); err != nil {
		return 0, &os.PathError{Op: "write", Path: f.path, Err: err}
	}
	n, err := f.f.Write(b)
	return n, f.afterWrite(err)
}

// WriteAt writes b at off.
func (f *File) WriteAt(b []byte, off int64) (int, error) {
	if err := f.beforeWrite(len(b)); err != nil {
		return 0, &os.PathError{Op: "write", Path: f.path, Err: err}
	}
	n, err := f.f.WriteAt(b, off)
	return n, f.afterWrite(err)
}

// maxIovecs bounds the iovecs of one pwritev call (Linux's IOV_MAX).
const maxIovecs = 1024

// Pwritev writes the concatenation of bufs at off with vectored positioned
// writes, looping over short writes and IOV_MAX. It may modify bufs.
func (f *File) Pwritev(bufs [][]byte, off int64) error {
	size := 0
	for _, b := range bufs {
		size += len(b)
	}
	if err := f.beforeWrite(size); err != nil {
		return err
	}
	return f.afterWrite(f.f.Pwritev(bufs, off))
}

func pwritev(fd int, bufs [][]byte, off int64) error {
	for len(bufs) > 0 {
		if len(bufs[0]) == 0 {
			bufs = bufs[1:]
			continue
		}
		n, err := unix.Pwritev(fd, bufs[:min(len(bufs), maxIovecs)], off)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 {
			if n < len(bufs[0]) {
				bufs[0] = bufs[0][n:]
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
	}
	return nil
}

// Preallocate reserves size bytes for the file (fallocate, mode 0: the
// file's size becomes at least size, the new bytes read as zeros).
func (f *File) Preallocate(size int64) error {
	op := Op{Kind: OpPreallocate, Path: f.path, SizeBytes: size}
	if err := f.fs.MaybeError(op); err != nil {
		return f.fs.Observe(op, err)
	}
	if err := f.f.Allocate(size); err != nil {
		return f.fs.Observe(op, err)
	}
	return nil
}

// Sync is fsync. A failure (real or injected) fails the FS for good.
func (f *File) Sync() error {
	op := Op{Kind: OpSync, Path: f.path}
	if err := f.fs.syncCheck(op); err != nil {
		return f.fs.Observe(op, err)
	}
	return f.fs.Observe(op, f.f.Sync())
}

// Datasync is fdatasync. A failure (real or injected) fails the FS for
// good.
func (f *File) Datasync() error {
	op := Op{Kind: OpSync, Path: f.path}
	if err := f.fs.syncCheck(op); err != nil {
		return f.fs.Observe(op, err)
	}
	if err := f.f.Datasync(); err != nil {
		return f.fs.Observe(op, err)
	}
	return nil
}

// ReadAt reads len(b) bytes at off, with the read faults of the FS.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	if err := f.fs.MaybeError(Op{Kind: OpRead, Path: f.path}); err != nil {
		return 0, err
	}
	n, err := f.f.ReadAt(b, off)
	if f.fs.corruptReads(f.path) {
		f.fs.corrupt(b[:n])
	}
	return n, err
}

// ReadAtUnfaulted reads like ReadAt without read faults: for reads whose
// failure the caller cannot survive (etcd raft panics on an error from
// raft.Storage.Entries) and for recovery.
func (f *File) ReadAtUnfaulted(b []byte, off int64) (int, error) { return f.f.ReadAt(b, off) }

// Read reads from the file offset, with the read faults of the FS.
func (f *File) Read(b []byte) (int, error) {
	if err := f.fs.MaybeError(Op{Kind: OpRead, Path: f.path}); err != nil {
		return 0, err
	}
	n, err := f.f.Read(b)
	if f.fs.corruptReads(f.path) {
		f.fs.corrupt(b[:n])
	}
	return n, err
}
