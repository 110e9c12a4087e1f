package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/systems"
)

// kvServer implements kvpb.KV on top of a Node.
type kvServer struct {
	kvpb.UnimplementedKVServer
	n *Node
}

func (s *kvServer) header() *kvpb.ResponseHeader {
	n := s.n
	return &kvpb.ResponseHeader{
		NodeId:       n.id,
		LeaderId:     n.lead.Load(),
		Term:         n.term.Load(),
		AppliedIndex: n.applied.Load(),
		System:       n.cfg.System.Name,
	}
}

// withTimeout bounds ctx by the node's request timeout; a ctx that ends
// sooner is returned as it is (no timer).
func (s *kvServer) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.n.cfg.RequestTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.n.cfg.RequestTimeout)
}

// writeError maps the outcome of a proposal to a gRPC status.
func writeError(err error) error {
	switch {
	case errors.Is(err, errDropped), errors.Is(err, errSuperseded), errors.Is(err, errNotProposed):
		return status.Errorf(codes.Aborted, "write not applied: %v; retry", err)
	case errors.Is(err, errLeaderChanged):
		return status.Errorf(codes.Unavailable, "write outcome unknown: %v; resend it with the same client session", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Errorf(codes.DeadlineExceeded, "write outcome unknown: %v", err)
	case errors.Is(err, errStopping):
		return status.Errorf(codes.Unavailable, "write outcome unknown: %v", err)
	}
	return status.Errorf(codes.Internal, "write outcome unknown: %v", err)
}

// readError maps a failed read to a gRPC status.
func readError(err error) error {
	switch {
	case errors.Is(err, errDropped), errors.Is(err, errStopping):
		return status.Errorf(codes.Aborted, "read not served: %v; retry", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Errorf(codes.DeadlineExceeded, "read not served in time: %v", err)
	case errors.Is(err, systems.ErrCorrupt):
		return status.Errorf(codes.DataLoss, "%v", err)
	}
	return status.Errorf(codes.Internal, "%v", err)
}

func (s *kvServer) Put(ctx context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	return s.put(ctx, req.Key, req.Value, clientSession{req.ClientId, req.Seq}, req.TtlMs, nil)
}

// clientSession is the optional session of a write (session.go).
type clientSession struct{ client, seq uint64 }

// put validates and proposes a put. ttlMs > 0 gives the key an expiry time
// of this node's clock + ttlMs, carried in the command. frame, if not nil,
// holds key and value, and the entry data is built in it around the value.
func (s *kvServer) put(ctx context.Context, key, value []byte, sess clientSession, ttlMs uint64, frame *putFrame) (*kvpb.PutResponse, error) {
	id, data, err := s.preparePut(key, value, sess, ttlMs, frame)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if err := s.stalled(ctx, "put"); err != nil {
		return nil, err
	}
	idx, err := s.n.proposeDataAndWait(ctx, id, data)
	if err != nil {
		return nil, writeError(err)
	}
	return &kvpb.PutResponse{Header: s.header(), Index: idx}, nil
}

// preparePut checks a put (put's arguments) and returns its request id
// and its encoded command, or the gRPC status that refuses it.
func (s *kvServer) preparePut(key, value []byte, sess clientSession, ttlMs uint64, frame *putFrame) (id uint64, data []byte, err error) {
	if err := s.n.removedErr(); err != nil {
		return 0, nil, err
	}
	if err := systems.CheckKey(key); err != nil {
		return 0, nil, status.Errorf(codes.InvalidArgument, "put: %v", err)
	}
	if err := systems.CheckValue(value, s.n.cfg.MaxValueBytes); err != nil {
		return 0, nil, status.Errorf(codes.InvalidArgument, "put: %v", err)
	}
	var expires int64
	if ttlMs > 0 {
		if ts, ok := s.n.sm.(systems.TTLStore); !ok || !ts.SupportsTTL() {
			return 0, nil, status.Errorf(codes.Unimplemented, "put: this system's state machine does not support TTLs")
		}
		if ttlMs > uint64(systems.MaxTTL/time.Millisecond) {
			return 0, nil, status.Errorf(codes.InvalidArgument, "put: TTL of %d ms is over the maximum of %d ms", ttlMs, uint64(systems.MaxTTL/time.Millisecond))
		}
		exp, err := systems.ExpiryUnixNano(time.Now(), time.Duration(ttlMs)*time.Millisecond)
		if err != nil {
			return 0, nil, status.Errorf(codes.InvalidArgument, "put: %v", err)
		}
		expires = exp
	}
	if err := s.n.disk.check(len(key) + len(value)); err != nil {
		return 0, nil, s.diskRefusal("put", err)
	}
	c := &systems.Command{Op: systems.OpPut, Key: key, Value: value, RequestID: s.n.nextRequestID(),
		ClientID: sess.client, Seq: sess.seq, ExpiresUnixNano: expires}
	if frame != nil && frame.valueLast {
		data, _ = systems.PrependCommandHeader(frame.buf, frame.valueStart, c)
	}
	if data == nil {
		data = systems.AppendCommand(make([]byte, 0, c.EncodedSize()), c)
	}
	return c.RequestID, data, nil
}

// putFrame is a PutRequest as kvCodec decodes it: one buffer holding
// putHeadroomBytes, then the request's bytes, with key and value aliasing
// it. When the value is the buffer's tail (as every protobuf encoder writes
// a PutRequest), the command's entry data is built around it in place
// (systems.PrependCommandHeader): the value is copied once, out of gRPC's
// buffers, between the client's request and the Raft log.
type putFrame struct {
	buf        []byte
	key, value []byte
	valueStart int
	valueLast  bool
	session    clientSession
	ttlMs      uint64
}

// putHeadroomBytes is room for the op, request id, client id, sequence
// number, expiry time and key length of a command (1 + 5 x 10 bytes, at
// most) beyond what the request's own field headers leave.
const putHeadroomBytes = 58

// decode fills f from the bytes of a PutRequest in parts.
func (f *putFrame) decode(parts [][]byte) error {
	var pad [putHeadroomBytes]byte
	f.buf = bytes.Join(append([][]byte{pad[:]}, parts...), nil)
	b := f.buf[putHeadroomBytes:]
	for off := putHeadroomBytes; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		vn := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vn < 0 {
			return protowire.ParseError(vn)
		}
		if typ == protowire.VarintType && (num == 3 || num == 4 || num == 5) {
			v, _ := protowire.ConsumeVarint(b[n:])
			switch num {
			case 3:
				f.session.client = v
			case 4:
				f.session.seq = v
			default:
				f.ttlMs = v
			}
		}
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, _ := protowire.ConsumeBytes(b[n:])
			start := off + n + vn - len(v)
			if num == 1 {
				f.key = f.buf[start : start+len(v) : start+len(v)]
			} else {
				f.value = f.buf[start : start+len(v) : start+len(v)]
				f.valueStart = start
				f.valueLast = start+len(v) == len(f.buf)
			}
		}
		off += n + vn
		b = b[n+vn:]
	}
	return nil
}

