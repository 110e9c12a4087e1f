package node

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// The Raft log's write path is pipelined with etcd raft's asynchronous
// storage writes (raft.Config.AsyncStorageWrites; docs/architecture.md section
// 3). The Ready loop sends a Ready's messages at once (a leader's MsgApp
// before its own append: Raft thesis 10.2.1), hands its MsgStorageAppend
// (entries, HardState, and the messages that may only leave once those are
// durable: a follower's MsgAppResp, a vote, the leader's own MsgAppResp and
// raft's MsgStorageAppendResp) to the log writer, and takes the next Ready
// without waiting for the disk. Two goroutines share the work:
//
//   - the writer appends what is pending as one group: the appends queued
//     since its last write, up to Config.LogGroupCommitBytes, in one
//     vectored write (raftlog.Log.Append without fdatasync);
//   - the flusher makes the groups written so far durable with one
//     fdatasync (raftlog.Log.Flush) and then delivers their responses, in
//     order: to the peers, and to the Ready loop, which steps them.
//
// The writer goes on writing while a flush runs, so a group is what
// arrived during the previous flush (group commit sized by what is
// pending), bounded by LogGroupCommitBytes (the writer writes at most that
// much ahead of the flush under way, then waits for it) and, if
// LogGroupCommitDelay is set, by how long the flusher waits for more. The
// flush under way does not count against the bound: one group is flushed
// while the next is written, so a disk whose flushes are slow still
// writes all the time (with the flush counted, a group as large as the
// bound waited for its predecessor's flush before it was written, and
// write and flush took turns). Nothing is acknowledged, to a client
// or to the leader, before the flush that covers it: raft counts an entry
// towards commitment, and hands a committed entry to the apply goroutine,
// only once its response is stepped. A failed flush fails the node
// (watchDisk too) before any response of what it covered is delivered, and
// raftlog writes nothing after it.
//
// The deterministic tests (env.manualLogWrites) start neither goroutine:
// they run the two stages (logWriter.writeStep, flushStep) on the Ready
// loop when their schedule says, and crash nodes between them.

// Defaults and bounds of Config.LogGroupCommitBytes and
// Config.LogGroupCommitDelay, from a sweep on 2 cores (nezha-nogc, 3 local
// nodes, fsync on, 256 KiB PUTs from 50 clients, bench -fsyncDelay; two
// rounds each, ops/s). With 20 ms added to every fsync a bound of 1 MiB
// made 222-224, 4 MiB 555-568, 16 MiB 571 and 64 MiB 544-587: a group
// must hold what arrives during one slow flush, and 4 MiB is where the
// curve flattens. With 5 ms: 542-603, 664-723, 622-719 and 769-837; 64
// MiB may gain there, but two rounds do not show it beyond the spread (4
// and 16 MiB overlap), and a larger bound lengthens each flush, and so
// the latency of the small writes behind it, and the bytes written and
// not yet durable (up to twice the bound, with the flush under way). A
// delay gained nothing where groups are small and many: 100 B PUTs from
// 1000 clients made 39.1k/40.8k ops/s with none, 38.6k/41.7k with 500 us
// and 41.0k/39.2k with 2 ms; at low load a delay is latency added to
// every write, so the default is none.
const (
	DefaultLogGroupCommitBytes = 4 << 20
	MinLogGroupCommitBytes     = 4 << 10
	MaxLogGroupCommitBytes     = 256 << 20
	DefaultLogGroupCommitDelay = time.Duration(0)
	MaxLogGroupCommitDelay     = 100 * time.Millisecond
)

// maxLogQueueBytes bounds the appends waiting to be written: beyond it the
// Ready loop takes no new client proposal until the writer caught up, as
// it took none while it waited for each Ready's write before the write
// path was pipelined. (A follower's appends are bounded by its leader's
// inflight limits, raft.Config.MaxInflightBytes.)
const maxLogQueueBytes = 64 << 20

// logWriter is the node's local append thread (see the top of this file).
type logWriter struct {
	n          *Node
	groupBytes int64
	groupDelay time.Duration

	mu sync.Mutex
	// queue: the MsgStorageAppend messages not yet written, in order, and
	// their entries' bytes.
	queue      []raftpb.Message
	queueBytes int64
	// written: the groups written and not yet flushed, in order, and
	// their bytes (with those of a flush under way, which flushingBytes
	// counts alone).
	written        []logGroup
	unflushedBytes int64
	flushingBytes  int64
	// inFlight counts the appends handed over whose responses are not
	// delivered yet.
	inFlight int
	// local: responses for the Ready loop to step.
	local []raftpb.Message

	// Wake-ups (one buffered signal each): wake, the writer (the queue
	// grew); wrote, the flusher (a group was written); room, the writer
	// (a flush ended); idle, drain (inFlight reached 0); localc, the Ready
	// loop (local responses).
	wake, wrote, room, idle, localc chan struct{}
	// done is closed once the writer and the flusher ended (at once
	// without them).
	done chan struct{}
}

