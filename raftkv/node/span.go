package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/systems"
)

// Span replication for a state machine that implements
// systems.SpanReplicator (lsm-raft; systems/spans.go has the rules). While
// this node leads, one sender per peer ships the state machine's spans in
// index order on the peer transport's connection (service Spans, beside
// Raft's streams): it offers a span's header, sends the data in chunks of
// snapChunkBytes only when the peer accepts, and moves to the next index
// the peer answers with, so that a peer that refuses a span as too far
// ahead gets the span covering its next index (or, if none is kept, the
// oldest one with NoEarlier). Flow control is gRPC's per-stream window and
// one span in flight per peer. A peer serves a span once its own applied
// index reached the span's Last (waiting up to spanBehindWait; then it
// answers BEHIND and the sender tries again after spanBehindRetry).

const (
	// spanPeerCheck is how often the senders are matched with the
	// transport's peers (members added or removed) and the role.
	spanPeerCheck = 250 * time.Millisecond
	// spanBehindWait bounds a receiver's wait for its applied index to
	// reach a span's Last.
	spanBehindWait = 5 * time.Second
	// spanBehindRetry is how long a sender waits after BEHIND.
	spanBehindRetry = 100 * time.Millisecond
	// spanRetryMax bounds the backoff after a failed transfer.
	spanRetryMax = 2 * time.Second
)

// spanShipper runs the span senders of a node and knows its replicator.
type spanShipper struct {
	n    *Node
	r    systems.SpanReplicator
	wake chan struct{} // a role change (capacity 1)
	done chan struct{} // closed when run returned and every sender stopped

	mu      sync.Mutex
	senders map[uint64]context.CancelFunc
	wg      sync.WaitGroup
}

// newSpanShipper returns the shipper of n's state machine, or nil if it
// does not replicate spans.
func newSpanShipper(n *Node) *spanShipper {
	r, ok := n.sm.(systems.SpanReplicator)
	if !ok {
		return nil
	}
	return &spanShipper{n: n, r: r, wake: make(chan struct{}, 1), done: make(chan struct{}), senders: map[uint64]context.CancelFunc{}}
}

// setLeader tells the state machine and the senders that the node's role
// changed (Ready loop).
func (sh *spanShipper) setLeader(leader bool) {
	if sh == nil {
		return
	}
	sh.r.SetLeader(leader)
	select {
	case sh.wake <- struct{}{}:
	default:
	}
}

// run matches the senders with the role and the peers until the node stops.
func (sh *spanShipper) run() {
	defer close(sh.done)
	t := time.NewTicker(spanPeerCheck)
	defer t.Stop()
	for {
		select {
		case <-sh.n.stopc:
		case <-sh.n.failed:
		case <-t.C:
			sh.reconcile()
			continue
		case <-sh.wake:
			sh.reconcile()
			continue
		}
		sh.mu.Lock()
		for id, cancel := range sh.senders {
			cancel()
			delete(sh.senders, id)
		}
		sh.mu.Unlock()
		sh.wg.Wait()
		return
	}
}

// stopped waits until run returned (Stop, before the storage closes).
func (sh *spanShipper) stopped() {
	if sh != nil {
		<-sh.done
	}
}

