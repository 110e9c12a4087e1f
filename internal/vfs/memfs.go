package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is a FileSystem in memory that knows what a crash keeps: for each
// file the bytes of its last Sync or Datasync, for each directory the
// entries of its last sync (creations, renames and removals are durable
// only once their directory is synced, as POSIX has it and as ext4 does
// not promise otherwise). CrashClone returns the file system a machine
// would find after losing power now: the synced state, and with
// CrashOptions.TornTailPercent some unsynced bytes appended to a file (a
// torn write at its end). The idea is Pebble's strict MemFS
// (vfs.NewCrashableMem); this one is written for this package's
// FileSystem.
//
// Paths are absolute, cleaned by filepath.Clean; "/" always exists and is
// durable. O_DIRECT is refused with EINVAL (as tmpfs does: the Raft log
// then writes through the page cache), and memory mapping with
// errors.ErrUnsupported (readers fall back to positioned reads). Safe for
// concurrent use.
type MemFS struct {
	mu    sync.Mutex
	root  *memNode
	temp  uint64 // the suffix of the next CreateTemp name
	locks map[string]bool
}

// memNode is a file or a directory.
type memNode struct {
	dir bool
	// A file: its bytes now, and at its last sync.
	data, synced []byte
	// A directory: its entries now, and at its last sync.
	children, syncedChildren map[string]*memNode
}

func newMemDir() *memNode {
	return &memNode{dir: true, children: map[string]*memNode{}, syncedChildren: map[string]*memNode{}}
}

// NewMem returns an empty MemFS.
func NewMem() *MemFS { return &MemFS{root: newMemDir(), locks: map[string]bool{}} }

// CrashOptions says what of the unsynced state a crash keeps.
type CrashOptions struct {
	// TornTailPercent: the unsynced bytes appended to a file since its
	// last sync survive, cut at a random length, with this probability
	// (0..100); else the file holds its synced bytes. Unsynced directory
	// entries never survive. Needs RNG when positive.
	TornTailPercent int
	RNG             *rand.Rand
}

// CrashClone returns the file system after a crash now (see MemFS): m
// itself goes on unchanged, so that a process still writing to it (the
// crashed node, being stopped) cannot touch the clone. Locks are not
// cloned: a crash ends the process that held them.
func (m *MemFS) CrashClone(o CrashOptions) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := NewMem()
	c.temp = m.temp
	c.root = m.root.crashClone(o, map[*memNode]*memNode{})
	return c
}

// crashClone copies the durable state of n (clones maps nodes already
// copied: a file renamed since the last sync of one of two directories
// may be named by both).
func (n *memNode) crashClone(o CrashOptions, clones map[*memNode]*memNode) *memNode {
	if c, ok := clones[n]; ok {
		return c
	}
	c := &memNode{dir: n.dir}
	clones[n] = c
	if n.dir {
		c.children = map[string]*memNode{}
		names := make([]string, 0, len(n.syncedChildren))
		for name := range n.syncedChildren {
			names = append(names, name)
		}
		sort.Strings(names) // the RNG is drawn in a fixed order
		for _, name := range names {
			c.children[name] = n.syncedChildren[name].crashClone(o, clones)
		}
		c.syncedChildren = cloneChildren(c.children)
		return c
	}
	c.data = slices.Clone(n.synced)
	if o.TornTailPercent > 0 && len(n.data) > len(n.synced) && bytes.Equal(n.data[:len(n.synced)], n.synced) &&
		o.RNG.IntN(100) < o.TornTailPercent {
		c.data = append(c.data, n.data[len(n.synced):len(n.synced)+1+o.RNG.IntN(len(n.data)-len(n.synced))]...)
	}
	if c.data == nil {
		c.data = []byte{}
	}
	c.synced = slices.Clone(c.data)
	return c
}

