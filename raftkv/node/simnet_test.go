package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"google.golang.org/grpc"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/cryptotest"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// The deterministic tier's plumbing: an in-memory network whose messages
// move only when the test says, and a handle on a node that runs on a
// vfs.MemFS and on ticks the test sends, whose Raft log is written and
// flushed when the test says (simNode.writeLog), and that the test drives
// in lock step (simNode.run, settle): every goroutine of the node is idle
// between two steps, so a seeded schedule of steps replays exactly (see
// sim_test.go).

// simNet is the network of a sim: messages wait, in the order they were
// sent, until the test delivers, drops or duplicates them. Safe for
// concurrent use (the nodes' Ready loops send; the test delivers).
type simNet struct {
	mu    sync.Mutex
	queue []simMsg
}

// simMsg is a message on its way: its sender and the address it was sent
// to (a node listens on its internal address; a restarted one on the
// same).
type simMsg struct {
	from uint64
	addr string
	m    raftpb.Message
}

func (m simMsg) String() string {
	return fmt.Sprintf("%d->%d %s term=%d index=%d commit=%d ents=%d reject=%v",
		m.m.From, m.m.To, m.m.Type, m.m.Term, m.m.Index, m.m.Commit, len(m.m.Entries), m.m.Reject)
}

func (net *simNet) push(m simMsg) {
	net.mu.Lock()
	net.queue = append(net.queue, m)
	net.mu.Unlock()
}

// len is the number of messages in flight.
func (net *simNet) len() int {
	net.mu.Lock()
	defer net.mu.Unlock()
	return len(net.queue)
}

// take removes and returns message i.
func (net *simNet) take(i int) simMsg {
	net.mu.Lock()
	defer net.mu.Unlock()
	m := net.queue[i]
	net.queue = append(net.queue[:i], net.queue[i+1:]...)
	return m
}

// at returns message i, which stays in flight.
func (net *simNet) at(i int) simMsg {
	net.mu.Lock()
	defer net.mu.Unlock()
	return net.queue[i]
}

// simTransport is a node's raftTransport on a simNet: it keeps the peers
// as the gRPC transport does (addPeer, removePeer, and streams on demand to
// a peer raft sends to: onDemandAddress) and queues every message to a
// peer on the network.
type simTransport struct {
	net   *simNet
	n     *Node
	mu    sync.Mutex
	peers map[uint64]string
}

var _ raftTransport = (*simTransport)(nil)

func newSimTransport(net *simNet, n *Node) raftTransport {
	t := &simTransport{net: net, n: n, peers: map[uint64]string{}}
	n.startPeers(t)
	return t
}

func (t *simTransport) send(msgs []raftpb.Message) {
	for _, m := range msgs {
		t.mu.Lock()
		addr, ok := t.peers[m.To]
		t.mu.Unlock()
		if !ok {
			if addr = t.n.onDemandAddress(m.To); addr == "" {
				continue
			}
			t.addPeer(m.To, addr)
		}
		t.net.push(simMsg{from: t.n.id, addr: addr, m: m})
	}
}

func (t *simTransport) addPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.peers[id]; !ok {
		t.peers[id] = addr
	}
}

func (t *simTransport) removePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.peers, id)
}

func (t *simTransport) stop() {}

func (t *simTransport) peerIDs() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]uint64, 0, len(t.peers))
	for id := range t.peers {
		ids = append(ids, id)
	}
	return ids
}

// conn is nil: the sim carries Raft messages only (no span shipping, no
// disk health checks between its nodes).
func (t *simTransport) conn(uint64) *grpc.ClientConn { return nil }

func (t *simTransport) context() context.Context { return context.Background() }

// simNode is one member of a sim, up (n set) or down, with its disk.
type simNode struct {
	id    uint64
	cfg   Config
	disk  *vfs.MemFS
	tickc chan time.Time
	n     *Node // nil while down
	// faulty: the sim made this process's disk fail; its failure is
	// expected. retired: no longer a member, stopped for good.
	faulty, retired bool
	// autoFlush: settle also writes and flushes the node's log until
	// nothing is pending (the scenarios); otherwise only the schedule's
	// steps do (writeLog).
	autoFlush bool
}

// start starts the node on its disk, ticks and the network.
func (sn *simNode) start(net *simNet) error {
	cfg := sn.cfg
	cfg.env = &env{fs: sn.disk, ticks: sn.tickc, transport: func(n *Node) raftTransport { return newSimTransport(net, n) },
		logWritesByTest: true}
	n, err := Start(cfg)
	if err != nil {
		return err
	}
	sn.n = n
	// A fresh node's first Ready (the committed entries it has not
	// applied) comes after its first event: this one.
	sn.run(func() {})
	return nil
}

// up reports whether the node runs and has not failed.
func (sn *simNode) up() bool { return sn.n != nil && sn.n.Err() == nil }

