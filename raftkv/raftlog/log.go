// Package raftlog is the persistent Raft log shared by every system: a
// directory of append-only segment files (000001.log, 000002.log, ...) of
// CRC-checked records holding Raft entries, HardState and compaction markers.
// It implements raft.Storage (go.etcd.io/raft/v3) keeping only a small
// per-entry location in memory, plus a bounded cache of the most recently
// appended entries (Options.EntryCacheBytes): committed entries and the
// MsgApps of followers that trail by little are served from it; older entries
// are read back with positioned reads.
//
// For KV-separated systems (nezha) this log is also the value store: a value
// is persisted once, in its entry's record, and the state machine keeps only
// its systems.Location (ReadCommand reads it back).
//
// Durability: Append writes the records of a group of appends (entries and
// HardState) with one vectored write (large payloads are not copied into a
// buffer) and, if asked, one fdatasync. The node's pipelined write path
// appends without the fdatasync and calls Flush from another goroutine, so
// that the next group is written while the previous one is flushed.
// Options.Sync=false skips every fsync; it exists for comparison only.
//
// Recovery: Open scans every segment and checks every CRC. A bad or short
// record at the end of the last segment is a torn write and is truncated with
// a warning; a bad record anywhere else is corruption and Open fails with an
// error naming the file and offset.
package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// DefaultSegmentSizeBytes is the default of Options.SegmentSizeBytes (64 MiB).
const DefaultSegmentSizeBytes = 64 << 20

// DefaultEntryCacheBytes is the default of Options.EntryCacheBytes (32 MiB:
// at 256 KiB values, 128 entries, several Readies of commit lag).
const DefaultEntryCacheBytes = 32 << 20

// DefaultPageCacheBytes is the default of Options.PageCacheBytes (64 MiB).
const DefaultPageCacheBytes = 64 << 20

// pageBytes is the page size dropSynced aligns to (4 KiB on Linux/amd64;
// a larger page only leaves more of a boundary page cached).
const pageBytes = 4096

// Options configures a Log.
type Options struct {
	// Dir holds the segment files. Created if missing.
	Dir string
	// SegmentSizeBytes: a segment is rolled once it holds at least this many
	// bytes. A record never spans two segments. Default 64 MiB.
	SegmentSizeBytes int64
	// Sync: fdatasync once per Append that must be durable. Default true
	// (set by DefaultOptions); false is for comparison only.
	Sync bool
	// Bootstrap is the membership written into a new, empty log. It is
	// ignored when the log already exists.
	Bootstrap raftpb.ConfState
	// EntryCacheBytes bounds the payload bytes of the most recently appended
	// entries that Entries serves from memory instead of re-reading their
	// records (committed entries are usually still there when raft hands
	// them to apply). 0 disables the cache. Default 32 MiB
	// (DefaultEntryCacheBytes).
	EntryCacheBytes int64
	// PageCacheBytes bounds how much of the log's newest data the kernel
	// keeps in its page cache: after each fdatasync, synced data older
	// than the newest PageCacheBytes is dropped from it (vfs.File.DropCache,
	// posix_fadvise DONTNEED). A log is written once and read back rarely
	// (a follower far behind, a value read of nezha), so its pages would
	// otherwise fill free memory with data nobody reads, and every new page
	// costs the kernel an allocation, which on a VM with free page reporting
	// (this project's machines) is a fault into the hypervisor: about half
	// of a node's CPU for 256 KiB PUTs. With a window the log reuses the
	// pages it just freed. Negative: no limit (the kernel decides). Only
	// with Sync (unsynced pages are dirty). Default 64 MiB
	// (DefaultPageCacheBytes).
	PageCacheBytes int64
	// DirectIO: with Sync, segments are written with O_DIRECT from a
	// block-aligned copy of each Append (direct.go), not through the page
	// cache: no page-cache copy and no page allocation per written byte
	// (on this project's VMs the larger part of a node's CPU under large
	// PUTs), and no cache filled with data that is rarely read back; reads
	// stay buffered. A filesystem without O_DIRECT (tmpfs) gets buffered
	// writes. Default true (DefaultOptions).
	DirectIO bool
	// Logger receives warnings (torn tails). Default slog.Default().
	Logger *slog.Logger
	// FS opens the segment files: it injects disk faults and watches
	// fsyncs (internal/vfs). nil: plain files.
	FS *vfs.FS
	// MmapReads: value reads (ReadCommand, ReadCommands) of sealed
	// segments copy out of a read-only memory mapping (vfs.Mapping, made
	// on a segment's first read) instead of a pread into a zeroed buffer:
	// no system call and no clear per read. Mapped reads take the FS's
	// read faults as positioned reads do. Default false: a mapped page
	// stays charged to the process and survives drop_caches while mapped,
	// which the replicated nodes' cold-read measurements must not have;
	// the embedded engine turns it on.
	MmapReads bool
	// AppendSeconds, if set, observes the duration in seconds of every
	// Append that wrote something (write and fdatasync), and FsyncSeconds
	// that of every fdatasync of a segment. A prometheus.Histogram
	// satisfies Observer. nil: not observed.
	AppendSeconds, FsyncSeconds Observer
}

// Observer receives one observation, e.g. a latency in seconds. It is the
// method set of prometheus.Observer, so a histogram can be passed as is.
type Observer interface {
	Observe(float64)
}

// DefaultOptions returns Options with the documented defaults for dir.
func DefaultOptions(dir string) Options {
	return Options{Dir: dir, SegmentSizeBytes: DefaultSegmentSizeBytes, Sync: true, EntryCacheBytes: DefaultEntryCacheBytes,
		PageCacheBytes: DefaultPageCacheBytes, DirectIO: true}
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("raftlog: Dir is required"))
	}
	if o.SegmentSizeBytes < 4096 {
		errs = append(errs, fmt.Errorf("raftlog: SegmentSizeBytes %d is below the minimum of 4096", o.SegmentSizeBytes))
	}
	if o.EntryCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("raftlog: EntryCacheBytes %d must not be negative", o.EntryCacheBytes))
	}
	return errors.Join(errs...)
}

// entryMeta locates one entry of the log.
type entryMeta struct {
	seg    *segment
	off    int64
	length uint32 // whole record, header included
	term   uint64
	kind   kind
}

// Stats are cumulative counters of a Log since Open.
type Stats struct {
	// BytesWritten counts record bytes written to segments.
	BytesWritten int64
	// Fsyncs counts fdatasync calls on segments.
	Fsyncs int64
	// Appends counts Append calls that wrote something.
	Appends int64
	// CacheHits and CacheMisses count Entries calls served from the entry
	// cache and from the segment files.
	CacheHits, CacheMisses int64
	// PageCacheDroppedBytes counts synced bytes the log asked the kernel
	// to drop from its page cache (Options.PageCacheBytes).
	PageCacheDroppedBytes int64
}

