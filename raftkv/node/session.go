package node

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// Client sessions (Raft dissertation section 6.3). A write may carry a
// session: a client id and a sequence number that grows with each write of
// the session (systems.Command). The node applies a session's sequence
// number at most once: a resent write whose first copy was applied is
// applied as a no-op and answered with the index of the first copy, so a
// client may resend a write whose outcome it does not know, on any node,
// and learn its real outcome.
//
// The session table is part of the replicated state: it is a deterministic
// function of the committed entries (every replica makes the same
// decisions). It lives in the node, not in the state machines, and is kept
// consistent with the log rather than with a state machine's own storage:
//
//   - <data>/sessions/<index>.sessions holds the table at the log's
//     compaction point, written (and fsynced) before the log is compacted
//     to it, and received with a snapshot before the snapshot is recorded;
//   - files above the compaction point are checkpoints: the table at an
//     applied index, written in the background every
//     sessionCheckpointBytes of applied entries (the two newest are kept);
//   - on start the node loads the newest checkpoint at or below where the
//     state machine resumes (else the file of the compaction point) and
//     folds the entries above it, up to where the state machine resumes,
//     from the log; the state machine then applies the rest with the
//     table's decisions. Replays (a fuzzy snapshot, a state machine ahead of the
//     log's commit index) therefore repeat the original decisions exactly.
//
// The table at the compaction point moves forward with every compaction
// without reading the log again: the apply goroutine records, for each
// applied write with a session, the decision's input (index, client id,
// sequence number: a sessionDelta) in a bounded in-memory queue, and the
// compaction folds the queued deltas up to its index into the old table
// (see sessionDeltas). Only when the queue overflowed does a compaction
// fold the entries it misses from the log.
//
// Memory is bounded: the table keeps the MaxSessions most recently used
// sessions and forgets the least recently used one beyond that (the order
// is part of the replicated state, so replicas forget the same one). A
// write of a forgotten session is applied as a new one: a resend is
// deduplicated as long as fewer than MaxSessions other sessions wrote since
// its session's last write.

// MaxSessions is how many client sessions the table keeps (about 100 bytes
// of memory each).
const MaxSessions = 1 << 16

// sessionVerdict is what the table decides about one write.
type sessionVerdict int

const (
	// sessionApply: a new sequence number (or no session): apply it.
	sessionApply sessionVerdict = iota
	// sessionDuplicate: the session's last applied sequence number again;
	// do not apply it, answer with the index of the first copy.
	sessionDuplicate
	// sessionStale: below the session's last applied sequence number (a
	// late copy of a write the client stopped waiting for); do not apply.
	sessionStale
)

// session is one client's record: the last applied sequence number and the
// Raft index that applied it (the write's result).
type session struct {
	client, seq, index uint64
}

// sessionTable is the table at Raft index `index` (every entry up to it
// folded in). Not safe for concurrent use.
type sessionTable struct {
	index uint64
	max   int
	m     map[uint64]*list.Element // client id -> element holding a *session
	lru   *list.List               // front: least recently used
}

func newSessionTable(max int) *sessionTable {
	return &sessionTable{max: max, m: map[uint64]*list.Element{}, lru: list.New()}
}

// decide applies the write of (client, seq) at index to the table and
// returns the verdict and, for sessionDuplicate, the index of the first copy.
func (t *sessionTable) decide(index, client, seq uint64) (sessionVerdict, uint64) {
	if el, ok := t.m[client]; ok {
		s := el.Value.(*session)
		t.lru.MoveToBack(el)
		switch {
		case seq == s.seq:
			return sessionDuplicate, s.index
		case seq < s.seq:
			return sessionStale, 0
		}
		s.seq, s.index = seq, index
		return sessionApply, index
	}
	t.m[client] = t.lru.PushBack(&session{client: client, seq: seq, index: index})
	for t.lru.Len() > t.max {
		old := t.lru.Remove(t.lru.Front()).(*session)
		delete(t.m, old.client)
	}
	return sessionApply, index
}

