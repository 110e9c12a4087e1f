package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nezha-harness/nezha/api/kvpb"
)

const (
	// mdCluster, mdFrom, mdAddress and mdInternal identify the sender of a
	// stream: its cluster, its Raft id, its client address and its
	// internal address.
	mdCluster  = "x-nezha-cluster"
	mdFrom     = "x-nezha-from"
	mdAddress  = "x-nezha-address"
	mdInternal = "x-nezha-internal-address"
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
	mu     sync.Mutex // guards peers (the Ready loop adds and removes them)
	peers  map[uint64]*peer
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	codec  *batchCodec
}

type peer struct {
	id           uint64
	addr         string
	msgc         chan raftpb.Message
	conn         *grpc.ClientConn
	snapshotting atomic.Bool // one snapshot in flight per peer
	// ctx ends when the peer is removed or the transport stops.
	ctx    context.Context
	cancel context.CancelFunc
}

// Flow control and buffers of the Raft transport's connections (both
// ends): as kvpb.StreamWindowBytes and its siblings for the KV API, but
// larger, since one stream carries a follower's appends of values of up to
// MaxValueBytes. Fixed windows turn off gRPC's BDP estimation, whose pings
// and window updates, and the 32 KiB writes of its default buffers, made a
// 256 KiB value cost about 95 syscalls and 40 context switches over the
// three nodes, against 31 and 24 with these (nezha-nogc, 50 clients).
const (
	peerWindowBytes = 16 << 20
	peerBufferBytes = 512 << 10
)

func maxMsgBytes(n *Node) int { return 2*n.cfg.MaxValueBytes + maxBatchBytes + (1 << 20) }

var _ raftTransport = (*transport)(nil)

func newTransport(n *Node, lis net.Listener) *transport {
	t := &transport{n: n, peers: map[uint64]*peer{}, codec: &batchCodec{Codec: n.codec}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.server = grpc.NewServer(append(n.metrics.serverOptions(),
		grpc.ForceServerCodecV2(t.codec),
		experimental.BufferPool(t.codec.Pool),
		grpc.MaxRecvMsgSize(maxMsgBytes(n)),
		grpc.InitialWindowSize(peerWindowBytes), grpc.InitialConnWindowSize(2*peerWindowBytes),
		grpc.WriteBufferSize(peerBufferBytes), grpc.ReadBufferSize(peerBufferBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 500 * time.Millisecond, PermitWithoutStream: true}),
	)...)
	kvpb.RegisterRaftServer(t.server, &raftServer{n: n})
	if n.spans != nil {
		kvpb.RegisterSpansServer(t.server, &spanServer{n: n, sh: n.spans})
	}
	healthpb.RegisterHealthServer(t.server, n.health)
	n.metrics.grpc.InitializeMetrics(t.server)
	go func() {
		if err := t.server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.fail(err)
		}
	}()
	n.startPeers(t)
	return t
}

// startPeers adds to t the members of the applied membership: those
// -peers names at their dial addresses, the others at the addresses their
// conf changes carried.
func (n *Node) startPeers(t raftTransport) {
	ids, _, _ := n.cfg.members()
	for _, id := range ids {
		if id != n.id && isMember(n.confState, id) {
			t.addPeer(id, n.dialAddress(id))
		}
	}
	for _, id := range append(slices.Clone(n.confState.Voters), n.confState.Learners...) {
		if id != n.id && !slices.Contains(ids, id) {
			// A member -peers does not name: its address came with its
			// conf change.
			if addr := n.dialAddress(id); addr != "" {
				t.addPeer(id, addr)
			} else {
				n.logger.Error("a member's address is unknown (not in -peers): this node cannot reach it", "member", id)
			}
		}
	}
}