// Log is a segmented Raft log. Its writers (Append, Roll, Compact,
// ApplySnapshot) take turns (writeMu): the node's log writer appends while
// its Ready loop compacts. Flush may run beside them, from one goroutine at
// a time. Every other method may be called from any goroutine.
type Log struct {
	opts   Options
	logger *slog.Logger
	// base is the file system of opts.FS, for the operations it does not
	// fault (listing, removing, the sidecars).
	base vfs.FileSystem

	// writeMu is held by the writer methods: "the writer goroutine" below
	// is whichever goroutine holds it.
	writeMu sync.Mutex
	// dropMu serializes dropSynced (after Flush, and after a writer's own
	// fdatasync) and guards the segments' dropped and settled, and
	// durable: how far the last fdatasync of the active segment covered
	// (DiscardUnflushed).
	dropMu  sync.Mutex
	durable struct {
		seg  *segment
		size int64
	}

	mu        sync.RWMutex
	segs      []*segment // ascending id; the last one is active
	activeSeg atomic.Pointer[segment]
	byID      map[uint64]*segment
	metas     []entryMeta // metas[i] is the entry at index first+i
	first     uint64      // = snap.Index + 1
	snap      raftpb.SnapshotMetadata
	hs        raftpb.HardState
	cache     entryCache // the newest entries, under mu

	buf  []byte   // encoding buffer, owned by the writer goroutine
	iovs [][]byte // the vectored write of one Append, owned by the writer
	// direct: segments are written with O_DIRECT (Options.DirectIO and
	// Sync, unless the filesystem refused it); dbuf is the block-aligned
	// buffer of those writes. Writer goroutine only.
	direct bool
	dbuf   []byte
	dvec   [1][]byte // the vector of a direct write (writeDirect)
	gap    gap       // the last index gap seen by recovery
	// marked is the highest index a compaction or snapshot record named
	// during recovery: a gap must lie at or below it. (snap cannot tell:
	// recovery moves it over every gap it meets.)
	marked uint64

	bytesWritten atomic.Int64
	droppedBytes atomic.Int64 // dropped from the page cache (dropSynced)
	fsyncs       atomic.Int64
	appends      atomic.Int64
	cacheHits    atomic.Int64
	cacheMisses  atomic.Int64

	indexing sync.WaitGroup // sidecar writers of sealed segments (segindex.go)
}

var _ raft.Storage = (*Log)(nil)
var _ systems.ValueLog = (*Log)(nil)

// Open opens or creates the log in opts.Dir and recovers its state.
func Open(opts Options) (*Log, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Log{opts: opts, logger: opts.Logger, base: opts.FS.Base(), byID: map[uint64]*segment{}, first: 1,
		cache: entryCache{maxBytes: opts.EntryCacheBytes}, direct: opts.DirectIO && opts.Sync}
	if err := vfs.MkdirAllSynced(l.base, opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	ids, err := listSegments(l.base, opts.Dir)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		if err := l.create(); err != nil {
			return nil, err
		}
		return l, nil
	}
	removeOrphanSegIndexes(l.base, opts.Dir, ids)
	for i, id := range ids {
		if err := l.recoverSegment(id, i == len(ids)-1); err != nil {
			l.closeFiles()
			return nil, err
		}
	}
	if g := l.gap; g.index != 0 && l.marked+1 < g.index {
		l.closeFiles()
		return nil, fmt.Errorf("raftlog: %s at offset %d: entry %d follows entry %d: gap in the log", g.path, g.off, g.index, g.after)
	}
	l.reconcileHardState()
	if err := l.openDirect(l.active()); err != nil {
		l.closeFiles()
		return nil, err
	}
	// What recovery found is the log (DiscardUnflushed cuts only what
	// this process wrote and could not flush).
	l.durable.seg = l.active()
	l.durable.size = l.active().size.Load()
	return l, nil
}

// create starts a new log with one segment holding the bootstrap membership.
func (l *Log) create() error {
	seg, err := createSegment(l.opts.FS, l.opts.Dir, 1)
	if err != nil {
		return err
	}
	l.addSegment(seg)
	if err := l.openDirect(seg); err != nil {
		return err
	}
	l.snap = raftpb.SnapshotMetadata{ConfState: l.opts.Bootstrap}
	md, err := l.snap.Marshal()
	if err != nil {
		return err
	}
	rec := appendRecord(nil, kindCompact, 0, 0, md)
	if err := l.write(seg, rec, true); err != nil {
		return err
	}
	return l.opts.FS.SyncDir(l.opts.Dir)
}

func (l *Log) addSegment(s *segment) {
	l.segs = append(l.segs, s)
	l.byID[s.id] = s
	l.activeSeg.Store(s)
}

// active is the segment being appended. It is read without l.mu (the
// writer goroutine changes it, under l.mu, and RemoveSegment, which may run
// elsewhere, never touches it).
func (l *Log) active() *segment { return l.activeSeg.Load() }