// logGroup is one write of the writer, waiting for its flush.
type logGroup struct {
	responses []raftpb.Message
	// sync: the group holds entries or a new term or vote (raft.MustSync).
	sync    bool
	bytes   int64
	appends int
	at      time.Time // when it was written
}

func newLogWriter(n *Node) *logWriter {
	return &logWriter{n: n, groupBytes: n.cfg.LogGroupCommitBytes, groupDelay: n.cfg.LogGroupCommitDelay,
		wake: make(chan struct{}, 1), wrote: make(chan struct{}, 1), room: make(chan struct{}, 1),
		idle: make(chan struct{}, 1), localc: make(chan struct{}, 1), done: make(chan struct{})}
}

// start starts the writer and the flusher, unless the tests run their
// stages (env.manualLogWrites).
func (w *logWriter) start() {
	if w.n.cfg.env.manualLogWrites() {
		close(w.done)
		return
	}
	var wg sync.WaitGroup
	wg.Go(w.runWriter)
	wg.Go(w.runFlusher)
	go func() {
		wg.Wait()
		close(w.done)
	}()
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// appendBytes is the size of m's entries, as bounds count it.
func appendBytes(m *raftpb.Message) int64 {
	var b int64
	for i := range m.Entries {
		b += int64(len(m.Entries[i].Data)) + entryOverheadBytes
	}
	return b
}

// enqueue hands a MsgStorageAppend to the writer (Ready loop).
func (w *logWriter) enqueue(m raftpb.Message) {
	w.mu.Lock()
	w.queue = append(w.queue, m)
	w.queueBytes += appendBytes(&m)
	w.inFlight++
	w.mu.Unlock()
	notify(w.wake)
}

// backlogged reports whether the appends waiting to be written exceed
// maxLogQueueBytes (the Ready loop then takes no proposal).
func (w *logWriter) backlogged() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queueBytes > maxLogQueueBytes
}

// takeLocal returns the responses for the Ready loop delivered so far.
func (w *logWriter) takeLocal() []raftpb.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	local := w.local
	w.local = nil
	return local
}

// pending reports whether an append awaits its write or its flush.
func (w *logWriter) pending() (queued, written bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) > 0, len(w.written) > 0
}

// takeAppends removes from the queue the appends of the next group: at
// least one, then as many as fit in groupBytes. mu held.
func (w *logWriter) takeAppends() []raftpb.Message {
	var size int64
	k := 0
	for k < len(w.queue) {
		b := appendBytes(&w.queue[k])
		if k > 0 && size+b > w.groupBytes {
			break
		}
		size += b
		k++
	}
	msgs := w.queue[:k:k]
	w.queue = w.queue[k:]
	if len(w.queue) == 0 {
		w.queue = nil
	}
	w.queueBytes -= size
	return msgs
}

// runWriter is the writer goroutine.
func (w *logWriter) runWriter() {
	n := w.n
	for {
		w.mu.Lock()
		if !w.canWrite() {
			w.mu.Unlock()
			select {
			case <-w.wake:
			case <-w.room:
			case <-n.stopc:
				return
			case <-n.failed:
				return
			}
			continue
		}
		msgs := w.takeAppends()
		w.mu.Unlock()
		if !w.write(msgs) {
			return
		}
	}
}

// canWrite reports whether the writer has appends to write and room for
// them: less than groupBytes written ahead of the flush under way. mu
// held.
func (w *logWriter) canWrite() bool {
	return len(w.queue) > 0 && w.unflushedBytes-w.flushingBytes < w.groupBytes
}

// writeStep writes the next group of queued appends, if any (the tests'
// schedule; on the Ready loop).
func (w *logWriter) writeStep() {
	w.mu.Lock()
	msgs := w.takeAppends()
	w.mu.Unlock()
	if len(msgs) > 0 {
		w.write(msgs)
	}
}

// write appends msgs as one group, without fdatasync, and hands it to the
// flusher. On an error it fails the node and returns false.
func (w *logWriter) write(msgs []raftpb.Message) bool {
	n := w.n
	ents, hs, mustSync := mergeAppends(msgs, n.log.HardState())
	if err := n.retryFullDisk(func() error { return n.log.Append(hs, ents, false) }); err != nil {
		if !errors.Is(err, errStopping) {
			n.fail(err)
		}
		return false
	}
	first, _ := n.log.FirstIndex()
	last, _ := n.log.LastIndex()
	n.firstIndex.Store(first)
	n.lastIndex.Store(last)
	g := logGroup{sync: mustSync, appends: len(msgs), at: time.Now()}
	for i := range msgs {
		g.bytes += appendBytes(&msgs[i])
		g.responses = append(g.responses, msgs[i].Responses...)
	}
	w.mu.Lock()
	w.written = append(w.written, g)
	w.unflushedBytes += g.bytes
	w.mu.Unlock()
	notify(w.wrote)
	return true
}

