package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
)

// The JSON-RPC 2.0 cluster API (https://www.jsonrpc.org/specification) on
// Config.JSONRPCAddress: one request object per line over TCP, one response
// object per line back, with the method names and parameter shapes of
// raftpico (https://github.com/sile/raftpico), so that its tools (jlot)
// drive a node. Requests on one connection run concurrently (up to
// jsonrpcMaxInflight); each response echoes its request's id. A
// notification (no id) gets no response. Batches (JSON arrays) are refused.
//
// Methods (docs/apis.md, "JSON-RPC cluster API"):
//
//	CreateCluster {}                  the cluster exists: answers GetServerState's result with "created": false
//	AddServer {"addr": CLIENT_ADDR}   asks the running, not yet member node at its client (-address) address
//	                                  for its id and Raft address, adds it as a learner, promotes it once caught up
//	RemoveServer {"addr": CLIENT_ADDR} removes the member with that client address
//	Apply {"kind": K, "input": I}     K: Command (Put, Delete through the log), Query (linearizable Get, Scan),
//	                                  LocalQuery (stale Get, Scan); I: {"Put": {"key", "value"}}, {"Delete": {"key"}},
//	                                  {"Get": {"key"}}, {"Scan": {"start", "end", "limit"}}
//	TakeSnapshot {}                   the state machine makes its applied state durable and this node's Raft log
//	                                  is compacted up to it (kvpb.Admin's TakeSnapshot): {"snapshot_index",
//	                                  "first_index"}; jsonrpcNotSupported for a system that never compacts its log
//	GetServerState {}                 id, term, role, leader, commit and applied index, members
//
// AddServer and RemoveServer are served by the leader only (else
// jsonrpcNotLeader naming the leader).

// Standard JSON-RPC 2.0 error codes (specification section 5.1).
const (
	jsonrpcParseError     = -32700
	jsonrpcInvalidRequest = -32600
	jsonrpcMethodNotFound = -32601
	jsonrpcInvalidParams  = -32602
	jsonrpcInternalError  = -32603
)

// Application error codes (the specification leaves -32000 to -32099 to
// the server). The error's data holds "grpc_code", the node's own status
// code, and for jsonrpcNotLeader "leader_id" and "leader_addr".
const (
	// jsonrpcNotLeader: a membership change sent to a follower.
	jsonrpcNotLeader = -32000
	// jsonrpcUnavailable: no leader, a timeout, a leadership change, the
	// node stopping; for writes the outcome is unknown. Retry.
	jsonrpcUnavailable = -32001
	// jsonrpcFailedPrecondition: another membership change is pending, a
	// learner has not caught up, this node was removed.
	jsonrpcFailedPrecondition = -32002
	// jsonrpcResourceExhausted: disk full or writes stalled on GC debt.
	jsonrpcResourceExhausted = -32003
	// jsonrpcNotSupported: the method exists in raftpico's API but this
	// node's system has no such operation (TakeSnapshot on nezha-nogc or
	// dwisckey; the node's Unimplemented).
	jsonrpcNotSupported = -32004
)

// jsonrpcMaxInflight bounds the requests of one connection served at once;
// the connection's reader waits while that many run.
const jsonrpcMaxInflight = 64

// jsonrpcDialTimeout bounds AddServer's Status call to the new node.
const jsonrpcDialTimeout = 10 * time.Second

type jsonrpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	ID      json.RawMessage `json:"id"`
}

type jsonrpcError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func (e *jsonrpcError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

type jsonrpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *jsonrpcError   `json:"error,omitempty"`
}