// recoverSegment replays one segment into the in-memory state.
func (l *Log) recoverSegment(id uint64, last bool) error {
	seg, err := openSegment(l.opts.FS, l.opts.Dir, id)
	if err != nil {
		return err
	}
	l.addSegment(seg)
	st, err := seg.f.Stat()
	if err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	fileSize := st.Size()
	if !last {
		// A sealed segment: its sidecar, if usable, saves reading it.
		if recs, err := readSegIndex(l.base, l.opts.Dir, id, fileSize); err == nil {
			off := int64(0)
			for _, rc := range recs {
				if err := l.replay(seg, off, rc.h, rc.payload); err != nil {
					return fmt.Errorf("raftlog: %s (from %s) at offset %d: %w", seg.path, segIndexName(id), off, err)
				}
				off += headerSize + int64(rc.h.length)
			}
			seg.size.Store(fileSize)
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			l.logger.Warn("raftlog: ignoring a segment index; scanning the segment", "file", segIndexName(id), "err", err)
		}
	}
	var recs []segIndexRecord // the records, for the segment's sidecar
	r := io.NewSectionReader(unfaulted{seg.f}, 0, fileSize)
	var hdr [headerSize]byte
	var rec []byte
	off := int64(0)
	for off < fileSize {
		// bad reports a record that failed. In the last segment, a failure
		// with no valid record after it is a torn write and is truncated;
		// anything else is corruption.
		bad := func(reason string) error {
			if last && !l.validRecordAfter(seg, off+1, fileSize) {
				l.logger.Warn("raftlog: truncating torn tail", "file", seg.path, "offset", off,
					"reason", reason, "bytes_dropped", fileSize-off)
				if err := seg.f.Truncate(off); err != nil {
					return fmt.Errorf("raftlog: truncate torn tail of %s: %w", seg.path, err)
				}
				fileSize = off
				return nil
			}
			return fmt.Errorf("raftlog: corrupt record in %s at offset %d: %s", seg.path, off, reason)
		}
		if fileSize-off < headerSize {
			if err := bad("short header"); err != nil {
				return err
			}
			break
		}
		if _, err := r.ReadAt(hdr[:], off); err != nil {
			return fmt.Errorf("raftlog: read %s at %d: %w", seg.path, off, err)
		}
		if isZero(hdr[:]) {
			// End of written data: the zero padding of a direct write's
			// last block (direct.go), or a preallocated or zero-filled
			// tail.
			if last && fileSize%directBlockBytes == 0 && fileSize-off < directBlockBytes && l.zeroTo(seg, off, fileSize) {
				if err := seg.f.Truncate(off); err != nil {
					return fmt.Errorf("raftlog: truncate the padding of %s: %w", seg.path, err)
				}
				fileSize = off
				break
			}
			if err := bad("zero header"); err != nil {
				return err
			}
			break
		}
		h := parseHeader(hdr[:])
		end := off + headerSize + int64(h.length)
		if h.length > maxPayloadBytes || end > fileSize {
			if err := bad(fmt.Sprintf("record of %d bytes extends past the end of the file (%d bytes)", h.length, fileSize)); err != nil {
				return err
			}
			break
		}
		if cap(rec) < int(end-off) {
			rec = make([]byte, end-off)
		}
		rec = rec[:end-off]
		if _, err := r.ReadAt(rec, off); err != nil {
			return fmt.Errorf("raftlog: read %s at %d: %w", seg.path, off, err)
		}
		if _, err := checkRecord(rec); err != nil {
			if err := bad(err.Error()); err != nil {
				return err
			}
			break
		}
		if err := l.replay(seg, off, h, rec[headerSize:]); err != nil {
			return fmt.Errorf("raftlog: %s at offset %d: %w", seg.path, off, err)
		}
		ir := segIndexRecord{h: h, raw: hdr}
		if !h.kind.isEntry() {
			ir.payload = append([]byte(nil), rec[headerSize:]...)
		}
		recs = append(recs, ir)
		off = end
	}
	seg.size.Store(fileSize)
	if last {
		// The active segment's sidecar is built, when it is sealed, from
		// the records noted as they are written (noteRecords): start from
		// the ones it holds already, or the sidecar would cover only what
		// was written since this recovery (and every later recovery would
		// ignore it and scan the segment).
		if len(recs) > maxDirectRecs {
			seg.recs, seg.recsOver = nil, true
		} else {
			seg.recs = recs
		}
		return nil
	}
	// Best effort: without it the next recovery scans again.
	if err := writeSegIndex(l.base, l.opts.Dir, id, encodeSegIndex(fileSize, recs)); err != nil {
		l.logger.Warn("raftlog: cannot write a segment index", "file", segIndexName(id), "err", err)
	}
	return nil
}

// reconcileHardState repairs a HardState that a truncated tail left behind
// the log: the compaction point is committed by construction, a node's term
// is at least that of its last entry, and the commit index cannot exceed the
// last entry (the leader resends what the tail lost). A lost vote cannot be
// recovered; it was never acted upon if the record was torn before its
// fsync completed (a node answers a vote only after persisting it).
func (l *Log) reconcileHardState() {
	hs := l.hs
	last := l.lastIndex()
	lastTerm := l.snap.Term
	if len(l.metas) > 0 {
		lastTerm = l.metas[len(l.metas)-1].term
	}
	hs.Commit = min(max(hs.Commit, l.snap.Index), last)
	hs.Term = max(hs.Term, lastTerm)
	if !isHardStateEqual(hs, l.hs) {
		l.logger.Warn("raftlog: hard state behind the log after recovery; repaired",
			"recovered", l.hs.String(), "repaired", hs.String(), "compacted_index", l.snap.Index, "last_index", last)
		l.hs = hs
	}
}

// zeroTo reports whether seg's bytes in [from, to) are all zero.
func (l *Log) zeroTo(seg *segment, from, to int64) bool {
	buf := make([]byte, to-from)
	if _, err := seg.f.ReadAtUnfaulted(buf, from); err != nil {
		return false
	}
	return isZero(buf)
}

// validRecordAfter reports whether any offset in [from, to) of seg starts a
// record whose CRC checks: if one does, an earlier bad record is corruption
// in the middle of the log, not a torn tail.
func (l *Log) validRecordAfter(seg *segment, from, to int64) bool {
	if to-from > 2*l.opts.SegmentSizeBytes+maxPayloadBytes {
		return true // too large to be one torn write; refuse to guess
	}
	if to-from < headerSize {
		return false
	}
	buf := make([]byte, to-from)
	if _, err := seg.f.ReadAtUnfaulted(buf, from); err != nil {
		return true
	}
	for i := 0; i+headerSize <= len(buf); i++ {
		k := kind(buf[i+8])
		if k < kindEntryNormal || k > kindSnapshot {
			continue
		}
		n := int(binary.LittleEndian.Uint32(buf[i+4:]))
		if n > len(buf)-i-headerSize {
			continue
		}
		if _, err := checkRecord(buf[i : i+headerSize+n]); err == nil {
			return true
		}
	}
	return false
}

// replay applies one recovered record to the in-memory state.
func (l *Log) replay(seg *segment, off int64, h header, payload []byte) error {
	switch {
	case h.kind.isEntry():
		if h.index <= l.snap.Index {
			return nil // compacted away
		}
		if last := l.lastIndex(); h.index > last+1 {
			// The segments holding the entries in between were removed after
			// a compaction whose marker sits in a later segment. Continue
			// provisionally; Open checks that a marker covered the gap.
			l.resetTo(raftpb.SnapshotMetadata{Index: h.index - 1, ConfState: l.snap.ConfState})
			l.gap = gap{index: h.index, after: last, path: seg.path, off: off}
		}
		l.metas = l.metas[:h.index-l.first] // conflicting suffix overwritten
		l.metas = append(l.metas, entryMeta{seg: seg, off: off, length: uint32(headerSize) + h.length, term: h.term, kind: h.kind})
		seg.noteIndex(h.index)
	case h.kind == kindHardState:
		var hs raftpb.HardState
		if err := hs.Unmarshal(payload); err != nil {
			return fmt.Errorf("hard state: %w", err)
		}
		l.hs = hs
	case h.kind == kindCompact || h.kind == kindSnapshot:
		var md raftpb.SnapshotMetadata
		if err := md.Unmarshal(payload); err != nil {
			return fmt.Errorf("snapshot metadata: %w", err)
		}
		l.marked = max(l.marked, md.Index)
		if h.kind == kindSnapshot {
			l.resetTo(md)
		} else {
			l.compactTo(md)
		}
	default:
		return fmt.Errorf("unknown record kind %d", h.kind)
	}
	return nil
}

// resetTo discards every entry and starts the log after md (a snapshot).
// Entries already in segments count as at or below md.Index from now on.
func (l *Log) resetTo(md raftpb.SnapshotMetadata) {
	l.snap = md
	l.metas = nil
	l.cache.reset()
	l.first = md.Index + 1
	for _, s := range l.segs {
		s.lastIndex = min(s.lastIndex, md.Index)
		s.firstIndex = min(s.firstIndex, s.lastIndex)
	}
}

