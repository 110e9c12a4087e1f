package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// Raft snapshots. raft.Storage.Snapshot (raftlog) returns only metadata: the
// compaction point. When raft sends MsgSnap, the transport streams the state
// machine's live data (systems.Snapshotter) after the message on a separate
// RPC; the receiver writes it to <data>/snap/, steps the message with
// Snapshot.Data = the file's path, and the Ready loop installs it:
// PrepareRestore, log.ApplySnapshot (the commit point), CommitRestore.

type snapshotStatus struct {
	to     uint64
	status raft.SnapshotStatus
}

const snapChunkBytes = 1 << 20

func (n *Node) snapDir() string { return filepath.Join(n.cfg.DataDir, "snap") }

// cleanSnapshotDir removes snapshot files left by an earlier run.
func cleanSnapshotDir(fsys vfs.FileSystem, dir string) error {
	if err := fsys.RemoveAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	return nil
}

// sendSnapshot streams m (a MsgSnap) and the state machine's data to peer p,
// then reports the outcome to raft.
func (t *transport) sendSnapshot(p *peer, m raftpb.Message) {
	n := t.n
	status := raft.SnapshotFailure
	defer func() {
		result := "failure"
		if status == raft.SnapshotFinish {
			result = "success"
		}
		n.metrics.snapshotSends.WithLabelValues(result).Inc()
		select {
		case n.snapc <- snapshotStatus{to: p.id, status: status}:
		case <-t.ctx.Done():
		}
	}()
	m, sessions, snapper, err := n.prepareSnapshot(m)
	if err != nil {
		n.logger.Warn("snapshot not sent", "peer", p.id, "err", err)
		return
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	stream, err := kvpb.NewRaftClient(p.conn).Snapshot(metadata.NewOutgoingContext(ctx, n.outgoingMD()))
	if err != nil {
		n.logger.Warn("snapshot stream", "peer", p.id, "err", err)
		return
	}
	mb, err := m.Marshal()
	if err != nil {
		return
	}
	if err := stream.Send(&kvpb.SnapshotChunk{Message: mb, Sessions: sessions}); err != nil {
		n.logger.Warn("snapshot send", "peer", p.id, "err", err)
		return
	}
	cw := &chunkWriter{stream: stream}
	w := systems.NewSnapshotWriter(cw)
	if err := snapper.WriteSnapshot(w); err != nil {
		n.logger.Warn("write snapshot", "peer", p.id, "err", err)
		return
	}
	if err := errors.Join(w.Close(), cw.flush()); err != nil {
		n.logger.Warn("snapshot send", "peer", p.id, "err", err)
		return
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		n.logger.Warn("snapshot not accepted", "peer", p.id, "err", err)
		return
	}
	status = raft.SnapshotFinish
	n.logger.Info("snapshot sent", "peer", p.id, "index", m.Snapshot.Metadata.Index,
		"bytes", cw.sent, "duration", time.Since(start).Round(time.Millisecond))
}

// prepareSnapshot returns MsgSnap m as it is sent to m.To, the encoded
// client sessions at its index that go with it, and the state machine that
// writes its data.
func (n *Node) prepareSnapshot(m raftpb.Message) (raftpb.Message, []byte, systems.Snapshotter, error) {
	snapper, ok := n.sm.(systems.Snapshotter)
	if !ok {
		return m, nil, nil, fmt.Errorf("a follower needs a snapshot, but %s cannot write one", n.cfg.System.Name)
	}
	if cs := m.Snapshot.Metadata.ConfState; !isMember(cs, m.To) {
		// The snapshot is the log's compaction point, taken before m.To
		// was added: raft there ignores a snapshot whose membership lacks
		// it ("should never happen"), and it would get this one again and
		// again until the next compaction. It is a learner from its add
		// on and learns every later change from the entries after the
		// snapshot (adding a learner that is one already changes nothing).
		snap := *m.Snapshot
		snap.Metadata.ConfState.Learners = append(slices.Clone(cs.Learners), m.To)
		m.Snapshot = &snap
		n.logger.Info("the snapshot's membership predates the peer; sent with the peer as a learner in it",
			"peer", m.To, "index", snap.Metadata.Index, "conf_state", cs.String())
	}
	// The members' addresses go with the membership: m.To never sees the
	// conf changes below the snapshot, whose contexts carried them.
	book, err := json.Marshal(n.addressBook())
	if err != nil {
		return m, nil, nil, err
	}
	snap := *m.Snapshot
	snap.Data = book
	m.Snapshot = &snap
	sessions, err := n.baseSessions(m.Snapshot.Metadata.Index)
	if err != nil {
		return m, nil, nil, err
	}
	return m, sessions, snapper, nil
}

// chunkWriter cuts a byte stream into SnapshotChunks.
type chunkWriter struct {
	stream grpc.ClientStreamingClient[kvpb.SnapshotChunk, kvpb.StreamAck]
	buf    []byte
	sent   int64
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	for len(c.buf) >= snapChunkBytes {
		if err := c.stream.Send(&kvpb.SnapshotChunk{Data: c.buf[:snapChunkBytes]}); err != nil {
			return 0, err
		}
		c.sent += snapChunkBytes
		c.buf = append(c.buf[:0], c.buf[snapChunkBytes:]...)
	}
	return len(p), nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.stream.Send(&kvpb.SnapshotChunk{Data: c.buf})
	c.sent += int64(len(c.buf))
	c.buf = c.buf[:0]
	return err
}

// Snapshot receives a MsgSnap and its data into <data>/snap/ and steps it.
func (s *raftServer) Snapshot(stream grpc.ClientStreamingServer[kvpb.SnapshotChunk, kvpb.StreamAck]) error {
	n := s.n
	from, err := n.admitPeer(stream.Context())
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	var m raftpb.Message
	if err := m.Unmarshal(first.Message); err != nil || m.Type != raftpb.MsgSnap || m.Snapshot == nil || m.From != from || m.To != n.id {
		return fmt.Errorf("snapshot stream does not start with a MsgSnap from %d to %d", from, n.id)
	}
	m, err = n.storeSnapshot(m, first.Sessions, func() ([]byte, error) {
		c, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		return c.Data, nil
	})
	if err != nil {
		return err
	}
	select {
	case n.recvc <- m:
	case <-n.stopc:
		return errStopping
	case <-n.failed:
		return errStopping
	}
	return stream.SendAndClose(&kvpb.StreamAck{})
}

// learnSnapshotAddresses records the members' addresses a MsgSnap's Data
// carries (sendSnapshot; empty from a sender that sends none) and saves
// them in the address book.
func (n *Node) learnSnapshotAddresses(data []byte, from uint64) {
	if len(data) == 0 {
		return
	}
	var book addressBook
	if err := json.Unmarshal(data, &book); err != nil {
		n.logger.Warn("the members' addresses sent with a snapshot are undecodable; ignored", "from", from, "err", err)
		return
	}
	if n.learnAddresses(book) {
		n.saveAddressBook()
	}
}

// storeSnapshot writes the data of a received MsgSnap m (its chunks from
// next, until io.EOF) and its client sessions into <data>/snap/, and
// returns m with Snapshot.Data the data file's path, to be stepped.
func (n *Node) storeSnapshot(m raftpb.Message, sessions []byte, next func() ([]byte, error)) (raftpb.Message, error) {
	dir := n.snapDir()
	if err := n.fsys.MkdirAll(dir, 0o755); err != nil {
		return m, err
	}
	md := m.Snapshot.Metadata
	name := fmt.Sprintf("%020d-%020d.snap", md.Index, md.Term)
	if err := writeSessionFile(n.fsys, dir, md.Index, sessions); err != nil {
		return m, fmt.Errorf("write snapshot's client sessions: %w", err)
	}
	tmp, err := n.fsys.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return m, err
	}
	defer n.fsys.Remove(tmp.Name())
	size := int64(0)
	for {
		data, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tmp.Close()
			return m, err
		}
		if _, err := tmp.Write(data); err != nil {
			tmp.Close()
			return m, fmt.Errorf("write snapshot: %w", err)
		}
		size += int64(len(data))
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return m, fmt.Errorf("write snapshot: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := n.fsys.Rename(tmp.Name(), path); err != nil {
		return m, err
	}
	removeOlderSnapshots(n.fsys, dir, md.Index)
	n.logger.Info("snapshot received", "from", m.From, "index", md.Index, "bytes", size)
	n.learnSnapshotAddresses(m.Snapshot.Data, m.From)
	snap := *m.Snapshot
	snap.Data = []byte(path)
	m.Snapshot = &snap
	return m, nil
}