func rpcErrorf(code int, format string, args ...any) *jsonrpcError {
	return &jsonrpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// rpcError maps a gRPC status of the node's servers to a JSON-RPC error.
func rpcError(err error) *jsonrpcError {
	var je *jsonrpcError
	if errors.As(err, &je) {
		return je
	}
	st := status.Convert(err)
	code := jsonrpcInternalError
	switch st.Code() {
	case codes.InvalidArgument:
		code = jsonrpcInvalidParams
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
		code = jsonrpcUnavailable
	case codes.FailedPrecondition:
		code = jsonrpcFailedPrecondition
	case codes.ResourceExhausted:
		code = jsonrpcResourceExhausted
	case codes.Unimplemented:
		code = jsonrpcNotSupported
	}
	return &jsonrpcError{Code: code, Message: st.Message(), Data: map[string]any{"grpc_code": st.Code().String()}}
}

// jsonrpcServer serves the JSON-RPC API of one node.
type jsonrpcServer struct {
	n   *Node
	lis net.Listener
	kv  *kvServer
	adm *adminServer

	ctx    context.Context // canceled by stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

// serveJSONRPC serves lis until stop.
func (n *Node) serveJSONRPC(lis net.Listener) *jsonrpcServer {
	s := &jsonrpcServer{n: n, lis: lis, kv: &kvServer{n: n}, adm: &adminServer{n: n}, conns: map[net.Conn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

func (s *jsonrpcServer) addr() string { return s.lis.Addr().String() }

// stop closes the listener and every connection and waits for the
// requests being served.
func (s *jsonrpcServer) stop() {
	s.cancel()
	s.lis.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *jsonrpcServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.lis.Accept()
		if err != nil {
			if s.ctx.Err() == nil {
				s.n.logger.Warn("JSON-RPC listener failed; the API is off", "err", err)
			}
			return
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// readLine reads one line (without its newline) of at most max bytes. A
// longer line is consumed up to its newline and reported by tooLong.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		frag, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(frag) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return bytes.TrimRight(line, "\r\n"), tooLong, nil
		}
		return nil, tooLong, err
	}
}

func (s *jsonrpcServer) serveConn(c net.Conn) {
	defer s.wg.Done()
	var (
		wmu      sync.Mutex
		inflight sync.WaitGroup
		sem      = make(chan struct{}, jsonrpcMaxInflight)
		w        = bufio.NewWriter(c)
	)
	defer func() {
		inflight.Wait()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	send := func(resp *jsonrpcResponse) {
		resp.JSONRPC = "2.0"
		if resp.ID == nil {
			resp.ID = json.RawMessage("null")
		}
		b, err := json.Marshal(resp)
		if err != nil {
			b, _ = json.Marshal(&jsonrpcResponse{JSONRPC: "2.0", ID: resp.ID,
				Error: rpcErrorf(jsonrpcInternalError, "cannot encode the result: %v", err)})
		}
		wmu.Lock()
		defer wmu.Unlock()
		w.Write(append(b, '\n'))
		w.Flush() // an error shows on the next read
	}
	r := bufio.NewReaderSize(c, 64<<10)
	max := s.n.cfg.JSONRPCMaxLineBytes
	for {
		line, tooLong, err := readLine(r, max)
		if err != nil {
			return
		}
		if tooLong {
			send(&jsonrpcResponse{Error: rpcErrorf(jsonrpcInvalidRequest, "request line over %d bytes refused", max)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		req, rerr := parseRequest(line)
		if rerr != nil {
			send(&jsonrpcResponse{ID: req.ID, Error: rerr})
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-sem }()
			result, err := s.call(req.Method, req.Params)
			if req.ID == nil {
				return // a notification
			}
			resp := &jsonrpcResponse{ID: req.ID, Result: result}
			if err != nil {
				resp.Result, resp.Error = nil, rpcError(err)
			}
			send(resp)
		}()
	}
}

// parseRequest decodes and checks one request line. On an error, the
// request holds the id when it could be read.
func parseRequest(line []byte) (jsonrpcRequest, *jsonrpcError) {
	var req jsonrpcRequest
	trimmed := bytes.TrimSpace(line)
	if !json.Valid(trimmed) {
		return req, rpcErrorf(jsonrpcParseError, "parse error: the line is not valid JSON")
	}
	if trimmed[0] == '[' {
		return req, rpcErrorf(jsonrpcInvalidRequest, "batch requests are not supported: send one request object per line")
	}
	if err := json.Unmarshal(trimmed, &req); err != nil {
		return jsonrpcRequest{}, rpcErrorf(jsonrpcInvalidRequest, "invalid request: %v", err)
	}
	if req.ID != nil {
		switch req.ID[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		default:
			req.ID = nil
			return req, rpcErrorf(jsonrpcInvalidRequest, "invalid request: id must be a string, a number or null")
		}
	}
	if req.JSONRPC != "2.0" {
		return req, rpcErrorf(jsonrpcInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	if req.Method == "" {
		return req, rpcErrorf(jsonrpcInvalidRequest, `invalid request: "method" is missing`)
	}
	return req, nil
}

// decodeParams decodes params into v, refusing unknown fields; absent or
// null params leave v as it is.
func decodeParams(params json.RawMessage, v any) error {
	if len(params) == 0 || string(params) == "null" {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(params))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return rpcErrorf(jsonrpcInvalidParams, "invalid params: %v", err)
	}
	return nil
}

func (s *jsonrpcServer) call(method string, params json.RawMessage) (any, error) {
	switch method {
	case "CreateCluster":
		// raftpico's creation parameters (election timeouts and the
		// like) have no meaning for a cluster that runs already.
		st := s.serverState()
		st.Created = new(bool)
		return st, nil
	case "AddServer":
		return s.addServer(params)
	case "RemoveServer":
		return s.removeServer(params)
	case "Apply":
		return s.apply(params)
	case "TakeSnapshot":
		if err := decodeParams(params, &struct{}{}); err != nil {
			return nil, err
		}
		ctx, cancel := s.adm.withTimeout(s.ctx)
		defer cancel()
		r, err := s.adm.TakeSnapshot(ctx, &kvpb.TakeSnapshotRequest{})
		if err != nil {
			return nil, err
		}
		// raftpico's result is {"snapshot_index"}.
		return map[string]uint64{"snapshot_index": r.SnapshotIndex, "first_index": r.FirstIndex}, nil
	case "GetServerState":
		if err := decodeParams(params, &struct{}{}); err != nil {
			return nil, err
		}
		return s.serverState(), nil
	}
	return nil, rpcErrorf(jsonrpcMethodNotFound, "method %q not found (methods: CreateCluster, AddServer, RemoveServer, Apply, TakeSnapshot, GetServerState)", method)
}

// rpcMember is a member as GetServerState lists it.
type rpcMember struct {
	ID              uint64 `json:"id"`
	Addr            string `json:"addr"` // client address (-address)
	InternalAddress string `json:"internal_addr"`
	Learner         bool   `json:"learner"`
}

// rpcServerState is GetServerState's result (CreateCluster's with Created).
type rpcServerState struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	Term uint64 `json:"term"`
	// Role: Leader, Follower, Candidate, PreCandidate, Learner or Removed.
	Role         string      `json:"role"`
	Leader       uint64      `json:"leader"` // 0: none known
	CommitIndex  uint64      `json:"commit_index"`
	AppliedIndex uint64      `json:"applied_index"`
	Members      []rpcMember `json:"members"`
	Created      *bool       `json:"created,omitempty"`
}

func (s *jsonrpcServer) members() []rpcMember {
	out := []rpcMember{}
	for _, m := range s.n.memberAddresses() {
		out = append(out, rpcMember{ID: m.Id, Addr: m.Address, InternalAddress: m.InternalAddress, Learner: m.Learner})
	}
	return out
}

func (s *jsonrpcServer) serverState() *rpcServerState {
	n := s.n
	st := &rpcServerState{
		ID: n.id, Addr: n.cfg.Address, Term: n.term.Load(), Leader: n.lead.Load(),
		Role:        strings.TrimPrefix(raft.StateType(n.raftState.Load()).String(), "State"),
		CommitIndex: n.commit.Load(), AppliedIndex: n.applied.Load(), Members: s.members(),
	}
	for _, m := range st.Members {
		if m.ID == n.id && m.Learner {
			st.Role = "Learner"
		}
	}
	if n.removed.Load() != nil {
		st.Role = "Removed"
	}
	return st
}

// leaderOnly refuses a membership change on a follower, naming the leader.
func (s *jsonrpcServer) leaderOnly() error {
	n := s.n
	if raft.StateType(n.raftState.Load()) == raft.StateLeader {
		return nil
	}
	lead := n.lead.Load()
	e := rpcErrorf(jsonrpcNotLeader, "node %d is not the leader; send membership changes to the leader", n.id)
	e.Data = map[string]any{"leader_id": lead}
	for _, m := range n.memberAddresses() {
		if m.Id == lead && lead != 0 {
			e.Data["leader_addr"] = m.Address
			e.Message = fmt.Sprintf("node %d is not the leader; node %d is (addr %s)", n.id, lead, m.Address)
		}
	}
	return e
}

type rpcAddrParams struct {
	Addr string `json:"addr"`
}

func addrParams(method string, params json.RawMessage) (string, error) {
	var p rpcAddrParams
	if err := decodeParams(params, &p); err != nil {
		return "", err
	}
	if _, port, err := net.SplitHostPort(p.Addr); err != nil || port == "" {
		return "", rpcErrorf(jsonrpcInvalidParams, "%s: addr %q is not host:port (the member's client address, -address)", method, p.Addr)
	}
	return p.Addr, nil
}

// rpcMembershipResult is AddServer's and RemoveServer's result.
type rpcMembershipResult struct {
	ID      uint64      `json:"id"`    // the member added or removed
	Index   uint64      `json:"index"` // log index of the applied change
	Members []rpcMember `json:"members"`
}

func (s *jsonrpcServer) addServer(params json.RawMessage) (any, error) {
	addr, err := addrParams("AddServer", params)
	if err != nil {
		return nil, err
	}
	if err := s.leaderOnly(); err != nil {
		return nil, err
	}
	c, err := client.New(client.DefaultConfig(addr))
	if err != nil {
		return nil, rpcErrorf(jsonrpcInvalidParams, "AddServer: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(s.ctx, jsonrpcDialTimeout)
	st, err := c.Status(ctx, addr, false)
	cancel()
	if err != nil {
		e := rpcErrorf(jsonrpcUnavailable, "AddServer: the new node at %s does not answer (start it first, as docs/operating.md's Membership change says): %s",
			addr, status.Convert(err).Message())
		return nil, e
	}
	id := st.GetHeader().GetNodeId()
	ctx, cancel = s.adm.withTimeout(s.ctx)
	defer cancel()
	r, err := s.adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: id, InternalAddress: st.InternalAddress, Address: addr, Promote: true})
	if err != nil {
		return nil, err
	}
	return &rpcMembershipResult{ID: id, Index: r.Index, Members: s.members()}, nil
}

func (s *jsonrpcServer) removeServer(params json.RawMessage) (any, error) {
	addr, err := addrParams("RemoveServer", params)
	if err != nil {
		return nil, err
	}
	if err := s.leaderOnly(); err != nil {
		return nil, err
	}
	var id uint64
	for _, m := range s.n.memberAddresses() {
		if m.Address == addr {
			id = m.Id
		}
	}
	if id == 0 {
		return nil, rpcErrorf(jsonrpcInvalidParams, "RemoveServer: no member has the client address %s", addr)
	}
	ctx, cancel := s.adm.withTimeout(s.ctx)
	defer cancel()
	r, err := s.adm.RemoveMember(ctx, &kvpb.RemoveMemberRequest{Id: id})
	if err != nil {
		return nil, err
	}
	return &rpcMembershipResult{ID: id, Index: r.Index, Members: s.members()}, nil
}

// rpcInput is Apply's input: exactly one of the operations.
type rpcInput struct {
	Put *struct {
		Key   *string `json:"key"`
		Value *string `json:"value"`
	} `json:"Put"`
	Delete *struct {
		Key *string `json:"key"`
	} `json:"Delete"`
	Get *struct {
		Key *string `json:"key"`
	} `json:"Get"`
	Scan *struct {
		Start string `json:"start"`
		End   string `json:"end"`
		Limit uint32 `json:"limit"` // 0: no limit
	} `json:"Scan"`
}

// rpcKV is one pair of a Scan result.
type rpcKV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (s *jsonrpcServer) apply(params json.RawMessage) (any, error) {
	var p struct {
		Kind  string   `json:"kind"`
		Input rpcInput `json:"input"`
	}
	if len(params) == 0 || string(params) == "null" {
		return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: params {"kind", "input"} are required`)
	}
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	in := p.Input
	ops := 0
	for _, set := range []bool{in.Put != nil, in.Delete != nil, in.Get != nil, in.Scan != nil} {
		if set {
			ops++
		}
	}
	if ops != 1 {
		return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: input must hold exactly one of Put, Delete, Get, Scan (got %d)`, ops)
	}
	var consistency kvpb.ReadConsistency
	switch p.Kind {
	case "Command":
		if in.Get != nil || in.Scan != nil {
			return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: Get and Scan are reads: use kind "Query" (linearizable) or "LocalQuery" (stale)`)
		}
	case "Query":
		consistency = kvpb.ReadConsistency_LINEARIZABLE
	case "LocalQuery":
		consistency = kvpb.ReadConsistency_STALE
	default:
		return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: kind %q is not "Command", "Query" or "LocalQuery"`, p.Kind)
	}
	if p.Kind != "Command" && (in.Put != nil || in.Delete != nil) {
		return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: Put and Delete are writes: use kind "Command"`)
	}
	ctx := s.ctx
	switch {
	case in.Put != nil:
		if in.Put.Key == nil || in.Put.Value == nil {
			return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: Put needs "key" and "value"`)
		}
		r, err := s.kv.put(ctx, []byte(*in.Put.Key), []byte(*in.Put.Value), clientSession{}, 0, nil)
		if err != nil {
			return nil, err
		}
		return map[string]uint64{"index": r.Index}, nil
	case in.Delete != nil:
		if in.Delete.Key == nil {
			return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: Delete needs "key"`)
		}
		r, err := s.kv.Delete(ctx, &kvpb.DeleteRequest{Key: []byte(*in.Delete.Key)})
		if err != nil {
			return nil, err
		}
		return map[string]uint64{"index": r.Index}, nil
	case in.Get != nil:
		if in.Get.Key == nil {
			return nil, rpcErrorf(jsonrpcInvalidParams, `Apply: Get needs "key"`)
		}
		r, err := s.kv.Get(ctx, &kvpb.GetRequest{Key: []byte(*in.Get.Key), Consistency: consistency})
		if err != nil {
			return nil, err
		}
		out := map[string]any{"found": r.Found}
		if r.Found {
			out["value"] = string(r.Value)
		}
		return out, nil
	}
	r, err := s.kv.Scan(ctx, &kvpb.ScanRequest{Start: []byte(in.Scan.Start), End: []byte(in.Scan.End),
		Limit: in.Scan.Limit, Consistency: consistency})
	if err != nil {
		return nil, err
	}
	kvs := make([]rpcKV, len(r.Kvs))
	for i, kv := range r.Kvs {
		kvs[i] = rpcKV{Key: string(kv.Key), Value: string(kv.Value)}
	}
	return map[string]any{"kvs": kvs, "more": r.More}, nil
}
