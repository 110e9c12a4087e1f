package nezha

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// Store is the Nezha state machine of one node: an Index of key -> Location
// over the value log (the Raft log, read through systems.ValueLog) and the
// key-sorted runs GC writes. It implements systems.StateMachine,
// systems.StateHasher, systems.Snapshotter and (with GC) systems.GCReporter.
//
// Apply is called by one goroutine; Get, Scan and StateHash by any number
// of goroutines concurrently with it and with GC.
type Store struct {
	name      string
	cfg       Config
	dir       string // the node's -data directory
	sortedDir string
	index     Index
	vlog      systems.ValueLog
	ctl       systems.LogControl
	logger    *slog.Logger
	runs      *runSet
	// fs opens the runs, the manifest and the checkpoint (nil: plain
	// files; see internal/vfs).
	fs *vfs.FS
	// clock is Config.Clock (default time.Now): TTL expiry is judged
	// against it.
	clock func() time.Time

	// applyMu serializes the writers of the index: Apply and GC's switch.
	applyMu sync.Mutex
	batch   IndexBatch // reused under applyMu

	// gate: readers hold it shared while they turn locations into values;
	// removing files (GC) and replacing the index (snapshot restore) hold
	// it exclusively, so a reader never meets a file deleted under it.
	gate sync.RWMutex

	// man is the sorted/ manifest; written under manMu.
	manMu sync.Mutex
	man   manifest
	// orphanRuns are run files the manifest does not list, found at open
	// (recoverRuns) and removed once the index is open (removeOrphanRuns).
	orphanRuns []uint64

	gc *collector // nil without GC (nezha-nogc)

	// scanLogBytes and scanRunBytes count the record bytes scans read from
	// log segments and from sorted runs (GC's scan trigger).
	scanLogBytes, scanRunBytes atomic.Int64
}

var (
	_ systems.StateMachine         = (*Store)(nil)
	_ systems.StateHasher          = (*Store)(nil)
	_ systems.Snapshotter          = (*Store)(nil)
	_ systems.GCReporter           = (*Store)(nil)
	_ systems.StorageReporter      = (*Store)(nil)
	_ systems.IndexEntriesReporter = (*Store)(nil)
)

// IndexKind is the kind of the store's index (IndexLevelDB or IndexMemory).
func (s *Store) IndexKind() string { return s.index.Kind() }

// AppliedIndex implements systems.StateMachine: the Raft index of the last
// applied entry stored in the index.
func (s *Store) AppliedIndex() uint64 { return s.index.AppliedIndex() }