// fold brings the table up to the entries ents (consecutive, starting at
// t.index+1), making the same decisions apply does, and returns ds with
// the deltas of the entries that carry a session appended.
func (t *sessionTable) fold(ents []raftpb.Entry, ds []sessionDelta) ([]sessionDelta, error) {
	for _, e := range ents {
		if e.Index != t.index+1 {
			return ds, fmt.Errorf("session table at index %d cannot fold entry %d", t.index, e.Index)
		}
		if e.Type == raftpb.EntryNormal && len(e.Data) > 0 {
			if c, err := systems.DecodeCommand(e.Data); err == nil && c.ClientID != 0 {
				t.decide(e.Index, c.ClientID, c.Seq)
				ds = append(ds, sessionDelta{index: e.Index, client: c.ClientID, seq: c.Seq})
			}
		}
		t.index = e.Index
	}
	return ds, nil
}

// foldDeltas brings the table up to index to by replaying ds, the deltas
// of the writes with a session among the entries t.index+1..to (ascending
// index): the same table fold makes from those entries.
func (t *sessionTable) foldDeltas(ds []sessionDelta, to uint64) error {
	for _, d := range ds {
		if d.index <= t.index || d.index > to {
			return fmt.Errorf("session table at index %d cannot fold the write at %d (folding up to %d)", t.index, d.index, to)
		}
		t.decide(d.index, d.client, d.seq)
		t.index = d.index
	}
	if to < t.index {
		return fmt.Errorf("session table at index %d cannot fold up to %d", t.index, to)
	}
	t.index = to
	return nil
}

func (t *sessionTable) clone() *sessionTable {
	c := newSessionTable(t.max)
	c.index = t.index
	for el := t.lru.Front(); el != nil; el = el.Next() {
		s := *el.Value.(*session)
		c.m[s.client] = c.lru.PushBack(&s)
	}
	return c
}

// MaxSessionDeltas bounds the queue of session deltas (sessionDeltas): at
// most this many writes with a session between the log's compaction point
// and the applied index, 24 bytes each (48 MiB, plus up to about a
// quarter for the slice's growth). Nezha compacts its log once per GC
// round (up to -gcThresholdBytes of log, 1 GiB by default): the bound
// covers a round of values of 512 bytes or more; the baselines compact
// sealed segments (64 MiB each by default). A queue that overflows is
// dropped, and the next compaction folds the entries it lost from the log
// instead (correct, one more read of them).
const MaxSessionDeltas = 1 << 21

// sessionDelta is what one applied write with a session did to the table:
// decide(index, client, seq). Entries without a session only move the
// table's index, and no other kind of entry changes the table.
type sessionDelta struct {
	index, client, seq uint64
}

// sessionDeltas is the queue of the deltas between the table at the log's
// compaction point (base) and the apply goroutine's table (to): folding
// the log's entries base+1..gap (if gap > base: the queue overflowed and
// lost them), then d, into the table at base gives the table at to. The
// Node keeps it under sessMu, consistent with sessBase: reset with it (a
// snapshot, a restart), trimmed when a compaction moves it. Not safe for
// concurrent use.
type sessionDeltas struct {
	base, gap, to uint64
	// d holds the deltas of the writes max(base, gap)+1..to, ascending
	// index. Slots once inside len(d) are never written again (trim
	// reslices, overflow drops the array), so plan's result stays valid
	// while later deltas are appended.
	d   []sessionDelta
	max int
	// overflows counts the times the queue overflowed.
	overflows int
}

func newSessionDeltas(max int) *sessionDeltas { return &sessionDeltas{max: max} }

// reset empties the queue for a table at index (base and to).
func (q *sessionDeltas) reset(index uint64) {
	q.base, q.gap, q.to, q.d = index, index, index, nil
}

// push appends ds, the deltas of the entries q.to+1..to. It reports
// whether the queue overflowed for the first time (to log it once): it
// then drops every delta it holds and records that the entries up to to
// must come from the log.
func (q *sessionDeltas) push(ds []sessionDelta, to uint64) (firstOverflow bool) {
	q.to = to
	if len(q.d)+len(ds) > q.max {
		q.d, q.gap = nil, to
		q.overflows++
		return q.overflows == 1
	}
	q.d = append(q.d, ds...)
	return false
}