func cloneChildren(m map[string]*memNode) map[string]*memNode {
	out := make(map[string]*memNode, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// split returns the cleaned components of an absolute path.
func split(name string) ([]string, error) {
	if !filepath.IsAbs(name) {
		return nil, fmt.Errorf("memfs: %q is not an absolute path", name)
	}
	clean := filepath.Clean(name)
	if clean == "/" {
		return nil, nil
	}
	return strings.Split(clean[1:], "/"), nil
}

// lookup returns the node at name and its parent directory (nil for the
// root); mu held.
func (m *MemFS) lookup(op, name string) (node, parent *memNode, base string, err error) {
	parts, err := split(name)
	if err != nil {
		return nil, nil, "", &os.PathError{Op: op, Path: name, Err: err}
	}
	node = m.root
	for i, p := range parts {
		if !node.dir {
			return nil, nil, "", &os.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
		}
		parent, base = node, p
		node = node.children[p]
		if node == nil {
			if i < len(parts)-1 {
				return nil, nil, "", &os.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
			}
			return nil, parent, base, nil
		}
	}
	return node, parent, base, nil
}

// OpenFile implements FileSystem.
func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (BaseFile, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.openLocked(name, flag)
}

func (m *MemFS) openLocked(name string, flag int) (BaseFile, error) {
	if flag&syscall.O_DIRECT != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EINVAL}
	}
	node, parent, base, err := m.lookup("open", name)
	if err != nil {
		return nil, err
	}
	switch {
	case node == nil && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case node == nil && parent == nil:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case node == nil:
		node = &memNode{data: []byte{}}
		parent.children[base] = node
	case flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case node.dir && flag&(os.O_WRONLY|os.O_RDWR) != 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	if flag&os.O_TRUNC != 0 && !node.dir {
		node.data = node.data[:0:0]
	}
	return &memFile{fs: m, n: node, name: name, flag: flag}, nil
}

// CreateTemp implements FileSystem; the names it makes are a counter, so
// that a seeded test makes the same ones.
func (m *MemFS) CreateTemp(dir, pattern string) (BaseFile, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix, suffix := pattern, ""
	if i := strings.LastIndex(pattern, "*"); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	for {
		m.temp++
		f, err := m.openLocked(filepath.Join(dir, prefix+strconv.FormatUint(m.temp, 10)+suffix), os.O_RDWR|os.O_CREATE|os.O_EXCL)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// Remove implements FileSystem.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	node, parent, base, err := m.lookup("remove", name)
	switch {
	case err != nil:
		return err
	case node == nil:
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	case parent == nil:
		return &os.PathError{Op: "remove", Path: name, Err: syscall.EBUSY}
	case node.dir && len(node.children) > 0:
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	delete(parent.children, base)
	return nil
}

// RemoveAll implements FileSystem.
func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	node, parent, base, err := m.lookup("removeall", name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if node != nil && parent != nil {
		delete(parent.children, base)
	}
	return nil
}

// Rename implements FileSystem: newname, if it exists, is replaced.
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	node, oldParent, oldBase, err := m.lookup("rename", oldname)
	if err != nil {
		return err
	}
	if node == nil || oldParent == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	target, newParent, newBase, err := m.lookup("rename", newname)
	if err != nil {
		return err
	}
	if newParent == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EBUSY}
	}
	if target != nil && target.dir != node.dir {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EISDIR}
	}
	delete(oldParent.children, oldBase)
	newParent.children[newBase] = node
	return nil
}

// MkdirAll implements FileSystem.
func (m *MemFS) MkdirAll(name string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts, err := split(name)
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: name, Err: err}
	}
	node := m.root
	for _, p := range parts {
		next := node.children[p]
		if next == nil {
			next = newMemDir()
			node.children[p] = next
		}
		if !next.dir {
			return &os.PathError{Op: "mkdir", Path: name, Err: syscall.ENOTDIR}
		}
		node = next
	}
	return nil
}

