package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/nezha"
	"github.com/nezha-harness/nezha/systems"
)

// The deterministic tier. A sim runs a cluster of real Nodes (the Ready
// loop, the raftlog, client sessions, snapshots, membership: this
// package's code) on a vfs.MemFS each, an in-memory network (simnet_test.go)
// and ticks it sends, in lock step from one goroutine: each step hands one
// thing to one node (a tick, a message, a proposal, a read, a snapshot)
// and waits until that node is idle again. Everything else a step could
// depend on is seeded: the sim's choices by its rand, etcd raft's election
// timeouts and the nodes' request nonces by crypto/rand, which
// cryptotest.SetGlobalRandom makes a seeded stream. A seed therefore
// replays the same run, and a failure prints the command that replays it.
//
// Clients write and read with sessions as client does: a write
// whose outcome is unknown (a leader change, a node that crashed, a
// timeout) is sent again, to any node, with the same session and sequence
// number, until it is known; the history of their operations is checked
// for linearizability against a key-value model (porcupine). Besides, each
// session write must be applied at one Raft index only (every node, every
// restart: simRecorder), and the members must end with the same state
// hash.

var (
	simSeed    = flag.Uint64("sim.seed", 0, "TestSimProperty: run only this seed (0: seeds 1..-sim.seeds)")
	simSeeds   = flag.Int("sim.seeds", 1000, "TestSimProperty: how many seeded scenarios")
	simVerbose = flag.Bool("sim.v", false, "sim tests: print every step and the nodes' log lines")
	simTwice   = flag.Int("sim.twice", 10, "TestSimDeterministic: how many seeds to run twice")
)

// simOptions shape a sim.
type simOptions struct {
	nodes   int
	clients int
	keys    int
	// steps is the length of the random phase (TestSimProperty).
	steps int
	// traceAll: the trace has every delivered message too.
	traceAll bool
	// logSteps: the nodes' logs are written and flushed by steps of the
	// schedule (stepLog), so that a crash can meet appends written and
	// not flushed; otherwise each step ends with everything flushed
	// (simNode.autoFlush).
	logSteps bool
}

// sim is a cluster under the test's control. See the top of this file.
type sim struct {
	opts    simOptions
	rng     *rand.Rand
	net     *simNet
	nodes   []*simNode // by id - 1
	clients []*simClient
	rec     *simRecorder
	logger  *slog.Logger
	now     int64 // logical time: one per step
	hist    []porcupine.Operation
	trace   []string
	// cut: nodes whose messages (both ways) are lost.
	cut   map[uint64]bool
	stats simStats
	// print hashes every step and every delivered message (runSim's
	// fingerprint).
	print hash.Hash64
	// out, if set, receives a line for each operation done (scenarios).
	out io.Writer
	// changes are the membership changes proposed (TestSimProperty).
	changes []simChange
}

// simStats count what a run did, to show that the schedule reaches what
// it is meant to test.
type simStats struct {
	ops, writes, reads, crashes, stops, snapshots, snapshotsSent, dedups int
	diskStops, confChanges                                               int
	// unflushedCrashes: crashes of a node that had appends written and
	// not flushed (or not written).
	unflushedCrashes int
}

func (a *simStats) add(b simStats) {
	a.ops += b.ops
	a.writes += b.writes
	a.reads += b.reads
	a.crashes += b.crashes
	a.stops += b.stops
	a.snapshots += b.snapshots
	a.snapshotsSent += b.snapshotsSent
	a.dedups += b.dedups
	a.diskStops += b.diskStops
	a.confChanges += b.confChanges
	a.unflushedCrashes += b.unflushedCrashes
}

func (a simStats) String() string {
	return fmt.Sprintf("%d operations done (%d writes, %d reads), %d crashes (%d after a failed fsync, %d with log appends not flushed), "+
		"%d clean restarts, %d log compactions, %d snapshots sent, %d membership changes applied, %d writes answered by their session's dedup",
		a.ops, a.writes, a.reads, a.crashes, a.diskStops, a.unflushedCrashes, a.stops, a.snapshots, a.snapshotsSent, a.confChanges, a.dedups)
}