// plan tells how to bring the table at base (the node's sessBase) to
// index: fold the log's entries base+1..logTo, then replay ds. logTo is
// index (read everything from the log) if the queue does not describe the
// table at base up to index.
func (q *sessionDeltas) plan(base, index uint64) (logTo uint64, ds []sessionDelta) {
	if q.base != base || index > q.to || index < base {
		return index, nil
	}
	logTo = base
	if q.gap > base {
		logTo = min(q.gap, index)
	}
	k := sort.Search(len(q.d), func(i int) bool { return q.d[i].index > index })
	return logTo, q.d[:k:k]
}

// skipTo records that the deltas of the entries up to index are not in
// q (a restart started from a checkpoint at index): a plan through them
// folds the log.
func (q *sessionDeltas) skipTo(index uint64) {
	q.d, q.gap, q.to = nil, index, index
}

// trim drops the deltas at or below index, the new compaction point (the
// table at base becomes the table at index).
func (q *sessionDeltas) trim(index uint64) {
	if index <= q.base {
		return
	}
	k := sort.Search(len(q.d), func(i int) bool { return q.d[i].index > index })
	if q.d = q.d[k:]; len(q.d) == 0 {
		q.d = nil
	}
	q.base = index
}

// Encoding of a table (files and snapshots):
//
//	magic "NZSESS1\n" | index (8, big endian) | count (uvarint)
//	| (client id, seq, result index: uvarints)* least recently used first
//	| crc32c of everything before (4, little endian)
const sessionMagic = "NZSESS1\n"

var errSessionsCorrupt = errors.New("corrupt session table")

func (t *sessionTable) encode() []byte {
	b := append([]byte(sessionMagic), make([]byte, 8)...)
	binary.BigEndian.PutUint64(b[len(sessionMagic):], t.index)
	b = binary.AppendUvarint(b, uint64(t.lru.Len()))
	for el := t.lru.Front(); el != nil; el = el.Next() {
		s := el.Value.(*session)
		b = binary.AppendUvarint(b, s.client)
		b = binary.AppendUvarint(b, s.seq)
		b = binary.AppendUvarint(b, s.index)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeSessionTable parses encode's output. Errors wrap errSessionsCorrupt.
func decodeSessionTable(b []byte, max int) (*sessionTable, error) {
	if len(b) < len(sessionMagic)+8+1+4 || string(b[:len(sessionMagic)]) != sessionMagic {
		return nil, fmt.Errorf("%w: bad header", errSessionsCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errSessionsCorrupt)
	}
	t := newSessionTable(max)
	t.index = binary.BigEndian.Uint64(body[len(sessionMagic):])
	rest := body[len(sessionMagic)+8:]
	count, n := binary.Uvarint(rest)
	if n <= 0 {
		return nil, fmt.Errorf("%w: bad count", errSessionsCorrupt)
	}
	rest = rest[n:]
	for i := uint64(0); i < count; i++ {
		var f [3]uint64
		for j := range f {
			if f[j], n = binary.Uvarint(rest); n <= 0 {
				return nil, fmt.Errorf("%w: truncated at session %d", errSessionsCorrupt, i)
			}
			rest = rest[n:]
		}
		if _, dup := t.m[f[0]]; dup || f[0] == 0 {
			return nil, fmt.Errorf("%w: client id %d repeated or zero", errSessionsCorrupt, f[0])
		}
		t.m[f[0]] = t.lru.PushBack(&session{client: f[0], seq: f[1], index: f[2]})
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errSessionsCorrupt, len(rest))
	}
	// A table written under a larger MaxSessions forgets the oldest, as
	// every replica with the same MaxSessions does.
	for t.lru.Len() > max {
		delete(t.m, t.lru.Remove(t.lru.Front()).(*session).client)
	}
	return t, nil
}

// sessionFileName is the file of the table at index in the sessions
// directory.
func sessionFileName(index uint64) string { return fmt.Sprintf("%020d.sessions", index) }

// writeSessionFile writes enc (a table at index) to dir of fsys atomically
// and durably (writeFileDurably; the directory is created synced into its
// parent: a lost sessions directory would read as a data directory older
// than sessions, loadSessionTable's legacy case, and the node would forget
// every session).
func writeSessionFile(fsys vfs.FileSystem, dir string, index uint64, enc []byte) error {
	return writeFileDurably(fsys, dir, sessionFileName(index), enc)
}

// writeFileDurably writes data to dir/name of fsys atomically (a temporary
// file, fsynced, renamed over name) and durably (dir fsynced; a missing
// dir is created synced into its parent): after a crash the file holds
// the old or the new content.
func writeFileDurably(fsys vfs.FileSystem, dir, name string, data []byte) error {
	if err := vfs.MkdirAllSynced(fsys, dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, name)
	tmp, err := fsys.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return err
	}
	defer fsys.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fsys.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if err := vfs.SyncDir(fsys, dir); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// sessionFiles lists the indexes of the table files in dir, ascending.
func sessionFiles(fsys vfs.FileSystem, dir string) ([]uint64, error) {
	des, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".sessions")
		if !ok {
			continue
		}
		if i, err := strconv.ParseUint(name, 10, 64); err == nil {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// loadSessionTable returns the table at the compaction point: empty at 0,
// else the file of that index. A data directory without a sessions
// directory was written before sessions existed: its log holds no session,
// and the table starts empty (with a warning from the caller: legacy=true).
func loadSessionTable(fsys vfs.FileSystem, dir string, compacted uint64, max int) (t *sessionTable, legacy bool, err error) {
	if compacted == 0 {
		return newSessionTable(max), false, nil
	}
	t, err = readSessionFile(fsys, dir, compacted, max)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if _, serr := fsys.Stat(dir); errors.Is(serr, os.ErrNotExist) {
			t := newSessionTable(max)
			t.index = compacted
			return t, true, nil
		}
		return nil, false, fmt.Errorf("client sessions: %s has no table for the log's compaction point %d",
			dir, compacted)
	case err != nil:
		return nil, false, fmt.Errorf("client sessions: %w", err)
	}
	return t, false, nil
}

// readSessionFile reads and decodes the table file of index in dir; a
// file that does not decode, or holds another index, is errSessionsCorrupt
// (named with its path). A missing file is os.ErrNotExist.
func readSessionFile(fsys vfs.FileSystem, dir string, index uint64, max int) (*sessionTable, error) {
	path := filepath.Join(dir, sessionFileName(index))
	b, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return nil, err
	}
	t, err := decodeSessionTable(b, max)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if t.index != index {
		return nil, fmt.Errorf("%s: %w: holds index %d", path, errSessionsCorrupt, t.index)
	}
	return t, nil
}

