package vfs

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrMappingFault is wrapped by the error of a read from a Mapping whose
// pages the kernel could not provide: an I/O error while paging in, or a
// file truncated under the mapping (SIGBUS), turned into an error instead
// of a crash (runtime/debug.SetPanicOnFault).
var ErrMappingFault = errors.New("fault reading a memory-mapped file")

// Mapping is a read-only, shared memory mapping of the first bytes of a
// File. Reads copy out of it with no system call, and take the read faults
// of the File's FS as File.ReadAt does (EIO, corrupt bytes), so that fault
// injection sees mapped and positioned reads alike.
//
// The mapped bytes must not change while mapped: callers map only files, or
// prefixes of files, that are no longer written or truncated (a sealed log
// segment, a sorted run). A Mapping is safe for concurrent reads; Close
// must not run concurrently with a read (callers hold a lock that their
// close path takes exclusively).
type Mapping struct {
	f *File
	b []byte
}

// Map maps the first size bytes of f (size > 0) read-only. It reads
// nothing: pages come in as reads touch them (no MAP_POPULATE, which would
// read the whole file, a run of gigabytes, inside the first read).
func (f *File) Map(size int64) (*Mapping, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("vfs: map %s: bad size %d", f.path, size)
	}
	b, err := f.f.Map(int(size))
	if err != nil {
		return nil, fmt.Errorf("vfs: map %d bytes of %s: %w", size, f.path, err)
	}
	return &Mapping{f: f, b: b}, nil
}

// Len is the number of mapped bytes.
func (m *Mapping) Len() int64 { return int64(len(m.b)) }

// AppendAt appends the n bytes at off to dst and returns the result. The
// bytes must lie inside the mapping. Unlike a read into a new buffer, the
// append does not zero the bytes it is about to overwrite (a 256 KiB
// make([]byte) costs a clear of 256 KiB before the copy).
func (m *Mapping) AppendAt(dst []byte, off int64, n int) (out []byte, err error) {
	if off < 0 || n < 0 || off+int64(n) > int64(len(m.b)) {
		return dst, fmt.Errorf("vfs: read of %d bytes at %d of %s is outside its mapping of %d bytes", n, off, m.f.path, len(m.b))
	}
	if err := m.f.fs.MaybeError(Op{Kind: OpRead, Path: m.f.path}); err != nil {
		return dst, err
	}
	start := len(dst)
	out, err = appendFaultSafe(dst, m.b[off:off+int64(n)])
	if err != nil {
		return dst, fmt.Errorf("vfs: read %s at %d: %w", m.f.path, off, err)
	}
	if m.f.fs.corruptReads(m.f.path) {
		m.f.fs.corrupt(out[start:])
	}
	return out, nil
}

// appendFaultSafe appends src to dst, turning a memory fault while reading
// src into ErrMappingFault.
func appendFaultSafe(dst, src []byte) (out []byte, err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			out, err = dst, fmt.Errorf("%w: %v", ErrMappingFault, r)
		}
	}()
	return append(dst, src...), nil
}

// Close unmaps the mapping. The File stays open.
func (m *Mapping) Close() error {
	if m.b == nil {
		return nil
	}
	err := unix.Munmap(m.b)
	m.b = nil
	return err
}

// LazyMapping maps a File on first use, for files that are read often and
// no longer change: the first Get maps the size bytes it is given; later
// Gets return that mapping. If mapping fails (no address space, a file
// system without mmap), Get returns nil from then on and the caller reads
// with File.ReadAt. The zero value is ready; it is safe for concurrent use.
type LazyMapping struct {
	mu     sync.Mutex
	m      atomic.Pointer[Mapping]
	failed bool
}

// Get returns the mapping of the first size bytes of f, made by the first
// call, or nil (size <= 0, or mapping failed).
func (l *LazyMapping) Get(f *File, size int64) *Mapping {
	if m := l.m.Load(); m != nil {
		return m
	}
	if size <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.m.Load(); m != nil || l.failed {
		return m
	}
	m, err := f.Map(size)
	if err != nil {
		l.failed = true
		return nil
	}
	l.m.Store(m)
	return m
}

// Close unmaps the mapping, if any; a later Get maps again. Callers make
// sure no read of the old mapping is in flight.
func (l *LazyMapping) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.m.Swap(nil); m != nil {
		return m.Close()
	}
	return nil
}