// kvServiceDesc is kvpb.KV with a Put handler that decodes into a putFrame.
func kvServiceDesc() *grpc.ServiceDesc {
	desc := kvpb.KV_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "Put" {
			desc.Methods[i].Handler = putFrameHandler
		}
	}
	return &desc
}

func putFrameHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	f := new(putFrame)
	if err := dec(f); err != nil {
		return nil, err
	}
	s := srv.(*kvServer)
	if interceptor == nil {
		return s.put(ctx, f.key, f.value, f.session, f.ttlMs, f)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: kvpb.KV_Put_FullMethodName}
	return interceptor(ctx, f, info, func(ctx context.Context, req any) (any, error) {
		f := req.(*putFrame)
		return s.put(ctx, f.key, f.value, f.session, f.ttlMs, f)
	})
}

// kvCodec is the client API's codec: kvpb.Codec, and putFrame.
type kvCodec struct{ *kvpb.Codec }

func (c kvCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*putFrame)
	if !ok {
		return c.Codec.Unmarshal(data, v)
	}
	return f.decode(bufferBytes(data))
}

// stalled holds a write of kind op while the state machine stalls writes
// (Node.awaitWriteStall) and refuses it with codes.ResourceExhausted if
// the stall outlasts ctx: the write was not proposed.
func (s *kvServer) stalled(ctx context.Context, op string) error {
	err := s.n.awaitWriteStall(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStopping):
		return writeError(err)
	}
	return status.Errorf(codes.ResourceExhausted, "%s: %v", op, err)
}

func (s *kvServer) Delete(ctx context.Context, req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	id, data, err := s.prepareDelete(req.Key, clientSession{req.ClientId, req.Seq})
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if err := s.stalled(ctx, "delete"); err != nil {
		return nil, err
	}
	idx, err := s.n.proposeDataAndWait(ctx, id, data)
	if err != nil {
		return nil, writeError(err)
	}
	return &kvpb.DeleteResponse{Header: s.header(), Index: idx}, nil
}