// reconcile starts a sender for each peer while the node leads and stops
// the others.
func (sh *spanShipper) reconcile() {
	n := sh.n
	leader := raft.StateType(n.raftState.Load()) == raft.StateLeader && n.removed.Load() == nil
	peers := map[uint64]bool{}
	if leader {
		for _, id := range n.transport.peerIDs() {
			peers[id] = true
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for id, cancel := range sh.senders {
		if !peers[id] {
			cancel()
			delete(sh.senders, id)
		}
	}
	for id := range peers {
		if _, ok := sh.senders[id]; !ok {
			ctx, cancel := context.WithCancel(n.transport.context())
			sh.senders[id] = cancel
			sh.wg.Go(func() { sh.send(ctx, id) })
		}
	}
}

// send ships spans to peer id until ctx ends.
func (sh *spanShipper) send(ctx context.Context, id uint64) {
	n := sh.n
	next := uint64(0) // unknown: start with the newest span
	backoff := spanBehindRetry
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		cut := sh.r.SpanCut()
		h, rc, err := sh.r.OpenSpan(next)
		if errors.Is(err, systems.ErrNoSpan) {
			select {
			case <-cut:
			case <-ctx.Done():
			}
			continue
		}
		if err != nil {
			n.logger.Warn("lsm-raft: cannot open a span to send", "peer", id, "next", next, "err", err)
			if !wait(spanRetryMax) {
				return
			}
			continue
		}
		v, nx, sent, err := sh.transfer(ctx, id, h, rc)
		rc.Close()
		n.metrics.spanSentBytes.Add(float64(sent))
		if err != nil {
			n.metrics.spanSends.WithLabelValues("failure").Inc()
			if ctx.Err() == nil {
				n.logger.Debug("lsm-raft: span transfer failed", "peer", id, "span", h.String(), "err", err)
			}
			if !wait(backoff) {
				return
			}
			backoff = min(2*backoff, spanRetryMax)
			continue
		}
		backoff = spanBehindRetry
		n.metrics.spanSends.WithLabelValues(v.String()).Inc()
		n.logger.Debug("lsm-raft: span offered", "peer", id, "span", h.String(), "no_earlier", h.NoEarlier, "verdict", v.String(), "next", nx)
		next = nx
		if v == systems.SpanBehind && !wait(spanBehindRetry) {
			return
		}
	}
}

// transfer offers h to peer id and sends rc's bytes if it accepts; it
// returns the peer's verdict and next index and the data bytes sent.
func (sh *spanShipper) transfer(ctx context.Context, id uint64, h systems.SpanHeader, rc io.Reader) (systems.SpanVerdict, uint64, int64, error) {
	n := sh.n
	conn := n.transport.conn(id)
	if conn == nil {
		return 0, 0, 0, fmt.Errorf("peer %d is gone", id)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := kvpb.NewSpansClient(conn).Span(metadata.NewOutgoingContext(ctx, n.outgoingMD()))
	if err != nil {
		return 0, 0, 0, err
	}
	if err := stream.Send(&kvpb.SpanChunk{First: h.First, Last: h.Last, SizeBytes: h.SizeBytes, Crc32C: h.CRC32C, NoEarlier: h.NoEarlier}); err != nil {
		return 0, 0, 0, err
	}
	reply, err := stream.Recv()
	if err != nil {
		return 0, 0, 0, err
	}
	if v := spanVerdict(reply.Verdict); v != systems.SpanAccept {
		return v, reply.Next, 0, nil
	}
	var sent int64
	buf := make([]byte, snapChunkBytes)
	for {
		k, err := io.ReadFull(rc, buf)
		if k > 0 {
			if err := stream.Send(&kvpb.SpanChunk{Data: buf[:k]}); err != nil {
				return 0, 0, sent, err
			}
			sent += int64(k)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return 0, 0, sent, err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return 0, 0, sent, err
	}
	if reply, err = stream.Recv(); err != nil {
		return 0, 0, sent, err
	}
	return spanVerdict(reply.Verdict), reply.Next, sent, nil
}

// spanVerdict maps the wire's verdicts onto systems'.
func spanVerdict(v kvpb.SpanReply_Verdict) systems.SpanVerdict {
	switch v {
	case kvpb.SpanReply_ACCEPT:
		return systems.SpanAccept
	case kvpb.SpanReply_INGESTED:
		return systems.SpanIngested
	case kvpb.SpanReply_SKIPPED:
		return systems.SpanSkipped
	case kvpb.SpanReply_GAP:
		return systems.SpanGap
	case kvpb.SpanReply_REPLAYED:
		return systems.SpanReplayed
	}
	return systems.SpanBehind
}

// spanReply maps systems' verdicts onto the wire's.
func spanReply(v systems.SpanVerdict, next uint64) *kvpb.SpanReply {
	w := kvpb.SpanReply_BEHIND
	switch v {
	case systems.SpanAccept:
		w = kvpb.SpanReply_ACCEPT
	case systems.SpanIngested:
		w = kvpb.SpanReply_INGESTED
	case systems.SpanSkipped:
		w = kvpb.SpanReply_SKIPPED
	case systems.SpanGap:
		w = kvpb.SpanReply_GAP
	case systems.SpanReplayed:
		w = kvpb.SpanReply_REPLAYED
	}
	return &kvpb.SpanReply{Verdict: w, Next: next}
}

// spanServer receives spans from the leader.
type spanServer struct {
	kvpb.UnimplementedSpansServer
	n  *Node
	sh *spanShipper
}

// Span serves one offered span: wait until this node applied its Last,
// ask the state machine, and take the data if it accepts.
func (s *spanServer) Span(stream kvpb.Spans_SpanServer) error {
	n, r := s.n, s.sh.r
	from, err := n.admitPeer(stream.Context())
	if err != nil {
		return err
	}
	c, err := stream.Recv()
	if err != nil {
		return err
	}
	h := systems.SpanHeader{First: c.First, Last: c.Last, SizeBytes: c.SizeBytes, CRC32C: c.Crc32C, NoEarlier: c.NoEarlier}
	if err := h.Check(); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	ctx, cancel := context.WithTimeout(stream.Context(), spanBehindWait)
	err = n.appliedWait.wait(ctx, h.Last, n.failed)
	cancel()
	if err != nil {
		if stream.Context().Err() != nil {
			return stream.Context().Err()
		}
		return stream.Send(spanReply(systems.SpanBehind, r.NextSpanIndex()))
	}
	v, next, err := r.OfferSpan(h)
	if err != nil {
		n.logger.Warn("lsm-raft: span offer failed", "from", from, "span", h.String(), "err", err)
		return status.Error(codes.Internal, err.Error())
	}
	if err := stream.Send(spanReply(v, next)); err != nil || v != systems.SpanAccept {
		return err
	}
	v, next, err = r.ReceiveSpan(h, &spanReader{stream: stream})
	if err != nil {
		n.logger.Warn("lsm-raft: span not taken", "from", from, "span", h.String(), "err", err)
		if errors.Is(err, systems.ErrSpanDamaged) {
			return status.Error(codes.DataLoss, err.Error())
		}
		return status.Error(codes.Internal, err.Error())
	}
	return stream.Send(spanReply(v, next))
}

// spanReader reads the data chunks of a Span stream until the sender's
// half-close (io.EOF); any other end is an error.
type spanReader struct {
	stream kvpb.Spans_SpanServer
	buf    []byte
}

func (r *spanReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		c, err := r.stream.Recv()
		if err != nil {
			return 0, err
		}
		r.buf = c.Data
	}
	k := copy(p, r.buf)
	r.buf = r.buf[k:]
	return k, nil
}