// Session checkpoints bound the log a restart folds: without them a node
// folded every entry since the log's compaction point, reading every
// value again (for nezha, whose log is its value store, gigabytes: the
// paper profile's crash campaign saw 8 s per restart, growing with
// -gcThresholdBytes). Every sessionCheckpointBytes of applied entries (or
// sessionCheckpointEntries entries) the apply goroutine encodes its table
// and a background writer stores it as <index>.sessions beside the table
// at the compaction point; a restart starts from the newest one at or
// below the state machine's applied index.
const (
	sessionCheckpointBytes   = 256 << 20
	sessionCheckpointEntries = 1 << 18
)

// maybeCheckpointSessions starts a checkpoint when the entries applied
// since the last one (counted by applyEntries) make one due and none is
// being written. Apply goroutine.
func (n *Node) maybeCheckpointSessions() {
	every := sessionCheckpointEntries
	if n.cfg.sessionCheckpointEntries > 0 {
		every = n.cfg.sessionCheckpointEntries
	}
	if n.sessCkptBytes < sessionCheckpointBytes && n.sessCkptEntries < every {
		return
	}
	if !n.sessCkptBusy.CompareAndSwap(false, true) {
		return
	}
	n.sessCkptBytes, n.sessCkptEntries = 0, 0
	t := n.sessions.clone()
	enc := t.encode()
	n.sessCkptWG.Add(1)
	go func() {
		defer n.sessCkptWG.Done()
		defer n.sessCkptBusy.Store(false)
		if err := n.writeSessionCheckpoint(t, enc); err != nil {
			n.logger.Warn("client sessions: checkpoint not written; a restart folds more of the log", "index", t.index, "err", err)
		}
	}()
}

