package node

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/systems/kvpb"
)

const (
	// mdCluster, mdFrom and mdAddress identify the sender of a stream: its
	// cluster, its Raft id and its client address.
	mdCluster = "x-nezha-cluster"
	mdFrom    = "x-nezha-from"
	mdAddress = "x-nezha-address"
	// maxBatchBytes bounds one MessageBatch (a single larger message is sent
	// alone).
	maxBatchBytes = 4 << 20
	// peerQueue is the number of messages queued per peer before new ones
	// are dropped (raft retries; the peer is reported unreachable).
	peerQueue = 1024
)

// transport carries raftpb.Messages between nodes over one gRPC client
// stream per directed pair, batching whatever is queued.
type transport struct {
	n      *Node
	server *grpc.Server
	peers  map[uint64]*peer
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type peer struct {
	id           uint64
	addr         string
	msgc         chan raftpb.Message
	conn         *grpc.ClientConn
	snapshotting atomic.Bool // one snapshot in flight per peer
}

func maxMsgBytes(n *Node) int { return 2*n.cfg.MaxValueBytes + maxBatchBytes + (1 << 20) }

func newTransport(n *Node, lis net.Listener) *transport {
	t := &transport{n: n, peers: map[uint64]*peer{}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.server = grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsgBytes(n)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 500 * time.Millisecond, PermitWithoutStream: true}),
	)
	kvpb.RegisterRaftServer(t.server, &raftServer{n: n})
	go func() {
		if err := t.server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.fail(err)
		}
	}()
	for i := range n.cfg.Peers {
		id := uint64(i + 1)
		if id == n.id {
			continue
		}
		addr := n.cfg.dialAddress(id)
		conn, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxMsgBytes(n))),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
			// Reconnect within a second of a peer's restart (gRPC's default
			// backoff grows to two minutes).
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: time.Second,
			}),
		)
		if err != nil {
			// NewClient only fails on a malformed target; Validate accepted it.
			n.logger.Error("peer address unusable", "peer", id, "address", addr, "err", err)
			continue
		}
		p := &peer{id: id, addr: addr, msgc: make(chan raftpb.Message, peerQueue), conn: conn}
		t.peers[id] = p
		t.wg.Add(1)
		go t.runPeer(p)
	}
	return t
}

// send queues messages for their peers without blocking. A message to a
// peer whose queue is full is dropped and the peer reported unreachable.
func (t *transport) send(msgs []raftpb.Message) {
	for _, m := range msgs {
		p := t.peers[m.To]
		if p == nil {
			continue
		}
		if m.Type == raftpb.MsgSnap {
			if p.snapshotting.CompareAndSwap(false, true) {
				go func() {
					defer p.snapshotting.Store(false)
					t.sendSnapshot(p, m)
				}()
			}
			// else: one is already in flight; it reports to raft.
			continue
		}
		select {
		case p.msgc <- m:
		default:
			t.reportUnreachable(p.id)
		}
	}
}

func (t *transport) reportUnreachable(id uint64) {
	select {
	case t.n.unreachc <- id:
	default:
	}
}

// runPeer keeps a stream to p open and writes batches to it.
func (t *transport) runPeer(p *peer) {
	defer t.wg.Done()
	client := kvpb.NewRaftClient(p.conn)
	md := t.n.outgoingMD()
	backoff := 50 * time.Millisecond
	for t.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(t.ctx, md))
		stream, err := client.Stream(ctx)
		if err == nil {
			err = t.pump(p, stream)
		}
		cancel()
		if t.ctx.Err() != nil {
			return
		}
		t.n.logger.Debug("peer stream broken", "peer", p.id, "err", err)
		t.reportUnreachable(p.id)
		// Drop what is queued: raft resends from its progress tracking.
		for len(p.msgc) > 0 {
			<-p.msgc
		}
		select {
		case <-time.After(backoff):
		case <-t.ctx.Done():
			return
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// pump sends queued messages on stream until an error.
func (t *transport) pump(p *peer, stream grpc.ClientStreamingClient[kvpb.MessageBatch, kvpb.StreamAck]) error {
	var batch kvpb.MessageBatch
	for {
		var m raftpb.Message
		select {
		case m = <-p.msgc:
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
		batch.Messages = batch.Messages[:0]
		size := 0
		for {
			b, err := m.Marshal()
			if err != nil {
				return err
			}
			batch.Messages = append(batch.Messages, b)
			size += len(b)
			if size >= maxBatchBytes || len(p.msgc) == 0 {
				break
			}
			m = <-p.msgc
		}
		if err := stream.Send(&batch); err != nil {
			return err
		}
	}
}

func (t *transport) stop() {
	t.cancel()
	stopped := make(chan struct{})
	go func() { t.server.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		t.server.Stop()
	}
	t.wg.Wait()
	for _, p := range t.peers {
		p.conn.Close()
	}
}

// raftServer receives streams from peers.
type raftServer struct {
	kvpb.UnimplementedRaftServer
	n *Node
}

func (s *raftServer) Stream(stream grpc.ClientStreamingServer[kvpb.MessageBatch, kvpb.StreamAck]) error {
	n := s.n
	from, err := n.admitPeer(stream.Context())
	if err != nil {
		return err
	}
	for {
		batch, err := stream.Recv()
		if err != nil {
			return err
		}
		for _, b := range batch.Messages {
			var m raftpb.Message
			if err := m.Unmarshal(b); err != nil {
				n.logger.Warn("undecodable raft message dropped", "err", err)
				continue
			}
			if m.From != from || m.To != n.id {
				n.logger.Warn("raft message with a wrong address dropped", "from", m.From, "to", m.To, "stream_from", from)
				continue
			}
			select {
			case n.recvc <- m:
			case <-n.stopc:
				return errStopping
			case <-n.failed:
				return errStopping
			}
		}
	}
}

// outgoingMD identifies this node to the peers it streams to.
func (n *Node) outgoingMD() metadata.MD {
	return metadata.Pairs(mdCluster, n.cfg.clusterID(), mdFrom, strconv.FormatUint(n.id, 10), mdAddress, n.cfg.Address)
}

// admitPeer checks that a stream comes from another member of this
// cluster (a node of another local cluster that reused a port must not
// reach this one's Raft) and records its client address.
func (n *Node) admitPeer(ctx context.Context) (uint64, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	cluster, from, addr := md.Get(mdCluster), md.Get(mdFrom), md.Get(mdAddress)
	if len(cluster) != 1 || cluster[0] != n.cfg.clusterID() {
		n.logger.Warn("refused a peer stream from another cluster", "cluster", cluster, "want", n.cfg.clusterID())
		return 0, status.Errorf(codes.PermissionDenied, "not a member of cluster %s", n.cfg.clusterID())
	}
	if len(from) != 1 {
		return 0, status.Errorf(codes.PermissionDenied, "no sender id")
	}
	id, err := strconv.ParseUint(from[0], 10, 64)
	if err != nil || id == 0 || id == n.id || id > uint64(len(n.cfg.Peers)) {
		n.logger.Warn("refused a peer stream with a bad sender id", "from", from[0])
		return 0, status.Errorf(codes.PermissionDenied, "bad sender id %q", from[0])
	}
	if len(addr) == 1 {
		n.peerAddrs.Store(id, addr[0])
	}
	return id, nil
}
