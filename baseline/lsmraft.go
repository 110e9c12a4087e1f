package baseline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/btree"
	"github.com/linxGnu/grocksdb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// LSM-Raft (Zhang, Tan, Song, Huang, Wang, Proc. ACM Manag. Data 3(6),
// 2025): the replicated log is a sequence of elements, each either raw
// entries or an SST file covering a span of log indexes. No implementation
// of the paper is public; this one follows the equivalent the Nezha
// authors built (a span is always shipped as an SST file, spans are cut by
// size or idleness, RocksDB's SstFileWriter and IngestExternalFile), and
// docs/design/2026-12-04-lsm-raft.md gives the reasons for each choice.
//
// Leader. Apply writes the entries into RocksDB as original does (one
// WriteBatch, WAL on) and adds them to the span being built: the last
// write of each key (keyOps). Once the span holds -lsmraft.spanBytes of
// keys and values, or nothing was applied for -lsmraft.spanIdle, it is
// cut: a background goroutine writes it with SstFileWriter, in key order
// (puts, and tombstones for deletes), as
// <data>/lsmraft/spans/FIRST-LAST.sst, and keeps the newest
// -lsmraft.retainSpans of them. The node ships each to every follower
// (systems.SpanReplicator; raftkv/node/span.go).
//
// Follower. Apply holds the entries in memory (keyOps, the last write of
// each key) instead of writing them: the node's applied index moves, the
// state machine's AppliedIndex (stored) does not. Get, Scan, StateHash and
// WriteSnapshot read the held writes over RocksDB (mergedIter), so reads
// see every applied entry. A span First..Last is ingested (IngestExternalFile,
// move_files: the file becomes an L0 or lower SST of the data column family,
// with no WAL, memtable or flush for its entries) once the follower has
// applied Last, if First <= stored+1 <= Last; the held writes at or below
// Last are then dropped. Spans are ingested strictly in log order: one
// already passed (Last <= stored) is skipped, one too far ahead
// (First > stored+1) refused with stored+1, and the leader goes back.
// Ingesting First..Last over a store at stored >= First-1 is exact: the
// span holds the last write of every key written in First..Last, and a key
// not written there has the same value at stored and at Last.
//
// The applied index travels inside the data: under the empty key of the
// data column family (no client key is empty; readers skip it), 16 bytes,
// the first and last index of what wrote it. Every WriteBatch of entries
// carries it, and every span file holds it, so an ingestion moves data and
// index together in one atomic RocksDB operation, and a restart resumes
// after the last span ingested or batch written (readApplied). The meta
// column family holds an index only after a snapshot restore (no empty key
// then).
//
// A follower replays what it holds into RocksDB itself (one WriteBatch per
// 4 MiB, WAL on, the index in the last) when it becomes leader (as its
// first act: SetLeader wakes a goroutine for it, and the leader's next
// Apply does it at the latest), when the leader has no span covering its
// next index (NoEarlier), when the held writes exceed
// -lsmraft.maxHeldBytes, and when asked to compact its log (SnapshotTaker:
// the state applied so far must then be in RocksDB).
//
// Locks: applyMu (Store) serializes Apply, cuts, replays and ingestions;
// viewMu guards held and its pairing with RocksDB's contents: a reader
// takes its RocksDB iterator and a clone of held under it, and an
// ingestion or a replay changes RocksDB first (every key it changes is
// masked by a held write, so readers see no difference) and drops the held
// writes under it after. Order: Store.mu, applyMu, viewMu, lsmRaft.mu.

// Crash points, the values of -lsmraft.crashPoint (testing): the node kills
// itself (SIGKILL) when span handling reaches the point.
const (
	// CrashSpanSend: a leader, once a span it sends was half read.
	CrashSpanSend = "span-send"
	// CrashSpanTransfer: a follower, once half of a span it receives is
	// written to its file.
	CrashSpanTransfer = "span-transfer"
	// CrashSpanIngest: a follower, a received span complete and synced,
	// at the ingestion (before RocksDB records it).
	CrashSpanIngest = "span-ingest"
	// CrashSpanAfterIngest: a follower, right after the ingestion, before
	// its index and held entries change and before it answers.
	CrashSpanAfterIngest = "span-after-ingest"
)