// writeSessionCheckpoint stores t (encoded as enc) and keeps it as the
// newest checkpoint, unless the log was compacted to or past it meanwhile.
func (n *Node) writeSessionCheckpoint(t *sessionTable, enc []byte) error {
	n.compactMu.Lock()
	defer n.compactMu.Unlock()
	compacted := n.log.CompactedIndex()
	if t.index <= compacted {
		return nil
	}
	if err := writeSessionFile(n.fsys, n.sessionDir(), t.index, enc); err != nil {
		return err
	}
	n.sessMu.Lock()
	n.sessCkpt = t
	n.sessMu.Unlock()
	pruneSessionFiles(n.fsys, n.sessionDir(), compacted)
	return nil
}

// pruneSessionFiles deletes every table file in dir but the one at the
// compaction point and the two newest above it (checkpoints: after a
// crash the state machine may resume below the newest). Best effort: a
// leftover file is never read unless it is one of those.
func pruneSessionFiles(fsys vfs.FileSystem, dir string, compacted uint64) {
	idx, _ := sessionFiles(fsys, dir) // ascending
	kept := 0
	for i := len(idx) - 1; i >= 0; i-- {
		if c := idx[i]; c > compacted && kept < 2 {
			kept++
			continue
		} else if c == compacted {
			continue
		}
		fsys.Remove(filepath.Join(dir, sessionFileName(idx[i])))
	}
}

// loadSessionCheckpoint returns the newest checkpoint in (base, applied],
// or nil if there is none or it does not decode (then the caller folds
// from base, as without checkpoints).
func (n *Node) loadSessionCheckpoint(base, applied uint64) *sessionTable {
	idx, _ := sessionFiles(n.fsys, n.sessionDir())
	for i := len(idx) - 1; i >= 0; i-- {
		c := idx[i]
		if c <= base || c > applied {
			continue
		}
		t, err := readSessionFile(n.fsys, n.sessionDir(), c, MaxSessions)
		if err != nil {
			n.logger.Warn("client sessions: ignoring a checkpoint", "err", err)
			continue
		}
		return t
	}
	return nil
}

func (n *Node) sessionDir() string { return filepath.Join(n.cfg.DataDir, "sessions") }

// openSessions loads the table at the log's compaction point and folds the
// log's entries up to applied, where the state machine resumes. The
// deltas of the fold start the queue (sessionDeltas).
func (n *Node) openSessions(applied uint64) error {
	base, legacy, err := loadSessionTable(n.fsys, n.sessionDir(), n.log.CompactedIndex(), MaxSessions)
	if err != nil {
		return err
	}
	if legacy {
		n.logger.Warn("no client session table: the data directory predates sessions; starting with none",
			"compacted_index", base.index)
	}
	cur := base.clone()
	n.sessDeltas.reset(base.index)
	from := base.index
	if ck := n.loadSessionCheckpoint(base.index, applied); ck != nil {
		// The deltas base..ck are not in the queue: a compaction below
		// the checkpoint folds them from the log (compactLog).
		cur, from = ck.clone(), ck.index
		n.sessDeltas.skipTo(ck.index)
		n.sessCkpt = ck
	}
	if err := n.foldLog(cur, applied, n.sessDeltas); err != nil {
		return err
	}
	n.sessBase, n.sessions = base, cur
	n.logger.Info("client sessions loaded", "sessions", cur.lru.Len(), "compacted_index", base.index, "from_index", from, "to_index", applied)
	return nil
}

// foldLog folds the log's entries t.index+1..to into t, and pushes their
// deltas into q unless q is nil.
func (n *Node) foldLog(t *sessionTable, to uint64, q *sessionDeltas) error {
	var ds []sessionDelta
	for t.index < to {
		ents, err := n.log.Entries(t.index+1, to+1, 64<<20)
		if err != nil {
			return fmt.Errorf("client sessions: read entries %d..%d: %w", t.index+1, to, err)
		}
		if ds, err = t.fold(ents, ds[:0]); err != nil {
			return err
		}
		if q != nil && q.push(ds, t.index) {
			n.logDeltaOverflow(q.max, t.index)
		}
	}
	return nil
}