// compactTo drops entries at or below md.Index, if it is newer than the
// current compaction point.
func (l *Log) compactTo(md raftpb.SnapshotMetadata) {
	if md.Index < l.snap.Index {
		return
	}
	if md.Index == l.snap.Index && md.Index < l.lastIndex() {
		// The same point again (every segment starts by restating it):
		// copying the entries' metadata for each segment made recovery
		// quadratic (30 s for 11,000 segments of a 91,000-entry log).
		l.snap = md
		return
	}
	if md.Index >= l.lastIndex() {
		l.resetTo(md)
		return
	}
	l.metas = append([]entryMeta(nil), l.metas[md.Index+1-l.first:]...)
	l.snap = md
	l.first = md.Index + 1
	l.cache.dropThrough(md.Index)
}

func (l *Log) lastIndex() uint64 { return l.first + uint64(len(l.metas)) - 1 }

// InitialState implements raft.Storage.
func (l *Log) InitialState() (raftpb.HardState, raftpb.ConfState, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.hs, l.snap.ConfState, nil
}

// ConfChangeIndexes returns the indexes of the conf change entries in
// [lo, hi] still in the log, in order, from the in-memory index (no read).
// A node replays them over InitialState's membership (the compaction
// point's) up to its applied index at open: raft does not.
func (l *Log) ConfChangeIndexes(lo, hi uint64) []uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	lo, hi = max(lo, l.first), min(hi, l.lastIndex())
	var out []uint64
	for i := lo; i <= hi && i >= l.first; i++ {
		if k := l.metas[i-l.first].kind; k == kindEntryConfChange || k == kindEntryConfChangeV2 {
			out = append(out, i)
		}
	}
	return out
}

// HardState returns the last persisted HardState.
func (l *Log) HardState() raftpb.HardState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.hs
}

// FirstIndex implements raft.Storage.
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.first, nil
}

// LastIndex implements raft.Storage.
func (l *Log) LastIndex() (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lastIndex(), nil
}

// Term implements raft.Storage.
func (l *Log) Term(i uint64) (uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	switch {
	case i == l.snap.Index:
		return l.snap.Term, nil
	case i < l.snap.Index:
		return 0, raft.ErrCompacted
	case i > l.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return l.metas[i-l.first].term, nil
}

// Snapshot implements raft.Storage. It returns the metadata of the latest
// compaction point; the data is attached by the node's snapshot sender.
func (l *Log) Snapshot() (raftpb.Snapshot, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return raftpb.Snapshot{Metadata: l.snap}, nil
}

// Entries implements raft.Storage: entries [lo, hi), at least one, and no
// more than maxSize bytes in total.
func (l *Log) Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error) {
	l.mu.RLock()
	if lo <= l.snap.Index {
		l.mu.RUnlock()
		return nil, raft.ErrCompacted
	}
	if hi > l.lastIndex()+1 {
		l.mu.RUnlock()
		return nil, fmt.Errorf("raftlog: entries [%d, %d) requested, last index is %d", lo, hi, l.lastIndex())
	}
	if ents, ok := l.cache.slice(lo, hi, maxSize); ok {
		l.mu.RUnlock()
		l.cacheHits.Add(1)
		return ents, nil
	}
	l.cacheMisses.Add(1)
	var size uint64
	metas := make([]entryMeta, 0, hi-lo)
	for i := lo; i < hi; i++ {
		m := l.metas[i-l.first]
		size += uint64(m.length)
		if len(metas) > 0 && size > maxSize {
			break
		}
		metas = append(metas, m)
	}
	l.mu.RUnlock()

	ents := make([]raftpb.Entry, 0, len(metas))
	for start := 0; start < len(metas); {
		// One positioned read per run of adjacent records in one segment.
		end := start + 1
		for end < len(metas) && metas[end].seg == metas[start].seg &&
			metas[end].off == metas[end-1].off+int64(metas[end-1].length) {
			end++
		}
		run := metas[start:end]
		total := run[len(run)-1].off + int64(run[len(run)-1].length) - run[0].off
		buf := make([]byte, total)
		if err := run[0].seg.readAt(buf, run[0].off, false); err != nil {
			return nil, err
		}
		for j, m := range run {
			rec := buf[m.off-run[0].off : m.off-run[0].off+int64(m.length)]
			h, err := checkRecord(rec)
			if err != nil {
				return nil, fmt.Errorf("raftlog: %s at offset %d: %w", m.seg.path, m.off, err)
			}
			want := lo + uint64(start+j)
			if h.index != want || !h.kind.isEntry() {
				return nil, fmt.Errorf("raftlog: %w: %s at offset %d holds %s %d, want entry %d",
					systems.ErrCorrupt, m.seg.path, m.off, h.kind, h.index, want)
			}
			ents = append(ents, raftpb.Entry{
				Term:  h.term,
				Index: h.index,
				Type:  raftpb.EntryType(h.kind - kindEntryNormal),
				Data:  rec[headerSize:len(rec):len(rec)],
			})
		}
		start = end
	}
	return ents, nil
}

// Location returns where the entry at index sits, if it is kept.
func (l *Log) Location(index uint64) (systems.Location, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if index < l.first || index > l.lastIndex() {
		return systems.Location{}, false
	}
	m := l.metas[index-l.first]
	return systems.Location{Segment: m.seg.id, Offset: m.off, Length: m.length, Index: index}, true
}

// ReadCommand implements systems.ValueLog.
func (l *Log) ReadCommand(loc systems.Location) (systems.Command, error) {
	rec, seg, err := l.readSpan(loc)
	if err != nil {
		return systems.Command{}, err
	}
	return decodeRecordAt(seg, rec, loc)
}

