package nezha

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/zeebo/xxh3"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// Sorted runs: the Final Compacted Storage of the paper (docs/architecture.md
// section 4.3). GC writes the live values it relocates into a run, in key order, so
// that a SCAN reads them sequentially. File sorted/NNNNNN.run:
//
//	record*: checksum (4) | length of the rest (4) | raft index (8) | key length (4) | [expiry (8)] | key | value
//	block index: (uvarint len(key) | key | uvarint offset)* of the first record of every ~64 KiB
//	footer (40): block index offset (8) | block index length (8) | records (8) | magic (8) | crc32c of the previous 32 bytes and the block index (4) | zero (4)
//
// The record checksum covers everything after it; how, the magic says
// (runChecksum): runs written now ("NZRUN2") take the low 32 bits of the
// xxh3 hash of the value seeded with the xxh3 hash of the rest of the
// record (github.com/zeebo/xxh3), as RocksDB's XXH3 block checksums do;
// older runs ("NZRUN1") a CRC32C, which this machine computes at about 20
// GB/s against xxh3's 69 GB/s, a third of a 256 KiB GET's time (issue
// 18). All integers little endian.
// A value with a TTL has runKeyExpiryFlag set in its key length, and its
// expiry time (Unix nanoseconds) before the key; runs written before TTLs
// existed never set it.
// A value in a run is addressed by a systems.Location whose Segment has
// runFlag set (the rest is the run id), Offset/Length are the record's, and
// Index is the Raft index of the write that produced the value.
const (
	runHeaderSize = 20
	runFooterSize = 40
	runMagicV1    = 0x4e5a52554e310a00 // "NZRUN1\n\0": records checksummed with runCRC32C
	runMagic      = 0x4e5a52554e320a00 // "NZRUN2\n\0": records checksummed with runXXH3
	runBlockBytes = 64 << 10
	runFlag       = uint64(1) << 63
	// runKeyExpiryFlag, in a record's key length, marks a record with an
	// expiry time (keys are at most 64 KiB, so the bit is free).
	runKeyExpiryFlag = uint32(1) << 31
	runFileSuffix    = ".run"
	runWriteBufSize  = 1 << 20
	// runBytesPerSync: a run being written has its dirty pages pushed to
	// the disk every this many bytes (sync_file_range, asynchronous;
	// RocksDB's bytes_per_sync), so that the final fsync does not flush
	// the whole run in one burst in front of the Raft log's fsyncs.
	runBytesPerSync = 1 << 20
)

func isRun(loc systems.Location) bool { return loc.Segment&runFlag != 0 }

// runChecksum is how a run's records are checksummed, in two steps so that
// a reader can check a record read in two pieces: meta over the bytes
// between the checksum and the value (length, Raft index, key length,
// expiry, key), then value over the value.
type runChecksum uint8

const (
	// runXXH3: xxh3 of the value seeded with xxh3 of the meta, low 32
	// bits (runs written now).
	runXXH3 runChecksum = iota
	// runCRC32C: CRC32C of the meta and the value (runs of format 1).
	runCRC32C
)

// runChecksumOf returns the checksum of a run with footer magic m.
func runChecksumOf(m uint64) (runChecksum, bool) {
	switch m {
	case runMagic:
		return runXXH3, true
	case runMagicV1:
		return runCRC32C, true
	}
	return 0, false
}

// magic is the footer magic of runs checksummed with c.
func (c runChecksum) magic() uint64 {
	if c == runCRC32C {
		return runMagicV1
	}
	return runMagic
}

// meta is the first step: the state after the record's meta bytes.
func (c runChecksum) meta(meta []byte) uint64 {
	if c == runCRC32C {
		return uint64(crc32.Update(0, castagnoli, meta))
	}
	return xxh3.Hash(meta)
}

// value finishes the checksum begun by meta (its state) over the value.
func (c runChecksum) value(state uint64, value []byte) uint32 {
	if c == runCRC32C {
		return crc32.Update(uint32(state), castagnoli, value)
	}
	return uint32(xxh3.HashSeed(value, state))
}

func runName(id uint64) string { return fmt.Sprintf("%06d%s", id, runFileSuffix) }

// fileCreator creates a file for writing. Tests inject failures (a full
// disk) through it, as Pebble's vfs/errorfs does.
type fileCreator func(path string) (writableFile, error)