func newSim(seed uint64, opts simOptions) (*sim, error) {
	s := &sim{opts: opts, rng: rand.New(rand.NewPCG(seed, 0x51d)), net: &simNet{}, rec: newSimRecorder(), cut: map[uint64]bool{},
		print: fnv.New64a()}
	s.logger = slog.New(slog.DiscardHandler)
	if *simVerbose {
		s.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var peers []string
	for id := 1; id <= opts.nodes; id++ {
		peers = append(peers, simInternal(uint64(id)))
	}
	for id := uint64(1); id <= uint64(opts.nodes); id++ {
		s.nodes = append(s.nodes, s.newNode(id, peers, nil))
	}
	for i := range opts.clients {
		s.clients = append(s.clients, &simClient{idx: i, session: uint64(1000 + i)})
	}
	for _, sn := range s.nodes {
		if err := sn.start(s.net); err != nil {
			return nil, fmt.Errorf("start node %d: %w", sn.id, err)
		}
	}
	return s, nil
}

func simInternal(id uint64) string { return fmt.Sprintf("raft-%d:7000", id) }
func simAddress(id uint64) string  { return fmt.Sprintf("kv-%d:7001", id) }

// newNode makes the handle of member id (down): nezha with a memory index
// and no GC round but the snapshot rounds the test asks for, over small
// log segments (rolls, sidecars, segment removal) with a small entry cache
// (reads from the log), and session checkpoints every few entries.
func (s *sim) newNode(id uint64, peers []string, bootstrap []uint64) *simNode {
	sc, _ := nezha.DefaultConfig(nezha.Name)
	sc.Index = nezha.IndexMemory
	sc.GC = nezha.StrategyGreedy
	sc.GCThresholdBytes, sc.GCMinBytes = 1<<62, 1<<62
	sc.GCIdleAfter, sc.GCScanLogBytes, sc.GCStagger, sc.GCStallGarbageBytes, sc.GCRateBytesPerSec = 0, 0, 0, 0, 0
	sc.GCInterval = time.Hour
	cfg := Default()
	cfg.System = nezha.Nezha()
	cfg.SystemConfig = simSystemConfig{Config: sc, rec: s.rec, node: id}
	cfg.Peers = peers
	cfg.BootstrapVoters = bootstrap
	cfg.InternalAddress, cfg.Address = simInternal(id), simAddress(id)
	cfg.DataDir = fmt.Sprintf("/node%d", id)
	cfg.ClusterID = "sim"
	cfg.SegmentSizeBytes = 4096
	cfg.EntryCacheBytes = 4096
	cfg.MinFreeDiskBytes, cfg.DiskBallastBytes = 0, 0
	cfg.Logger = s.logger
	cfg.sessionCheckpointEntries = 16
	return &simNode{id: id, cfg: cfg, disk: vfs.NewMem(), tickc: make(chan time.Time), autoFlush: !s.opts.logSteps}
}

// tracef records a step (printed with a failure, or at once with -sim.v).
func (s *sim) tracef(format string, args ...any) {
	line := fmt.Sprintf("%5d ", s.now) + fmt.Sprintf(format, args...)
	s.trace = append(s.trace, line)
	io.WriteString(s.print, line)
	if *simVerbose {
		fmt.Println(line)
	}
}

func (s *sim) node(id uint64) *simNode {
	if id == 0 || id > uint64(len(s.nodes)) {
		return nil
	}
	return s.nodes[id-1]
}

// upNodes returns the nodes that run.
func (s *sim) upNodes() []*simNode {
	var out []*simNode
	for _, sn := range s.nodes {
		if sn.up() {
			out = append(out, sn)
		}
	}
	return out
}

// leader returns an up node that leads, or nil.
func (s *sim) leader() *simNode {
	var best *simNode
	for _, sn := range s.upNodes() {
		if raft.StateType(sn.n.raftState.Load()) == raft.StateLeader && (best == nil || sn.n.term.Load() > best.n.term.Load()) {
			best = sn
		}
	}
	return best
}

// failed returns the error of a node that stopped on a fatal error, a
// failure of the test unless the sim made its disk fail (faulty): such a
// node is crashed (and restarted later), as its process would have ended.
func (s *sim) failed() error {
	for _, sn := range s.nodes {
		if sn.n == nil || sn.n.Err() == nil {
			continue
		}
		if !sn.faulty {
			return fmt.Errorf("node %d failed: %w", sn.id, sn.n.Err())
		}
		// (Not the error: the Ready loop and watchDisk race to report it.)
		s.tracef("node %d stopped on its disk fault", sn.id)
		s.stats.diskStops++
		s.crash(sn, 100)
	}
	return s.rec.failure()
}

// deliverAt delivers message i of the network.
func (s *sim) deliverAt(i int) {
	m := s.net.take(i)
	dst := s.nodeAt(m.addr)
	if s.cut[m.from] || (dst != nil && s.cut[dst.id]) {
		s.tracef("lost (partition) %v", m)
		lost(m, s.node(m.from))
		return
	}
	if why := deliver(m, s.node(m.from), dst); why != "" {
		s.tracef("not delivered (%s) %v", why, m)
		return
	}
	if m.m.Type == raftpb.MsgSnap {
		s.stats.snapshotsSent++
		s.tracef("snapshot delivered %v", m)
	}
	if *simVerbose || s.opts.traceAll {
		s.tracef("delivered %v", m)
	} else {
		fmt.Fprint(s.print, m.m.From, m.m.To, m.m.Type, m.m.Term, m.m.Index, m.m.LogTerm, m.m.Commit, len(m.m.Entries), m.m.Reject)
	}
}

// nodeAt returns the node listening on addr.
func (s *sim) nodeAt(addr string) *simNode {
	for _, sn := range s.nodes {
		if sn.cfg.InternalAddress == addr {
			return sn
		}
	}
	return nil
}

// crash crashes node sn, keeping torn tails of its unsynced writes with
// probability torn percent.
func (s *sim) crash(sn *simNode, torn int) {
	s.tracef("crash %d (torn tails %d%%)", sn.id, torn)
	s.stats.crashes++
	if queued, written := sn.n.logw.pending(); queued || written {
		s.stats.unflushedCrashes++
	}
	sn.crash(torn, s.rng)
	sn.faulty = false // a new process, a new file layer
}

// restart starts a down node again.
func (s *sim) restart(sn *simNode) error {
	s.tracef("start %d", sn.id)
	if len(s.nodes) > s.opts.nodes {
		// A node restarts with -peers naming every node that joined, as
		// `nezha cluster` passes them from cluster.json: the addresses of
		// members added since its first start are in its log only until a
		// compaction drops their conf changes.
		sn.cfg.Peers = nil
		for _, o := range s.live() {
			sn.cfg.Peers = append(sn.cfg.Peers, fmt.Sprintf("%d=%s", o.id, o.cfg.InternalAddress))
		}
		if !slices.Contains(sn.cfg.Peers, fmt.Sprintf("%d=%s", sn.id, sn.cfg.InternalAddress)) {
			sn.cfg.Peers = append(sn.cfg.Peers, fmt.Sprintf("%d=%s", sn.id, sn.cfg.InternalAddress))
		}
	}
	if err := sn.start(s.net); err != nil {
		return fmt.Errorf("restart node %d: %w", sn.id, err)
	}
	return nil
}

// snapshot has node sn compact its log (systems.SnapshotTaker through the
// Admin service, as `nezha cluster compact` does).
func (s *sim) snapshot(sn *simNode) string {
	resp, err := (&adminServer{n: sn.n}).TakeSnapshot(context.Background(), &kvpb.TakeSnapshotRequest{})
	sn.settle()
	if err != nil {
		return err.Error()
	}
	s.stats.snapshots++
	return fmt.Sprintf("snapshot index %d first index %d", resp.SnapshotIndex, resp.FirstIndex)
}

// simClient is a client with a session and at most one operation at a
// time (as a closed-loop client).
type simClient struct {
	idx     int
	session uint64
	seq     uint64
	op      *simOp
}

// simOp is a client's operation and its attempt in flight.
type simOp struct {
	in   kvInput
	seq  uint64
	hist int // in sim.hist
	// The attempt: on node (its incarnation inc) since since; retryAt is
	// when to try again once an attempt failed (node nil).
	node    *simNode
	inc     *Node
	since   int64
	retryAt int64
	reqID   uint64
	wait    <-chan applyResult
	reads   chan readResult
	index   uint64
	indexed bool
	// attempts counts the attempts sent to a node.
	attempts int
}

// kvInput and kvOutput are the operations of the porcupine model.
type kvInput struct {
	op         string // put, delete, get
	key, value string
}

type kvOutput struct {
	value string
	found bool
}

// simAttemptSteps is how long an attempt waits for its answer before the
// client gives up on it and sends the operation again.
const simAttemptSteps = 200

// begin starts operation in on client c.
func (s *sim) begin(c *simClient, in kvInput) {
	op := &simOp{in: in, hist: len(s.hist)}
	if in.op != "get" {
		c.seq++
		op.seq = c.seq
	}
	s.hist = append(s.hist, porcupine.Operation{ClientId: c.idx, Input: in, Call: s.now, Return: -1})
	c.op = op
	s.tracef("client %d begins %s %s=%s (seq %d)", c.idx, in.op, in.key, in.value, op.seq)
}

// resend starts on client c a copy of its earlier write seq (scenarios).
// It is no operation of the history: its effect, if any, is the first
// copy's.
func (s *sim) resend(c *simClient, in kvInput, seq uint64) {
	op := &simOp{in: in, hist: -1, seq: seq}
	c.op = op
	s.tracef("client %d begins %s %s=%s (seq %d)", c.idx, in.op, in.key, in.value, op.seq)
}

// pickNode returns the node a client tries: usually one that leads, else
// any node up.
func (s *sim) pickNode() *simNode {
	if l := s.leader(); l != nil && s.rng.IntN(4) != 0 {
		return l
	}
	up := s.upNodes()
	if len(up) == 0 {
		return nil
	}
	return up[s.rng.IntN(len(up))]
}

// attempt sends c's operation to a node: a write through the client API's
// checks (kvServer.preparePut, prepareDelete) to the Ready loop's
// propose; a read as a ReadIndex round (as readIndex does).
func (s *sim) attempt(c *simClient) { s.attemptOn(c, s.pickNode()) }

// attemptOn is attempt on node sn.
func (s *sim) attemptOn(c *simClient, sn *simNode) {
	op := c.op
	if sn == nil || !sn.up() {
		op.retryAt = s.now + 10
		return
	}
	op.node, op.inc, op.since, op.indexed = sn, sn.n, s.now, false
	op.attempts++
	ks := &kvServer{n: sn.n}
	if op.in.op == "get" {
		if err := sn.n.removedErr(); err != nil {
			s.refused(c, sn, err)
			return
		}
		op.reads = make(chan readResult, 1)
		sn.run(func() {
			sn.n.queuedReads = append(sn.n.queuedReads, readRequest{ch: op.reads})
			sn.n.issueReads()
		})
		return
	}
	var (
		id   uint64
		data []byte
		err  error
	)
	sess := clientSession{c.session, op.seq}
	if op.in.op == "put" {
		id, data, err = ks.preparePut([]byte(op.in.key), []byte(op.in.value), sess, 0, nil)
	} else {
		id, data, err = ks.prepareDelete([]byte(op.in.key), sess)
	}
	if err != nil {
		s.refused(c, sn, err)
		return
	}
	op.reqID, op.wait = id, sn.n.proposals.register(id)
	sn.run(func() { sn.n.propose(proposal{id: id, data: data}) })
}

// refused is retry for an attempt node sn refused at its front door.
func (s *sim) refused(c *simClient, sn *simNode, err error) {
	c.op.node = sn
	s.retry(c, "refused: "+err.Error())
}

// retry gives up c's attempt: the operation is sent again later.
func (s *sim) retry(c *simClient, why string) {
	op := c.op
	if op.node != nil && op.wait != nil && op.node.n == op.inc && op.inc != nil {
		op.inc.proposals.cancel(op.reqID)
	}
	line := fmt.Sprintf("client %d: %s %s via %d: %s; again later", c.idx, op.in.op, op.in.key, idOf(op.node), why)
	s.tracef("%s", line)
	if s.out != nil {
		fmt.Fprintln(s.out, line)
	}
	op.node, op.inc, op.wait, op.reads = nil, nil, nil, nil
	op.retryAt = s.now + 5 + int64(s.rng.IntN(20))
}

func idOf(sn *simNode) uint64 {
	if sn == nil {
		return 0
	}
	return sn.id
}

// poll moves c's operation on: it starts an attempt when due, and
// completes the operation once its attempt has an answer.
func (s *sim) poll(c *simClient) error {
	op := c.op
	if op == nil {
		return nil
	}
	if op.node == nil {
		if s.now >= op.retryAt {
			s.attempt(c)
		}
		return nil
	}
	stale := op.node.n != op.inc || !op.node.up()
	timedOut := s.now-op.since > simAttemptSteps
	if op.in.op != "get" {
		select {
		case r := <-op.wait:
			switch {
			case r.err == nil:
				if op.attempts > 1 {
					s.stats.dedups++ // sent more than once, answered once
				}
				s.complete(c, nil, fmt.Sprintf("applied at index %d", r.index))
			case errors.Is(r.err, errSuperseded) && op.hist < 0:
				s.complete(c, nil, r.err.Error()) // a late copy (scenarios)
			case errors.Is(r.err, errSuperseded):
				return fmt.Errorf("client %d: write %d was superseded, but the client has one write at a time", c.idx, op.seq)
			default:
				s.retry(c, r.err.Error())
			}
		default:
			if stale || timedOut {
				s.retry(c, "no answer")
			}
		}
		return nil
	}
	if !op.indexed {
		select {
		case r := <-op.reads:
			if r.err != nil {
				s.retry(c, r.err.Error())
				return nil
			}
			op.index, op.indexed = r.index, true
		default:
			if stale || timedOut {
				s.retry(c, "no read index")
			}
			return nil
		}
	}
	switch {
	case stale || timedOut:
		s.retry(c, "not applied up to the read index")
	case op.inc.applied.Load() >= op.index:
		resp, err := (&kvServer{n: op.inc}).getLocal(&kvpb.GetRequest{Key: []byte(op.in.key)}, false)
		if err != nil {
			return fmt.Errorf("client %d: get %s on node %d: %w", c.idx, op.in.key, op.node.id, err)
		}
		s.complete(c, kvOutput{value: string(resp.Value), found: resp.Found},
			fmt.Sprintf("read index %d: found=%v %q", op.index, resp.Found, resp.Value))
	}
	return nil
}

// complete ends c's operation with output.
func (s *sim) complete(c *simClient, out any, how string) {
	op := c.op
	if op.hist >= 0 {
		s.hist[op.hist].Output = out
		s.hist[op.hist].Return = s.now
	}
	s.stats.ops++
	if op.in.op == "get" {
		s.stats.reads++
	} else {
		s.stats.writes++
	}
	line := fmt.Sprintf("client %d: %s %s via %d: %s", c.idx, op.in.op, op.in.key, op.node.id, how)
	s.tracef("%s", line)
	if s.out != nil {
		fmt.Fprintln(s.out, line)
	}
	c.op = nil
}

// pollAll polls every client, in order, and the membership changes.
func (s *sim) pollAll() error {
	s.pollChanges()
	for _, c := range s.clients {
		if err := s.poll(c); err != nil {
			return err
		}
	}
	return nil
}

// pending reports whether an operation is unfinished.
func (s *sim) pending() bool {
	return slices.ContainsFunc(s.clients, func(c *simClient) bool { return c.op != nil })
}

// randomOp returns a random operation on the sim's keys.
func (s *sim) randomOp(c *simClient) kvInput {
	key := fmt.Sprintf("k%d", s.rng.IntN(s.opts.keys))
	switch r := s.rng.IntN(10); {
	case r < 5:
		return kvInput{op: "put", key: key, value: fmt.Sprintf("c%d.%d", c.idx, c.seq+1)}
	case r < 6:
		return kvInput{op: "delete", key: key}
	}
	return kvInput{op: "get", key: key}
}

// simStep is a kind of random step, with its weight in simSteps.
type simStep int

const (
	stepDeliver simStep = iota
	stepTick
	stepTickAll
	stepClient
	stepLose
	stepDuplicate
	stepCrash
	stepRestart
	stepStop
	stepPartition
	stepSnapshot
	stepFsyncFault
	stepMembership
	stepLog
)

// simStepWeights are the weights of the random steps, per mille.
var simStepWeights = [...]int{
	stepDeliver: 560, stepTick: 170, stepTickAll: 50, stepClient: 110, stepLose: 15, stepDuplicate: 5,
	stepCrash: 6, stepRestart: 30, stepStop: 3, stepPartition: 8, stepSnapshot: 15, stepFsyncFault: 2, stepMembership: 8,
	stepLog: 300,
}

// pickStep draws a kind of step.
func (s *sim) pickStep() simStep {
	total := 0
	for _, w := range simStepWeights {
		total += w
	}
	r := s.rng.IntN(total)
	for k, w := range simStepWeights {
		if r < w {
			return simStep(k)
		}
		r -= w
	}
	return stepTick
}

// step takes one random step (TestSimProperty's schedule): mostly
// deliveries and ticks, client operations, and now and then a lost,
// duplicated or reordered message, a crash (while at most a minority is
// down), a restart, a partition, a log compaction. A step that does not
// apply now (a delivery with nothing in flight) is a tick instead.
func (s *sim) step() error {
	s.now++
	up := s.upNodes()
	down := 0
	for _, sn := range s.nodes {
		if sn.n == nil && !sn.retired {
			down++
		}
	}
	inFlight := s.net.len()
	var logging []*simNode // nodes with appends to write or flush
	for _, sn := range up {
		if queued, written := sn.n.logw.pending(); queued || written {
			logging = append(logging, sn)
		}
	}
	k := s.pickStep()
	switch {
	case len(up) == 0:
		k = stepRestart
	case (k == stepDeliver || k == stepLose || k == stepDuplicate) && inFlight == 0,
		(k == stepCrash || k == stepFsyncFault) && down >= (len(s.live())-1)/2,
		k == stepRestart && down == 0,
		k == stepClient && !slices.ContainsFunc(s.clients, func(c *simClient) bool { return c.op == nil }),
		k == stepLog && len(logging) == 0:
		k = stepTick
	}
	switch k {
	case stepDeliver:
		i := 0
		if s.rng.IntN(10) == 0 {
			i = s.rng.IntN(inFlight) // reordered
		}
		s.deliverAt(i)
	case stepTick:
		up[s.rng.IntN(len(up))].tick()
	case stepTickAll:
		for _, sn := range up {
			sn.tick()
		}
	case stepClient:
		for _, c := range s.clients {
			if c.op == nil {
				s.begin(c, s.randomOp(c))
				s.attempt(c)
				break
			}
		}
	case stepLose:
		m := s.net.take(s.rng.IntN(inFlight))
		s.tracef("lost %v", m)
		lost(m, s.node(m.from))
	case stepDuplicate:
		m := s.net.at(s.rng.IntN(inFlight))
		s.net.push(m)
		s.tracef("duplicated %v", m)
	case stepCrash:
		s.crash(up[s.rng.IntN(len(up))], []int{0, 50, 100}[s.rng.IntN(3)])
	case stepRestart:
		for _, sn := range s.nodes {
			if sn.n == nil && !sn.retired {
				if err := s.restart(sn); err != nil {
					return err
				}
				break
			}
		}
	case stepStop:
		sn := up[s.rng.IntN(len(up))]
		s.tracef("stop %d", sn.id)
		s.stats.stops++
		sn.stop()
		if err := s.restart(sn); err != nil {
			return err
		}
	case stepPartition:
		if len(s.cut) > 0 {
			s.tracef("heal the partition")
			clear(s.cut)
		} else {
			id := uint64(1 + s.rng.IntN(len(s.nodes)))
			s.tracef("partition: %d cut off", id)
			s.cut[id] = true
		}
	case stepSnapshot:
		sn := up[s.rng.IntN(len(up))]
		s.tracef("node %d: %s", sn.id, s.snapshot(sn))
	case stepFsyncFault:
		// The node's next fsync fails: it stops (failed), and restarts.
		sn := up[s.rng.IntN(len(up))]
		if err := sn.n.DiskFS().SetFaults(vfs.Fault{Kind: vfs.FaultFsyncError}); err != nil {
			return err
		}
		sn.faulty = true
		s.tracef("node %d: fsync fails from now on", sn.id)
	case stepMembership:
		if err := s.changeMembership(); err != nil {
			return err
		}
	case stepLog:
		// Each node with appends pending writes them without flushing,
		// flushes what was written, or both: a crash between the two
		// keeps only what the flush covered.
		for _, sn := range logging {
			write, flush := false, false
			switch s.rng.IntN(4) {
			case 0:
				write = true
			case 1:
				flush = true
			default:
				write, flush = true, true
			}
			s.tracef("node %d: log write=%v flush=%v", sn.id, write, flush)
			sn.writeLog(write, flush)
		}
	}
	if err := s.pollAll(); err != nil {
		return err
	}
	return s.failed()
}

// heal ends the faults (partition, down nodes) and runs the cluster, every
// message delivered in order and every node ticked, until every operation
// is done and the members agree; then it reads every key.
func (s *sim) heal() error {
	s.tracef("heal: every node up, no partition, no disk fault")
	clear(s.cut)
	for _, sn := range s.nodes {
		if sn.faulty && sn.n != nil {
			s.crash(sn, 100) // a failed fsync is for good: a new process
		}
		if sn.n == nil && !sn.retired {
			if err := s.restart(sn); err != nil {
				return err
			}
		}
	}
	if err := s.settleCluster("finish the operations"); err != nil {
		return err
	}
	// The nodes the membership no longer (or never) named are stopped,
	// as an operator does.
	members := s.members()
	for _, sn := range s.nodes {
		if !slices.Contains(members, sn) && !sn.retired {
			s.tracef("retire %d", sn.id)
			sn.retired = true
			if sn.n != nil {
				sn.stop()
			}
		}
	}
	for k := range s.opts.keys {
		s.begin(s.clients[0], kvInput{op: "get", key: fmt.Sprintf("k%d", k)})
		s.attempt(s.clients[0])
		if err := s.settleCluster("final read"); err != nil {
			return err
		}
	}
	return nil
}

// simSettleSteps bounds settleCluster: with every message delivered and
// every node ticked, a cluster elects a leader and finishes what is
// pending well within it.
const simSettleSteps = 5000

// settleCluster runs the healed cluster until no operation is pending, no
// message is in flight and every member applied the leader's last index.
func (s *sim) settleCluster(what string) error {
	return s.runUntil(what, func() bool { return s.net.len() == 0 && !s.pending() && s.converged() })
}

// runUntil runs the cluster, each node's log written and flushed, each
// message delivered in order and every node up ticked once nothing is in
// flight, until done, for at most simSettleSteps steps.
func (s *sim) runUntil(what string, done func() bool) error {
	for i := 0; i < simSettleSteps; i++ {
		if done() {
			return nil
		}
		s.now++
		for _, sn := range s.upNodes() {
			if queued, written := sn.n.logw.pending(); queued || written {
				sn.writeLog(true, true)
			}
		}
		if s.net.len() > 0 {
			s.deliverAt(0)
		} else {
			for _, sn := range s.upNodes() {
				sn.tick()
			}
		}
		if err := s.pollAll(); err != nil {
			return err
		}
		if err := s.failed(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: no progress in %d steps:\n%s", what, simSettleSteps, s.status())
}

// live returns the nodes not retired.
func (s *sim) live() []*simNode {
	var out []*simNode
	for _, sn := range s.nodes {
		if !sn.retired {
			out = append(out, sn)
		}
	}
	return out
}

// changeMembership proposes one membership change on the leader, as the
// Admin service would (tryConfChange, with its checks), without waiting
// for it: add a node (a new one, or one started whose addition was lost),
// promote a learner, or remove a voter other than the leader, keeping
// three to five voters.
func (s *sim) changeMembership() error {
	l := s.leader()
	if l == nil {
		return nil
	}
	cs := *l.n.confPub.Load()
	var pending *simNode // started, not (yet) a member
	for _, sn := range s.nodes {
		if !sn.retired && !isMember(cs, sn.id) {
			pending = sn
		}
	}
	switch {
	case len(cs.Learners) > 0:
		id := cs.Learners[0]
		s.proposeChange(l, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddNode, NodeID: id}, confContext{},
			func() error { return l.n.checkPromote(id) })
	case pending != nil && pending.up():
		s.proposeAdd(l, pending)
	case pending == nil && len(cs.Voters) < 5 && len(s.nodes) < 7:
		_, boot, _ := l.n.log.InitialState() // what MemberList reports
		sn := s.joinNode(uint64(len(s.nodes))+1, slices.Clone(boot.Voters))
		s.tracef("node %d joins (bootstrap voters %v)", sn.id, boot.Voters)
		if err := sn.start(s.net); err != nil {
			return fmt.Errorf("start node %d: %w", sn.id, err)
		}
		s.proposeAdd(l, sn)
	case len(cs.Voters) > 3:
		var others []uint64
		for _, id := range cs.Voters {
			if id != l.id {
				others = append(others, id)
			}
		}
		id := others[s.rng.IntN(len(others))]
		s.proposeChange(l, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id}, confContext{},
			func() error { return l.n.checkRemoveMember(id) })
	}
	return nil
}

// proposeAdd proposes on leader l to add node sn as a learner.
func (s *sim) proposeAdd(l, sn *simNode) {
	s.proposeChange(l, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: sn.id},
		confContext{ID: sn.id, InternalAddress: sn.cfg.InternalAddress, Address: sn.cfg.Address},
		func() error { return l.n.checkAddMember(sn.id, sn.cfg.InternalAddress) })
}

