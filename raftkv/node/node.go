package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nezha-harness/nezha/api/etcdapi"
	"github.com/nezha-harness/nezha/api/jsonrpc"
	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/activity"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

// Errors a request can meet inside the node. They map onto gRPC codes in
// kvserver.go.
var (
	// errDropped: the proposal or read was not accepted by Raft (no leader,
	// leadership transfer); it was definitely not applied.
	errDropped = errors.New("not accepted by raft (no leader?)")
	// errNotProposed: the request ended (its deadline, a cancel) before
	// the Ready loop took its proposal; it was definitely not applied.
	errNotProposed = errors.New("the request ended before it was proposed")
	// errStopping: the node is shutting down.
	errStopping = errors.New("node is stopping")
	// errLeaderChanged: the node lost its leader, or the term changed,
	// while the proposal was pending: it may still commit under the new
	// leader, or never. Its outcome is unknown; a write with a client
	// session may be resent.
	errLeaderChanged = errors.New("the leader or the term changed while the write was pending")
	// errSuperseded: a late copy of a write whose session has applied a
	// later write: it was not applied now (the client stopped waiting).
	errSuperseded = errors.New("a later write of the same client session was applied first")
)

// proposal is a client write on its way into the Ready loop, or the
// writes of one batch (batch not nil; id and data unused), which Raft gets
// in proposal messages of several entries (proposalChunks).
type proposal struct {
	id    uint64
	data  []byte
	batch []proposal
}

// readRequest asks the Ready loop for a read index.
type readRequest struct {
	ch chan readResult
}

type readResult struct {
	index uint64
	err   error
}

// readBatch is one ReadIndex round shared by the reads that arrived together.
type readBatch struct {
	waiters  []readRequest
	issuedAt int       // loop tick count
	started  time.Time // when the round was issued (monotonic)
}

// applyBatch is a run of committed entries for the apply goroutine, or a
// barrier: barrier is closed once every earlier batch is applied.
type applyBatch struct {
	entries []raftpb.Entry
	barrier chan struct{}
}

// Node is one member of a cluster. Start it with Start; stop it with Stop.
type Node struct {
	cfg    Config
	id     uint64
	logger *slog.Logger

	log *raftlog.Log
	// logw writes and flushes the log (logwrite.go).
	logw *logWriter
	sm   systems.StateMachine
	// dataUnlock releases the data directory's flock (lockDataDir) in
	// closeStorage.
	dataUnlock func()
	rn         *raft.RawNode // owned by the Ready loop goroutine

	transport raftTransport
	codec     *kvpb.Codec // the gRPC codec and buffer pool of both servers and the peer clients
	kvServer  *grpc.Server
	kvLis     net.Listener
	// etcdServer serves etcd's KV API on cfg.EtcdAddress (nil if off).
	etcdServer *grpc.Server
	// jsonrpc serves the JSON-RPC API on cfg.JSONRPCAddress (nil if off).
	jsonrpc *jsonrpc.Server
	// health is the standard gRPC health service (grpc.health.v1.Health)
	// on all three servers: SERVING while the node knows a leader and has
	// not failed (see setHealth), NOT_SERVING otherwise.
	health *health.Server

	ctlc     chan func() // closures run on the Ready loop (logControl)
	snapc    chan snapshotStatus
	propc    chan proposal
	recvc    chan raftpb.Message
	readc    chan readRequest
	unreachc chan uint64
	applyc   chan applyBatch

	stopOnce  sync.Once
	stopc     chan struct{} // closed by Stop
	readers   *readerPool   // serves batched GETs (readers.go)
	loopDone  chan struct{}
	applyDone chan struct{}
	failOnce  sync.Once
	failed    chan struct{} // closed on a fatal error
	failErr   error

	// Written by the loop, read by anyone.
	term, commit, lead atomic.Uint64
	// leader: whether a leader is known, for writes Raft dropped.
	leader *leaderWatch
	// activities records the leader changes this node saw (Status):
	// from losing a leader (or the node's start) until knowing the next;
	// and the state machine's write stalls (awaitWriteStall).
	activities activity.History
	raftState  atomic.Uint64 // raft.StateType
	firstIndex atomic.Uint64
	lastIndex  atomic.Uint64
	// Written by the apply goroutine.
	applied atomic.Uint64
	// Written by the loop: see updateCompactBound.
	minFollowerMatch atomic.Uint64
	// Loop-owned: the membership, for compaction markers; confPub a copy
	// for other goroutines (Status). Set both with setConfState.
	confState raftpb.ConfState
	confPub   atomic.Pointer[raftpb.ConfState]
	// leaseUntil (nanoseconds since epoch, monotonic) is when this
	// leader's read lease ends (Config.LeaseRead); 0: no lease.
	epoch      time.Time
	leaseUntil atomic.Int64

	proposals   *waitRegistry
	appliedWait *indexWait
	reqNonce    uint64
	reqSeq      atomic.Uint64
	// propEpoch counts leader and term changes (loop-owned): a proposal
	// made in an earlier epoch fails with errLeaderChanged at once.
	propEpoch uint64

	// Client sessions (session.go). sessions is the table at the applied
	// index: the apply goroutine's (the Ready loop's while the apply
	// goroutine waits at a barrier, and open's). sessBase is the table at
	// the log's compaction point and sessDeltas the deltas from it to
	// sessions, both under sessMu. applyDeltas is the apply goroutine's
	// buffer for them. compactMu serializes LogControl.Compact.
	// sessLogFolded counts the entries compactions folded from the log
	// (when the delta queue overflowed).
	sessions      *sessionTable
	sessMu        sync.Mutex
	sessBase      *sessionTable
	sessDeltas    *sessionDeltas
	applyDeltas   []sessionDelta
	compactMu     sync.Mutex
	sessLogFolded atomic.Uint64
	// Session checkpoints (session.go: maybeCheckpointSessions,
	// writeSessionCheckpoint): the bytes and entries applied since the last
	// one (apply goroutine), whether one is being written, its writers
	// (Stop waits), and sessCkpt, the newest table on disk above the
	// compaction point (under sessMu; nil if none).
	sessCkptBytes   int64
	sessCkptEntries int
	sessCkptBusy    atomic.Bool
	sessCkptWG      sync.WaitGroup
	sessCkpt        *sessionTable

	// Loop-owned read index state: the rounds in flight, and the reads
	// that wait for one to end (issueReads).
	readSeq      uint64
	pendingReads map[uint64]*readBatch
	queuedReads  []readRequest
	ticks        int
	// campaignTicks: the ticks left in which a fresh node with
	// Config.CampaignOnBoot campaigns again (loop-owned).
	campaignTicks int
	// recvBatch is the Ready loop's buffer of the peers' messages it
	// steps together (stepReceived).
	recvBatch []raftpb.Message

	peerAddrs sync.Map // uint64 id -> string client address

	// Membership (membership.go). removed says why this node is no longer
	// a member (nil while it is one). removedIDs are the members removed by
	// conf changes this process applied (id -> index), whose peer streams
	// are refused; internalAddrs the members' internal addresses (id ->
	// string). Loop-owned: raftApplied, the last index handed to the apply
	// goroutine (raft's applied index); leaderSince, the last log index
	// when this node became leader; lastConfIndex, the newest conf change
	// entry it appended. etcd raft ignores a conf change proposed while
	// one of those is above raftApplied (membership.go confPending).
	removed       atomic.Pointer[string]
	removedIDs    sync.Map
	internalAddrs sync.Map
	// bookMu serializes the writes of the address book file
	// (saveAddressBook).
	bookMu sync.Mutex
	// announcedAddrs are the internal addresses peers announced on their
	// streams to this node (id -> string): how a member that has not yet
	// applied the conf change adding its leader answers it (transport.go
	// peerOnDemand).
	announcedAddrs sync.Map
	raftApplied    uint64
	leaderSince    uint64
	lastConfIndex  uint64
	// raftLast is raft's last log index as of the last Ready, written or
	// not (loop-owned); sendBuf holds a Ready's messages to peers.
	raftLast uint64
	sendBuf  []raftpb.Message

	// fs is the file layer of the log and the state machine (injected
	// disk faults; a failed fsync stops the node, ENOSPC makes disk
	// refuse writes).
	fs   *vfs.FS
	fsys vfs.FileSystem // fs.Base(): the node's files without faults
	disk *diskGuard
	// diskRefusal is why the disk guard refuses client writes now (nil:
	// it accepts them), and handoff the leadership transfers for it
	// (diskhandoff.go).
	diskRefusal atomic.Pointer[string]
	handoff     diskHandoff

	// metrics are the node's Prometheus metrics (metrics.go).
	metrics *metrics
	// spans ships the state machine's spans (span.go); nil unless it
	// implements systems.SpanReplicator.
	spans *spanShipper
}