// prepareDelete checks a delete and returns its request id and its
// encoded command, or the gRPC status that refuses it.
func (s *kvServer) prepareDelete(key []byte, sess clientSession) (id uint64, data []byte, err error) {
	if err := s.n.removedErr(); err != nil {
		return 0, nil, err
	}
	if err := systems.CheckKey(key); err != nil {
		return 0, nil, status.Errorf(codes.InvalidArgument, "delete: %v", err)
	}
	if err := s.n.disk.check(len(key)); err != nil {
		return 0, nil, s.diskRefusal("delete", err)
	}
	c := &systems.Command{Op: systems.OpDelete, Key: key, RequestID: s.n.nextRequestID(), ClientID: sess.client, Seq: sess.seq}
	return c.RequestID, systems.AppendCommand(make([]byte, 0, c.EncodedSize()), c), nil
}

// awaitRead makes a read of the given consistency safe to serve locally.
func (s *kvServer) awaitRead(ctx context.Context, c kvpb.ReadConsistency) error {
	switch c {
	case kvpb.ReadConsistency_STALE:
		return nil
	case kvpb.ReadConsistency_LINEARIZABLE:
		if err := s.n.removedErr(); err != nil {
			return err
		}
		ctx, cancel := s.withTimeout(ctx)
		defer cancel()
		return s.n.readIndex(ctx)
	}
	return status.Errorf(codes.InvalidArgument, "unknown read consistency %d", c)
}

func (s *kvServer) Get(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	if err := checkGet(req); err != nil {
		return nil, err
	}
	if err := s.awaitReadStatus(ctx, req.Consistency); err != nil {
		return nil, err
	}
	return s.getLocal(req, true)
}

// checkGet refuses a malformed GetRequest with InvalidArgument.
func checkGet(req *kvpb.GetRequest) error {
	if err := systems.CheckKey(req.Key); err != nil {
		return status.Errorf(codes.InvalidArgument, "get: %v", err)
	}
	return nil
}

// awaitReadStatus is awaitRead with its error as a gRPC status: its own
// answers (bad consistency, a removed node's Aborted) as they are,
// readError's mapping for the others.
func (s *kvServer) awaitReadStatus(ctx context.Context, c kvpb.ReadConsistency) error {
	err := s.awaitRead(ctx, c)
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return readError(err)
}

// getLocal answers a checked GetRequest from the local state machine
// (after awaitRead made it safe), with the node's header if withHeader.
func (s *kvServer) getLocal(req *kvpb.GetRequest, withHeader bool) (*kvpb.GetResponse, error) {
	v, found, err := s.n.sm.Get(req.Key)
	if err != nil {
		s.n.logger.Error("get failed", "key", fmt.Sprintf("%q", truncate(req.Key)), "err", err)
		return nil, readError(err)
	}
	resp := &kvpb.GetResponse{Found: found, Value: v}
	if withHeader {
		resp.Header = s.header()
	}
	return resp, nil
}

func (s *kvServer) Scan(ctx context.Context, req *kvpb.ScanRequest) (*kvpb.ScanResponse, error) {
	if len(req.Start) > systems.MaxKeyBytes || len(req.End) > systems.MaxKeyBytes {
		return nil, status.Errorf(codes.InvalidArgument, "scan: bound over the maximum key size of %d bytes", systems.MaxKeyBytes)
	}
	if len(req.End) > 0 && string(req.Start) > string(req.End) {
		return nil, status.Errorf(codes.InvalidArgument, "scan: start %q is after end %q", truncate(req.Start), truncate(req.End))
	}
	if err := s.awaitReadStatus(ctx, req.Consistency); err != nil {
		return nil, err
	}
	kvs, more, err := s.n.sm.Scan(req.Start, req.End, int(req.Limit), s.n.cfg.ScanMaxBytes)
	if err != nil {
		s.n.logger.Error("scan failed", "start", fmt.Sprintf("%q", truncate(req.Start)), "err", err)
		return nil, readError(err)
	}
	resp := &kvpb.ScanResponse{Header: s.header(), More: more, Kvs: make([]*kvpb.KeyValue, len(kvs))}
	for i, kv := range kvs {
		resp.Kvs[i] = &kvpb.KeyValue{Key: kv.Key, Value: kv.Value}
	}
	return resp, nil
}