// LSMRaftCrashPoints returns every lsm-raft crash point.
func LSMRaftCrashPoints() []string {
	return []string{CrashSpanSend, CrashSpanTransfer, CrashSpanIngest, CrashSpanAfterIngest}
}

// Why a follower replayed what it held (the reason label of
// nezha_lsmraft_replays_total).
const (
	replayLeader   = "leader"
	replayNoSpan   = "no_span"
	replayBound    = "bound"
	replaySnapshot = "snapshot"
)

func replayReasons() []string {
	return []string{replayLeader, replayNoSpan, replayBound, replaySnapshot}
}

const (
	// lsmRaftDir holds spansDir (the spans a leader cut) and inDir (spans
	// being received) under the node's data directory. Neither outlives a
	// restart: spans are not kept across one, and a span is taken only
	// once RocksDB ingested it.
	lsmRaftDir = "lsmraft"
	spansDir   = "spans"
	inDir      = "in"
	// spanIndexBytes is the size of the index value (first, last).
	spanIndexBytes = 16
	// cutQueue is how many cut spans may wait for the writer before Apply
	// waits (bounds the memory of spans not yet written).
	cutQueue = 2
)

// keptSpan is a span file a leader keeps.
type keptSpan struct {
	h    systems.SpanHeader
	path string
}

// lsmRaft is the lsm-raft part of a Store.
type lsmRaft struct {
	s            *Store
	spanBytes    int64
	spanIdle     time.Duration
	maxHeldBytes int64
	retain       int
	crashAt      string
	spans, in    string // directories

	leader  atomic.Bool
	leaderc chan struct{} // SetLeader(true): replay now (capacity 1)
	// stored is the index RocksDB reflects (AppliedIndex). Written under
	// applyMu and viewMu.
	stored atomic.Uint64

	// viewMu guards held (the entries a follower holds above stored).
	viewMu    sync.Mutex
	held      *keyOps
	heldBytes atomic.Int64

	// Under applyMu: the span being built, and when an entry was last
	// applied.
	building  *keyOps
	lastApply time.Time

	cutc  chan *keyOps
	stopc chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	// mu guards kept (oldest first) and cutNotify (closed at each cut).
	mu        sync.Mutex
	kept      []keptSpan
	cutNotify chan struct{}

	// RocksDB objects of span writing and ingestion (freed by release).
	sstOpts    *grocksdb.Options
	envOpts    *grocksdb.EnvOptions
	ingestOpts *grocksdb.IngestExternalFileOptions

	counters lsmRaftCounters
}

// lsmRaftCounters are the lsm-raft metrics (Store.Collect).
type lsmRaftCounters struct {
	spansCut, cutBytes, cutFailures         atomic.Int64
	spansIngested, ingestedBytes            atomic.Int64
	spansSkipped, spansRefused, spansBehind atomic.Int64
	replays                                 [4]atomic.Int64 // by replayReasons
	replayedBytes                           atomic.Int64
}