// removeOlderSnapshots deletes received snapshot files below index (raft
// ignores a snapshot older than what it has; an open file survives unlink).
func removeOlderSnapshots(fsys vfs.FileSystem, dir string, index uint64) {
	des, _ := fsys.ReadDir(dir)
	for _, de := range des {
		idx, _, ok := strings.Cut(de.Name(), "-")
		if !ok || !strings.HasSuffix(de.Name(), ".snap") {
			continue
		}
		if i, err := strconv.ParseUint(idx, 10, 64); err == nil && i < index {
			fsys.Remove(filepath.Join(dir, de.Name()))
		}
	}
}

// installSnapshot replaces the state machine's state with a received
// snapshot. Runs on the Ready loop before the Ready's entries are appended.
func (n *Node) installSnapshot(snap raftpb.Snapshot) error {
	md := snap.Metadata
	snapper, ok := n.sm.(systems.Snapshotter)
	if !ok {
		return fmt.Errorf("received a snapshot at index %d, but %s cannot restore one", md.Index, n.cfg.System.Name)
	}
	// Let the apply goroutine finish what it holds.
	barrier := make(chan struct{})
	select {
	case n.applyc <- applyBatch{barrier: barrier}:
	case <-n.failed:
		return errStopping
	}
	select {
	case <-barrier:
	case <-n.failed:
		return errStopping
	}
	path := string(snap.Data)
	f, err := n.fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("open received snapshot: %w", err)
	}
	defer f.Close()
	start := time.Now()
	r := systems.NewSnapshotReader(f)
	if err := snapper.PrepareRestore(md.Index, r); err != nil {
		return fmt.Errorf("restore snapshot at index %d: %w", md.Index, err)
	}
	sessPath := filepath.Join(filepath.Dir(path), sessionFileName(md.Index))
	enc, err := vfs.ReadFile(n.fsys, sessPath)
	if err != nil {
		return fmt.Errorf("snapshot at index %d: client sessions: %w", md.Index, err)
	}
	sessions, err := n.installSessions(md.Index, enc)
	if err != nil {
		return err
	}
	if err := n.log.ApplySnapshot(md); err != nil {
		return err
	}
	if err := snapper.CommitRestore(md.Index); err != nil {
		return fmt.Errorf("restore snapshot at index %d: %w", md.Index, err)
	}
	n.sessMu.Lock()
	n.sessBase = sessions
	n.sessDeltas.reset(md.Index)
	n.sessCkpt = nil
	n.sessMu.Unlock()
	n.sessions = sessions.clone()
	pruneSessionFiles(n.fsys, n.sessionDir(), md.Index)
	n.fsys.Remove(sessPath)
	n.setConfState(md.ConfState)
	n.raftApplied = md.Index
	if !isMember(md.ConfState, n.id) {
		n.markRemoved(fmt.Sprintf("the snapshot at index %d does not name this node as a member", md.Index))
	}
	n.applied.Store(md.Index)
	n.appliedWait.trigger(md.Index)
	n.fsys.Remove(path)
	n.logger.Info("snapshot installed", "index", md.Index, "term", md.Term, "pairs", r.Count(),
		"duration", time.Since(start).Round(time.Millisecond))
	return nil
}