func (s *kvServer) Status(ctx context.Context, req *kvpb.StatusRequest) (*kvpb.StatusResponse, error) {
	n := s.n
	resp := &kvpb.StatusResponse{
		Header:          s.header(),
		RaftState:       raft.StateType(n.raftState.Load()).String(),
		CommitIndex:     n.commit.Load(),
		Sync:            n.cfg.Sync,
		FirstIndex:      n.firstIndex.Load(),
		LastIndex:       n.lastIndex.Load(),
		Address:         n.cfg.Address,
		InternalAddress: n.cfg.InternalAddress,
		Pid:             int64(os.Getpid()),
	}
	if n.removed.Load() != nil {
		// Raft still calls a removed node a follower; it serves nothing.
		resp.RaftState = raftStateRemoved
	}
	if r := n.diskRefusal.Load(); r != nil {
		resp.DiskRefusal = *r
	}
	resp.Members = n.memberAddresses()
	resp.CompactedIndex = n.log.CompactedIndex()
	for _, seg := range n.log.Segments() {
		resp.LogBytes += seg.SizeBytes
	}
	if g, ok := n.sm.(systems.GCReporter); ok {
		for _, r := range g.GCRounds() {
			resp.GcRounds = append(resp.GcRounds, &kvpb.GCRound{
				Strategy: r.Strategy, StartUnixNanos: r.Start.UnixNano(), EndUnixNanos: r.End.UnixNano(),
				BytesRead: r.BytesRead, BytesWritten: r.BytesWritten, LiveBytes: r.LiveBytes,
				ReclaimedBytes: r.ReclaimedBytes, SegmentsRemoved: int32(r.SegmentsRemoved),
				RunsRemoved: int32(r.RunsRemoved), KeysMoved: r.KeysMoved, CompactedIndex: r.CompactedIndex,
				Error: r.Error, Trigger: r.Trigger, ThrottledNanos: int64(r.Throttled),
			})
		}
	}
	if req.ActivitiesSinceUnixNanos != 0 {
		since := time.Unix(0, req.ActivitiesSinceUnixNanos)
		acts := n.activities.Since(since)
		if ar, ok := n.sm.(systems.ActivityReporter); ok {
			acts = append(acts, ar.Activities(since)...)
			systems.SortActivities(acts)
		}
		for _, a := range acts {
			pa := &kvpb.Activity{Kind: a.Kind, StartUnixNanos: a.Start.UnixNano(), Bytes: a.Bytes, Detail: a.Detail}
			if !a.End.IsZero() {
				pa.EndUnixNanos = a.End.UnixNano()
			}
			resp.Activities = append(resp.Activities, pa)
		}
	}
	if sr, ok := n.sm.(systems.StorageReporter); ok {
		sh := sr.StorageShape()
		resp.Storage = &kvpb.StorageShape{ValueLogBytes: sh.ValueLogBytes, SortedRunBytes: sh.SortedRunBytes,
			BlobFileBytes: sh.BlobFileBytes, LiveBytes: sh.LiveBytes}
		for _, l := range sh.Levels {
			resp.Storage.Levels = append(resp.Storage.Levels, &kvpb.LevelShape{Level: int32(l.Level), Files: l.Files, Bytes: l.Bytes})
		}
	}
	if h, ok := n.sm.(systems.StateHasher); ok && req.WithStateHash {
		sum, applied, err := h.StateHash()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "state hash: %v", err)
		}
		resp.StateHash, resp.StateHashIndex = sum, applied
	}
	return resp, nil
}

// raftStateRemoved is StatusResponse.raft_state of a node that was
// removed from the cluster (markRemoved), in the form of raft's states.
const raftStateRemoved = "StateRemoved"

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// diskRefusal is the error of a write that the disk guard refused (err)
// before it was proposed; it publishes the refusal (noteDisk), which on
// the leader starts the search for a voter to hand the leadership to
// (diskhandoff.go). It is Aborted, which clients retry on another member,
// on a follower (a quorum commits the write without this node, which
// catches up once space returns), on a node that knows no leader, and on
// a leader that hands its leadership over; ResourceExhausted, definite,
// only on a leader that found no other voter whose disk accepts writes:
// the cluster is out of space.
func (s *kvServer) diskRefusal(op string, err error) error {
	n := s.n
	n.noteDisk(err)
	switch lead := n.lead.Load(); {
	case lead == raft.None:
		return status.Errorf(codes.Aborted, "%s: %v; not proposed: node %d knows no leader; retry", op, err, n.id)
	case lead != n.id:
		return status.Errorf(codes.Aborted, "%s: %v; not proposed: node %d is a follower, send the write to the leader (node %d)", op, err, n.id, lead)
	case !n.noVoterWithSpace():
		return status.Errorf(codes.Aborted, "%s: %v; not proposed: node %d leads and hands the leadership to a voter whose disk accepts writes; retry", op, err, n.id)
	}
	return status.Errorf(codes.ResourceExhausted, "%s: %v; no other voter's disk accepts writes either", op, err)
}