// mergeAppends is what the MsgStorageAppend messages msgs persist, in
// order, as one append: their entries (a later message's replace the
// earlier ones' at and above its first index, as raft's conflict
// resolution does), the last HardState among them, and whether that must
// be fdatasynced before the responses leave (entries, or a term or vote
// other than prev's: raft.MustSync). A snapshot is installed before its
// message is queued (handleReady).
func mergeAppends(msgs []raftpb.Message, prev raftpb.HardState) (ents []raftpb.Entry, hs raftpb.HardState, mustSync bool) {
	for i := range msgs {
		m := &msgs[i]
		if len(m.Entries) > 0 {
			mustSync = true
			switch first := m.Entries[0].Index; {
			case len(ents) == 0 && len(msgs) == 1:
				ents = m.Entries // alone: no copy
			case len(ents) > 0 && first <= ents[0].Index:
				ents = append(ents[:0], m.Entries...)
			case len(ents) > 0 && first <= ents[len(ents)-1].Index:
				ents = append(ents[:first-ents[0].Index], m.Entries...)
			default:
				ents = append(ents, m.Entries...)
			}
		}
		if h := (raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}); !raft.IsEmptyHardState(h) {
			if h.Term != prev.Term || h.Vote != prev.Vote {
				mustSync = true
			}
			hs, prev = h, h
		}
	}
	return ents, hs, mustSync
}

// runFlusher is the flusher goroutine.
func (w *logWriter) runFlusher() {
	n := w.n
	var timer *time.Timer
	for {
		w.mu.Lock()
		var wait time.Duration
		if len(w.written) > 0 && w.groupDelay > 0 && w.unflushedBytes < w.groupBytes {
			wait = time.Until(w.written[0].at.Add(w.groupDelay))
		}
		if len(w.written) == 0 || wait > 0 {
			w.mu.Unlock()
			var expired <-chan time.Time
			if wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				expired = timer.C
			}
			select {
			case <-w.wrote:
			case <-expired:
			case <-n.stopc:
				return
			case <-n.failed:
				return
			}
			continue
		}
		groups := w.takeWritten()
		w.mu.Unlock()
		notify(w.room) // the writer may write ahead of this flush
		if !w.flush(groups) {
			return
		}
	}
}

// takeWritten removes the groups written so far for a flush, which from
// now on counts in flushingBytes. mu held.
func (w *logWriter) takeWritten() []logGroup {
	groups := w.written
	w.written = nil
	for _, g := range groups {
		w.flushingBytes += g.bytes
	}
	return groups
}

// flushStep flushes the groups written so far, if any (the tests'
// schedule; on the Ready loop).
func (w *logWriter) flushStep() {
	w.mu.Lock()
	groups := w.takeWritten()
	w.mu.Unlock()
	if len(groups) > 0 {
		w.flush(groups)
	}
}

// flush makes groups durable with one fdatasync (none if no group needs
// it: every earlier group was flushed before) and delivers their
// responses. A failed fdatasync fails the node and delivers nothing; it
// returns false.
func (w *logWriter) flush(groups []logGroup) bool {
	n := w.n
	var bytes int64
	appends, mustSync := 0, false
	for _, g := range groups {
		bytes += g.bytes
		appends += g.appends
		mustSync = mustSync || g.sync
	}
	if mustSync {
		if err := n.log.Flush(); err != nil {
			n.fail(fmt.Errorf("raft log flush: %w", err))
			return false
		}
		n.metrics.flushBytes.Observe(float64(bytes))
		n.metrics.flushAppends.Observe(float64(appends))
	}
	var peers, local []raftpb.Message
	for _, g := range groups {
		for _, m := range g.responses {
			if m.To == n.id {
				local = append(local, m)
			} else {
				peers = append(peers, m)
			}
		}
	}
	// The peers first: the Ready loop's reaction to the local responses
	// (a commit, the next MsgApp) follows them (the tests' order).
	if len(peers) > 0 {
		n.transport.send(peers)
	}
	w.mu.Lock()
	w.local = append(w.local, local...)
	w.unflushedBytes -= bytes
	w.flushingBytes -= bytes
	w.inFlight -= appends
	idle := w.inFlight == 0
	w.mu.Unlock()
	notify(w.room)
	if len(local) > 0 {
		notify(w.localc)
	}
	if idle {
		notify(w.idle)
	}
	return true
}

// drain returns once every append handed over so far is written, flushed
// and its responses delivered (Ready loop: before it installs a snapshot,
// which replaces the log), or errStopping.
func (w *logWriter) drain() error {
	n := w.n
	for {
		w.mu.Lock()
		busy := w.inFlight > 0
		w.mu.Unlock()
		if !busy {
			return nil
		}
		if n.cfg.env.manualLogWrites() {
			// The tests' nodes have no writer: do its work here.
			w.writeStep()
			w.flushStep()
			if n.Err() != nil {
				return errStopping
			}
			continue
		}
		select {
		case <-w.idle:
		case <-n.stopc:
			return errStopping
		case <-n.failed:
			return errStopping
		}
	}
}