// Start opens the node's log and state machine, starts serving the peer
// transport and the client API, and starts the Ready loop. Errors that come
// from user input (flags, ports in use) are *cmdline.UsageError.
func Start(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ComposeReplicas > 0 {
		var err error
		lookup := cfg.lookupPTR
		if lookup == nil {
			lookup = lookupPTR
		}
		if cfg, err = cfg.withComposeIdentity(context.Background(), lookup); err != nil {
			return nil, err
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		cfg.Logger.Info("replica of a Compose service", "address", cfg.Address, "peers", cfg.Peers, "data", cfg.DataDir)
	}
	n := &Node{
		cfg:          cfg,
		id:           cfg.ID(),
		propc:        make(chan proposal, 4096),
		recvc:        make(chan raftpb.Message, 4096),
		readc:        make(chan readRequest, 4096),
		unreachc:     make(chan uint64, 64),
		ctlc:         make(chan func()),
		snapc:        make(chan snapshotStatus, 16),
		applyc:       make(chan applyBatch, 16),
		stopc:        make(chan struct{}),
		loopDone:     make(chan struct{}),
		applyDone:    make(chan struct{}),
		failed:       make(chan struct{}),
		proposals:    newWaitRegistry(),
		leader:       newLeaderWatch(),
		appliedWait:  newIndexWait(),
		pendingReads: map[uint64]*readBatch{},
		epoch:        time.Now(),
		codec:        kvpb.NewCodec(),
		sessDeltas:   newSessionDeltas(MaxSessionDeltas),
		metrics:      newMetrics(cfg.env == nil),
	}
	n.activities.Begin(systems.ActivityLeaderChange, n.epoch, "node started")
	// Every line the node, its log and its state machine write names the
	// node and the term it is in.
	n.readers = newReaderPool(readerWorkers, n.stopc)
	n.logger = slog.New(termHandler{Handler: cfg.Logger.Handler(), term: &n.term}).With("node", n.id)
	fsys := cfg.env.fileSystem()
	// Before anything in the data directory is created or opened: a node
	// whose address is taken, or whose directory a running node holds,
	// leaves -data as it was. (The tests' in-memory network binds none.)
	var lis *listeners
	if !cfg.env.inMemoryNetwork() {
		if err := checkDataDirFree(cfg.DataDir); err != nil {
			return nil, err
		}
		var err error
		if lis, err = cfg.listen(); err != nil {
			return nil, err
		}
	}
	// A second node on the data directory would damage the first's log
	// (lockDataDir).
	lock, err := lockDataDir(fsys, cfg.DataDir)
	if err != nil {
		lis.close()
		return nil, err
	}
	n.dataUnlock = lock
	n.fs = vfs.NewOn(fsys)
	n.fsys = fsys
	if cfg.FsyncDelay > 0 {
		if err := n.fs.SetFaults(vfs.Fault{Kind: vfs.FaultSlowDisk, Latency: cfg.FsyncDelay}); err != nil {
			lis.close()
			n.closeStorage()
			return nil, err
		}
		n.logger.Warn("-fsyncDelay: every fsync of this node takes longer, for measurements", "fsync_delay", cfg.FsyncDelay)
	}
	n.disk = newDiskGuard(cfg.DataDir, cfg.MinFreeDiskBytes, n.fs, cfg.DiskBallastBytes, n.logger)
	n.minFollowerMatch.Store(math.MaxUint64)
	var nonce [4]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		lis.close()
		n.closeStorage()
		return nil, err
	}
	n.reqNonce = uint64(binary.LittleEndian.Uint32(nonce[:])) << 32
	if err := n.open(); err != nil {
		lis.close()
		n.closeStorage()
		return nil, err
	}
	if lis != nil && lis.metrics != nil {
		n.logger.Info("serving Prometheus metrics", "metrics_address", n.metrics.serve(lis.metrics, n))
	}
	n.serve(lis)
	n.disk.start()
	go n.watchDisk()
	go n.watchDiskSpace()
	n.logw.start()
	go n.runLoop()
	go n.runApply()
	if n.spans != nil {
		go n.spans.run()
	}
	if lis != nil && lis.jsonrpc != nil {
		if n.jsonrpc, err = n.serveJSONRPC(lis.jsonrpc); err != nil {
			lis.jsonrpc.Close()
			n.Stop()
			return nil, err
		}
		n.logger.Info("serving the JSON-RPC API", "jsonrpc_address", n.jsonrpc.Addr())
	}
	n.logger.Info("node started", "config", cfg.String())
	if !cfg.Sync {
		n.logger.Warn("-sync=false: the Raft log is NOT fsynced; results are for comparison only")
	}
	return n, nil
}