// ReadCommands reads several records, with one positioned read per run of
// adjacent records in one segment (a scan over values written in key order
// reads sequentially). Results are in the order of locs; each is checked as
// in ReadCommand.
func (l *Log) ReadCommands(locs []systems.Location) ([]systems.Command, error) {
	out := make([]systems.Command, len(locs))
	for start := 0; start < len(locs); {
		end := start + 1
		size := int64(locs[start].Length)
		for end < len(locs) && locs[end].Segment == locs[start].Segment &&
			locs[end].Offset == locs[end-1].Offset+int64(locs[end-1].Length) && size < maxCoalesceBytes {
			size += int64(locs[end].Length)
			end++
		}
		if end == start+1 {
			c, err := l.ReadCommand(locs[start])
			if err != nil {
				return nil, err
			}
			out[start] = c
			start = end
			continue
		}
		first := locs[start]
		span := systems.Location{Segment: first.Segment, Offset: first.Offset, Length: uint32(size), Index: first.Index}
		buf, seg, err := l.readSpan(span)
		if err != nil {
			return nil, err
		}
		for i := start; i < end; i++ {
			rel := locs[i].Offset - first.Offset
			c, err := decodeRecordAt(seg, buf[rel:rel+int64(locs[i].Length)], locs[i])
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		start = end
	}
	return out, nil
}

// maxCoalesceBytes bounds one read of ReadCommands.
const maxCoalesceBytes = 4 << 20

// readSpan reads loc.Length bytes at loc.Offset of loc's segment, checking
// the bounds.
func (l *Log) readSpan(loc systems.Location) ([]byte, *segment, error) {
	l.mu.RLock()
	seg := l.byID[loc.Segment]
	l.mu.RUnlock()
	if seg == nil {
		return nil, nil, fmt.Errorf("raftlog: %w: %s: segment %s does not exist", systems.ErrSegmentRemoved, loc, segmentName(loc.Segment))
	}
	if loc.Length < headerSize || loc.Offset < 0 || loc.Offset+int64(loc.Length) > seg.size.Load() {
		return nil, nil, fmt.Errorf("raftlog: %w: %s at offset %d: record of %d bytes points past the end of the segment (%d bytes)",
			systems.ErrCorrupt, seg.path, loc.Offset, loc.Length, seg.size.Load())
	}
	buf, err := seg.readValue(loc.Offset, int(loc.Length), l.opts.MmapReads && seg != l.active())
	if err != nil {
		return nil, nil, err
	}
	return buf, seg, nil
}

// decodeRecordAt checks that rec is a normal entry at loc and decodes it.
func decodeRecordAt(seg *segment, rec []byte, loc systems.Location) (systems.Command, error) {
	h, err := checkRecord(rec)
	if err != nil {
		return systems.Command{}, fmt.Errorf("raftlog: %s at offset %d: %w", seg.path, loc.Offset, err)
	}
	if h.index != loc.Index || h.kind != kindEntryNormal {
		return systems.Command{}, fmt.Errorf("raftlog: %w: %s at offset %d holds %s %d, want entry %d",
			systems.ErrCorrupt, seg.path, loc.Offset, h.kind, h.index, loc.Index)
	}
	c, err := systems.DecodeCommand(rec[headerSize:])
	if err != nil {
		return systems.Command{}, fmt.Errorf("raftlog: %s at offset %d: %w", seg.path, loc.Offset, err)
	}
	return c, nil
}

// Append persists a HardState (if not empty and changed) and entries (which
// replace any entries at or above their first index), with one write and,
// if mustSync and Options.Sync, one fdatasync; without it, the records are
// durable once a Flush that began after Append returned has returned. The
// entries are readable (Entries, Location) on return. It rolls the active
// segment once it reaches SegmentSizeBytes.
func (l *Log) Append(hs raftpb.HardState, ents []raftpb.Entry, mustSync bool) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.RLock()
	last, first, prevHS := l.lastIndex(), l.first, l.hs
	l.mu.RUnlock()
	if len(ents) > 0 {
		if ents[0].Index < first {
			return fmt.Errorf("raftlog: append of entry %d below first index %d", ents[0].Index, first)
		}
		if ents[0].Index > last+1 {
			return fmt.Errorf("raftlog: append of entry %d after last index %d leaves a gap", ents[0].Index, last)
		}
	}
	seg := l.active()
	base := seg.size.Load()
	hsChanged := !raft.IsEmptyHardState(hs) && !isHardStateEqual(hs, prevHS)
	var hsData []byte
	if hsChanged {
		md, err := hs.Marshal()
		if err != nil {
			return err
		}
		hsData = md
	}
	// One buffer holds every header, the small payloads and the HardState
	// record; it is sized up front so that the iovecs into it stay valid.
	inline := headerSize + len(hsData)
	for i := range ents {
		inline += headerSize
		if len(ents[i].Data) < vectorMinBytes {
			inline += len(ents[i].Data)
		}
	}
	if cap(l.buf) < inline {
		l.buf = make([]byte, 0, inline)
	}
	buf := l.buf[:0]
	iovs := l.iovs[:0]
	mark := 0 // start of the part of buf not yet in iovs
	size := int64(0)
	newMetas := make([]entryMeta, 0, len(ents))
	for i := range ents {
		e := &ents[i]
		k := kindEntryNormal + kind(e.Type)
		n := int64(headerSize + len(e.Data))
		newMetas = append(newMetas, entryMeta{seg: seg, off: base + size, length: uint32(n), term: e.Term, kind: k})
		size += n
		if len(e.Data) < vectorMinBytes {
			buf = appendRecord(buf, k, e.Term, e.Index, e.Data)
			continue
		}
		buf = appendRecordHeader(buf, k, e.Term, e.Index, e.Data)
		iovs = append(iovs, buf[mark:], e.Data)
		mark = len(buf)
	}
	if hsChanged {
		buf = appendRecord(buf, kindHardState, 0, 0, hsData)
		size += int64(headerSize + len(hsData))
	}
	if len(buf) > mark {
		iovs = append(iovs, buf[mark:])
	}
	l.buf, l.iovs = buf, iovs
	if size == 0 {
		return nil
	}
	start := time.Now()
	err := l.writev(seg, iovs, size, mustSync)
	clear(l.iovs) // drop the references to the payloads
	if err != nil {
		return err
	}
	l.mu.Lock()
	if len(ents) > 0 {
		l.metas = append(l.metas[:ents[0].Index-l.first], newMetas...)
		for i := range ents {
			seg.noteIndex(ents[i].Index)
		}
		l.cache.append(ents)
	}
	if hsChanged {
		l.hs = hs
	}
	l.mu.Unlock()
	l.appends.Add(1)
	if l.opts.AppendSeconds != nil {
		l.opts.AppendSeconds.Observe(time.Since(start).Seconds())
	}
	if seg.size.Load() >= l.opts.SegmentSizeBytes {
		if err := l.roll(); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return err
			}
			// The append itself is durable; keep appending to the active
			// segment and roll at the next append.
			l.logger.Warn("raftlog: cannot start the next segment; the active one grows past its size", "err", err)
		}
	}
	return nil
}

func isHardStateEqual(a, b raftpb.HardState) bool {
	return a.Term == b.Term && a.Vote == b.Vote && a.Commit == b.Commit
}

// write appends buf to seg and optionally fdatasyncs it.
func (l *Log) write(seg *segment, buf []byte, mustSync bool) error {
	return l.writev(seg, [][]byte{buf}, int64(len(buf)), mustSync)
}