// addPeer starts streaming to member id at addr (no-op if it has a
// stream).
func (t *transport) addPeer(id uint64, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.peers[id]; ok || t.ctx.Err() != nil {
		return
	}
	n := t.n
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxMsgBytes(n)), grpc.ForceCodecV2(t.codec)),
		experimental.WithBufferPool(t.codec.Pool),
		grpc.WithInitialWindowSize(peerWindowBytes), grpc.WithInitialConnWindowSize(2*peerWindowBytes),
		grpc.WithWriteBufferSize(peerBufferBytes), grpc.WithReadBufferSize(peerBufferBytes),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
		// Reconnect within a second of a peer's restart (gRPC's default
		// backoff grows to two minutes).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
	)
	if err != nil {
		// NewClient only fails on a malformed target.
		n.logger.Error("peer address unusable", "peer", id, "address", addr, "err", err)
		return
	}
	ctx, cancel := context.WithCancel(t.ctx)
	p := &peer{id: id, addr: addr, msgc: make(chan raftpb.Message, peerQueue), conn: conn, ctx: ctx, cancel: cancel}
	t.peers[id] = p
	t.wg.Add(1)
	go t.runPeer(p)
}

// removePeer stops streaming to member id.
func (t *transport) removePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		p.cancel()
	}
}

func (t *transport) peer(id uint64) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[id]
}

func (t *transport) peerIDs() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]uint64, 0, len(t.peers))
	for id := range t.peers {
		ids = append(ids, id)
	}
	return ids
}

func (t *transport) conn(id uint64) *grpc.ClientConn {
	if p := t.peer(id); p != nil {
		return p.conn
	}
	return nil
}

func (t *transport) context() context.Context { return t.ctx }