type writableFile interface {
	io.Writer
	Sync() error
	Close() error
}

func osCreate(path string) (writableFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}

// fsCreate returns the fileCreator of fs (injected faults, watched fsyncs).
func fsCreate(fs *vfs.FS) fileCreator {
	return func(path string) (writableFile, error) {
		return fs.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	}
}

// runWriter writes one run.
type runWriter struct {
	id       uint64
	path     string
	f        writableFile
	w        *bufio.Writer
	off      int64
	records  uint64
	index    []byte // block index
	nextMark int64  // offset at which the next block starts
	lastKey  []byte
	hdr      [runHeaderSize]byte
	exp      [8]byte
	meta     []byte // a record's bytes between checksum and value
	synced   int64  // bytes handed to sync_file_range
	// sum checksums the records (runXXH3; tests write format 1 runs).
	sum runChecksum
}

func newRunWriter(create fileCreator, dir string, id uint64) (*runWriter, error) {
	p := filepath.Join(dir, runName(id))
	f, err := create(p)
	if err != nil {
		return nil, fmt.Errorf("nezha: create run: %w", err)
	}
	return &runWriter{id: id, path: p, f: f, w: bufio.NewWriterSize(f, runWriteBufSize)}, nil
}

// Add appends a record; keys must ascend. expires is the value's expiry
// time (Unix nanoseconds; 0: none). It returns the value's Location.
func (rw *runWriter) Add(key, value []byte, raftIndex uint64, expires int64) (systems.Location, error) {
	if rw.records > 0 && bytes.Compare(key, rw.lastKey) <= 0 {
		return systems.Location{}, fmt.Errorf("nezha: run %d: key %s after %s", rw.id, keyString(key), keyString(rw.lastKey))
	}
	if rw.off >= rw.nextMark {
		rw.index = binary.AppendUvarint(rw.index, uint64(len(key)))
		rw.index = append(rw.index, key...)
		rw.index = binary.AppendUvarint(rw.index, uint64(rw.off))
		rw.nextMark = rw.off + runBlockBytes
	}
	h := rw.hdr[:]
	var exp []byte
	kl := uint32(len(key))
	if expires != 0 {
		exp = binary.LittleEndian.AppendUint64(rw.exp[:0], uint64(expires))
		kl |= runKeyExpiryFlag
	}
	binary.LittleEndian.PutUint32(h[4:], uint32(12+len(exp)+len(key)+len(value)))
	binary.LittleEndian.PutUint64(h[8:], raftIndex)
	binary.LittleEndian.PutUint32(h[16:], kl)
	rw.meta = append(append(append(rw.meta[:0], h[4:]...), exp...), key...)
	binary.LittleEndian.PutUint32(h[0:], rw.sum.value(rw.sum.meta(rw.meta), value))
	for _, b := range [][]byte{h, exp, key, value} {
		if _, err := rw.w.Write(b); err != nil {
			return systems.Location{}, fmt.Errorf("nezha: write run %s: %w", rw.path, err)
		}
	}
	n := runHeaderSize + len(exp) + len(key) + len(value)
	loc := systems.Location{Segment: runFlag | rw.id, Offset: rw.off, Length: uint32(n), Index: raftIndex, ExpiresUnixNano: expires}
	rw.off += int64(n)
	rw.startWriteback()
	rw.records++
	rw.lastKey = append(rw.lastKey[:0], key...)
	return loc, nil
}

// startWriteback starts the writeback of the bytes already written past
// the last runBytesPerSync mark (files without a descriptor: never).
func (rw *runWriter) startWriteback() {
	written := rw.off - int64(rw.w.Buffered())
	if written-rw.synced < runBytesPerSync {
		return
	}
	if f, ok := rw.f.(interface{ StartWriteback(off, n int64) error }); ok {
		// Best effort: the final fsync is what makes the run durable.
		_ = f.StartWriteback(rw.synced, written-rw.synced)
	}
	rw.synced = written
}