// writev appends the concatenation of bufs (size bytes in all) to seg with
// positioned vectored writes, and optionally fdatasyncs it. After a failed
// fdatasync it writes nothing more (vfs.FS.Err: no retry past a failed
// fsync).
func (l *Log) writev(seg *segment, bufs [][]byte, size int64, mustSync bool) error {
	if err := l.opts.FS.Err(); err != nil {
		return fmt.Errorf("raftlog: an earlier fsync failed; refusing to write: %w", err)
	}
	off := seg.size.Load()
	write := func() error { return seg.f.Pwritev(bufs, off) }
	if seg.dw == nil && seg.recs != nil {
		// Records written directly were noted for the sidecar; this one
		// is not (a failed roll could not give the segment its direct
		// descriptor back): indexSealed scans the segment instead.
		seg.recs, seg.recsOver = nil, true
	}
	if seg.dw != nil {
		write = func() error { return l.writeDirect(seg, bufs, size) }
	}
	if err := write(); err != nil {
		// Leave the in-memory state as it was; a partial write is a torn
		// tail for the next recovery. Cut it now so that a retry (after
		// ENOSPC) appends at a clean offset.
		_ = seg.f.Truncate(off)
		return fmt.Errorf("raftlog: write %s at %d: %w", seg.path, off, err)
	}
	seg.size.Store(off + size)
	l.bytesWritten.Add(size)
	if mustSync && l.opts.Sync {
		if err := l.datasync(seg); err != nil {
			return fmt.Errorf("raftlog: fdatasync %s: %w", seg.path, err)
		}
		// Only this goroutine writes: seg is synced up to its size.
		l.synced(seg, seg.size.Load())
	}
	return nil
}

// Flush makes durable every record Append wrote before Flush was called:
// one fdatasync of the active segment (a segment sealed since was synced
// when it was rolled). It may run while Append writes the next records,
// which it may or may not cover; the caller knows which appends had
// returned when it called. A failed fdatasync fails the log's FS for good
// (vfs.FS.Err): nothing is written after it. No-op without Options.Sync.
func (l *Log) Flush() error {
	if !l.opts.Sync {
		return nil
	}
	seg := l.active()
	size := seg.size.Load()
	if err := l.datasync(seg); err != nil {
		return fmt.Errorf("raftlog: fdatasync %s: %w", seg.path, err)
	}
	l.synced(seg, size)
	return nil
}

// synced notes that an fdatasync covered seg up to size, and drops what
// is synced from the page cache (dropSynced).
func (l *Log) synced(seg *segment, size int64) {
	l.dropMu.Lock()
	if d := &l.durable; d.seg != seg || size > d.size {
		d.seg, d.size = seg, size
	}
	l.dropMu.Unlock()
	l.dropSynced(seg, size)
}

// DiscardUnflushed cuts the active segment back to what its last
// successful fdatasync covered, after a flush failed (the node's Stop):
// what was written after it is not durable, and the kernel may even have
// dropped its pages (PostgreSQL's "fsyncgate"), so a restart without a
// reboot must not take it for a durable part of the log, which its
// entries' acknowledgements would rest on. Nothing was acknowledged past a
// failed flush; the leader resends what is cut. The log is closed next.
func (l *Log) DiscardUnflushed() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.dropMu.Lock()
	d := l.durable
	l.dropMu.Unlock()
	seg := l.active()
	if d.seg != seg || d.size >= seg.size.Load() {
		return nil // a sealed segment was synced whole by Roll
	}
	l.logger.Warn("raftlog: a flush failed; cutting the records written after the last good one",
		"file", seg.path, "offset", d.size, "bytes_dropped", seg.size.Load()-d.size)
	seg.size.Store(d.size)
	if err := seg.f.Truncate(d.size); err != nil {
		return fmt.Errorf("raftlog: cut %s to %d: %w", seg.path, d.size, err)
	}
	return nil
}

// dropSynced drops from the page cache the log's synced data older than
// its newest Options.PageCacheBytes, except sealed segments whose sidecar
// index is still being built. synced is how much of segment active an
// fdatasync just covered; the segments before it were synced when they
// were rolled, and a segment after it (rolled meanwhile) is left alone. A
// failed hint is logged, not returned.
func (l *Log) dropSynced(active *segment, synced int64) {
	keep := l.opts.PageCacheBytes
	if keep < 0 {
		return
	}
	l.dropMu.Lock()
	defer l.dropMu.Unlock()
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	after := true // segs[i] is newer than active
	for i := len(segs) - 1; i >= 0; i-- {
		seg := segs[i]
		size := seg.size.Load()
		if seg == active {
			after, size = false, min(size, synced)
		}
		if after {
			keep = max(0, keep-size)
			continue
		}
		if keep >= size {
			keep -= size
			continue
		}
		cut := size - keep
		keep = 0
		sealed := i < len(segs)-1
		if sealed && !seg.settled {
			if !seg.indexed.Load() {
				// Its sidecar index is being built from its pages
				// (indexSealed): dropping them now would have it read
				// them back from the disk. A later call drops them.
				continue
			}
			// The indexer read its pages back into the cache.
			seg.settled, seg.dropped = true, 0
		}
		if cut <= seg.dropped {
			if sealed {
				return // sealed and dropped already, as is every older one
			}
			continue
		}
		// The kernel drops whole pages only: start at the page the last
		// drop ended in (all of it is synced), and let the last drop of
		// a sealed segment run to its end (length 0).
		from := seg.dropped &^ (pageBytes - 1)
		n := cut - from
		if sealed && cut == size {
			n = 0
		}
		if err := seg.f.DropCache(from, n); err != nil {
			l.opts.Logger.Debug("raftlog: dropping synced pages from the page cache", "err", err)
			return
		}
		l.droppedBytes.Add(cut - seg.dropped)
		seg.dropped = cut
	}
}

// Roll seals the active segment and starts the next one, whose first records
// restate the HardState and the compaction point so that older segments can
// be removed. If the next segment cannot be started (ENOSPC, say), it is
// removed again and the active segment stays active.
func (l *Log) Roll() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.roll()
}

// roll is Roll; writeMu held.
func (l *Log) roll() error {
	old := l.active()
	if err := l.closeDirect(old); err != nil {
		return err
	}
	if l.opts.Sync {
		if err := l.datasync(old); err != nil {
			return fmt.Errorf("raftlog: fdatasync %s: %w", old.path, err)
		}
	}
	seg, err := createSegment(l.opts.FS, l.opts.Dir, old.id+1)
	if err != nil {
		// The active segment stays active (Append goes on after ENOSPC):
		// give it its direct descriptor back.
		if oerr := l.openDirect(old); oerr != nil {
			err = errors.Join(err, oerr)
		}
		return err
	}
	l.mu.RLock()
	snap := l.snap
	md, err1 := snap.Marshal()
	hs, err2 := l.hs.Marshal()
	l.mu.RUnlock()
	if err := errors.Join(err1, err2); err != nil {
		_ = seg.remove(l.base)
		return err
	}
	rec := appendRecord(nil, kindCompact, snap.Term, snap.Index, md)
	rec = appendRecord(rec, kindHardState, 0, 0, hs)
	err = l.openDirect(seg)
	if err == nil {
		err = l.write(seg, rec, true)
	}
	if err != nil {
		// Nobody has seen the new segment: remove it, so that a restart
		// does not take an empty or torn file for the active segment.
		_ = seg.remove(l.base)
		if oerr := l.openDirect(old); oerr != nil {
			err = errors.Join(err, oerr)
		}
		return err
	}
	l.mu.Lock()
	l.addSegment(seg)
	l.mu.Unlock()
	l.indexSealed(old)
	if l.opts.Sync {
		return l.opts.FS.SyncDir(l.opts.Dir)
	}
	return nil
}