// open opens the Raft log and the state machine and creates the RawNode.
func (n *Node) open() error {
	voters := n.cfg.bootstrapVoters()
	lo := raftlog.DefaultOptions(n.cfg.logDir())
	lo.SegmentSizeBytes = n.cfg.SegmentSizeBytes
	lo.EntryCacheBytes = n.cfg.EntryCacheBytes
	lo.PageCacheBytes = n.cfg.LogPageCacheBytes
	lo.DirectIO = n.cfg.LogDirectIO
	lo.Sync = n.cfg.Sync
	lo.Bootstrap = raftpb.ConfState{Voters: voters}
	lo.Logger = n.logger
	lo.FS = n.fs
	lo.AppendSeconds, lo.FsyncSeconds = n.metrics.appendSeconds, n.metrics.fsyncSeconds
	began := time.Now()
	l, err := raftlog.Open(lo)
	if err != nil {
		return err
	}
	n.log = l
	segs := l.Segments()
	n.logger.Info("raft log open", "segments", len(segs), "duration", time.Since(began).Round(time.Millisecond))
	hs, cs, _ := l.InitialState()
	n.setConfState(cs)
	if err := cleanSnapshotDir(n.fsys, n.snapDir()); err != nil {
		return err
	}
	sm, err := n.cfg.SystemConfig.Open(systems.Env{Dir: n.cfg.DataDir, Log: l, Control: logControl{n}, Logger: n.logger,
		NodeID: n.id, Nodes: len(n.cfg.Peers), FS: n.fs})
	if err != nil {
		return fmt.Errorf("open %s state machine: %w", n.cfg.System.Name, err)
	}
	n.sm = sm
	n.spans = newSpanShipper(n)
	if err := n.metrics.register(n); err != nil {
		return err
	}
	first, _ := l.FirstIndex()
	applied := sm.AppliedIndex()
	switch {
	case applied > hs.Commit:
		// The log lost its tail (a torn write, or -sync=false and an OS
		// crash): replay from the commit index; entries the leader re-sends
		// are applied again at their new locations.
		n.logger.Warn("state machine is ahead of the log's commit index; replaying from the commit index",
			"applied", applied, "commit", hs.Commit)
		applied = hs.Commit
	case applied+1 < first:
		return fmt.Errorf("state machine applied index %d is below the log's first index %d: entries %d..%d are gone",
			applied, first, applied+1, first-1)
	}
	if err := n.openSessions(applied); err != nil {
		return err
	}
	n.applied.Store(applied)
	n.appliedWait.trigger(applied)
	rc := &raft.Config{
		ID:                        n.id,
		ElectionTick:              n.cfg.ElectionTicks,
		HeartbeatTick:             n.cfg.HeartbeatTicks,
		Storage:                   l,
		Applied:                   applied,
		MaxSizePerMsg:             maxProposalBytes,
		MaxCommittedSizePerReady:  64 << 20,
		MaxUncommittedEntriesSize: 1 << 30,
		MaxInflightMsgs:           256,
		MaxInflightBytes:          32 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		AsyncStorageWrites:        true,
		Logger:                    &raftLogger{l: n.logger},
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return fmt.Errorf("raft: %w", err)
	}
	n.rn = rn
	n.logw = newLogWriter(n)
	n.raftApplied = applied
	n.raftLast, _ = l.LastIndex()
	if err := n.openMembership(applied); err != nil {
		return err
	}
	n.term.Store(hs.Term)
	n.commit.Store(hs.Commit)
	return nil
}

// listeners are the node's bound addresses; metrics, etcd and jsonrpc
// are nil unless configured.
type listeners struct {
	internal, client, etcd, jsonrpc, metrics net.Listener
}

func (l *listeners) close() {
	if l == nil {
		return
	}
	for _, lis := range []net.Listener{l.internal, l.client, l.etcd, l.jsonrpc, l.metrics} {
		if lis != nil {
			lis.Close()
		}
	}
}

// listen binds every address of c (Start does it before it touches the
// data directory): a port in use is a usage error naming its flag.
func (c *Config) listen() (*listeners, error) {
	l := &listeners{}
	for _, a := range []struct {
		flag, addr, listen string
		lis                *net.Listener
	}{
		{"-internalAddress", c.InternalAddress, c.listenAddress(c.InternalAddress), &l.internal},
		{"-address", c.Address, c.listenAddress(c.Address), &l.client},
		{"-etcdAddress", c.EtcdAddress, c.EtcdAddress, &l.etcd},
		{"-jsonrpcAddress", c.JSONRPCAddress, c.JSONRPCAddress, &l.jsonrpc},
		{"-metricsAddress", c.MetricsAddress, c.MetricsAddress, &l.metrics},
	} {
		if a.addr == "" {
			continue
		}
		lis, err := net.Listen("tcp", a.listen)
		if err != nil {
			l.close()
			return nil, cmdline.Usagef("cannot listen on %s %s: %v", a.flag, a.addr, unwrapListenErr(err))
		}
		*a.lis = lis
	}
	return l, nil
}

// serve starts the gRPC servers on lis; with the tests' in-memory network
// (lis nil) it only builds that transport.
func (n *Node) serve(lis *listeners) {
	n.health = health.NewServer()
	n.setHealth(false) // health.NewServer starts SERVING; not until there is a leader
	// The disk accepts writes until watchDiskSpace says otherwise.
	n.health.SetServingStatus(kvpb.DiskHealthService, healthpb.HealthCheckResponse_SERVING)
	if lis == nil {
		n.transport = n.cfg.env.transport(n)
		return
	}
	ilis, klis, elis := lis.internal, lis.client, lis.etcd
	n.transport = newTransport(n, ilis)
	n.kvLis = klis
	n.kvServer = grpc.NewServer(append(n.metrics.serverOptions(),
		grpc.ForceServerCodecV2(kvCodec{n.codec}),
		experimental.BufferPool(n.codec.Pool),
		grpc.InitialWindowSize(kvpb.StreamWindowBytes), grpc.InitialConnWindowSize(kvpb.ConnWindowBytes),
		grpc.WriteBufferSize(kvpb.ConnBufferBytes), grpc.ReadBufferSize(kvpb.ConnBufferBytes),
		grpc.MaxRecvMsgSize(2*n.cfg.MaxValueBytes+systems.MaxKeyBytes+(1<<20)),
		grpc.MaxSendMsgSize(n.cfg.ScanMaxBytes+n.cfg.MaxValueBytes+(4<<20)),
	)...)
	n.kvServer.RegisterService(kvServiceDesc(), &kvServer{n: n})
	healthpb.RegisterHealthServer(n.kvServer, n.health)
	kvpb.RegisterAdminServer(n.kvServer, &adminServer{n: n})
	if n.cfg.DiskFaults {
		kvpb.RegisterDiskFaultsServer(n.kvServer, &diskFaultServer{n: n})
	}
	n.metrics.grpc.InitializeMetrics(n.kvServer)
	go func() {
		if err := n.kvServer.Serve(klis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.fail(fmt.Errorf("client API server: %w", err))
		}
	}()
	if elis != nil {
		// etcd's own codec and limits: a request up to the largest value
		// and key, a response up to a scan page and a value.
		n.etcdServer = grpc.NewServer(append(n.metrics.serverOptions(),
			grpc.InitialWindowSize(kvpb.StreamWindowBytes), grpc.InitialConnWindowSize(kvpb.ConnWindowBytes),
			grpc.WriteBufferSize(kvpb.ConnBufferBytes), grpc.ReadBufferSize(kvpb.ConnBufferBytes),
			grpc.MaxRecvMsgSize(n.cfg.MaxValueBytes+systems.MaxKeyBytes+(1<<20)),
			grpc.MaxSendMsgSize(n.cfg.ScanMaxBytes+n.cfg.MaxValueBytes+(4<<20)),
		)...)
		kvs := &kvServer{n: n}
		etcdserverpb.RegisterKVServer(n.etcdServer, etcdapi.New(kvs))
		etcdserverpb.RegisterMaintenanceServer(n.etcdServer, etcdapi.NewMaintenance(kvs))
		etcdserverpb.RegisterClusterServer(n.etcdServer, etcdapi.NewCluster(kvs))
		etcdserverpb.RegisterWatchServer(n.etcdServer, etcdapi.Watch{})
		healthpb.RegisterHealthServer(n.etcdServer, n.health)
		n.metrics.grpc.InitializeMetrics(n.etcdServer)
		n.logger.Info("serving etcd's KV API", "etcd_address", elis.Addr().String())
		go func() {
			if err := n.etcdServer.Serve(elis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				n.fail(fmt.Errorf("etcd API server: %w", err))
			}
		}()
	}
}

func unwrapListenErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err
		}
		return oe.Err
	}
	return err
}

// setHealth sets the health service's status of the server as a whole
// ("") and of the client API (nezha.kv.KV): SERVING when serving is true,
// i.e. the node knows a leader, so that its requests can be served. After
// Shutdown (Stop or a fatal error) it stays NOT_SERVING.
func (n *Node) setHealth(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving && n.removed.Load() == nil {
		st = healthpb.HealthCheckResponse_SERVING
	}
	n.health.SetServingStatus("", st)
	n.health.SetServingStatus(kvpb.KV_ServiceDesc.ServiceName, st)
}

// ID returns the node's Raft id.
func (n *Node) ID() uint64 { return n.id }

// Logger returns the node's logger: Config.Logger with the attributes
// "node" (the Raft id) and "term" (the current Raft term) on every line.
func (n *Node) Logger() *slog.Logger { return n.logger }

// Failed is closed when the node met a fatal error (see Err).
func (n *Node) Failed() <-chan struct{} { return n.failed }

// Err returns the fatal error, if any.
func (n *Node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}

func (n *Node) fail(err error) {
	n.failOnce.Do(func() {
		n.failErr = err
		n.logger.Error("fatal error; the node stops", "err", err)
		if n.health != nil {
			n.health.Shutdown() // NOT_SERVING from now on
		}
		close(n.failed)
	})
}

// Stop stops serving, stops the loops and closes the storage. Pending
// requests fail with Unavailable (their outcome is unknown to the client).
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		n.health.Shutdown() // NOT_SERVING from now on, while requests drain
		if n.kvServer != nil {
			n.stopServers()
		}
		if n.jsonrpc != nil {
			n.jsonrpc.Stop()
		}
		close(n.stopc)
		<-n.loopDone
		<-n.logw.done
		<-n.applyDone
		n.spans.stopped()
		n.sessCkptWG.Wait()
		n.metrics.stop()
		n.transport.stop()
		n.proposals.failAll(errStopping)
		// What the log writer wrote and did not flush is flushed now; if
		// that fails, it is cut (raftlog.Log.DiscardUnflushed).
		if err := n.log.Sync(); err != nil {
			n.logger.Warn("final log sync", "err", err)
			if err := n.log.DiscardUnflushed(); err != nil {
				n.logger.Warn("discard unflushed log records", "err", err)
			}
		}
		n.closeStorage()
		n.logger.Info("node stopped")
	})
}