// Finish writes the block index and footer, fsyncs and closes the file,
// and returns its size.
func (rw *runWriter) Finish() (int64, error) {
	var footer [runFooterSize]byte
	binary.LittleEndian.PutUint64(footer[0:], uint64(rw.off))
	binary.LittleEndian.PutUint64(footer[8:], uint64(len(rw.index)))
	binary.LittleEndian.PutUint64(footer[16:], rw.records)
	binary.LittleEndian.PutUint64(footer[24:], rw.sum.magic())
	crc := crc32.Update(crc32.Update(0, castagnoli, footer[:32]), castagnoli, rw.index)
	binary.LittleEndian.PutUint32(footer[32:], crc)
	if _, err := rw.w.Write(rw.index); err != nil {
		return 0, fmt.Errorf("nezha: write run %s: %w", rw.path, err)
	}
	if _, err := rw.w.Write(footer[:]); err != nil {
		return 0, fmt.Errorf("nezha: write run %s: %w", rw.path, err)
	}
	if err := rw.w.Flush(); err != nil {
		return 0, fmt.Errorf("nezha: write run %s: %w", rw.path, err)
	}
	if err := rw.f.Sync(); err != nil {
		return 0, fmt.Errorf("nezha: fsync run %s: %w", rw.path, err)
	}
	if err := rw.f.Close(); err != nil {
		return 0, fmt.Errorf("nezha: close run %s: %w", rw.path, err)
	}
	return rw.off + int64(len(rw.index)) + runFooterSize, nil
}

// Abort closes and deletes (from fsys) a run that will not be finished.
func (rw *runWriter) Abort(fsys vfs.FileSystem) {
	rw.f.Close()
	fsys.Remove(rw.path)
}

// run is one finished, open run file. Readers hold mu.RLock while reading;
// removal takes mu.Lock.
type run struct {
	id        uint64
	path      string
	f         *vfs.File
	size      int64
	dataBytes int64 // bytes of records (the block index starts here)
	records   uint64
	blocks    []runBlock
	sum       runChecksum // of the records, from the magic
	// tier of the run (its size class; see tierFor), from the manifest.
	tier int

	mu      sync.RWMutex
	removed bool
	// mapping for value reads (Config.MmapReads), unmapped by close.
	mapping vfs.LazyMapping
}

type runBlock struct {
	firstKey []byte
	offset   int64
}