// indexSealed writes the sidecar of a segment that was just sealed, in
// the background (a segment removed meanwhile leaves none, or an orphan
// that the next Open deletes). Close waits for it.
func (l *Log) indexSealed(seg *segment) {
	size := seg.size.Load()
	seg.indexed.Store(false)
	l.dropMu.Lock()
	seg.settled = false
	l.dropMu.Unlock()
	// A direct-written segment's records were noted as they were written
	// (noteRecords): no need to read them back from the disk.
	known := seg.recs
	seg.recs, seg.recsOver = nil, false
	l.indexing.Add(1)
	go func() {
		defer l.indexing.Done()
		defer seg.indexed.Store(true) // dropSynced may now drop its pages
		recs, err := known, error(nil)
		if recs == nil {
			recs, err = scanHeaders(seg, size)
		}
		if err == nil {
			err = writeSegIndex(l.base, l.opts.Dir, seg.id, encodeSegIndex(size, recs))
		}
		if err != nil && !errors.Is(err, systems.ErrSegmentRemoved) {
			l.logger.Warn("raftlog: cannot write a segment index; the next recovery scans the segment", "file", segIndexName(seg.id), "err", err)
		}
	}()
}

// WaitIndexed waits until the sidecars of the segments sealed so far are
// written (or given up): the only work of the log that runs in the
// background. A test that schedules every step (the node's deterministic
// tier) calls it so that each step leaves the same files behind.
func (l *Log) WaitIndexed() { l.indexing.Wait() }

// ApplySnapshot records a snapshot received from the leader: every entry is
// discarded and the log continues after snap's index. Durable on return.
func (l *Log) ApplySnapshot(md raftpb.SnapshotMetadata) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	b, err := md.Marshal()
	if err != nil {
		return err
	}
	seg := l.active()
	if err := l.write(seg, appendRecord(nil, kindSnapshot, md.Term, md.Index, b), true); err != nil {
		return err
	}
	l.mu.Lock()
	l.resetTo(md)
	l.mu.Unlock()
	return nil
}

// Compact drops the entries at or below index, whose effects the state
// machine has made durable elsewhere; raft then sends a snapshot to a
// follower that needs them. The compaction marker is durable on return.
// It returns raft.ErrCompacted if index is at or below the current
// compaction point, and an error if index is above the last index.
func (l *Log) Compact(index uint64, cs raftpb.ConfState) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.RLock()
	switch {
	case index <= l.snap.Index:
		l.mu.RUnlock()
		return raft.ErrCompacted
	case index > l.lastIndex():
		l.mu.RUnlock()
		return fmt.Errorf("raftlog: compact to %d beyond last index %d", index, l.lastIndex())
	}
	md := raftpb.SnapshotMetadata{Index: index, Term: l.metas[index-l.first].term, ConfState: cs}
	l.mu.RUnlock()
	b, err := md.Marshal()
	if err != nil {
		return err
	}
	if err := l.write(l.active(), appendRecord(nil, kindCompact, md.Term, md.Index, b), true); err != nil {
		return err
	}
	l.mu.Lock()
	l.compactTo(md)
	l.mu.Unlock()
	return nil
}

// CompactedIndex is the compaction point: entries at or below it are not
// kept as Raft entries.
func (l *Log) CompactedIndex() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.snap.Index
}

// Segments lists the segments in ascending id order.
func (l *Log) Segments() []systems.SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]systems.SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = systems.SegmentInfo{ID: s.id, Path: s.path, SizeBytes: s.size.Load(),
			FirstIndex: s.firstIndex, LastIndex: s.lastIndex, Active: i == len(l.segs)-1}
	}
	return out
}

// RemoveSegment deletes a sealed segment whose entries are all at or below
// the (durable) compaction point, after in-flight reads of it finish. Safe
// to call from any goroutine.
func (l *Log) RemoveSegment(id uint64) error {
	l.mu.Lock()
	seg := l.byID[id]
	switch {
	case seg == nil:
		l.mu.Unlock()
		return fmt.Errorf("raftlog: no segment %d", id)
	case seg == l.active():
		l.mu.Unlock()
		return fmt.Errorf("raftlog: segment %d is active", id)
	case seg.lastIndex > l.snap.Index:
		l.mu.Unlock()
		return fmt.Errorf("raftlog: segment %d holds entry %d above the compaction point %d", id, seg.lastIndex, l.snap.Index)
	}
	delete(l.byID, id)
	for i, s := range l.segs {
		if s == seg {
			l.segs = append(l.segs[:i:i], l.segs[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
	l.base.Remove(filepath.Join(l.opts.Dir, segIndexName(id)))
	return seg.remove(l.base)
}

// Stats returns cumulative counters.
func (l *Log) Stats() Stats {
	return Stats{BytesWritten: l.bytesWritten.Load(), Fsyncs: l.fsyncs.Load(), Appends: l.appends.Load(),
		CacheHits: l.cacheHits.Load(), CacheMisses: l.cacheMisses.Load(), PageCacheDroppedBytes: l.droppedBytes.Load()}
}

// Sync is Flush (clean shutdown; a no-op when Options.Sync is false).
func (l *Log) Sync() error { return l.Flush() }

// datasync fdatasyncs seg, counts it and observes its duration
// (Options.FsyncSeconds).
func (l *Log) datasync(seg *segment) error {
	start := time.Now()
	if err := seg.f.Datasync(); err != nil {
		return err
	}
	l.fsyncs.Add(1)
	if l.opts.FsyncSeconds != nil {
		l.opts.FsyncSeconds.Observe(time.Since(start).Seconds())
	}
	return nil
}

// Close closes every segment file.
func (l *Log) Close() error {
	l.mu.Lock()
	err := l.closeFiles()
	l.mu.Unlock()
	l.indexing.Wait() // sidecar writers stop at the closed files
	return err
}

func (l *Log) closeFiles() error {
	var errs []error
	for _, s := range l.segs {
		s.mu.Lock()
		if !s.closed {
			s.closed = true
			// A clean close leaves no padding (direct.go).
			errs = append(errs, l.closeDirect(s), s.mapping.Close(), s.f.Close())
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// gap is an entry recovery met after a hole in the indexes.
type gap struct {
	index, after uint64
	path         string
	off          int64
}

// segment is one log file. Readers hold mu.RLock while reading; removal
// takes mu.Lock, so a file is never closed under an in-flight read.
type segment struct {
	id   uint64
	path string
	f    *vfs.File
	size atomic.Int64

	// Written only by the writer goroutine under Log.mu.
	firstIndex, lastIndex uint64
	// dropped: bytes from the start dropped from the page cache
	// (dropSynced; under Log.dropMu). indexed: its sidecar index is
	// written, or will not be (indexSealed is done with its pages).
	dropped int64
	indexed atomic.Bool
	// settled (under Log.dropMu): dropSynced has seen indexed.
	settled bool
	// With direct I/O (direct.go; writer goroutine only): dw writes the
	// active segment with O_DIRECT, tail holds its bytes from the last
	// block boundary to its size, recs its sidecar records so far (nil
	// and recsOver once there are too many to keep).
	dw       *vfs.File
	tail     []byte
	recs     []segIndexRecord
	recsOver bool

	mu     sync.RWMutex
	closed bool
	// mapping of a sealed segment for value reads (Options.MmapReads);
	// unmapped when the segment is closed or removed.
	mapping vfs.LazyMapping
}

func (s *segment) noteIndex(i uint64) {
	if s.firstIndex == 0 || i < s.firstIndex {
		s.firstIndex = i
	}
	if i > s.lastIndex {
		s.lastIndex = i
	}
}

// readAt reads buf at off. Value reads (faults true) take the injected
// read faults of the FS; raft's own reads (Entries) do not: etcd raft
// panics on an error from raft.Storage.Entries, and a corrupt record there
// would stop the node rather than fail one request.
func (s *segment) readAt(buf []byte, off int64, faults bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("raftlog: %w: %s", systems.ErrSegmentRemoved, s.path)
	}
	read := s.f.ReadAtUnfaulted
	if faults {
		read = s.f.ReadAt
	}
	if _, err := read(buf, off); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("raftlog: %w: %s at offset %d: short read of %d bytes", systems.ErrCorrupt, s.path, off, len(buf))
		}
		return fmt.Errorf("raftlog: read %s at offset %d: %w", s.path, off, err)
	}
	return nil
}

// readValue returns the n bytes at off, a value read with the FS's read
// faults: out of the segment's mapping if mapped is true (the segment is
// sealed: its bytes no longer change) and the bytes lie in it, else by a
// positioned read into a new buffer.
func (s *segment) readValue(off int64, n int, mapped bool) ([]byte, error) {
	if mapped {
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			return nil, fmt.Errorf("raftlog: %w: %s", systems.ErrSegmentRemoved, s.path)
		}
		if m := s.mapping.Get(s.f, s.size.Load()); m != nil && off+int64(n) <= m.Len() {
			buf, err := m.AppendAt(nil, off, n)
			s.mu.RUnlock()
			if err != nil {
				return nil, fmt.Errorf("raftlog: read %s at offset %d: %w", s.path, off, err)
			}
			return buf, nil
		}
		s.mu.RUnlock()
	}
	buf := make([]byte, n)
	if err := s.readAt(buf, off, true); err != nil {
		return nil, err
	}
	return buf, nil
}

func (s *segment) remove(fsys vfs.FileSystem) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		if s.dw != nil {
			_ = s.dw.Close()
		}
		_ = s.mapping.Close()
		_ = s.f.Close()
	}
	if err := fsys.Remove(s.path); err != nil {
		return fmt.Errorf("raftlog: %w", err)
	}
	return nil
}

func segmentName(id uint64) string { return fmt.Sprintf("%06d.log", id) }

func createSegment(fs *vfs.FS, dir string, id uint64) (*segment, error) {
	p := filepath.Join(dir, segmentName(id))
	f, err := fs.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("raftlog: create segment: %w", err)
	}
	return &segment{id: id, path: p, f: f}, nil
}