// stopServers stops the client API servers, letting requests drain for up
// to two seconds.
func (n *Node) stopServers() {
	stopped := make(chan struct{})
	go func() {
		n.kvServer.GracefulStop()
		if n.etcdServer != nil {
			n.etcdServer.GracefulStop()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		n.kvServer.Stop()
		if n.etcdServer != nil {
			n.etcdServer.Stop()
		}
	}
}

func (n *Node) closeStorage() {
	if n.sm != nil {
		if err := n.sm.Close(); err != nil {
			n.logger.Warn("close state machine", "err", err)
		}
	}
	if n.log != nil {
		if err := n.log.Close(); err != nil {
			n.logger.Warn("close raft log", "err", err)
		}
	}
	if n.dataUnlock != nil {
		n.dataUnlock()
		n.dataUnlock = nil
	}
}

// campaign starts an election (Ready loop only).
func (n *Node) campaign() {
	if err := n.rn.Campaign(); err != nil {
		n.logger.Warn("campaign", "err", err)
	}
}

// runLoop is the Ready loop: the only goroutine that touches n.rn. It
// hands the log's appends to the log writer (logwrite.go) and steps the
// responses the flusher delivers back.
func (n *Node) runLoop() {
	defer close(n.loopDone)
	ticks := n.cfg.env.tickSource()
	if ticks == nil {
		ticker := time.NewTicker(n.cfg.TickInterval)
		defer ticker.Stop()
		ticks = ticker.C
	}
	// -campaign: on a fresh log (term 0), campaign now and again at every
	// tick until an election moved the term (a pre-vote sent before the
	// peers' streams are up is lost); the first election timeout bounds it.
	if n.cfg.CampaignOnBoot && n.rn.Status().Term == 0 {
		n.logger.Info("fresh log: campaigning at once (-campaign)")
		n.campaignTicks = n.cfg.ElectionTicks
		n.campaign()
	}
	for {
		// While the log writer is behind, proposals wait (in propc, then
		// in their proposers) as they did for each Ready's write.
		propc := n.propc
		if n.logw.backlogged() {
			propc = nil
		}
		select {
		case <-ticks:
			n.tick()
		case f := <-n.ctlc:
			f()
		case st := <-n.snapc:
			n.rn.ReportSnapshot(st.to, st.status)
		case m := <-n.recvc:
			batch := append(n.recvBatch[:0], m)
			for more := len(n.recvc); more > 0; more-- {
				batch = append(batch, <-n.recvc)
			}
			n.stepReceived(batch)
			clear(batch) // hold no entries until the next batch
			n.recvBatch = batch[:0]
		case <-n.logw.localc:
			// The flusher delivered responses: processReadies steps them.
		case p := <-propc:
			n.propose(p)
			for more := len(n.propc); more > 0; more-- {
				n.propose(<-n.propc)
			}
		case r := <-n.readc:
			n.queuedReads = append(n.queuedReads, r)
			for more := len(n.readc); more > 0; more-- {
				n.queuedReads = append(n.queuedReads, <-n.readc)
			}
			n.issueReads()
		case id := <-n.unreachc:
			n.rn.ReportUnreachable(id)
		case <-n.stopc:
			n.failReads(errStopping)
			return
		case <-n.failed:
			n.failReads(errStopping)
			return
		}
		if err := n.processReadies(); err != nil {
			if !errors.Is(err, errStopping) {
				n.fail(err)
			}
			n.failReads(errStopping)
			return
		}
	}
}

// processReadies handles raft's Readies and steps the responses the
// flusher delivered, until raft has no Ready and nothing is left to step
// (the deterministic tests rely on it: the loop is idle in its select only
// once nothing it can do is left).
func (n *Node) processReadies() error {
	for {
		for n.rn.HasReady() {
			if err := n.handleReady(n.rn.Ready()); err != nil {
				return err
			}
		}
		local := n.logw.takeLocal()
		if len(local) == 0 {
			return nil
		}
		for _, m := range local {
			n.stepLocal(m)
		}
	}
}

// stepLocal steps a response of the node's own storage work: the log's
// (MsgStorageAppendResp, the leader's own MsgAppResp or vote) or the apply
// hand-off's (MsgStorageApplyResp). Ready loop only.
func (n *Node) stepLocal(m raftpb.Message) {
	if err := n.rn.Step(m); err != nil {
		n.logger.Debug("step local response", "err", err, "type", m.Type)
	}
}

// tick is one Raft tick of the Ready loop.
func (n *Node) tick() {
	if n.campaignTicks > 0 {
		n.campaignTicks--
		if n.rn.Status().Term == 0 {
			n.campaign()
		} else {
			n.campaignTicks = 0
		}
	}
	n.rn.Tick()
	n.ticks++
	n.expireReads()
	n.updateCompactBound()
}

// stepReceived steps a batch of the peers' messages that the Ready loop
// took together, before its next Ready: the heartbeats and heartbeat
// answers coalesced (coalesceHeartbeats), the rest in order.
func (n *Node) stepReceived(msgs []raftpb.Message) {
	for _, m := range coalesceHeartbeats(msgs) {
		n.step(m)
	}
}

// heartbeatKey is a sender and a heartbeat message type.
type heartbeatKey struct {
	from uint64
	typ  raftpb.MessageType
}

// coalesceHeartbeats drops, in place, every MsgHeartbeat and
// MsgHeartbeatResp of msgs but each sender's last one of each type, keeps
// the other messages, and returns what is left in the order received.
//
// Why: a node that was stopped (SIGSTOP) or slow answers every heartbeat
// its leader queued meanwhile, hundreds in a row, and a leader steps its
// followers' messages together before its next Ready. Raft answers each
// MsgHeartbeatResp of a follower it probes (StateProbe) with an append of
// up to MaxSizePerMsg of entries, so that backlog made hundreds of MiB of
// appends, and the leader neither ticked nor sent heartbeats until it had
// sent them: long enough to lose its leadership.
//
// Why it is safe: heartbeats carry no entries, and a sender's later one
// supersedes its earlier ones. A leader's MsgHeartbeat carries
// min(its commit, what it records the receiver has), neither of which
// goes back in a term, and the ReadIndex context of its newest pending
// read round, if any; raft's follower only commits up to Commit and echoes
// Context. A MsgHeartbeatResp tells the leader the follower is active and
// acknowledges Context. Dropping an older answer with a context can
// therefore only delay a read round, never lose or wrongly confirm one:
// an acknowledgement counts for its own round only; the kept answer's
// round is the same or a later one (raft's leader queues its rounds in
// order, and an empty context means none was pending); once a quorum
// acknowledges a round, the leader releases every earlier one with it;
// and the leader's heartbeats carry its newest pending round's context
// until a quorum has acknowledged it, at most a heartbeat interval
// later. (Raft may drop any message anyway: this is one of those drops.)
func coalesceHeartbeats(msgs []raftpb.Message) []raftpb.Message {
	var seenBuf [8]heartbeatKey
	seen := seenBuf[:0]
	// From the end, so that the last of each sender and type is kept;
	// kept messages move to the end of msgs, in order.
	kept := len(msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if t := msgs[i].Type; t == raftpb.MsgHeartbeat || t == raftpb.MsgHeartbeatResp {
			k := heartbeatKey{from: msgs[i].From, typ: t}
			if slices.Contains(seen, k) {
				continue
			}
			seen = append(seen, k)
		}
		kept--
		msgs[kept] = msgs[i]
	}
	return msgs[kept:]
}

func (n *Node) step(m raftpb.Message) {
	if m.Type == raftpb.MsgHeartbeat {
		// A heartbeat carries min(the leader's commit, what the leader
		// recorded this node as having). Past this node's log, it means
		// the node lost entries it had acknowledged (fsynced bytes gone,
		// a data directory deleted): outside Raft's fault model, and raft
		// would panic. Stop with a clear error instead: the node's votes
		// and acknowledgements can no longer be trusted.
		if last, _ := n.log.LastIndex(); m.Commit > last {
			n.fail(fmt.Errorf("leader %d says this node acknowledged entries up to %d, but its log ends at %d: "+
				"acknowledged entries were lost (data directory deleted or truncated?); refusing to continue: "+
				"replace this member with a fresh one (nezha cluster replace -cluster DIR -node %d; docs/operating.md, Membership change)", m.From, m.Commit, last, n.id))
			return
		}
	}
	if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
		n.logger.Debug("step", "err", err, "type", m.Type, "from", m.From)
	}
}

func (n *Node) propose(p proposal) {
	if p.batch == nil {
		if err := n.rn.Propose(p.data); err != nil {
			n.metrics.proposalsDropped.Inc()
			n.proposals.trigger(p.id, applyResult{err: errDropped})
			return
		}
		n.metrics.proposals.Inc()
		n.proposals.proposed(n.propEpoch, p.id)
		return
	}
	// One MsgProp per chunk of the batch's entries (RawNode.Propose is a
	// MsgProp of one): Raft appends a chunk's entries and sends them to
	// each follower at once, and accepts or drops them together.
	for _, chunk := range proposalChunks(p.batch, maxProposalBytes) {
		ents := make([]raftpb.Entry, len(chunk))
		ids := make([]uint64, len(chunk))
		for i, q := range chunk {
			ents[i].Data, ids[i] = q.data, q.id
		}
		if err := n.rn.Step(raftpb.Message{Type: raftpb.MsgProp, From: n.id, Entries: ents}); err != nil {
			n.metrics.proposalsDropped.Add(float64(len(ids)))
			for _, id := range ids {
				n.proposals.trigger(id, applyResult{err: errDropped})
			}
			continue
		}
		n.metrics.proposals.Add(float64(len(ids)))
		n.proposals.proposed(n.propEpoch, ids...)
	}
}