// logDeltaOverflow tells, once per process, that the queue of session
// deltas overflowed.
func (n *Node) logDeltaOverflow(maxDeltas int, index uint64) {
	n.logger.Warn("client sessions: more writes with a session since the log's compaction point than the delta queue holds; "+
		"the next compaction folds them from the log (logged once)", "max_deltas", maxDeltas, "index", index)
}

// compactLog is LogControl.Compact: it writes the session table at index,
// then compacts the log to it on the Ready loop. The table at index is the
// table at the current compaction point with the queued deltas up to
// index folded in; only entries the queue lost to an overflow are read
// from the log.
func (n *Node) compactLog(ctx context.Context, index uint64) error {
	n.compactMu.Lock()
	defer n.compactMu.Unlock()
	if applied := n.applied.Load(); index > applied {
		return fmt.Errorf("compact to %d above the applied index %d", index, applied)
	}
	n.sessMu.Lock()
	next := n.sessBase.clone()
	logTo, ds := n.sessDeltas.plan(next.index, index)
	fromCkpt := false
	if ck := n.sessCkpt; ck != nil && logTo > next.index && ck.index >= logTo && ck.index <= index {
		// The queue holds every delta after the checkpoint (a restart
		// started from it): start there instead of folding the log.
		next, logTo, fromCkpt = ck.clone(), ck.index, true
		k := sort.Search(len(ds), func(i int) bool { return ds[i].index > ck.index })
		ds = ds[k:]
	}
	n.sessMu.Unlock()
	var enc []byte
	if index > next.index || fromCkpt {
		// Entries up to the applied index are committed: the table at index
		// is the same in every replica's history, whatever snapshot this
		// node installs meanwhile.
		if logTo > next.index {
			n.logger.Debug("client sessions: folding entries from the log", "from_index", next.index+1, "to_index", logTo)
			n.sessLogFolded.Add(logTo - next.index)
			if err := n.foldLog(next, logTo, nil); err != nil {
				return err
			}
		}
		if err := next.foldDeltas(ds, index); err != nil {
			return fmt.Errorf("client sessions: %w", err)
		}
		enc = next.encode()
		if err := writeSessionFile(n.fsys, n.sessionDir(), index, enc); err != nil {
			return fmt.Errorf("client sessions: %w", err)
		}
	}
	return n.inLoop(ctx, func() error {
		if index > n.applied.Load() {
			return fmt.Errorf("compact to %d above the applied index %d", index, n.applied.Load())
		}
		if err := n.log.Compact(index, n.confState); err != nil {
			return err
		}
		if enc != nil {
			n.sessMu.Lock()
			n.sessBase = next
			n.sessDeltas.trim(index)
			if n.sessCkpt != nil && n.sessCkpt.index <= index {
				n.sessCkpt = nil
			}
			n.sessMu.Unlock()
			pruneSessionFiles(n.fsys, n.sessionDir(), index)
		}
		return nil
	})
}

// baseSessions returns the encoded table at index, the log's compaction
// point that a snapshot being sent carries.
func (n *Node) baseSessions(index uint64) ([]byte, error) {
	n.sessMu.Lock()
	defer n.sessMu.Unlock()
	if n.sessBase.index != index {
		return nil, fmt.Errorf("client sessions: table at %d, snapshot at %d (the log was compacted meanwhile)",
			n.sessBase.index, index)
	}
	return n.sessBase.encode(), nil
}

// installSessions makes the table received with a snapshot at index the
// node's, durably, before the log records the snapshot. Ready loop, with
// the apply goroutine at a barrier.
func (n *Node) installSessions(index uint64, enc []byte) (*sessionTable, error) {
	t, err := decodeSessionTable(enc, MaxSessions)
	if err != nil {
		return nil, fmt.Errorf("snapshot at index %d: %w", index, err)
	}
	if t.index != index {
		return nil, fmt.Errorf("snapshot at index %d: %w: session table at index %d", index, errSessionsCorrupt, t.index)
	}
	if err := writeSessionFile(n.fsys, n.sessionDir(), index, enc); err != nil {
		return nil, fmt.Errorf("client sessions: %w", err)
	}
	return t, nil
}