// proposeChange proposes change on node l now; it counts as applied if l
// applies it (its waiter is read by pollChanges).
func (s *sim) proposeChange(l *simNode, change raftpb.ConfChangeSingle, cctx confContext, check func() error) {
	ch, err := l.proposeConfChange(change, cctx, check)
	if err != nil {
		s.tracef("node %d: %s %d refused: %v", l.id, change.Type, change.NodeID, err)
		return
	}
	s.tracef("node %d: %s %d proposed", l.id, change.Type, change.NodeID)
	s.changes = append(s.changes, simChange{change: change, ch: ch})
}

// simChange is a proposed membership change and its proposer's waiter.
type simChange struct {
	change raftpb.ConfChangeSingle
	ch     <-chan applyResult
}

// pollChanges notes the membership changes applied by their proposers.
func (s *sim) pollChanges() {
	keep := s.changes[:0]
	for _, c := range s.changes {
		select {
		case r := <-c.ch:
			if r.err == nil {
				s.stats.confChanges++
				s.tracef("%s %d applied at index %d", c.change.Type, c.change.NodeID, r.index)
			}
		default:
			keep = append(keep, c)
		}
	}
	s.changes = keep
}

// members returns the nodes of the leader's membership.
func (s *sim) members() []*simNode {
	l := s.leader()
	if l == nil {
		return nil
	}
	cs := l.n.confPub.Load()
	var out []*simNode
	for _, sn := range s.nodes {
		if isMember(*cs, sn.id) {
			out = append(out, sn)
		}
	}
	return out
}