func openSegment(fs *vfs.FS, dir string, id uint64) (*segment, error) {
	p := filepath.Join(dir, segmentName(id))
	f, err := fs.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open segment: %w", err)
	}
	s := &segment{id: id, path: p, f: f}
	s.indexed.Store(true) // recovery has read it; nothing builds its index now
	return s, nil
}

// listSegments returns the ids of the segment files in dir, ascending.
func listSegments(fsys vfs.FileSystem, dir string) ([]uint64, error) {
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("raftlog: %w", err)
	}
	var ids []uint64
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, ".log"), 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("raftlog: unexpected file %s in %s", name, dir)
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// vectorMinBytes: an entry payload at least this large is written from its
// own buffer (an iovec of the vectored write) instead of being copied into
// the Append buffer.
const vectorMinBytes = 4 << 10

// entryCache keeps the most recently appended entries, contiguous from
// index first, within maxBytes of payload. It aliases the entries' Data,
// which nobody mutates (raft's contract for Ready entries). Guarded by
// Log.mu.
type entryCache struct {
	maxBytes int64
	first    uint64
	ents     []raftpb.Entry
	bytes    int64
}

// append adds ents (contiguous, ascending), replacing any cached entries at
// or above ents[0].Index (a new leader overwrote a suffix), then evicts the
// oldest entries beyond maxBytes.
func (c *entryCache) append(ents []raftpb.Entry) {
	if c.maxBytes <= 0 || len(ents) == 0 {
		return
	}
	start := ents[0].Index
	switch {
	case len(c.ents) == 0 || start < c.first || start > c.first+uint64(len(c.ents)):
		c.reset()
		c.first = start
	default:
		keep := int(start - c.first)
		for i := keep; i < len(c.ents); i++ {
			c.bytes -= int64(len(c.ents[i].Data))
			c.ents[i] = raftpb.Entry{}
		}
		c.ents = c.ents[:keep]
	}
	for i := range ents {
		c.ents = append(c.ents, ents[i])
		c.bytes += int64(len(ents[i].Data))
	}
	for len(c.ents) > 0 && c.bytes > c.maxBytes {
		c.bytes -= int64(len(c.ents[0].Data))
		c.ents[0] = raftpb.Entry{}
		c.ents = c.ents[1:]
		c.first++
	}
}

// dropThrough evicts the entries at or below index (log compaction).
func (c *entryCache) dropThrough(index uint64) {
	for len(c.ents) > 0 && c.first <= index {
		c.bytes -= int64(len(c.ents[0].Data))
		c.ents[0] = raftpb.Entry{}
		c.ents = c.ents[1:]
		c.first++
	}
}

func (c *entryCache) reset() {
	clear(c.ents)
	c.ents, c.bytes, c.first = c.ents[:0], 0, 0
}

// slice returns the entries [lo, hi) if all are cached, limited to maxSize
// bytes of records as Log.Entries does (at least one entry). The result's
// capacity is its length: raft may append to it.
func (c *entryCache) slice(lo, hi, maxSize uint64) ([]raftpb.Entry, bool) {
	if len(c.ents) == 0 || lo < c.first || hi > c.first+uint64(len(c.ents)) || lo >= hi {
		return nil, false
	}
	a, b := int(lo-c.first), int(hi-c.first)
	var size uint64
	for i := a; i < b; i++ {
		size += uint64(headerSize + len(c.ents[i].Data))
		if i > a && size > maxSize {
			b = i
			break
		}
	}
	out := make([]raftpb.Entry, b-a)
	copy(out, c.ents[a:b])
	return out, true
}

// unfaulted reads a segment without injected read faults (recovery: a
// fault there would be a node that cannot start, not a failed request).
type unfaulted struct{ f *vfs.File }

func (u unfaulted) ReadAt(b []byte, off int64) (int, error) { return u.f.ReadAtUnfaulted(b, off) }