// ctl hands f to the node's Ready loop; false if the loop has ended.
func (sn *simNode) ctl(f func()) bool {
	select {
	case sn.n.ctlc <- f:
		return true
	case <-sn.n.loopDone:
		return false
	}
}

// run runs f on the node's Ready loop, then settles the node.
func (sn *simNode) run(f func()) {
	if sn.ctl(f) {
		sn.settle()
	}
}

// settle returns once every goroutine of the node is idle (settleOnce);
// with autoFlush, once its log holds nothing unwritten or unflushed too.
func (sn *simNode) settle() {
	sn.settleOnce()
	for sn.autoFlush && sn.up() {
		if queued, written := sn.n.logw.pending(); !queued && !written {
			return
		}
		sn.writeLog(true, true)
	}
}

// writeLog runs the node's log writer (logwrite.go) on its Ready loop:
// write, every append queued is written (without fdatasync); flush, what is
// written is flushed and its responses delivered (the loop steps its own).
// Then it settles the node.
func (sn *simNode) writeLog(write, flush bool) {
	w := sn.n.logw
	if !sn.ctl(func() {
		for queued, _ := w.pending(); write && queued && sn.n.Err() == nil; queued, _ = w.pending() {
			w.writeStep()
		}
		if flush && sn.n.Err() == nil {
			w.flushStep()
		}
	}) {
		return
	}
	sn.settleOnce()
}

// settleOnce returns once every goroutine of the node is idle: the Ready
// loop back in its select (done with what it was handed, with every Ready
// that made and every response of its log writer), the apply goroutine
// done with every entry handed to it, the background writers of session
// checkpoints and log sidecars done, and, after a failed fsync, the node
// stopped.
func (sn *simNode) settleOnce() {
	n := sn.n
	// The loop takes this no-op only after it handled what it was handed
	// before (a tick, a function: run) and every Ready that made.
	sn.ctl(func() {})
	barrier := make(chan struct{})
	select {
	case n.applyc <- applyBatch{barrier: barrier}:
		select {
		case <-barrier:
		case <-n.applyDone:
		}
	case <-n.applyDone:
	}
	n.sessCkptWG.Wait()
	n.log.WaitIndexed()
	if n.fs.Err() != nil {
		// A failed fsync stops the node through watchDisk, a goroutine
		// of its own: wait until it has, so that the node stops at this
		// step on every run.
		<-n.failed
		<-n.loopDone
		<-n.applyDone
	}
}

// tick sends the node one Raft tick.
func (sn *simNode) tick() {
	select {
	case sn.tickc <- time.Time{}:
		sn.settle()
	case <-sn.n.loopDone:
	}
}

// proposeConfChange proposes change on the node's Ready loop now, as the
// Admin service does (tryConfChange, with check), and returns the waiter
// of its proposal.
func (sn *simNode) proposeConfChange(change raftpb.ConfChangeSingle, cctx confContext, check func() error) (<-chan applyResult, error) {
	n := sn.n
	cctx.RequestID = n.nextRequestID()
	cc, err := newConfChange(change, cctx)
	if err != nil {
		return nil, err
	}
	ch := n.proposals.register(cctx.RequestID)
	sn.run(func() { err = n.tryConfChange(cctx.RequestID, cc, check) })
	if err != nil {
		n.proposals.cancel(cctx.RequestID)
		return nil, err
	}
	return ch, nil
}

// crash stops the node as a power loss would: its disk becomes what a
// crash keeps (torn: vfs.CrashOptions.TornTailPercent, drawn from rng).
func (sn *simNode) crash(torn int, rng *rand.Rand) {
	disk := sn.disk.CrashClone(vfs.CrashOptions{TornTailPercent: torn, RNG: rng})
	sn.n.Stop() // what it writes while stopping goes to the old disk
	sn.n = nil
	sn.disk = disk
}

// stop stops the node cleanly (its disk keeps everything).
func (sn *simNode) stop() {
	sn.n.Stop()
	sn.n = nil
}

// deliver hands message m to the node listening on its address, as the
// gRPC transport's receiving end does (raftServer.Stream, admitPeer): a
// removed sender is refused, and learns it (noteRefused); a snapshot's
// data is written by its sender's state machine and stored by the
// receiver before the message is stepped (sendSnapshot, Snapshot); the
// sender then hears how it went (ReportSnapshot). It returns why the
// message was not stepped ("" if it was).
func deliver(m simMsg, src, dst *simNode) string {
	switch {
	case dst == nil || !dst.up():
		if src != nil && src.up() {
			src.run(func() { src.n.rn.ReportUnreachable(m.m.To) })
		}
		lost(m, src)
		return "receiver down"
	case dst.cfg.InternalAddress != m.addr:
		lost(m, src)
		return "nobody at " + m.addr
	}
	if err := dst.n.removedPeerErr(m.from); err != nil {
		if src != nil && src.up() {
			src.n.noteRefused(dst.id, err)
		}
		lost(m, src)
		return "sender removed"
	}
	if src != nil {
		dst.n.notePeer(m.from, src.cfg.Address, src.cfg.InternalAddress)
	}
	if m.m.To != dst.id {
		return "wrong address"
	}
	if m.m.Type != raftpb.MsgSnap {
		dst.run(func() { dst.n.step(m.m) })
		return ""
	}
	if src == nil || !src.up() {
		return "snapshot sender down"
	}
	status := raft.SnapshotFailure
	why := deliverSnapshot(m.m, src.n, dst)
	if why == "" {
		status = raft.SnapshotFinish
	}
	src.run(func() { src.n.rn.ReportSnapshot(dst.id, status) })
	return why
}