// send queues messages for their peers without blocking. A message to a
// peer whose queue is full is dropped and the peer reported unreachable.
func (t *transport) send(msgs []raftpb.Message) {
	for _, m := range msgs {
		p := t.peer(m.To)
		if p == nil {
			p = t.peerOnDemand(m.To)
		}
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

// peerOnDemand starts streaming to id, which raft sends to but this
// node's applied membership does not list, unless it was removed: a node
// that joined with bootstrap voters older than the current membership (its
// leader's log began before the leader joined), or a member that lags
// behind the conf change adding its new leader (it was down or cut off
// while the leader joined), must answer the leader before the log or a
// snapshot tells it who the members are. The address is the one
// dialAddress knows, else the internal address id's own stream to this
// node announced. Returns nil if id has no known address.
func (t *transport) peerOnDemand(id uint64) *peer {
	addr := t.n.onDemandAddress(id)
	if addr == "" {
		return nil
	}
	t.addPeer(id, addr)
	return t.peer(id)
}

// onDemandAddress is the address a transport starts streaming to for id,
// which raft sends to but which is not its peer (see peerOnDemand), or ""
// if there is none or id was removed.
func (n *Node) onDemandAddress(id uint64) string {
	if _, removed := n.removedIDs.Load(id); removed || id == n.id {
		return ""
	}
	addr := n.dialAddress(id)
	if a, ok := n.announcedAddrs.Load(id); ok && addr == "" {
		addr = a.(string)
	}
	if addr != "" {
		n.logger.Info("streaming to a peer outside the applied membership that raft sends to", "peer", id, "address", addr)
	}
	return addr
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
	defer p.conn.Close()
	md := t.n.outgoingMD()
	backoff := 50 * time.Millisecond
	for p.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(p.ctx, md))
		stream, err := p.conn.NewStream(ctx, &kvpb.Raft_ServiceDesc.Streams[0], kvpb.Raft_Stream_FullMethodName)
		if err == nil {
			err = t.pump(p, stream)
			if errors.Is(err, io.EOF) {
				// The server ended the stream: its status says why.
				err = stream.RecvMsg(&kvpb.StreamAck{})
			}
		}
		cancel()
		if p.ctx.Err() != nil {
			return
		}
		t.n.noteRefused(p.id, err)
		t.n.logger.Debug("peer stream broken", "peer", p.id, "err", err)
		t.reportUnreachable(p.id)
		// Drop what is queued: raft resends from its progress tracking.
		for len(p.msgc) > 0 {
			<-p.msgc
		}
		select {
		case <-time.After(backoff):
		case <-p.ctx.Done():
			return
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// pump sends queued messages on stream until an error: whatever is queued
// (up to maxBatchBytes) goes out as one MessageBatch, marshaled once by
// batchCodec.
func (t *transport) pump(p *peer, stream grpc.ClientStream) error {
	var batch outBatch
	for {
		var m raftpb.Message
		select {
		case m = <-p.msgc:
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
		clear(batch.msgs)
		batch.msgs = batch.msgs[:0]
		size := 0
		for {
			batch.msgs = append(batch.msgs, m)
			size += m.Size()
			if size >= maxBatchBytes || len(p.msgc) == 0 {
				break
			}
			m = <-p.msgc
		}
		if err := stream.SendMsg(&batch); err != nil {
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
	var batch inBatch
	for {
		batch.msgs = batch.msgs[:0]
		if err := stream.RecvMsg(&batch); err != nil {
			return err
		}
		if err := n.removedPeerErr(from); err != nil {
			return err // removed while its stream was open
		}
		for _, m := range batch.msgs {
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
	return metadata.Pairs(mdCluster, n.cfg.clusterID(), mdFrom, strconv.FormatUint(n.id, 10), mdAddress, n.cfg.Address,
		mdInternal, n.cfg.InternalAddress)
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
	if err != nil || id == 0 || id == n.id {
		n.logger.Warn("refused a peer stream with a bad sender id", "from", from[0])
		return 0, status.Errorf(codes.PermissionDenied, "bad sender id %q", from[0])
	}
	if err := n.removedPeerErr(id); err != nil {
		// Tell a removed member, which may not have applied its removal.
		return 0, err
	}
	var client, internal string
	if len(addr) == 1 {
		client = addr[0]
	}
	if a := md.Get(mdInternal); len(a) == 1 {
		internal = a[0]
	}
	n.notePeer(id, client, internal)
	return id, nil
}

// removedPeerErr is the answer to Raft messages from member id if a conf
// change this node applied removed it (a FailedPrecondition naming
// removedMarker, which the sender recognises: noteRefused), else nil.
func (n *Node) removedPeerErr(id uint64) error {
	if at, ok := n.removedIDs.Load(id); ok {
		return status.Errorf(codes.FailedPrecondition, "node %d %s %s at index %d", id, removedMarker, n.cfg.clusterID(), at)
	}
	return nil
}

// noteRefused marks this node removed if member peer refused its Raft
// messages with removedPeerErr's answer (err, from peer).
func (n *Node) noteRefused(peer uint64, err error) {
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), removedMarker) {
		n.markRemoved(fmt.Sprintf("member %d refuses this node's Raft messages: %s", peer, st.Message()))
	}
}

// notePeer records the client address (in the address book too, when it
// is new) and the internal address (if it is host:port) that member id
// announced with its Raft messages.
func (n *Node) notePeer(id uint64, client, internal string) {
	if client != "" {
		if old, known := n.peerAddrs.Swap(id, client); !known || old.(string) != client {
			n.saveAddressBook()
		}
	}
	if _, _, err := net.SplitHostPort(internal); err == nil {
		n.announcedAddrs.Store(id, internal)
	}
}

// batchCodec is the gRPC codec of the peer transport. An outBatch is
// written in the protobuf wire form of a MessageBatch (field 1, repeated
// bytes) straight from its raftpb.Messages: the payloads of large entries
// are handed to gRPC as buffers of their own (no copy; entries are never
// mutated), everything else is marshaled once into a small buffer. An
// inBatch is decoded from one copy of gRPC's receive buffers that the
// decoded entries alias (no copy per entry). Other messages go through
// kvpb.Codec.
type batchCodec struct {
	*kvpb.Codec
}

// outBatch is the messages of one MessageBatch to send.
type outBatch struct{ msgs []raftpb.Message }

// inBatch receives the messages of one MessageBatch. Their entries' Data
// alias one buffer owned by the batch.
type inBatch struct{ msgs []raftpb.Message }

const (
	// messageBatchTag is the tag of MessageBatch.messages: field 1, bytes.
	messageBatchTag = 1<<3 | 2
	// messageEntriesField and entryDataField are raftpb.Message.entries
	// and raftpb.Entry.data.
	messageEntriesField = 7
	entryDataField      = 4
	// inlineEntryBytes: entry payloads below this size are copied into
	// the batch's buffer; larger ones are sent from their own memory.
	inlineEntryBytes = 4 << 10
)

func (c *batchCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*outBatch)
	if !ok {
		return c.Codec.Marshal(v)
	}
	var out mem.BufferSlice
	var head []byte
	for i := range b.msgs {
		m := b.msgs[i] // a copy: its Entries are marshaled apart
		ents := m.Entries
		m.Entries = nil
		size := m.Size()
		for j := range ents {
			n := ents[j].Size()
			size += 1 + protowire.SizeVarint(uint64(n)) + n
		}
		head = append(head, messageBatchTag)
		head = protowire.AppendVarint(head, uint64(size))
		head = appendMarshaled(head, &m)
		for j := range ents {
			e := &ents[j]
			head = protowire.AppendTag(head, messageEntriesField, protowire.BytesType)
			head = protowire.AppendVarint(head, uint64(e.Size()))
			if len(e.Data) < inlineEntryBytes {
				head = appendMarshaled(head, e)
				continue
			}
			noData := raftpb.Entry{Term: e.Term, Index: e.Index, Type: e.Type}
			head = appendMarshaled(head, &noData)
			head = protowire.AppendTag(head, entryDataField, protowire.BytesType)
			head = protowire.AppendVarint(head, uint64(len(e.Data)))
			out = append(out, mem.SliceBuffer(head), mem.SliceBuffer(e.Data))
			head = nil
		}
	}
	if len(head) > 0 {
		out = append(out, mem.SliceBuffer(head))
	}
	return out, nil
}

// bufferBytes returns the bytes of each buffer of data (valid until gRPC
// frees data, after the codec's Unmarshal returns).
func bufferBytes(data mem.BufferSlice) [][]byte {
	parts := make([][]byte, len(data))
	for i, d := range data {
		parts[i] = d.ReadOnlyData()
	}
	return parts
}

// appendMarshaled appends the gogo-protobuf encoding of m to dst.
func appendMarshaled(dst []byte, m interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}) []byte {
	n := m.Size()
	dst = slices.Grow(dst, n)
	_, _ = m.MarshalToSizedBuffer(dst[len(dst) : len(dst)+n]) // cannot fail with an exact buffer
	return dst[:len(dst)+n]
}

func (c *batchCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*inBatch)
	if !ok {
		return c.Codec.Unmarshal(data, v)
	}
	// One copy out of gRPC's pooled buffers, without zeroing (bytes.Join);
	// the entries alias it.
	raw := bytes.Join(bufferBytes(data), nil)
	var rest []byte // the fields of one message other than its entries
	for len(raw) > 0 {
		if raw[0] != messageBatchTag {
			return fmt.Errorf("raft message batch: unexpected tag byte %#x", raw[0])
		}
		mb, n := protowire.ConsumeBytes(raw[1:])
		if n < 0 {
			return fmt.Errorf("raft message batch: %w", protowire.ParseError(n))
		}
		raw = raw[1+n:]
		m, err := decodeMessage(mb, rest[:0])
		if err != nil {
			return fmt.Errorf("raft message batch: %w", err)
		}
		b.msgs = append(b.msgs, m)
	}
	return nil
}

// decodeMessage decodes a raftpb.Message whose entries' Data alias b;
// scratch collects the other fields for gogo's Unmarshal.
func decodeMessage(b, scratch []byte) (raftpb.Message, error) {
	var ents []raftpb.Entry
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return raftpb.Message{}, protowire.ParseError(n)
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vn < 0 {
			return raftpb.Message{}, protowire.ParseError(vn)
		}
		if num == messageEntriesField && typ == protowire.BytesType {
			eb, _ := protowire.ConsumeBytes(b[n:])
			e, err := decodeEntry(eb)
			if err != nil {
				return raftpb.Message{}, err
			}
			ents = append(ents, e)
		} else {
			scratch = append(scratch, b[:n+vn]...)
		}
		b = b[n+vn:]
	}
	var m raftpb.Message
	if err := m.Unmarshal(scratch); err != nil {
		return raftpb.Message{}, err
	}
	m.Entries = ents
	return m, nil
}

// decodeEntry decodes a raftpb.Entry whose Data aliases b (capped, so that
// an append to it cannot overwrite what follows).
func decodeEntry(b []byte) (raftpb.Entry, error) {
	var e raftpb.Entry
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == entryDataField && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			e.Data = v[:len(v):len(v)]
			b = b[n:]
			continue
		case num <= 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return e, protowire.ParseError(n)
			}
			switch num {
			case 1:
				e.Type = raftpb.EntryType(v)
			case 2:
				e.Term = v
			case 3:
				e.Index = v
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return e, nil
}