func newLSMRaft(s *Store, c *Config) (*lsmRaft, error) {
	comp, _ := compressionType(c.Compression)
	lr := &lsmRaft{
		s: s, spanBytes: c.spanBytes(), spanIdle: c.SpanIdle, maxHeldBytes: c.maxHeldBytes(), retain: c.RetainSpans,
		crashAt: c.CrashPoint,
		spans:   filepath.Join(s.root, lsmRaftDir, spansDir), in: filepath.Join(s.root, lsmRaftDir, inDir),
		leaderc: make(chan struct{}, 1), held: newKeyOps(), building: newKeyOps(),
		cutc: make(chan *keyOps, cutQueue), stopc: make(chan struct{}), cutNotify: make(chan struct{}),
	}
	lr.stored.Store(s.applied.Load())
	for _, d := range []string{lr.spans, lr.in} {
		if err := os.RemoveAll(d); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// Span files are read by the followers' RocksDB as SST files of the
	// data column family: the same table format and compression.
	lr.sstOpts = grocksdb.NewDefaultOptions()
	lr.sstOpts.SetBlockBasedTableFactory(s.bbto)
	lr.sstOpts.SetCompression(comp)
	lr.envOpts = grocksdb.NewDefaultEnvOptions()
	lr.ingestOpts = grocksdb.NewDefaultIngestExternalFileOptions()
	lr.ingestOpts.SetMoveFiles(true)
	return lr, nil
}

func (lr *lsmRaft) start() {
	lr.wg.Add(2)
	go lr.runWriter()
	go lr.runTimer()
}

// stop stops the goroutines (a cut span not yet written is dropped: the
// followers replay instead). Called by Close before it takes Store.mu.
func (lr *lsmRaft) stop() {
	lr.once.Do(func() {
		close(lr.stopc)
		lr.wg.Wait()
	})
}

// release frees the RocksDB objects; after stop.
func (lr *lsmRaft) release() {
	lr.sstOpts.Destroy()
	lr.envOpts.Destroy()
	lr.ingestOpts.Destroy()
}

// spanIndexValue encodes the index under the empty key: first and last
// index, big-endian.
func spanIndexValue(first, last uint64) []byte {
	v := make([]byte, spanIndexBytes)
	binary.BigEndian.PutUint64(v, first)
	binary.BigEndian.PutUint64(v[8:], last)
	return v
}

// readSpanIndex reads the index under the empty key of the data column
// family (ok false if there is none).
func (s *Store) readSpanIndex(ro *grocksdb.ReadOptions) (first, last uint64, ok bool, err error) {
	h, err := s.db.GetPinnedCF(ro, s.data, nil)
	if err != nil {
		return 0, 0, false, fmt.Errorf("read the span index: %w", err)
	}
	defer h.Destroy()
	if !h.Exists() {
		return 0, 0, false, nil
	}
	v := h.Data()
	if len(v) != spanIndexBytes {
		return 0, 0, false, fmt.Errorf("%w: span index under the empty key is %d bytes, want %d", systems.ErrCorrupt, len(v), spanIndexBytes)
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), true, nil
}

// crashPoint kills the process if the configured crash point is name.
func (lr *lsmRaft) crashPoint(name string) {
	if lr.crashAt != name {
		return
	}
	lr.s.logger.Error("lsm-raft: crash point reached; killing the node", "crash_point", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // wait for the signal
}

// apply is Store.Apply in lsm-raft mode; the caller holds Store.mu shared
// and applyMu, and checked the entries.
func (lr *lsmRaft) apply(entries []systems.AppliedEntry) error {
	s := lr.s
	last := entries[len(entries)-1].Index
	lr.lastApply = time.Now()
	if lr.leader.Load() {
		if lr.pending() {
			if err := lr.replayHeld(replayLeader); err != nil {
				return err
			}
		}
		if err := s.writeEntries(entries); err != nil {
			return err
		}
		lr.stored.Store(last)
		s.applied.Store(last)
		lr.build(entries)
		return nil
	}
	// A follower (or a leader that stepped down): the span being built
	// covers entries up to the previous call; cut it as it is.
	lr.cut()
	lr.viewMu.Lock()
	for i := range entries {
		lr.held.add(&entries[i])
	}
	lr.heldBytes.Store(lr.held.bytes)
	lr.viewMu.Unlock()
	s.applied.Store(last)
	if lr.held.bytes > lr.maxHeldBytes {
		return lr.replayHeld(replayBound)
	}
	return nil
}

// pending reports whether RocksDB is behind the applied index (entries are
// held, or held no-ops moved the applied index). Under applyMu.
func (lr *lsmRaft) pending() bool {
	return lr.held.t.Len() > 0 || lr.stored.Load() != lr.s.applied.Load()
}

// build adds a leader's applied entries to the span being built and cuts
// it once it is large enough. Under applyMu.
func (lr *lsmRaft) build(entries []systems.AppliedEntry) {
	for i := range entries {
		if e := &entries[i]; !lr.building.empty() && e.Index != lr.building.last+1 {
			// Not contiguous (the node replays from an older index): a
			// span must hold every entry of its range.
			lr.building = newKeyOps()
		}
		lr.building.add(&entries[i])
	}
	if lr.building.bytes >= lr.spanBytes {
		lr.cut()
	}
}

// cut hands the span being built to the writer (waiting while cutQueue
// spans wait for it). Under applyMu; the writer never takes it.
func (lr *lsmRaft) cut() {
	if lr.building.empty() {
		return
	}
	c := lr.building
	lr.building = newKeyOps()
	select {
	case lr.cutc <- c:
	case <-lr.stopc:
	}
}

// runTimer cuts a span once the leader applied nothing for spanIdle, and
// replays the held entries when the node becomes leader.
func (lr *lsmRaft) runTimer() {
	defer lr.wg.Done()
	t := time.NewTicker(max(lr.spanIdle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-lr.stopc:
			return
		case <-lr.leaderc:
			if !lr.leader.Load() {
				continue
			}
			if err := lr.replayNow(replayLeader); err != nil && !errors.Is(err, ErrClosed) {
				// The leader's next Apply meets it again (and fails).
				lr.s.logger.Error("lsm-raft: replay of held entries failed", "err", err)
			}
		case <-t.C:
			_ = lr.s.applying(func() error {
				if time.Since(lr.lastApply) >= lr.spanIdle {
					lr.cut()
				}
				return nil
			})
		}
	}
}

// replayNow replays what is held, if anything, for reason.
func (lr *lsmRaft) replayNow(reason string) error {
	return lr.s.applying(func() error {
		if lr.pending() {
			return lr.replayHeld(reason)
		}
		return nil
	})
}

// replayHeld writes the held entries into RocksDB (WriteBatches of up to
// restoreBatchBytes, WAL on, the index in the last) and drops them:
// RocksDB then reflects the applied index. Under Store.mu and applyMu.
func (lr *lsmRaft) replayHeld(reason string) error {
	s := lr.s
	lr.viewMu.Lock()
	t := lr.held.t.Clone()
	lr.viewMu.Unlock()
	first, applied := lr.stored.Load()+1, s.applied.Load()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	var err error
	pending, total := 0, int64(0)
	t.Ascend(func(op keyOp) bool {
		if op.del {
			wb.DeleteCF(s.data, op.key)
		} else {
			wb.PutCF(s.data, op.key, op.value)
		}
		n := len(op.key) + len(op.value)
		pending += n
		total += int64(n)
		if pending >= restoreBatchBytes {
			// Without the index: a crash here leaves RocksDB ahead of its
			// index, and the restart's replay converges.
			if err = s.writeBatch(wb, first, applied); err != nil {
				return false
			}
			wb.Clear()
			pending = 0
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("%s: replay of held entries %d..%d: %w", s.mode, first, applied, err)
	}
	s.putIndex(wb, first, applied)
	if err := s.writeBatch(wb, first, applied); err != nil {
		return fmt.Errorf("%s: replay of held entries %d..%d: %w", s.mode, first, applied, err)
	}
	lr.viewMu.Lock()
	lr.held = newKeyOps()
	lr.heldBytes.Store(0)
	lr.stored.Store(applied)
	lr.viewMu.Unlock()
	for i, r := range replayReasons() {
		if r == reason {
			lr.counters.replays[i].Add(1)
		}
	}
	lr.counters.replayedBytes.Add(total)
	s.logger.Info("lsm-raft: held entries replayed into RocksDB", "reason", reason, "first", first, "last", applied,
		"keys", t.Len(), "bytes", total)
	return nil
}

// heldGet returns key's held write, if any.
// Nothing held (no key is empty, so held writes have bytes): no lock.
func (lr *lsmRaft) heldGet(key []byte) (keyOp, bool) {
	if lr.heldBytes.Load() == 0 {
		return keyOp{}, false
	}
	lr.viewMu.Lock()
	defer lr.viewMu.Unlock()
	return lr.held.get(key)
}

// view creates a RocksDB iterator with newIter and clones the held writes
// under viewMu, so that no ingestion or replay comes between them.
func (lr *lsmRaft) view(newIter func() *grocksdb.Iterator) (*grocksdb.Iterator, *btree.BTreeG[keyOp]) {
	lr.viewMu.Lock()
	defer lr.viewMu.Unlock()
	var held *btree.BTreeG[keyOp]
	if lr.held.t.Len() > 0 {
		held = lr.held.t.Clone()
	}
	return newIter(), held
}

// restored is CommitRestore's: RocksDB now reflects index, and nothing
// held or being built is relevant. Under Store.mu (exclusively).
func (lr *lsmRaft) restored(index uint64) {
	lr.viewMu.Lock()
	lr.held = newKeyOps()
	lr.heldBytes.Store(0)
	lr.stored.Store(index)
	lr.viewMu.Unlock()
	lr.building = newKeyOps()
}

// runWriter writes the cut spans, in order.
func (lr *lsmRaft) runWriter() {
	defer lr.wg.Done()
	for {
		select {
		case <-lr.stopc:
			return
		case c := <-lr.cutc:
			if err := lr.writeSpan(c); err != nil {
				lr.counters.cutFailures.Add(1)
				lr.s.logger.Error("lsm-raft: writing a span failed; followers that need it replay instead",
					"first", c.first, "last", c.last, "err", err)
			}
		}
	}
}

// writeSpan writes c as an SST file (the index under the empty key, then
// every key's last write in key order: a put, or a tombstone), keeps it,
// drops the oldest kept beyond retain, and wakes the senders.
func (lr *lsmRaft) writeSpan(c *keyOps) error {
	s := lr.s
	path := filepath.Join(lr.spans, fmt.Sprintf("%020d-%020d.sst", c.first, c.last))
	if err := s.rocksIO(vfs.OpWrite, rocksSST, c.bytes); err != nil {
		return err
	}
	w := grocksdb.NewSSTFileWriter(lr.envOpts, lr.sstOpts)
	defer w.Destroy()
	if err := w.Open(path + ".tmp"); err != nil {
		return fmt.Errorf("open span file: %w", err)
	}
	err := w.Put(nil, spanIndexValue(c.first, c.last))
	c.t.Ascend(func(op keyOp) bool {
		if op.del {
			err = w.Delete(op.key)
		} else {
			err = w.Put(op.key, op.value)
		}
		return err == nil
	})
	if err == nil {
		err = w.Finish() // and fsyncs it
	}
	if err != nil {
		os.Remove(path + ".tmp")
		return fmt.Errorf("write span file %s: %w", path, s.observe(vfs.OpWrite, err))
	}
	size, crc, err := fileCRC(path + ".tmp")
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		os.Remove(path + ".tmp")
		return err
	}
	lr.counters.spansCut.Add(1)
	lr.counters.cutBytes.Add(size)
	lr.mu.Lock()
	lr.kept = append(lr.kept, keptSpan{h: systems.SpanHeader{First: c.first, Last: c.last, SizeBytes: size, CRC32C: crc}, path: path})
	for len(lr.kept) > lr.retain {
		os.Remove(lr.kept[0].path) // a sender still reading it keeps its descriptor
		lr.kept = lr.kept[1:]
	}
	close(lr.cutNotify)
	lr.cutNotify = make(chan struct{})
	lr.mu.Unlock()
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileCRC returns the size and CRC32C of the file at path.
func fileCRC(path string) (int64, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	return n, h.Sum32(), err
}

// setLeader implements systems.SpanReplicator.SetLeader.
func (lr *lsmRaft) setLeader(leader bool) {
	if lr.leader.Swap(leader) == leader || !leader {
		return
	}
	select {
	case lr.leaderc <- struct{}{}:
	default:
	}
}

// spanCut implements systems.SpanReplicator.SpanCut.
func (lr *lsmRaft) spanCut() <-chan struct{} {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.cutNotify
}

// openSpan implements systems.SpanReplicator.OpenSpan.
func (lr *lsmRaft) openSpan(next uint64) (systems.SpanHeader, io.ReadCloser, error) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	var k *keptSpan
	noEarlier := false
	if next == 0 && len(lr.kept) > 0 {
		k = &lr.kept[len(lr.kept)-1]
	}
	for i := range lr.kept {
		if k == nil && lr.kept[i].h.First <= next && next <= lr.kept[i].h.Last {
			k = &lr.kept[i]
		}
	}
	for i := range lr.kept {
		if k == nil && lr.kept[i].h.First > next {
			k, noEarlier = &lr.kept[i], true
		}
	}
	if k == nil {
		return systems.SpanHeader{}, nil, systems.ErrNoSpan
	}
	f, err := os.Open(k.path)
	if err != nil {
		return systems.SpanHeader{}, nil, err
	}
	h := k.h
	h.NoEarlier = noEarlier
	if lr.crashAt == CrashSpanSend {
		return h, &crashReader{f: f, lr: lr, at: h.SizeBytes / 2}, nil
	}
	return h, f, nil
}

// crashReader reads a span file and hits CrashSpanSend once at bytes were
// read.
type crashReader struct {
	f  *os.File
	lr *lsmRaft
	at int64
	n  int64
}

func (c *crashReader) Read(p []byte) (int, error) {
	n, err := c.f.Read(p)
	if c.n += int64(n); c.n >= c.at {
		c.lr.crashPoint(CrashSpanSend)
	}
	return n, err
}

func (c *crashReader) Close() error { return c.f.Close() }

// fit says what a receiver at stored does with h, and its next index.
// Under applyMu.
func (lr *lsmRaft) fit(h systems.SpanHeader) (systems.SpanVerdict, uint64) {
	stored := lr.stored.Load()
	switch {
	case h.Last <= stored:
		return systems.SpanSkipped, stored + 1
	case h.First > stored+1:
		return systems.SpanGap, stored + 1
	case lr.s.applied.Load() < h.Last:
		return systems.SpanBehind, stored + 1
	}
	return systems.SpanAccept, stored + 1
}

// offerSpan implements systems.SpanReplicator.OfferSpan.
func (lr *lsmRaft) offerSpan(h systems.SpanHeader) (v systems.SpanVerdict, next uint64, err error) {
	if err := h.Check(); err != nil {
		return 0, 0, err
	}
	err = lr.s.applying(func() error {
		v, next = lr.fit(h)
		if v == systems.SpanGap && h.NoEarlier {
			if lr.s.applied.Load() < h.Last {
				v = systems.SpanBehind
			} else {
				// The leader has no span covering next: write what is
				// held (which reaches at least h.Last: the span is passed).
				if err := lr.replayHeld(replayNoSpan); err != nil {
					return err
				}
				v, next = systems.SpanReplayed, lr.stored.Load()+1
				return nil
			}
		}
		lr.count(v)
		return nil
	})
	return v, next, err
}

// count counts a span not taken.
func (lr *lsmRaft) count(v systems.SpanVerdict) {
	switch v {
	case systems.SpanSkipped:
		lr.counters.spansSkipped.Add(1)
	case systems.SpanGap:
		lr.counters.spansRefused.Add(1)
	case systems.SpanBehind:
		lr.counters.spansBehind.Add(1)
	}
}

// receiveSpan implements systems.SpanReplicator.ReceiveSpan.
func (lr *lsmRaft) receiveSpan(h systems.SpanHeader, r io.Reader) (systems.SpanVerdict, uint64, error) {
	if err := h.Check(); err != nil {
		return 0, 0, err
	}
	s := lr.s
	path, err := lr.receiveFile(h, r)
	if err != nil {
		return 0, lr.stored.Load() + 1, err
	}
	defer os.Remove(path) // gone once ingested (move_files)
	v, next := systems.SpanIngested, uint64(0)
	err = s.applying(func() error {
		if v, next = lr.fit(h); v != systems.SpanAccept {
			lr.count(v) // the store moved on while the span was sent
			return nil
		}
		if err := lr.ingest(h, path); err != nil {
			return fmt.Errorf("%s: ingest %v: %w", s.mode, h, err)
		}
		v, next = systems.SpanIngested, h.Last+1
		return nil
	})
	if err != nil {
		next = lr.stored.Load() + 1
	}
	return v, next, err
}

// ingest has RocksDB ingest the span file at path, checks the index it
// carries, and drops the held writes it covers. Under Store.mu and
// applyMu; fit accepted h.
func (lr *lsmRaft) ingest(h systems.SpanHeader, path string) error {
	s := lr.s
	lr.crashPoint(CrashSpanIngest)
	if err := s.rocksIO(vfs.OpWrite, rocksSST, h.SizeBytes); err != nil {
		return err
	}
	if err := s.db.IngestExternalFileCF(s.data, []string{path}, lr.ingestOpts); err != nil {
		return s.observe(vfs.OpWrite, err)
	}
	lr.crashPoint(CrashSpanAfterIngest)
	first, last, ok, err := s.readSpanIndex(s.ro)
	if err != nil {
		return err
	}
	if !ok || first != h.First || last != h.Last {
		return fmt.Errorf("%w: the ingested file holds the index %d..%d (present %v)", systems.ErrCorrupt, first, last, ok)
	}
	lr.viewMu.Lock()
	lr.held = lr.held.without(h.Last)
	lr.heldBytes.Store(lr.held.bytes)
	lr.stored.Store(h.Last)
	lr.viewMu.Unlock()
	lr.counters.spansIngested.Add(1)
	lr.counters.ingestedBytes.Add(h.SizeBytes)
	return nil
}

// receiveFile writes the span's bytes from r into a file of inDir and
// returns its path once they match h's size and CRC32C and are synced; a
// damaged transfer wraps systems.ErrSpanDamaged and leaves no file.
func (lr *lsmRaft) receiveFile(h systems.SpanHeader, r io.Reader) (path string, err error) {
	f, err := os.CreateTemp(lr.in, fmt.Sprintf("%020d-%020d.*.sst", h.First, h.Last))
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	crc := crc32.New(castagnoli)
	var w io.Writer = io.MultiWriter(f, crc)
	if lr.crashAt == CrashSpanTransfer {
		w = &crashWriter{w: w, lr: lr, at: h.SizeBytes / 2}
	}
	// One byte more than announced tells a longer stream apart.
	n, err := io.Copy(w, io.LimitReader(r, h.SizeBytes+1))
	if err != nil {
		return "", fmt.Errorf("%w: %v after %d of %d bytes: %w", systems.ErrSpanDamaged, h, n, h.SizeBytes, err)
	}
	if n != h.SizeBytes || crc.Sum32() != h.CRC32C {
		return "", fmt.Errorf("%w: %v: got %d bytes with CRC32C %08x, want %d with %08x",
			systems.ErrSpanDamaged, h, n, crc.Sum32(), h.SizeBytes, h.CRC32C)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("write received %v: %w", h, err)
	}
	return f.Name(), nil
}

// crashWriter hits CrashSpanTransfer once at bytes were written.
type crashWriter struct {
	w  io.Writer
	lr *lsmRaft
	at int64
	n  int64
}

func (c *crashWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if c.n += int64(n); c.n >= c.at {
		c.lr.crashPoint(CrashSpanTransfer)
	}
	return n, err
}

// LSMRaftStore is the lsm-raft state machine: a Store in ModeLSMRaft that
// also implements systems.SpanReplicator (so that the node ships spans for
// it, and for no other mode).
type LSMRaftStore struct {
	*Store
}

var _ systems.SpanReplicator = LSMRaftStore{}

// SetLeader implements systems.SpanReplicator: a leader applies entries
// into RocksDB and cuts spans; a new leader first replays what it holds.
func (l LSMRaftStore) SetLeader(leader bool) { l.lr.setLeader(leader) }

// SpanCut implements systems.SpanReplicator.
func (l LSMRaftStore) SpanCut() <-chan struct{} { return l.lr.spanCut() }

// OpenSpan implements systems.SpanReplicator: one of the newest
// -lsmraft.retainSpans spans cut.
func (l LSMRaftStore) OpenSpan(next uint64) (systems.SpanHeader, io.ReadCloser, error) {
	return l.lr.openSpan(next)
}

// NextSpanIndex implements systems.SpanReplicator: AppliedIndex + 1.
func (l LSMRaftStore) NextSpanIndex() uint64 { return l.lr.stored.Load() + 1 }

// OfferSpan implements systems.SpanReplicator (see the rules at the top of
// this file).
func (l LSMRaftStore) OfferSpan(h systems.SpanHeader) (systems.SpanVerdict, uint64, error) {
	return l.lr.offerSpan(h)
}

// ReceiveSpan implements systems.SpanReplicator: the bytes go to a file
// under <data>/lsmraft/in/, checked against h's size and CRC32C and
// synced, then (if the span still fits) RocksDB ingests the file and the
// held writes it covers are dropped.
func (l LSMRaftStore) ReceiveSpan(h systems.SpanHeader, r io.Reader) (systems.SpanVerdict, uint64, error) {
	return l.lr.receiveSpan(h, r)
}