// lost tells the sender of a MsgSnap that was not delivered, as the gRPC
// transport's sendSnapshot reports every snapshot it could not send (raft
// sends the follower nothing else until it hears).
func lost(m simMsg, src *simNode) {
	if m.m.Type == raftpb.MsgSnap && src != nil && src.up() {
		src.run(func() { src.n.rn.ReportSnapshot(m.m.To, raft.SnapshotFailure) })
	}
}

// deliverSnapshot streams MsgSnap m's data from src's state machine to dst
// and steps it there.
func deliverSnapshot(m raftpb.Message, src *Node, dst *simNode) string {
	m, sessions, snapper, err := src.prepareSnapshot(m)
	if err != nil {
		return "snapshot not sent: " + err.Error()
	}
	var buf bytes.Buffer
	w := systems.NewSnapshotWriter(&buf)
	if err := errors.Join(snapper.WriteSnapshot(w), w.Close()); err != nil {
		return "snapshot not written: " + err.Error()
	}
	stored, err := dst.n.storeSnapshot(m, sessions, func() ([]byte, error) {
		if buf.Len() == 0 {
			return nil, io.EOF
		}
		return buf.Next(snapChunkBytes), nil
	})
	if err != nil {
		return "snapshot not stored: " + err.Error()
	}
	dst.run(func() { dst.n.step(stored) })
	return ""
}

// The tests' transport queues messages in the order they are sent, to
// the peers it was given and to the ones raft sends to that announced an
// address (onDemandAddress, as the gRPC transport); messages to a node it
// knows no address of are dropped.
func TestSimTransport(t *testing.T) {
	net := &simNet{}
	n := &Node{id: 1, logger: slog.New(slog.DiscardHandler), cfg: Config{Peers: []string{"a:1", "b:1"}, InternalAddress: "a:1"}}
	tr := &simTransport{net: net, n: n, peers: map[uint64]string{}}
	n.startPeers(tr) // no membership applied yet: no peer
	tr.addPeer(2, "b:1")
	tr.send([]raftpb.Message{
		{From: 1, To: 2, Type: raftpb.MsgApp, Index: 1},
		{From: 1, To: 3, Type: raftpb.MsgApp},
		{From: 1, To: 2, Type: raftpb.MsgHeartbeat},
	})
	if net.len() != 2 || net.at(0).m.Index != 1 || net.at(1).m.Type != raftpb.MsgHeartbeat || net.at(0).addr != "b:1" {
		t.Fatalf("queued %v, want the two messages to 2 in order", net.queue)
	}
	n.announcedAddrs.Store(uint64(3), "c:1")
	tr.send([]raftpb.Message{{From: 1, To: 3, Type: raftpb.MsgHeartbeat}})
	if net.len() != 3 || net.at(2).addr != "c:1" {
		t.Fatalf("a message to a peer that announced its address was not queued there: %v", net.queue)
	}
	tr.removePeer(2)
	n.removedIDs.Store(uint64(2), uint64(9))
	tr.send([]raftpb.Message{{From: 1, To: 2, Type: raftpb.MsgHeartbeat}})
	if net.len() != 3 {
		t.Fatalf("a message to a removed member was queued: %v", net.queue)
	}
	if m := net.take(0); m.m.Index != 1 || net.len() != 2 {
		t.Fatalf("take(0) = %v, %d left", m, net.len())
	}
}

// A node of the tests ticks only when it is sent a tick: no election
// without ticks, one within two election timeouts of them.
func TestSimNodeTicksOnlyWhenTold(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	s, err := newSim(1, simOptions{nodes: 1, clients: 1, keys: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	sn := s.nodes[0]
	for range 100 {
		sn.settle()
	}
	if term := sn.n.term.Load(); term != 0 {
		t.Fatalf("term %d without a tick", term)
	}
	for i := 0; raft.StateType(sn.n.raftState.Load()) != raft.StateLeader; i++ {
		if i == 2*sn.cfg.ElectionTicks {
			t.Fatalf("no leader after %d ticks: %s", i, s.status())
		}
		sn.tick()
	}
}