// Apply implements systems.StateMachine (docs/architecture.md section 3). It writes one
// index batch holding, for every entry, key -> entry.Location for OpPut
// (never the value), a tombstone for OpDelete and nothing for OpNone,
// together with the new applied index. Entries at or below the applied
// index are applied again (the node replays them after the log lost its
// tail, and their records may have moved). It fails (fatally for the node)
// on an unknown op, on a put whose Location is not its entry's, and on an
// index write error.
func (s *Store) Apply(entries []systems.AppliedEntry) error {
	if len(entries) == 0 {
		return nil
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	b := &s.batch
	b.Reset()
	var acct *liveAccount
	if s.gc != nil {
		acct = s.gc.newAccount()
	}
	for i := range entries {
		e := &entries[i]
		switch e.Command.Op {
		case systems.OpPut:
			if e.Location.Index != e.Index || e.Location.Offset < 0 || e.Location.Length == 0 {
				return fmt.Errorf("nezha: put of key %s at index %d has location %s, not one of its entry",
					keyString(e.Command.Key), e.Index, e.Location)
			}
			loc := e.Location
			loc.ExpiresUnixNano = e.Command.ExpiresUnixNano
			b.Put(e.Command.Key, loc)
			if acct != nil {
				if err := acct.set(e.Command.Key, &loc, systems.Location{}); err != nil {
					return err
				}
			}
		case systems.OpDelete:
			b.Delete(e.Command.Key)
			if acct != nil {
				if err := acct.set(e.Command.Key, nil, e.Location); err != nil {
					return err
				}
			}
		case systems.OpNone:
		default:
			return fmt.Errorf("nezha: entry %d has unknown op %s", e.Index, e.Command.Op)
		}
	}
	b.SetApplied(entries[len(entries)-1].Index)
	if err := s.indexIO(vfs.OpWrite, b.SizeBytes()); err != nil {
		return err
	}
	if err := s.index.Write(b); err != nil {
		return err
	}
	if acct != nil {
		acct.commit()
		s.gc.kickNonBlocking()
	}
	return nil
}

var _ systems.WriteStaller = (*Store)(nil)

var _ systems.TTLStore = (*Store)(nil)

// SupportsTTL implements systems.TTLStore: expiry times are kept in the
// index and honoured by Get, Scan, snapshots, StateHash and GC.
func (s *Store) SupportsTTL() bool { return true }

// WriteStall implements systems.WriteStaller: an error while the garbage
// GC has not reclaimed is at least Config.GCStallGarbageBytes (never
// without GC, or with the limit 0).
func (s *Store) WriteStall() error {
	if s.gc == nil || s.gc.cfg.GCStallGarbageBytes == 0 {
		return nil
	}
	if g := s.gc.garbage.Load(); g >= s.gc.cfg.GCStallGarbageBytes {
		return fmt.Errorf("write stall: %d bytes of garbage not yet reclaimed by GC (-gcStallGarbageBytes %d)",
			g, s.gc.cfg.GCStallGarbageBytes)
	}
	return nil
}

// Get implements systems.StateMachine: one index lookup, then one positioned
// read of the value's record, from the log or from a sorted run. The value
// is the caller's. An error (the record failed its CRC or bounds check,
// holds another key, or could not be read; the first two wrap
// systems.ErrCorrupt and name the location) concerns this key only; other
// keys keep working.
func (s *Store) Get(key []byte) ([]byte, bool, error) { return s.get(nil, key, false) }

// GetAppend is Get that appends the value to dst and returns the result
// (dst itself when the key is absent or on an error). A value in a sorted
// run is read straight into dst's room, so a caller that passes the same
// buffer again allocates nothing per GET; a value still in the log is read
// into a new buffer and copied.
func (s *Store) GetAppend(dst, key []byte) ([]byte, bool, error) { return s.get(dst, key, true) }

func (s *Store) get(dst, key []byte, appendTo bool) ([]byte, bool, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	loc, found, err := s.index.Get(key)
	if err != nil || !found || loc.Expired(s.nowUnixNano()) {
		return dst, false, err
	}
	if appendTo && isRun(loc) {
		out, err := s.runs.appendValue(dst, key, loc)
		if err != nil {
			return dst, false, readErr(key, loc, err)
		}
		return out, true, nil
	}
	v, err := s.readValue(key, loc)
	if err != nil {
		return dst, false, err
	}
	if appendTo {
		v = append(dst, v...)
	}
	return v, true, nil
}

// nowUnixNano is the store's clock in Unix nanoseconds (TTL expiry).
func (s *Store) nowUnixNano() int64 { return s.clock().UnixNano() }

// readValue reads the value of key at loc (a log record or a run record),
// checking that the record is a put of key. Caller holds gate.
func (s *Store) readValue(key []byte, loc systems.Location) ([]byte, error) {
	if isRun(loc) {
		v, err := s.runs.readValue(key, loc)
		if err != nil {
			return nil, readErr(key, loc, err)
		}
		return v, nil
	}
	c, err := s.vlog.ReadCommand(loc)
	if err != nil {
		return nil, readErr(key, loc, err)
	}
	if err := checkCommand(key, loc, c); err != nil {
		return nil, err
	}
	return c.Value, nil
}

func readErr(key []byte, loc systems.Location, err error) error {
	if errors.Is(err, systems.ErrSegmentRemoved) {
		// Under the gate, a location into a removed file is a lost value.
		err = fmt.Errorf("%w: %w", systems.ErrCorrupt, err)
	}
	return fmt.Errorf("nezha: read value of key %s at %s: %w", keyString(key), locString(loc), err)
}

func checkCommand(key []byte, loc systems.Location, c systems.Command) error {
	if c.Op != systems.OpPut || !bytes.Equal(c.Key, key) {
		return fmt.Errorf("nezha: %w: %s holds a %s of key %s, want a put of key %s",
			systems.ErrCorrupt, locString(loc), c.Op, keyString(c.Key), keyString(key))
	}
	return nil
}

// readValues reads the values of keys at locs, coalescing adjacent records
// of one file into one read (values GC wrote in key order are read
// sequentially: the paper's SCAN gain). The values are the caller's.
// Caller holds gate.
func (s *Store) readValues(keys [][]byte, locs []systems.Location) ([][]byte, error) {
	out := make([][]byte, len(locs))
	err := s.forValues(keys, locs, 4<<20, false, func(i int, v []byte) error {
		out[i] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// forValues calls fn with the value of each of keys at locs, in order,
// until fn fails (its error is returned as is), reading adjacent records
// of one file together (runs: spans of about spanBytes). With reuse, the
// values of sorted runs are read into one buffer (runSet.forValues) and
// are valid only during fn. Caller holds gate.
func (s *Store) forValues(keys [][]byte, locs []systems.Location, spanBytes int64, reuse bool, fn func(i int, value []byte) error) error {
	var fnErr error
	call := func(i int, v []byte) error {
		fnErr = fn(i, v)
		return fnErr
	}
	for start := 0; start < len(locs); {
		end := start + 1
		for end < len(locs) && isRun(locs[end]) == isRun(locs[start]) && locs[end].Segment == locs[start].Segment {
			end++
		}
		if isRun(locs[start]) {
			err := s.runs.forValues(keys[start:end], locs[start:end], spanBytes, reuse, func(i int, v []byte) error { return call(start+i, v) })
			if err != nil {
				if fnErr != nil {
					return fnErr
				}
				return readErr(keys[start], locs[start], err)
			}
		} else {
			cs, err := s.vlog.ReadCommands(locs[start:end])
			if err != nil {
				return readErr(keys[start], locs[start], err)
			}
			for i, c := range cs {
				if err := checkCommand(keys[start+i], locs[start+i], c); err != nil {
					return err
				}
				if err := call(start+i, c.Value); err != nil {
					return err
				}
			}
		}
		start = end
	}
	return nil
}

// recordOverheadMax bounds the bytes of a value-log or run record beyond
// its key and value (header, op, request id, key length).
const recordOverheadMax = headerOverheadLog

// headerOverheadLog: raftlog header (25) + op (1) + request id (<= 10) +
// key length (<= 10).
const headerOverheadLog = 25 + 1 + 10 + 10

// Scan implements systems.StateMachine: pairs with start <= key < end
// (empty end: no upper bound) in ascending key order, at most limit of them
// (0: no limit). Once the keys and values collected reach maxBytes (<= 0:
// no cap) it stops, with more=true if a further key exists in the range;
// it always returns at least one pair if the range holds one. The keys
// come from one consistent index view (sized from the record lengths);
// values are then read with coalesced reads. A value read error fails the
// whole scan (see Get).
func (s *Store) Scan(start, end []byte, limit int, maxBytes int) ([]systems.KeyValue, bool, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	keys, locs, more, err := s.scanLocations(start, end, limit, maxBytes)
	if err != nil {
		return nil, false, err
	}
	vals, err := s.readValues(keys, locs)
	if err != nil {
		return nil, false, err
	}
	s.countScan(locs)
	kvs := make([]systems.KeyValue, 0, len(keys))
	total := 0
	for i := range keys {
		kvs = append(kvs, systems.KeyValue{Key: keys[i], Value: vals[i]})
		total += len(keys[i]) + len(vals[i])
		if maxBytes > 0 && total >= maxBytes {
			return kvs, more || i+1 < len(keys), nil
		}
	}
	return kvs, more, nil
}

// scanSpanBytes bounds one read of adjacent run records in ScanFunc, which
// reads every span into the same buffer.
const scanSpanBytes = 256 << 10

// ScanFunc calls fn with the pairs Scan(start, end, limit, 0) returns, in
// order, until fn returns false or an error (which ScanFunc returns).
// key and value are valid only during the call: the values of sorted runs
// are read, span by span (at most about 256 KiB of adjacent records per
// read, or one record), into one buffer that the scan reuses, so a scan
// allocates about one span's buffer instead of one per value. A value read
// error ends the scan as Scan's does.
func (s *Store) ScanFunc(start, end []byte, limit int, fn func(key, value []byte) (bool, error)) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	keys, locs, _, err := s.scanLocations(start, end, limit, 0)
	if err != nil {
		return err
	}
	done := 0
	err = s.forValues(keys, locs, scanSpanBytes, true, func(i int, v []byte) error {
		done = i + 1
		more, err := fn(keys[i], v)
		if err == nil && !more {
			return errScanDone
		}
		return err
	})
	s.countScan(locs[:done])
	if errors.Is(err, errScanDone) {
		return nil
	}
	return err
}

// errScanDone ends ScanFunc's reads once fn wants no more pairs.
var errScanDone = errors.New("nezha: scan done")

// scanLocations collects the keys and locations of a scan (Scan's
// arguments) from one consistent index view, leaving out expired keys;
// more is true if maxBytes stopped it before the range's end. Caller
// holds gate.
func (s *Store) scanLocations(start, end []byte, limit int, maxBytes int) (keys [][]byte, locs []systems.Location, more bool, err error) {
	if len(end) > 0 && bytes.Compare(start, end) >= 0 {
		return nil, nil, false, nil
	}
	view, err := s.index.View()
	if err != nil {
		return nil, nil, false, err
	}
	estimate := 0 // record bytes: at least key + value each
	now := s.nowUnixNano()
	err = view.Iterate(start, end, func(key []byte, loc systems.Location) (bool, error) {
		if loc.Expired(now) {
			return true, nil
		}
		// Enough records to reach maxBytes even at the largest overhead?
		if len(keys) > 0 && maxBytes > 0 && estimate >= maxBytes+recordOverheadMax*len(keys) {
			more = true
			return false, nil
		}
		keys = append(keys, bytes.Clone(key))
		locs = append(locs, loc)
		estimate += int(loc.Length)
		return limit <= 0 || len(keys) < limit, nil
	})
	view.Release()
	if err != nil {
		return nil, nil, false, err
	}
	return keys, locs, more, nil
}

// countScan adds the record bytes a scan read to the log and run
// counters (GC's scan trigger).
func (s *Store) countScan(locs []systems.Location) {
	var fromLog, fromRuns int64
	for _, l := range locs {
		if isRun(l) {
			fromRuns += int64(l.Length)
		} else {
			fromLog += int64(l.Length)
		}
	}
	s.scanLogBytes.Add(fromLog)
	s.scanRunBytes.Add(fromRuns)
}

// StateHash implements systems.StateHasher over one consistent index view
// (a LevelDB snapshot, or a memory index view; Apply goes on meanwhile).
// The sum is SHA-256 of
//
//	applied index (8 bytes, big endian)
//	then for every live key in ascending order:
//	  uvarint(len(key)) | key | uvarint(len(value)) | value
//
// It reads every value, so its cost is that of a full scan. The layout of
// values (log or runs) does not change the sum. Keys expired by the
// store's clock are left out (replicas whose clocks straddle an expiry
// time may disagree until both passed it).
func (s *Store) StateHash() ([]byte, uint64, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	view, err := s.index.View()
	if err != nil {
		return nil, 0, err
	}
	defer view.Release()
	applied := view.AppliedIndex()
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	h.Write(binary.BigEndian.AppendUint64(buf[:0], applied))
	now := s.nowUnixNano()
	err = view.Iterate(nil, nil, func(key []byte, loc systems.Location) (bool, error) {
		if loc.Expired(now) {
			return true, nil
		}
		v, err := s.readValue(key, loc)
		if err != nil {
			return false, err
		}
		h.Write(binary.AppendUvarint(buf[:0], uint64(len(key))))
		h.Write(key)
		h.Write(binary.AppendUvarint(buf[:0], uint64(len(v))))
		h.Write(v)
		return true, nil
	})
	if err != nil {
		return nil, 0, err
	}
	return h.Sum(nil), applied, nil
}

// iterateChunks calls fn with consecutive chunks of up to n (key, location)
// pairs, each taken from a fresh index view that is released before fn
// runs (a memory index view records pre-images while open). The gate is held
// shared during each chunk, so the files the chunk's locations name exist
// while fn runs; fn must not take the gate itself. The chunks together are
// not one consistent view; GC and snapshots tolerate that (GC re-validates;
// see WriteSnapshot).
func (s *Store) iterateChunks(n int, fn func(keys [][]byte, locs []systems.Location) error) error {
	var next []byte
	for {
		more, err := s.chunk(n, &next, fn)
		if err != nil || !more {
			return err
		}
	}
}

// chunk is one step of iterateChunks; more is false after the last chunk.
func (s *Store) chunk(n int, next *[]byte, fn func(keys [][]byte, locs []systems.Location) error) (more bool, err error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	view, err := s.index.View()
	if err != nil {
		return false, err
	}
	var keys [][]byte
	var locs []systems.Location
	err = view.Iterate(*next, nil, func(key []byte, loc systems.Location) (bool, error) {
		keys = append(keys, bytes.Clone(key))
		locs = append(locs, loc)
		return len(keys) < n, nil
	})
	view.Release()
	if err != nil || len(keys) == 0 {
		return false, err
	}
	if err := fn(keys, locs); err != nil {
		return false, err
	}
	*next = append(bytes.Clone(keys[len(keys)-1]), 0)
	return len(keys) == n, nil
}

var _ systems.SnapshotTaker = (*Store)(nil)

// TakeSnapshot implements systems.SnapshotTaker with a GC round of
// TriggerSnapshot, run by the GC loop between its other rounds: the index
// made durable (LevelDB sync, or a memory-index checkpoint), the Raft log
// compacted to the compaction bound, and the files below it that hold no
// live byte removed. It returns the log's compaction point. nezha-nogc
// refuses (systems.ErrSnapshotUnsupported): its log only grows.
func (s *Store) TakeSnapshot(ctx context.Context) (uint64, error) {
	if s.gc == nil {
		return 0, fmt.Errorf("%w: %s has no GC: its Raft log (the value log) only grows", systems.ErrSnapshotUnsupported, s.name)
	}
	return s.gc.takeSnapshot(ctx)
}

// GCRounds implements systems.GCReporter (empty without GC).
func (s *Store) GCRounds() []systems.GCRound {
	if s.gc == nil {
		return nil
	}
	return s.gc.hist.Rounds()
}

// GCTotals implements systems.GCTotalsReporter (zero without GC).
func (s *Store) GCTotals() systems.GCTotals {
	if s.gc == nil {
		return systems.GCTotals{}
	}
	return s.gc.hist.Totals()
}

// StorageShape implements systems.StorageReporter from in-memory counts:
// Levels are the tiers of the sorted runs (tier 0 first, every tier up to
// the highest: runs and file bytes), ValueLogBytes the bytes of the Raft
// log's segments, SortedRunBytes those of the runs, and LiveBytes the
// record bytes the index points at (with GC only: nezha-nogc does not
// count them).
func (s *Store) StorageShape() systems.StorageShape {
	var sh systems.StorageShape
	if s.ctl != nil {
		for _, sg := range s.ctl.Segments() {
			sh.ValueLogBytes += sg.SizeBytes
		}
	}
	for _, id := range s.runs.ids() {
		r := s.runs.get(id)
		if r == nil {
			continue
		}
		for len(sh.Levels) <= r.tier {
			sh.Levels = append(sh.Levels, systems.LevelShape{Level: len(sh.Levels)})
		}
		sh.Levels[r.tier].Files++
		sh.Levels[r.tier].Bytes += r.size
		sh.SortedRunBytes += r.size
	}
	if s.gc != nil {
		s.applyMu.Lock()
		for _, n := range s.gc.live {
			sh.LiveBytes += n
		}
		s.applyMu.Unlock()
	}
	return sh
}

// IndexEntries implements systems.IndexEntriesReporter: the live keys in
// the index, counted exactly with GC's live bytes (rebuilt from the index
// at start and after a snapshot restore); ok is false without GC
// (nezha-nogc does not look up a key's old location on a put, so it cannot
// count them).
func (s *Store) IndexEntries() (n int64, ok bool) {
	if s.gc == nil {
		return 0, false
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.gc.liveKeys, true
}

// Close implements systems.StateMachine: it stops GC and closes the index
// and the runs (the value log belongs to the node). Unsynced LevelDB writes
// are recovered by replay.
func (s *Store) Close() error {
	if s.gc != nil {
		s.gc.stop()
	}
	s.runs.closeAll()
	if err := s.index.Close(); err != nil {
		return fmt.Errorf("nezha: close %s index: %w", s.index.Kind(), err)
	}
	return nil
}

// openIndex opens the configured index; a memory index loads the GC
// checkpoint if there is one.
func (s *Store) openIndex() (Index, error) {
	x, err := openIndex(s.cfg.Index, filepath.Join(s.dir, IndexDir), s.cfg.IndexCacheEntries)
	if err != nil {
		return nil, err
	}
	if m, ok := x.(*MemoryIndex); ok {
		if _, err := loadCheckpoint(s.fs.Base(), m, filepath.Join(s.dir, checkpointName)); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// syncIndex makes the index durable up to its applied index: LevelDB
// syncs its journal, a memory index writes a checkpoint.
func (s *Store) syncIndex() error {
	if m, ok := s.index.(*MemoryIndex); ok {
		return writeCheckpoint(s.fs, m, filepath.Join(s.dir, checkpointName))
	}
	if err := s.indexIO(vfs.OpSync, 0); err != nil {
		return err
	}
	return s.index.Sync()
}

// removeOrphanRuns deletes the run files recoverRuns found unlisted (a
// GC or restore that crashed before registering them), once the index is
// open: if the index points into one of them, the manifest was lost or
// damaged, not a registration interrupted (a round registers its run
// before it repoints any key), and Open refuses, keeping the files,
// instead of deleting values the index still needs.
func (s *Store) removeOrphanRuns() error {
	if len(s.orphanRuns) == 0 {
		return nil
	}
	orphan := map[uint64]bool{}
	for _, id := range s.orphanRuns {
		orphan[runFlag|id] = true
	}
	var keys int
	var first uint64
	err := s.iterateChunks(4096, func(_ [][]byte, locs []systems.Location) error {
		for _, l := range locs {
			if orphan[l.Segment] {
				if keys == 0 {
					first = l.Segment &^ runFlag
				}
				keys++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if keys > 0 {
		return fmt.Errorf("nezha: the index points %d keys into run %s, which %s does not list (lost or damaged manifest?): "+
			"refusing to start; the run files are kept", keys, runName(first), filepath.Join(s.sortedDir, manifestName))
	}
	for _, id := range s.orphanRuns {
		s.logger.Warn("nezha: removing a run no manifest lists (an interrupted GC or restore)", "run", runName(id))
		if err := s.fs.Base().Remove(filepath.Join(s.sortedDir, runName(id))); err != nil {
			return fmt.Errorf("nezha: %w", err)
		}
	}
	s.orphanRuns = nil
	return nil
}

// recoverRuns reconciles sorted/ with its manifest at open: it finishes or
// discards a staged snapshot restore, deletes run files the manifest does
// not list (a GC or restore that crashed before registering them), and
// opens the live runs.
func (s *Store) recoverRuns() error {
	m, err := readManifest(s.fs.Base(), s.sortedDir)
	if err != nil {
		return err
	}
	s.man = m
	files, err := listRunFiles(s.fs.Base(), s.sortedDir)
	if err != nil {
		return err
	}
	s.orphanRuns = nil
	for _, id := range files {
		if !m.hasRun(id) && (m.Restore == nil || m.Restore.Run != id) {
			// Removed by removeOrphanRuns once the index is open and
			// points at none of them.
			s.orphanRuns = append(s.orphanRuns, id)
		}
		if id >= s.man.NextRun {
			s.man.NextRun = id + 1
		}
	}
	for _, id := range m.Runs {
		r, err := openRun(s.fs, s.sortedDir, id)
		if err != nil {
			return err
		}
		t, ok := m.Tiers[id]
		if !ok { // a version-1 manifest
			t = tierFor(r.dataBytes, s.cfg.GCFanout)
		}
		r.tier = t
		s.runs.add(r)
	}
	return nil
}

// indexIO injects the disk faults of s.fs at the calls into the LevelDB
// index (its files are LevelDB's own, not opened through the FS); a memory
// index writes nothing there.
func (s *Store) indexIO(kind vfs.OpKind, size int64) error {
	if !s.fs.Injecting() || s.index.Kind() != IndexLevelDB {
		return nil
	}
	op := vfs.Op{Kind: kind, Path: filepath.Join(s.dir, IndexDir), SizeBytes: size}
	if err := s.fs.MaybeError(op); err != nil {
		return fmt.Errorf("nezha: index: %w", s.fs.Observe(op, err))
	}
	return nil
}