// openRun opens a run and checks its footer and block index.
func openRun(fs *vfs.FS, dir string, id uint64) (*run, error) {
	p := filepath.Join(dir, runName(id))
	f, err := fs.Open(p)
	if err != nil {
		return nil, fmt.Errorf("nezha: open run: %w", err)
	}
	r, err := readRunFooter(f, id, p)
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// readRunFooter reads the footer and block index without injected read
// faults (they would keep the store from opening; value reads take them).
func readRunFooter(f *vfs.File, id uint64, p string) (*run, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	bad := func(why string) error {
		return fmt.Errorf("nezha: %w: run %s: %s", systems.ErrCorrupt, p, why)
	}
	if size < runFooterSize {
		return nil, bad("shorter than its footer")
	}
	var footer [runFooterSize]byte
	if _, err := f.ReadAtUnfaulted(footer[:], size-runFooterSize); err != nil {
		return nil, err
	}
	sum, ok := runChecksumOf(binary.LittleEndian.Uint64(footer[24:]))
	if !ok {
		return nil, bad("bad magic")
	}
	idxOff := int64(binary.LittleEndian.Uint64(footer[0:]))
	idxLen := int64(binary.LittleEndian.Uint64(footer[8:]))
	if idxOff < 0 || idxLen < 0 || idxOff+idxLen != size-runFooterSize {
		return nil, bad("footer offsets do not match the file size")
	}
	index := make([]byte, idxLen)
	if _, err := f.ReadAtUnfaulted(index, idxOff); err != nil {
		return nil, err
	}
	crc := crc32.Update(crc32.Update(0, castagnoli, footer[:32]), castagnoli, index)
	if crc != binary.LittleEndian.Uint32(footer[32:]) {
		return nil, bad("footer CRC mismatch")
	}
	r := &run{id: id, path: p, f: f, size: size, dataBytes: idxOff, records: binary.LittleEndian.Uint64(footer[16:]), sum: sum}
	for rest := index; len(rest) > 0; {
		kl, n := binary.Uvarint(rest)
		if n <= 0 || kl > uint64(len(rest)-n) {
			return nil, bad("bad block index")
		}
		key := rest[n : n+int(kl)]
		rest = rest[n+int(kl):]
		off, m := binary.Uvarint(rest)
		if m <= 0 {
			return nil, bad("bad block index")
		}
		rest = rest[m:]
		r.blocks = append(r.blocks, runBlock{firstKey: key, offset: int64(off)})
	}
	return r, nil
}

// decodeRunRecord checks one record (header and body) read at off.
func decodeRunRecord(r *run, rec []byte, off int64) (key, value []byte, raftIndex uint64, expires int64, err error) {
	keyAt, valueAt, raftIndex, expires, err := decodeRunHeader(r, rec, len(rec), off)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if r.sum.value(r.sum.meta(rec[4:valueAt]), rec[valueAt:]) != binary.LittleEndian.Uint32(rec[0:]) {
		return nil, nil, 0, 0, runCorrupt(r, off, "checksum mismatch")
	}
	return rec[keyAt:valueAt], rec[valueAt:], raftIndex, expires, nil
}

// runHeadBytes is how many bytes of a record of recBytes bytes whose key
// has keyBytes bytes decodeRunHeader needs (with an expiry time or not).
func runHeadBytes(recBytes, keyBytes int) int { return min(recBytes, runHeaderSize+8+keyBytes) }

// decodeRunHeader checks the header of a record of recBytes bytes read at
// off from its first bytes head (at least the header and the expiry time,
// if any) and returns where its key and its value start. It does not
// check the checksum, which covers the whole record.
func decodeRunHeader(r *run, head []byte, recBytes int, off int64) (keyAt, valueAt int, raftIndex uint64, expires int64, err error) {
	if recBytes < runHeaderSize || len(head) < runHeaderSize {
		return 0, 0, 0, 0, runCorrupt(r, off, "short record")
	}
	if n := binary.LittleEndian.Uint32(head[4:]); int(n) != recBytes-8 {
		return 0, 0, 0, 0, runCorrupt(r, off, fmt.Sprintf("record length %d does not match %d bytes", n, recBytes-8))
	}
	kl := binary.LittleEndian.Uint32(head[16:])
	keyAt = runHeaderSize
	if kl&runKeyExpiryFlag != 0 {
		kl &^= runKeyExpiryFlag
		if len(head) < keyAt+8 {
			return 0, 0, 0, 0, runCorrupt(r, off, "expiry past the record")
		}
		expires = int64(binary.LittleEndian.Uint64(head[keyAt:]))
		keyAt += 8
	}
	if int(kl) > recBytes-keyAt {
		return 0, 0, 0, 0, runCorrupt(r, off, "key length past the record")
	}
	return keyAt, keyAt + int(kl), binary.LittleEndian.Uint64(head[8:]), expires, nil
}

// runCorrupt is the error of a bad record of run r at off.
func runCorrupt(r *run, off int64, why string) error {
	return fmt.Errorf("nezha: %w: run %s at offset %d: %s", systems.ErrCorrupt, r.path, off, why)
}

// checkRunKey reports a record at off of run r that holds key k of Raft
// index idx where a location said key of index want.
func checkRunKey(r *run, off int64, k []byte, idx uint64, key []byte, want uint64) error {
	if !bytes.Equal(k, key) || idx != want {
		return fmt.Errorf("nezha: %w: run %s at offset %d holds key %s index %d, want key %s index %d",
			systems.ErrCorrupt, r.path, off, keyString(k), idx, keyString(key), want)
	}
	return nil
}

// readNew returns the bytes [off, off+n) of the run's records: copied out
// of the run's mapping if mapped, else read into a new buffer.
func (r *run) readNew(off int64, n int, mapped bool) ([]byte, error) {
	return r.readAppend(nil, off, n, mapped)
}

// readAppend appends the bytes [off, off+n) of the run's records to dst:
// copied out of the run's mapping if mapped, else read with one
// positioned read.
func (r *run) readAppend(dst []byte, off int64, n int, mapped bool) ([]byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.removed {
		return nil, fmt.Errorf("nezha: %w: run %s", systems.ErrSegmentRemoved, r.path)
	}
	if off < 0 || n < 0 || off+int64(n) > r.dataBytes {
		return nil, fmt.Errorf("nezha: %w: run %s: %d bytes at offset %d point past its records (%d bytes)",
			systems.ErrCorrupt, r.path, n, off, r.dataBytes)
	}
	if mapped {
		if m := r.mapping.Get(r.f, r.dataBytes); m != nil {
			out, err := m.AppendAt(dst, off, n)
			if err != nil {
				return nil, fmt.Errorf("nezha: read run %s at %d: %w", r.path, off, err)
			}
			return out, nil
		}
	}
	out := slices.Grow(dst, n)[:len(dst)+n]
	if _, err := r.f.ReadAt(out[len(dst):], off); err != nil {
		return nil, fmt.Errorf("nezha: read run %s at %d: %w", r.path, off, err)
	}
	return out, nil
}

// iterate calls fn for every record from the first block at or before
// start, in key order, until fn returns false.
func (r *run) iterate(start []byte, fn func(key, value []byte, loc systems.Location) (bool, error)) error {
	from := int64(0)
	if len(start) > 0 {
		i := sort.Search(len(r.blocks), func(i int) bool { return bytes.Compare(r.blocks[i].firstKey, start) > 0 })
		if i > 0 {
			from = r.blocks[i-1].offset
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.removed {
		return fmt.Errorf("nezha: %w: run %s", systems.ErrSegmentRemoved, r.path)
	}
	br := bufio.NewReaderSize(io.NewSectionReader(r.f, from, r.dataBytes-from), runWriteBufSize)
	off := from
	var hdr [runHeaderSize]byte
	for off < r.dataBytes {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return fmt.Errorf("nezha: %w: run %s at offset %d: %v", systems.ErrCorrupt, r.path, off, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[4:])) + 8
		if n < runHeaderSize || off+n > r.dataBytes {
			return fmt.Errorf("nezha: %w: run %s at offset %d: bad record length", systems.ErrCorrupt, r.path, off)
		}
		rec := make([]byte, n)
		copy(rec, hdr[:])
		if _, err := io.ReadFull(br, rec[runHeaderSize:]); err != nil {
			return fmt.Errorf("nezha: %w: run %s at offset %d: %v", systems.ErrCorrupt, r.path, off, err)
		}
		key, value, idx, exp, err := decodeRunRecord(r, rec, off)
		if err != nil {
			return err
		}
		if bytes.Compare(key, start) >= 0 {
			more, err := fn(key, value, systems.Location{Segment: runFlag | r.id, Offset: off, Length: uint32(n), Index: idx, ExpiresUnixNano: exp})
			if err != nil || !more {
				return err
			}
		}
		off += n
	}
	return nil
}

func (r *run) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.removed {
		r.removed = true
		r.mapping.Close()
		r.f.Close()
	}
}

// runSet holds the open runs of a store.
type runSet struct {
	fsys vfs.FileSystem
	dir  string
	mu   sync.RWMutex
	runs map[uint64]*run
	mmap bool
}

// newRunSet returns an empty set of the runs in dir of fsys; mmap: value
// reads copy out of each run's mapping (Config.MmapReads).
func newRunSet(fsys vfs.FileSystem, dir string, mmap bool) *runSet {
	return &runSet{fsys: fsys, dir: dir, runs: map[uint64]*run{}, mmap: mmap}
}

func (rs *runSet) get(id uint64) *run {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	return rs.runs[id]
}

func (rs *runSet) add(r *run) {
	rs.mu.Lock()
	rs.runs[r.id] = r
	rs.mu.Unlock()
}

// ids returns the open run ids, ascending.
func (rs *runSet) ids() []uint64 {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	out := make([]uint64, 0, len(rs.runs))
	for id := range rs.runs {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// remove closes a run (after in-flight reads) and deletes its file.
func (rs *runSet) remove(id uint64) error {
	rs.mu.Lock()
	r := rs.runs[id]
	delete(rs.runs, id)
	rs.mu.Unlock()
	if r == nil {
		return nil
	}
	r.close()
	if err := rs.fsys.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("nezha: remove run: %w", err)
	}
	return nil
}

func (rs *runSet) closeAll() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, r := range rs.runs {
		r.close()
	}
}

// readValue reads the value of key at a run location, checking the record.
func (rs *runSet) readValue(key []byte, loc systems.Location) ([]byte, error) {
	r, err := rs.open(loc)
	if err != nil {
		return nil, err
	}
	rec, err := r.readNew(loc.Offset, int(loc.Length), rs.mmap)
	if err != nil {
		return nil, err
	}
	k, v, idx, _, err := decodeRunRecord(r, rec, loc.Offset)
	if err != nil {
		return nil, err
	}
	if err := checkRunKey(r, loc.Offset, k, idx, key, loc.Index); err != nil {
		return nil, err
	}
	return v, nil
}

// appendValue appends the value of key at a run location to dst, checking
// the record as readValue does, without a buffer of its own: the record's
// head is read into dst's spare room and checked there (and its meta
// checksummed), the value then appended after it and checksummed.
func (rs *runSet) appendValue(dst, key []byte, loc systems.Location) ([]byte, error) {
	r, err := rs.open(loc)
	if err != nil {
		return nil, err
	}
	n := int(loc.Length)
	headBytes := runHeadBytes(n, len(key))
	base := len(dst)
	out, err := r.readAppend(dst, loc.Offset, headBytes, rs.mmap)
	if err != nil {
		return nil, err
	}
	head := out[base:]
	keyAt, valueAt, idx, _, err := decodeRunHeader(r, head, n, loc.Offset)
	if err != nil {
		return nil, err
	}
	if valueAt > len(head) { // a longer key than key: not its record
		return nil, checkRunKey(r, loc.Offset, head[keyAt:], idx, key, loc.Index)
	}
	if err := checkRunKey(r, loc.Offset, head[keyAt:valueAt], idx, key, loc.Index); err != nil {
		return nil, err
	}
	state, want := r.sum.meta(head[4:valueAt]), binary.LittleEndian.Uint32(head[0:])
	// The value's first bytes, if the head read reached into it, move to
	// the front, and the rest of the value follows them.
	out = out[:base+copy(out[base:], head[valueAt:])]
	if out, err = r.readAppend(out, loc.Offset+int64(headBytes), n-headBytes, rs.mmap); err != nil {
		return nil, err
	}
	if r.sum.value(state, out[base:]) != want {
		return nil, runCorrupt(r, loc.Offset, "checksum mismatch")
	}
	return out, nil
}

// open returns the run of a run location, or an error wrapping
// systems.ErrSegmentRemoved.
func (rs *runSet) open(loc systems.Location) (*run, error) {
	r := rs.get(loc.Segment &^ runFlag)
	if r == nil {
		return nil, fmt.Errorf("nezha: %w: run %s of %s is not open", systems.ErrSegmentRemoved, runName(loc.Segment&^runFlag), locString(loc))
	}
	return r, nil
}

// listRunFiles returns the ids of the *.run files in dir of fsys.
func listRunFiles(fsys vfs.FileSystem, dir string) ([]uint64, error) {
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("nezha: %w", err)
	}
	var ids []uint64
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, runFileSuffix) {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, runFileSuffix), 10, 64)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// locString renders a location, naming runs as runs.
func locString(loc systems.Location) string {
	if isRun(loc) {
		return fmt.Sprintf("run %d offset %d length %d index %d", loc.Segment&^runFlag, loc.Offset, loc.Length, loc.Index)
	}
	return loc.String()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// forValues calls fn with the value of each record of one run at locs
// (ascending offsets expected, as a scan produces them), in order, until
// fn fails, checking each record against its key. Adjacent records are
// read together, one positioned read (or mapped copy) per span of up to
// about spanBytes. With reuse every span is read into the same buffer, so
// a value is valid only during fn; without, each span gets a new one and
// the values are fn's to keep.
func (rs *runSet) forValues(keys [][]byte, locs []systems.Location, spanBytes int64, reuse bool, fn func(i int, value []byte) error) error {
	var buf []byte
	for start := 0; start < len(locs); {
		end := start + 1
		size := int64(locs[start].Length)
		for end < len(locs) && locs[end].Segment == locs[start].Segment &&
			locs[end].Offset == locs[end-1].Offset+int64(locs[end-1].Length) && size < spanBytes {
			size += int64(locs[end].Length)
			end++
		}
		r, err := rs.open(locs[start])
		if err != nil {
			return err
		}
		if !reuse {
			buf = nil
		}
		if buf, err = r.readAppend(buf[:0], locs[start].Offset, int(size), rs.mmap); err != nil {
			return err
		}
		for i := start; i < end; i++ {
			rel := locs[i].Offset - locs[start].Offset
			k, v, idx, _, err := decodeRunRecord(r, buf[rel:rel+int64(locs[i].Length)], locs[i].Offset)
			if err != nil {
				return err
			}
			if err := checkRunKey(r, locs[i].Offset, k, idx, keys[i], locs[i].Index); err != nil {
				return err
			}
			if err := fn(i, v); err != nil {
				return err
			}
		}
		start = end
	}
	return nil
}