// maxProposalBytes bounds the entries (data and entryOverheadBytes each)
// of one proposal message of a batch (a single larger entry goes alone):
// a follower forwards the message to the leader whole, and the Raft
// transport sizes its message limit (maxMsgBytes) for a batch of messages
// of about this size plus values of at most MaxValueBytes. It is
// raft.Config.MaxSizePerMsg.
const maxProposalBytes = 1 << 20

// entryOverheadBytes bounds what an entry adds to a message beyond its
// data (raftpb.Entry's term, index, type and data length fields).
const entryOverheadBytes = 32

// proposalChunks splits batch in order into runs whose entries (data plus
// entryOverheadBytes each) add up to at most maxBytes, except a run of one
// larger write.
func proposalChunks(batch []proposal, maxBytes int) [][]proposal {
	var (
		chunks [][]proposal
		start  int
		size   int
	)
	for i, q := range batch {
		n := len(q.data) + entryOverheadBytes
		if i > start && size+n > maxBytes {
			chunks = append(chunks, batch[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(batch) {
		chunks = append(chunks, batch[start:])
	}
	return chunks
}

// handleReady sends, persists and dispatches one Ready (raft's doc.go, with
// AsyncStorageWrites): it sends the messages to peers at once, hands the
// MsgStorageAppend to the log writer (logwrite.go), whose flusher delivers
// the messages that must wait for the disk, and hands the committed entries
// (MsgStorageApply) to the apply goroutine. A leader's MsgApp thus leaves
// before its own append (Raft thesis 10.2.1), as every node's heartbeats
// and read index answers do.
func (n *Node) handleReady(rd raft.Ready) error {
	changed := false
	if rd.SoftState != nil {
		if old := n.lead.Swap(rd.SoftState.Lead); old != rd.SoftState.Lead {
			n.logger.Info("leader changed", "leader", rd.SoftState.Lead, "state", rd.SoftState.RaftState)
			if rd.SoftState.Lead == raft.None {
				n.activities.Begin(systems.ActivityLeaderChange, time.Now(), fmt.Sprintf("leader %d lost", old))
			} else if old == raft.None {
				n.activities.End(systems.ActivityLeaderChange, time.Now(), 0, fmt.Sprintf("leader %d", rd.SoftState.Lead))
			} else {
				n.activities.End(systems.ActivityLeaderChange, time.Now(), 0, fmt.Sprintf("leader %d -> %d", old, rd.SoftState.Lead))
			}
			n.setHealth(rd.SoftState.Lead != raft.None)
			n.leader.set(rd.SoftState.Lead != raft.None)
			n.metrics.leaderChanges.Inc()
			n.leaseUntil.Store(0)
			n.failReads(errDropped)
			changed = true
		}
		if old := n.raftState.Swap(uint64(rd.SoftState.RaftState)); old != uint64(rd.SoftState.RaftState) {
			changed = true
			n.spans.setLeader(rd.SoftState.RaftState == raft.StateLeader)
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		// Publish the commit index before any message carries it: a
		// follower may apply an entry and answer its client before this
		// node's append of it is flushed, and a lease read here must not
		// miss it.
		if old := n.term.Swap(rd.HardState.Term); old != rd.HardState.Term {
			changed = true
		}
		n.commit.Store(rd.HardState.Commit)
	}
	if changed {
		// A proposal made before a change of leader or term may never
		// commit (it was lost with the old leader, or will be replaced by
		// the new leader's entries), or may commit: tell its client now
		// rather than at its timeout. Its session makes a resend safe.
		n.propEpoch++
		n.proposals.failProposedBefore(n.propEpoch, errLeaderChanged)
	}
	var storeAppend, storeApply *raftpb.Message
	peers := n.sendBuf[:0]
	for i := range rd.Messages {
		switch m := &rd.Messages[i]; m.To {
		case raft.LocalAppendThread:
			storeAppend = m
		case raft.LocalApplyThread:
			storeApply = m
		default:
			peers = append(peers, *m)
		}
	}
	n.transport.send(peers)
	clear(peers)
	n.sendBuf = peers[:0]
	if storeAppend != nil {
		if snap := storeAppend.Snapshot; snap != nil {
			// The snapshot replaces the log: the appends before it are
			// written and flushed first.
			if err := n.logw.drain(); err != nil {
				return err
			}
			if err := n.installSnapshot(*snap); err != nil {
				return err
			}
			n.metrics.snapshotInstalls.Inc()
			n.raftLast = snap.Metadata.Index
			storeAppend.Snapshot = nil // durable; its response carries it to raft
		}
		if k := len(storeAppend.Entries); k > 0 {
			n.raftLast = storeAppend.Entries[k-1].Index
		}
		n.logw.enqueue(*storeAppend)
	}
	n.noteEntries(rd, n.raftLast)
	defer n.issueReads() // the rounds that ended make room for the reads queued meanwhile
	for _, rs := range rd.ReadStates {
		seq, ok := n.readSeqOf(rs.RequestCtx)
		if !ok {
			continue
		}
		if b, ok := n.pendingReads[seq]; ok {
			delete(n.pendingReads, seq)
			if n.cfg.LeaseRead && raft.StateType(n.raftState.Load()) == raft.StateLeader {
				n.extendLease(b.started)
			}
			for _, w := range b.waiters {
				w.ch <- readResult{index: rs.Index}
			}
		}
	}
	if storeApply != nil {
		// Committed entries come only once this node's log holds them
		// durably (raft with AsyncStorageWrites).
		for _, e := range storeApply.Entries {
			n.applyConfChange(e)
		}
		select {
		case n.applyc <- applyBatch{entries: storeApply.Entries}:
		case <-n.stopc:
			return errStopping
		case <-n.failed:
			return errStopping
		}
		// Raft's applied index is what the apply goroutine was handed
		// (it applies in order; a snapshot waits for it at a barrier).
		for _, m := range storeApply.Responses {
			n.stepLocal(m)
		}
	}
	return nil
}

// applyConfChange applies a committed conf change entry to raft and to the
// node (membership.go noteConfChange); other entries are ignored.
func (n *Node) applyConfChange(e raftpb.Entry) {
	cc, ok := decodeConfChange(e, n.logger)
	if !ok {
		return
	}
	cs := n.rn.ApplyConfChange(cc)
	n.setConfState(*cs)
	n.logger.Info("applied conf change", "index", e.Index, "conf_state", cs.String())
	n.noteConfChange(e.Index, cc)
}

// readCtx is the ReadIndex context of round seq: this node's id and the
// random nonce of this process, then seq. The leader keeps the pending
// rounds of every node in one table keyed by context and silently drops a
// duplicate, so contexts must be unique across nodes and restarts.
func (n *Node) readCtx(seq uint64) []byte {
	ctx := make([]byte, 24)
	binary.BigEndian.PutUint64(ctx[0:], n.id)
	binary.BigEndian.PutUint64(ctx[8:], n.reqNonce)
	binary.BigEndian.PutUint64(ctx[16:], seq)
	return ctx
}

// readSeqOf returns the round of a context made by readCtx of this node.
func (n *Node) readSeqOf(ctx []byte) (uint64, bool) {
	if len(ctx) != 24 || binary.BigEndian.Uint64(ctx[0:]) != n.id || binary.BigEndian.Uint64(ctx[8:]) != n.reqNonce {
		return 0, false
	}
	return binary.BigEndian.Uint64(ctx[16:]), true
}

// maxReadRounds is how many ReadIndex rounds a node has in flight at
// once. Reads that arrive meanwhile queue and share the next round, as
// etcd's linearizableReadLoop shares one: under load a round serves many
// reads (its heartbeats to every follower are the cost), and a read waits
// at most for the round in flight and its own.
const maxReadRounds = 1

// issueReads starts a ReadIndex round for the queued reads, unless
// maxReadRounds are in flight (Ready loop only).
func (n *Node) issueReads() {
	if len(n.queuedReads) == 0 || len(n.pendingReads) >= maxReadRounds {
		return
	}
	batch := &readBatch{waiters: n.queuedReads, issuedAt: n.ticks, started: time.Now()}
	n.queuedReads = nil
	n.readSeq++
	n.pendingReads[n.readSeq] = batch
	n.rn.ReadIndex(n.readCtx(n.readSeq))
	n.metrics.readRounds.Inc()
	n.metrics.readWaiters.Add(float64(len(batch.waiters)))
}

// expireReads fails read index rounds that got no answer within two
// election timeouts (raft drops MsgReadIndex silently without a leader),
// and issues the reads queued behind them.
func (n *Node) expireReads() {
	for seq, b := range n.pendingReads {
		if n.ticks-b.issuedAt > 2*n.cfg.ElectionTicks {
			delete(n.pendingReads, seq)
			for _, w := range b.waiters {
				w.ch <- readResult{err: errDropped}
			}
		}
	}
	n.issueReads()
}

// failReads fails every read in flight or queued.
func (n *Node) failReads(err error) {
	for seq, b := range n.pendingReads {
		delete(n.pendingReads, seq)
		for _, w := range b.waiters {
			w.ch <- readResult{err: err}
		}
	}
	for _, w := range n.queuedReads {
		w.ch <- readResult{err: err}
	}
	n.queuedReads = nil
}

// runApply applies committed entries to the state machine in order.
func (n *Node) runApply() {
	defer close(n.applyDone)
	for {
		var batches []applyBatch
		select {
		case b := <-n.applyc:
			batches = append(batches, b)
			for more := len(n.applyc); more > 0; more-- {
				batches = append(batches, <-n.applyc)
			}
		case <-n.stopc:
			return
		case <-n.failed:
			return
		}
		if err := n.apply(batches); err != nil {
			if !errors.Is(err, errStopping) {
				n.fail(err)
			}
			return
		}
	}
}

// apply applies the batches' entries in order and releases each barrier
// once every entry before it is applied.
func (n *Node) apply(batches []applyBatch) error {
	for i, b := range batches {
		if b.barrier != nil {
			if err := n.applyEntries(batches[:i]); err != nil {
				return err
			}
			close(b.barrier)
			return n.apply(batches[i+1:])
		}
	}
	return n.applyEntries(batches)
}

// applyEntries applies the entries of batches (which hold no barrier).
func (n *Node) applyEntries(batches []applyBatch) error {
	var (
		ents    []systems.AppliedEntry
		results []applyResult // per entry: what its proposer is told
	)
	for _, b := range batches {
		for _, e := range b.entries {
			if e.Index != n.sessions.index+1 {
				return fmt.Errorf("client sessions at index %d, next entry to apply is %d", n.sessions.index, e.Index)
			}
			ae := systems.AppliedEntry{Index: e.Index, Term: e.Term}
			res := applyResult{index: e.Index}
			if e.Type == raftpb.EntryNormal && len(e.Data) > 0 {
				c, err := systems.DecodeCommand(e.Data)
				if err != nil {
					n.logger.Error("undecodable committed entry; applied as a no-op", "index", e.Index, "err", err)
				} else {
					ae.Command = c
				}
				if c.ClientID != 0 {
					n.applyDeltas = append(n.applyDeltas, sessionDelta{index: e.Index, client: c.ClientID, seq: c.Seq})
					switch v, first := n.sessions.decide(e.Index, c.ClientID, c.Seq); v {
					case sessionDuplicate:
						ae.Command = systems.Command{Op: systems.OpNone, RequestID: c.RequestID}
						res.index = first
					case sessionStale:
						ae.Command = systems.Command{Op: systems.OpNone, RequestID: c.RequestID}
						res = applyResult{err: errSuperseded}
					}
				}
			}
			n.sessions.index = e.Index
			n.sessCkptBytes += int64(len(e.Data))
			n.sessCkptEntries++
			loc, ok := n.log.Location(e.Index)
			if !ok {
				return fmt.Errorf("committed entry %d has no location in the log", e.Index)
			}
			ae.Location = loc
			ents = append(ents, ae)
			results = append(results, res)
		}
	}
	if len(ents) == 0 {
		return nil
	}
	// Queue the deltas before the applied index moves: a compaction to an
	// applied index finds them.
	n.sessMu.Lock()
	overflow := n.sessDeltas.push(n.applyDeltas, n.sessions.index)
	maxDeltas := n.sessDeltas.max
	n.sessMu.Unlock()
	if overflow {
		n.logDeltaOverflow(maxDeltas, n.sessions.index)
	}
	n.applyDeltas = n.applyDeltas[:0]
	if err := n.retryFullDisk(func() error { return n.sm.Apply(ents) }); err != nil {
		return fmt.Errorf("apply entries %d..%d: %w", ents[0].Index, ents[len(ents)-1].Index, err)
	}
	last := ents[len(ents)-1].Index
	n.applied.Store(last)
	n.maybeCheckpointSessions()
	for i := range ents {
		if id := ents[i].Command.RequestID; id != 0 {
			n.proposals.trigger(id, results[i])
		}
	}
	n.appliedWait.trigger(last)
	return nil
}

// nextRequestID returns an id unique to this process.
func (n *Node) nextRequestID() uint64 { return n.reqNonce | (n.reqSeq.Add(1) & 0xffffffff) }

// maxDroppedResends bounds how often proposeDataAndWait proposes a write
// again after Raft dropped it while a leader was known (a leadership
// transfer, a pre-candidate that still names the old leader).
const maxDroppedResends = 2

// leaderWaitElectionTimeouts is how long, in election timeouts, a write
// Raft dropped waits for a leader: an election timer runs for up to two
// (raft randomizes it in [timeout, 2 x timeout)), the third covers the
// pre-vote and vote rounds.
const leaderWaitElectionTimeouts = 3

// proposeDataAndWait proposes the encoded command data of request id and
// waits until it is applied. A proposal Raft dropped was never in the log,
// so it may be proposed again: when the node knows no leader (right after a
// start or during an election) it waits for one, up to
// leaderWaitElectionTimeouts from the first drop, and proposes again; when
// it knows one, it proposes again a tick later, at most maxDroppedResends
// times. A node cut off from the leader thus still fails the write within a
// few election timeouts, and the client tries another node.
func (n *Node) proposeDataAndWait(ctx context.Context, id uint64, data []byte) (uint64, error) {
	idx, err := n.proposeOnce(ctx, id, data)
	return n.resendDropped(ctx, id, data, idx, err)
}

// resendDropped is proposeDataAndWait after the first attempt, which
// returned idx and err.
func (n *Node) resendDropped(ctx context.Context, id uint64, data []byte, idx uint64, err error) (uint64, error) {
	var leaderWait <-chan time.Time // from the first drop
	for resends := 0; ; idx, err = n.proposeOnce(ctx, id, data) {
		if !errors.Is(err, errDropped) || ctx.Err() != nil {
			return idx, err
		}
		if leaderWait == nil {
			leaderWait = time.After(leaderWaitElectionTimeouts * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval)
		}
		var tick <-chan time.Time
		leader := n.leader.wait()
		select {
		case <-leader:
			if resends == maxDroppedResends {
				return idx, err
			}
			resends++
			tick = time.After(n.cfg.TickInterval)
			leader = nil
		default:
		}
		select {
		case <-leader:
		case <-tick:
		case <-leaderWait:
			return 0, err
		case <-ctx.Done():
			return 0, err
		case <-n.stopc:
			return 0, err
		case <-n.failed:
			return 0, err
		}
	}
}

// proposeBatchAndWait is proposeDataAndWait for several writes (request
// ids, encoded commands data, each with its own deadline) at once: they
// reach Raft together (Node.propose: proposal messages of at most
// maxProposalBytes) and their proposer wakes once, when all of them are
// answered, or at a write's deadline, which fails that write alone with
// context.DeadlineExceeded (its outcome unknown, as a unary write's). A
// write Raft dropped is then proposed again alone (resendDropped), up to
// its deadline. It returns each write's index, or its error.
func (n *Node) proposeBatchAndWait(ids []uint64, data [][]byte, deadlines []time.Time) []applyResult {
	out := make([]applyResult, len(ids))
	batch := make([]proposal, len(ids))
	last := deadlines[0]
	for i := range ids {
		batch[i] = proposal{id: ids[i], data: data[i]}
		if deadlines[i].After(last) {
			last = deadlines[i]
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	g := n.proposals.registerGroup(ids)
	fail := func(err error) []applyResult {
		n.proposals.cancelGroup(ids, g)
		for i := range out {
			out[i].err = err
		}
		return out
	}
	select {
	case n.propc <- proposal{batch: batch}:
	case <-ctx.Done():
		return fail(errNotProposed) // never handed to raft
	case <-n.stopc:
		return fail(errDropped)
	case <-n.failed:
		return fail(errDropped)
	}
	expired := make([]bool, len(ids))
	timer := time.NewTimer(time.Until(last))
	defer timer.Stop()
	var err error
wait:
	for {
		// Fail the writes whose deadline passed; wait for the next one.
		now, next := time.Now(), last
		for i, dl := range deadlines {
			if expired[i] {
				continue
			}
			if !dl.After(now) {
				expired[i] = n.proposals.expire(ids[i], g, i)
			} else if dl.Before(next) {
				next = dl
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-g.done:
			break wait
		case <-timer.C:
		case <-n.failed:
			err = errStopping
			break wait
		}
	}
	delivered := n.proposals.cancelGroup(ids, g)
	var resends sync.WaitGroup // the dropped writes wait for a leader side by side
	for i := range out {
		switch {
		case expired[i]:
			out[i].err = context.DeadlineExceeded
		case !delivered[i]:
			out[i].err = err
		default:
			out[i] = g.results[i]
			if errors.Is(out[i].err, errDropped) {
				resends.Go(func() {
					ctx, cancel := context.WithDeadline(context.Background(), deadlines[i])
					defer cancel()
					out[i].index, out[i].err = n.resendDropped(ctx, ids[i], data[i], out[i].index, out[i].err)
				})
			}
		}
	}
	resends.Wait()
	return out
}

// proposeOnce proposes the encoded command data of request id once and
// waits until it is applied.
func (n *Node) proposeOnce(ctx context.Context, id uint64, data []byte) (uint64, error) {
	ch := n.proposals.register(id)
	select {
	case n.propc <- proposal{id: id, data: data}:
	case <-ctx.Done():
		n.proposals.cancel(id)
		return 0, errNotProposed // never handed to raft
	case <-n.stopc:
		n.proposals.cancel(id)
		return 0, errDropped
	case <-n.failed:
		n.proposals.cancel(id)
		return 0, errDropped
	}
	select {
	case r := <-ch:
		return r.index, r.err
	case <-ctx.Done():
		n.proposals.cancel(id)
		return 0, ctx.Err()
	case <-n.failed:
		n.proposals.cancel(id)
		return 0, errStopping
	}
}

// leaseFraction of the election timeout is how long a confirmed round of
// leadership lets the leader read locally (the margin covers clock drift).
const leaseFraction = 0.75

// extendLease starts a read lease at the moment a ReadIndex round that a
// quorum confirmed was issued. A follower that acknowledged the round's
// heartbeat refuses votes (CheckQuorum) and does not campaign for an
// election timeout after it, so no other leader can exist before then. The
// lease is measured on the monotonic clock, not in Raft ticks: a paused
// leader's lease expires while it is stopped.
func (n *Node) extendLease(started time.Time) {
	d := time.Duration(float64(n.cfg.ElectionTicks) * float64(n.cfg.TickInterval) * leaseFraction)
	until := int64(started.Sub(n.epoch) + d)
	for {
		cur := n.leaseUntil.Load()
		if until <= cur || n.leaseUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// leaseRead reports whether this node may serve a linearizable read from
// its lease now, and at which commit index.
func (n *Node) leaseRead() (uint64, bool) {
	if !n.cfg.LeaseRead || raft.StateType(n.raftState.Load()) != raft.StateLeader {
		return 0, false
	}
	if int64(time.Since(n.epoch)) >= n.leaseUntil.Load() {
		return 0, false
	}
	return n.commit.Load(), true
}

// readIndex waits until the local state machine reflects every write that
// was committed before the call: from the leader's lease (Config.LeaseRead)
// when it holds one, else through a ReadIndex round.
func (n *Node) readIndex(ctx context.Context) error {
	if index, ok := n.leaseRead(); ok {
		return n.appliedWait.wait(ctx, index, n.failed)
	}
	ch := make(chan readResult, 1)
	select {
	case n.readc <- readRequest{ch: ch}:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return errStopping
	case <-n.failed:
		return errStopping
	}
	var r readResult
	select {
	case r = <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	if r.err != nil {
		return r.err
	}
	return n.appliedWait.wait(ctx, r.index, n.failed)
}