// ReadDir implements FileSystem.
func (m *MemFS) ReadDir(name string) ([]os.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	node, _, _, err := m.lookup("readdir", name)
	switch {
	case err != nil:
		return nil, err
	case node == nil:
		return nil, &os.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	case !node.dir:
		return nil, &os.PathError{Op: "readdir", Path: name, Err: syscall.ENOTDIR}
	}
	out := make([]os.DirEntry, 0, len(node.children))
	for base, c := range node.children {
		out = append(out, fs.FileInfoToDirEntry(memInfo{name: base, size: int64(len(c.data)), dir: c.dir}))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// Stat implements FileSystem.
func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	node, _, _, err := m.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	if node == nil {
		return nil, &os.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: filepath.Base(name), size: int64(len(node.data)), dir: node.dir}, nil
}

// Lock implements FileSystem: the lock is held until unlock, or until the
// MemFS is crash-cloned (the clone holds no lock).
func (m *MemFS) Lock(name string) (func(), error) {
	f, err := m.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, fmt.Errorf("%s: %w", name, ErrLocked)
	}
	m.locks[name] = true
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.locks, name)
	}, nil
}

// memInfo is the os.FileInfo of a MemFS file or directory.
type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() os.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }

// memFile is an open MemFS file: its node (which survives its removal
// while open, as an unlinked file does) and its offset.
type memFile struct {
	fs     *MemFS
	n      *memNode
	name   string
	flag   int
	off    int64
	closed bool
}

func (f *memFile) check(op string, write bool) error {
	switch {
	case f.closed:
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	case write && f.flag&(os.O_WRONLY|os.O_RDWR) == 0:
		return &os.PathError{Op: op, Path: f.name, Err: syscall.EBADF}
	case !write && f.flag&os.O_WRONLY != 0:
		return &os.PathError{Op: op, Path: f.name, Err: syscall.EBADF}
	case f.n.dir:
		return &os.PathError{Op: op, Path: f.name, Err: syscall.EISDIR}
	}
	return nil
}

func (f *memFile) Name() string { return f.name }
func (f *memFile) Fd() uintptr  { return ^uintptr(0) }

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.closed = true
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return nil, &os.PathError{Op: "stat", Path: f.name, Err: os.ErrClosed}
	}
	return memInfo{name: filepath.Base(f.name), size: int64(len(f.n.data)), dir: f.n.dir}, nil
}

func (f *memFile) readAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: syscall.EINVAL}
	}
	if off >= int64(len(f.n.data)) {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(b, f.n.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Read(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	n, err := f.readAt(b, f.off)
	f.off += int64(n)
	if n > 0 && errors.Is(err, io.EOF) {
		err = nil // io.Reader: EOF on the next call
	}
	return n, err
}

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	return f.readAt(b, off)
}

// writeAt writes b at off, growing the file (with zeros up to off).
func (f *memFile) writeAt(b []byte, off int64) {
	if end := off + int64(len(b)); end > int64(len(f.n.data)) {
		f.n.data = append(f.n.data, make([]byte, end-int64(len(f.n.data)))...)
	}
	copy(f.n.data[off:], b)
}

func (f *memFile) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		f.off = int64(len(f.n.data))
	}
	f.writeAt(b, f.off)
	f.off += int64(len(b))
	return len(b), nil
}

func (f *memFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.EINVAL}
	}
	f.writeAt(b, off)
	return len(b), nil
}

func (f *memFile) Pwritev(bufs [][]byte, off int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("pwritev", true); err != nil {
		return err
	}
	for _, b := range bufs {
		f.writeAt(b, off)
		off += int64(len(b))
	}
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &os.PathError{Op: "truncate", Path: f.name, Err: syscall.EINVAL}
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = slices.Clip(f.n.data[:size])
	} else {
		f.writeAt(nil, size)
	}
	return nil
}

func (f *memFile) Allocate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("fallocate", true); err != nil {
		return err
	}
	if size > int64(len(f.n.data)) {
		f.writeAt(nil, size)
	}
	return nil
}

// Sync makes the file's bytes durable, or a directory's entries.
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "sync", Path: f.name, Err: os.ErrClosed}
	}
	if f.n.dir {
		f.n.syncedChildren = cloneChildren(f.n.children)
		return nil
	}
	f.n.synced = append(f.n.synced[:0:0], f.n.data...)
	return nil
}

func (f *memFile) Datasync() error { return f.Sync() }

func (f *memFile) DropCache(off, n int64) error      { return nil }
func (f *memFile) StartWriteback(off, n int64) error { return nil }

func (f *memFile) Map(int) ([]byte, error) {
	return nil, fmt.Errorf("memfs: map %s: %w", f.name, errors.ErrUnsupported)
}