// converged reports whether a leader leads every member, all up, and each
// applied the leader's last index.
func (s *sim) converged() bool {
	l := s.leader()
	if l == nil {
		return false
	}
	last := l.n.lastIndex.Load()
	if l.n.commit.Load() != last {
		return false
	}
	for _, sn := range s.members() {
		if !sn.up() || sn.n.applied.Load() != last || sn.n.lead.Load() != l.id {
			return false
		}
	}
	return true
}

// status describes every node, for failures and scenarios.
func (s *sim) status() string {
	var b strings.Builder
	for _, sn := range s.nodes {
		if sn.n == nil {
			fmt.Fprintf(&b, "node %d: down\n", sn.id)
			continue
		}
		n := sn.n
		fmt.Fprintf(&b, "node %d: %s term=%d lead=%d commit=%d applied=%d log=[%d,%d]",
			sn.id, raft.StateType(n.raftState.Load()), n.term.Load(), n.lead.Load(), n.commit.Load(), n.applied.Load(),
			n.firstIndex.Load(), n.lastIndex.Load())
		if cs := n.confPub.Load(); cs != nil {
			fmt.Fprintf(&b, " voters=%v", cs.Voters)
			if len(cs.Learners) > 0 {
				fmt.Fprintf(&b, " learners=%v", cs.Learners)
			}
		}
		if p := n.removed.Load(); p != nil {
			b.WriteString(" removed")
		}
		if err := n.Err(); err != nil {
			fmt.Fprintf(&b, " failed: %v", err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// check checks the run: the history is linearizable, every session write
// was applied at one index, and the members' state hashes agree.
func (s *sim) check() error {
	if err := s.rec.failure(); err != nil {
		return err
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, s.hist, 10*time.Second)
	switch res {
	case porcupine.Illegal:
		return fmt.Errorf("the history is not linearizable:\n%s%s", describeHistory(s.hist), describeLinearizations(info))
	case porcupine.Unknown:
		return fmt.Errorf("the linearizability check timed out (%d operations)", len(s.hist))
	}
	var want []byte
	var wantFrom uint64
	for _, sn := range s.members() {
		h, ok := sn.n.sm.(systems.StateHasher)
		if !ok {
			return fmt.Errorf("node %d: no state hash", sn.id)
		}
		sum, applied, err := h.StateHash()
		if err != nil {
			return fmt.Errorf("node %d: state hash: %w", sn.id, err)
		}
		if want == nil {
			want, wantFrom = sum, sn.id
		} else if string(sum) != string(want) {
			return fmt.Errorf("node %d's state (applied %d) differs from node %d's:\n%s", sn.id, applied, wantFrom, s.status())
		}
	}
	return nil
}

// close stops every node that runs.
func (s *sim) close() {
	for _, sn := range s.nodes {
		if sn.n != nil {
			sn.n.Stop()
			sn.n = nil
		}
	}
}

// kvModel is a key-value map, partitioned by key.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return kvOutput{} },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(kvOutput), input.(kvInput)
		switch in.op {
		case "put":
			return true, kvOutput{value: in.value, found: true}
		case "delete":
			return true, kvOutput{}
		}
		if output == nil { // never answered
			return true, st
		}
		return output.(kvOutput) == st, st
	},
	DescribeOperation: func(input, output any) string {
		in := input.(kvInput)
		if in.op != "get" {
			return fmt.Sprintf("%s(%s, %s)", in.op, in.key, in.value)
		}
		if out, ok := output.(kvOutput); ok {
			return fmt.Sprintf("get(%s) -> %q found=%v", in.key, out.value, out.found)
		}
		return fmt.Sprintf("get(%s) -> ?", in.key)
	},
}

func describeHistory(hist []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range hist {
		fmt.Fprintf(&b, "  client %d [%d, %d] %s\n", op.ClientId, op.Call, op.Return, kvModel.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

func describeLinearizations(info porcupine.LinearizationInfo) string {
	var b strings.Builder
	for p, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			fmt.Fprintf(&b, "partition %d, longest linearizable prefix:", p)
			for _, op := range lin {
				fmt.Fprintf(&b, " %s;", kvModel.DescribeOperation(op.Input, op.Output))
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// simRecorder checks that each session write is applied (as a put or a
// delete, not as the no-op of a duplicate) at one Raft index only, by
// every node and across restarts.
type simRecorder struct {
	mu      sync.Mutex
	applied map[clientSession]uint64
	err     error
}

func newSimRecorder() *simRecorder { return &simRecorder{applied: map[clientSession]uint64{}} }

func (r *simRecorder) note(node uint64, ents []systems.AppliedEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range ents {
		c := e.Command
		if c.ClientID == 0 || c.Op == systems.OpNone {
			continue
		}
		k := clientSession{c.ClientID, c.Seq}
		if first, ok := r.applied[k]; !ok {
			r.applied[k] = e.Index
		} else if first != e.Index && r.err == nil {
			r.err = fmt.Errorf("session %d's write %d applied twice: at index %d, and at index %d on node %d", c.ClientID, c.Seq, first, e.Index, node)
		}
	}
}

func (r *simRecorder) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// simSystemConfig opens nezha's store wrapped in simStore.
type simSystemConfig struct {
	*nezha.Config
	rec  *simRecorder
	node uint64
}

func (c simSystemConfig) Open(env systems.Env) (systems.StateMachine, error) {
	st, err := c.Config.OpenStore(env)
	if err != nil {
		return nil, err
	}
	return &simStore{Store: st, rec: c.rec, node: c.node}, nil
}

// simStore is nezha's store, whose applies simRecorder sees.
type simStore struct {
	*nezha.Store
	rec  *simRecorder
	node uint64
}

func (s *simStore) Apply(ents []systems.AppliedEntry) error {
	s.rec.note(s.node, ents)
	return s.Store.Apply(ents)
}

// runSim runs seed's random scenario (TestSimProperty) and returns what it
// did, its fingerprint (a hash of every step and message, and of the final
// status) and what failed, with the end of its trace.
func runSim(t *testing.T, seed uint64, opts simOptions) (stats simStats, fingerprint uint64, trace []string, err error) {
	cryptotest.SetGlobalRandom(t, seed)
	s, err := newSim(seed, opts)
	if err != nil {
		return stats, 0, nil, err
	}
	defer s.close()
	defer func() {
		stats, trace = s.stats, append(s.trace, s.status())
		io.WriteString(s.print, s.status())
		fingerprint = s.print.Sum64()
	}()
	// Every scenario crashes a node at least once, at a random step of
	// its middle half (besides the crashes of its random steps).
	crashAt := opts.steps/4 + s.rng.IntN(opts.steps/2+1)
	err = func() error {
		for i := range opts.steps {
			if i == crashAt && s.stats.crashes == 0 {
				if up := s.upNodes(); len(up) > 0 {
					s.crash(up[s.rng.IntN(len(up))], 100)
				}
			}
			if err := s.step(); err != nil {
				return err
			}
		}
		if err := s.heal(); err != nil {
			return err
		}
		return s.check()
	}()
	if err != nil {
		tail := s.trace[max(0, len(s.trace)-80):]
		return stats, 0, nil, fmt.Errorf("%w\n\nstatus:\n%s\nlast %d of %d steps:\n%s", err, s.status(), len(tail), len(s.trace), strings.Join(tail, "\n"))
	}
	return stats, 0, nil, nil
}

// A seed replays exactly: the same steps, the same messages, the same end.
func TestSimDeterministic(t *testing.T) {
	opts := simPropertyOptions
	opts.traceAll = true
	for seed := uint64(1); seed <= uint64(*simTwice); seed++ {
		var prints [2]uint64
		var traces [2][]string
		for i := range prints {
			t.Run(fmt.Sprintf("seed=%d/run=%d", seed, i), func(t *testing.T) {
				var err error
				if _, prints[i], traces[i], err = runSim(t, seed, opts); err != nil {
					t.Fatal(err)
				}
			})
		}
		if prints[0] != prints[1] {
			a, b := traces[0], traces[1]
			i := 0
			for i < min(len(a), len(b)) && a[i] == b[i] {
				i++
			}
			t.Fatalf("seed %d: two runs differ (fingerprints %x, %x) from step line %d on:\n%s\n----\n%s", seed, prints[0], prints[1], i,
				strings.Join(a[max(0, i-5):min(len(a), i+5)], "\n"), strings.Join(b[max(0, i-5):min(len(b), i+5)], "\n"))
		}
	}
}

// simPropertyOptions is TestSimProperty's cluster: three nodes, two
// clients, four keys, 250 random steps.
var simPropertyOptions = simOptions{nodes: 3, clients: 2, keys: 4, steps: 300, logSteps: true}

// TestSimProperty runs -sim.seeds seeded scenarios of random steps (see
// sim.step): client writes and reads with sessions, lost, duplicated and
// reordered messages, partitions, crashes that keep only what was synced
// (and torn tails), clean restarts and log compactions, then heals the
// cluster and checks it against the model (sim.check). A failure prints
// its seed and the command that replays it.
func TestSimProperty(t *testing.T) {
	seeds := []uint64{*simSeed}
	if *simSeed == 0 {
		seeds = seeds[:0]
		n := *simSeeds
		if testing.Short() {
			n = min(n, 100)
		}
		for i := range uint64(n) {
			seeds = append(seeds, i+1)
		}
	}
	// Each scenario starts nodes again and again, and each start allocates
	// its buffers anew: collect less often. The sim runs one goroutine at
	// a time (lock step): on one P, handing over to a node's goroutine and
	// back needs no thread wake-up (10% less time under -race).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	start := time.Now()
	var stats simStats
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			st, _, _, err := runSim(t, seed, simPropertyOptions)
			stats.add(st)
			if err != nil {
				t.Fatalf("seed %d: %v\n\nreplay: go test ./raftkv/node -run 'TestSimProperty$' -sim.seed %d -sim.v", seed, err, seed)
			}
		})
		if t.Failed() {
			break
		}
	}
	t.Logf("%d seeded scenarios in %v: %v", len(seeds), time.Since(start).Round(time.Millisecond), stats)
}
