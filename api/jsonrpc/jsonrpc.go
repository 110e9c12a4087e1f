// Package jsonrpc serves the JSON-RPC 2.0 cluster API
// (https://www.jsonrpc.org/specification) of a node: one request object per
// line over TCP, one response object per line back, with the method names
// and parameter shapes of raftpico (https://github.com/sile/raftpico), so
// that its tools (jlot) drive a node. As package etcdapi, it sits beside
// the node and speaks to it through the node's own services (kvpb.KV and
// kvpb.Admin); the node constructs and serves it on its -jsonrpcAddress.
//
// Requests on one connection run concurrently (up to maxInflight); each
// response echoes its request's id. A notification (no id) gets no
// response. Batches (JSON arrays) are refused.
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
//	                                  "first_index"}; CodeNotSupported for a system that never compacts its log
//	GetServerState {}                 id, term, role, leader, commit and applied index, members
//
// AddServer and RemoveServer are served by the leader only (else
// CodeNotLeader naming the leader).
package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// Standard JSON-RPC 2.0 error codes (specification section 5.1).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Application error codes (the specification leaves -32000 to -32099 to
// the server). The error's data holds "grpc_code", the node's own status
// code, and for CodeNotLeader "leader_id" and "leader_addr".
const (
	// CodeNotLeader: a membership change sent to a follower.
	CodeNotLeader = -32000
	// CodeUnavailable: no leader, a timeout, a leadership change, the
	// node stopping; for writes the outcome is unknown. Retry.
	CodeUnavailable = -32001
	// CodeFailedPrecondition: another membership change is pending, a
	// learner has not caught up, this node was removed.
	CodeFailedPrecondition = -32002
	// CodeResourceExhausted: disk full or writes stalled on GC debt.
	CodeResourceExhausted = -32003
	// CodeNotSupported: the method exists in raftpico's API but this
	// node's system has no such operation (TakeSnapshot on nezha-nogc or
	// dwisckey; the node's Unimplemented).
	CodeNotSupported = -32004
)

// maxInflight bounds the requests of one connection served at once;
// the connection's reader waits while that many run.
const maxInflight = 64

// dialTimeout bounds AddServer's Status call to the new node.
const dialTimeout = 10 * time.Second

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	ID      json.RawMessage `json:"id"`
}

type Error struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

func errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// toError maps a gRPC status of the node's servers to a JSON-RPC error.
func toError(err error) *Error {
	var je *Error
	if errors.As(err, &je) {
		return je
	}
	st := status.Convert(err)
	code := CodeInternalError
	switch st.Code() {
	case codes.InvalidArgument:
		code = CodeInvalidParams
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
		code = CodeUnavailable
	case codes.FailedPrecondition:
		code = CodeFailedPrecondition
	case codes.ResourceExhausted:
		code = CodeResourceExhausted
	case codes.Unimplemented:
		code = CodeNotSupported
	}
	return &Error{Code: code, Message: st.Message(), Data: map[string]any{"grpc_code": st.Code().String()}}
}

// Config configures a Server.
type Config struct {
	// MaxLineBytes bounds one request line, in bytes; a longer line is
	// refused with an error reply (CodeInvalidRequest) and the connection
	// goes on. Default: 4 MiB.
	MaxLineBytes int
	// Logger gets the listener's failure. Required.
	Logger *slog.Logger
	// PeerStatus asks the node at a client address for its Status:
	// AddServer learns the new node's id and Raft address from it. An
	// InvalidArgument status says addr cannot be asked at all (bad
	// params); any other error that the node does not answer. Required.
	PeerStatus func(ctx context.Context, addr string) (*kvpb.StatusResponse, error)
}

// DefaultConfig returns the defaults; Logger and PeerStatus are left for
// the caller.
func DefaultConfig() Config { return Config{MaxLineBytes: 4 << 20} }

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.MaxLineBytes < 1 {
		errs = append(errs, fmt.Errorf("jsonrpc: MaxLineBytes %d is not positive", c.MaxLineBytes))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("jsonrpc: Logger is required"))
	}
	if c.PeerStatus == nil {
		errs = append(errs, errors.New("jsonrpc: PeerStatus is required"))
	}
	return errors.Join(errs...)
}

// Server serves the JSON-RPC API of one node through its kvpb.KV and
// kvpb.Admin services.
type Server struct {
	cfg Config
	lis net.Listener
	kv  kvpb.KVServer
	adm kvpb.AdminServer

	ctx    context.Context // canceled by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

// Serve serves the node of kv and adm on lis until Stop. The requests'
// deadlines are the services' own (kv's request timeout, adm's membership
// timeout).
func Serve(lis net.Listener, kv kvpb.KVServer, adm kvpb.AdminServer, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, lis: lis, kv: kv, adm: adm, conns: map[net.Conn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Stop closes the listener and every connection and waits for the
// requests being served.
func (s *Server) Stop() {
	s.cancel()
	s.lis.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.lis.Accept()
		if err != nil {
			if s.ctx.Err() == nil {
				s.cfg.Logger.Warn("JSON-RPC listener failed; the API is off", "err", err)
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

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	var (
		wmu      sync.Mutex
		inflight sync.WaitGroup
		sem      = make(chan struct{}, maxInflight)
		w        = bufio.NewWriter(c)
	)
	defer func() {
		inflight.Wait()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	send := func(resp *response) {
		resp.JSONRPC = "2.0"
		if resp.ID == nil {
			resp.ID = json.RawMessage("null")
		}
		b, err := json.Marshal(resp)
		if err != nil {
			b, _ = json.Marshal(&response{JSONRPC: "2.0", ID: resp.ID,
				Error: errorf(CodeInternalError, "cannot encode the result: %v", err)})
		}
		wmu.Lock()
		defer wmu.Unlock()
		w.Write(append(b, '\n'))
		w.Flush() // an error shows on the next read
	}
	r := bufio.NewReaderSize(c, 64<<10)
	max := s.cfg.MaxLineBytes
	for {
		line, tooLong, err := readLine(r, max)
		if err != nil {
			return
		}
		if tooLong {
			send(&response{Error: errorf(CodeInvalidRequest, "request line over %d bytes refused", max)})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		req, rerr := parseRequest(line)
		if rerr != nil {
			send(&response{ID: req.ID, Error: rerr})
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
			resp := &response{ID: req.ID, Result: result}
			if err != nil {
				resp.Result, resp.Error = nil, toError(err)
			}
			send(resp)
		}()
	}
}

// parseRequest decodes and checks one request line. On an error, the
// request holds the id when it could be read.
func parseRequest(line []byte) (request, *Error) {
	var req request
	trimmed := bytes.TrimSpace(line)
	if !json.Valid(trimmed) {
		return req, errorf(CodeParseError, "parse error: the line is not valid JSON")
	}
	if trimmed[0] == '[' {
		return req, errorf(CodeInvalidRequest, "batch requests are not supported: send one request object per line")
	}
	if err := json.Unmarshal(trimmed, &req); err != nil {
		return request{}, errorf(CodeInvalidRequest, "invalid request: %v", err)
	}
	if req.ID != nil {
		switch req.ID[0] {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		default:
			req.ID = nil
			return req, errorf(CodeInvalidRequest, "invalid request: id must be a string, a number or null")
		}
	}
	if req.JSONRPC != "2.0" {
		return req, errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	}
	if req.Method == "" {
		return req, errorf(CodeInvalidRequest, `invalid request: "method" is missing`)
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
		return errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

func (s *Server) call(method string, params json.RawMessage) (any, error) {
	switch method {
	case "CreateCluster":
		// raftpico's creation parameters (election timeouts and the
		// like) have no meaning for a cluster that runs already.
		st, err := s.serverState()
		if err != nil {
			return nil, err
		}
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
		r, err := s.adm.TakeSnapshot(s.ctx, &kvpb.TakeSnapshotRequest{})
		if err != nil {
			return nil, err
		}
		// raftpico's result is {"snapshot_index"}.
		return map[string]uint64{"snapshot_index": r.SnapshotIndex, "first_index": r.FirstIndex}, nil
	case "GetServerState":
		if err := decodeParams(params, &struct{}{}); err != nil {
			return nil, err
		}
		return s.serverState()
	}
	return nil, errorf(CodeMethodNotFound, "method %q not found (methods: CreateCluster, AddServer, RemoveServer, Apply, TakeSnapshot, GetServerState)", method)
}

// Member is a member as GetServerState lists it.
type Member struct {
	ID              uint64 `json:"id"`
	Addr            string `json:"addr"` // client address (-address)
	InternalAddress string `json:"internal_addr"`
	Learner         bool   `json:"learner"`
}

// ServerState is GetServerState's result (CreateCluster's with Created).
type ServerState struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	Term uint64 `json:"term"`
	// Role: Leader, Follower, Candidate, PreCandidate, Learner or Removed.
	Role         string   `json:"role"`
	Leader       uint64   `json:"leader"` // 0: none known
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Members      []Member `json:"members"`
	Created      *bool    `json:"created,omitempty"`
}

// status is the node's Status (without activities or a state hash).
func (s *Server) status() (*kvpb.StatusResponse, error) {
	return s.kv.Status(s.ctx, &kvpb.StatusRequest{})
}

func members(st *kvpb.StatusResponse) []Member {
	out := []Member{}
	for _, m := range st.Members {
		out = append(out, Member{ID: m.Id, Addr: m.Address, InternalAddress: m.InternalAddress, Learner: m.Learner})
	}
	return out
}

// raftStateRemoved is kvpb.StatusResponse's raft_state of a node removed
// from the cluster.
const raftStateRemoved = "StateRemoved"

func (s *Server) serverState() (*ServerState, error) {
	r, err := s.status()
	if err != nil {
		return nil, err
	}
	h := r.GetHeader()
	st := &ServerState{
		ID: h.GetNodeId(), Addr: r.Address, Term: h.GetTerm(), Leader: h.GetLeaderId(),
		Role:        strings.TrimPrefix(r.RaftState, "State"),
		CommitIndex: r.CommitIndex, AppliedIndex: h.GetAppliedIndex(), Members: members(r),
	}
	if r.RaftState != raftStateRemoved {
		for _, m := range st.Members {
			if m.ID == st.ID && m.Learner {
				st.Role = "Learner"
			}
		}
	}
	return st, nil
}

// leaderOnly refuses a membership change on a follower, naming the leader.
func (s *Server) leaderOnly() error {
	r, err := s.status()
	if err != nil {
		return err
	}
	if r.RaftState == "StateLeader" {
		return nil
	}
	id, lead := r.GetHeader().GetNodeId(), r.GetHeader().GetLeaderId()
	e := errorf(CodeNotLeader, "node %d is not the leader; send membership changes to the leader", id)
	e.Data = map[string]any{"leader_id": lead}
	for _, m := range r.Members {
		if m.Id == lead && lead != 0 {
			e.Data["leader_addr"] = m.Address
			e.Message = fmt.Sprintf("node %d is not the leader; node %d is (addr %s)", id, lead, m.Address)
		}
	}
	return e
}

func addrParams(method string, params json.RawMessage) (string, error) {
	var p struct {
		Addr string `json:"addr"`
	}
	if err := decodeParams(params, &p); err != nil {
		return "", err
	}
	if _, port, err := net.SplitHostPort(p.Addr); err != nil || port == "" {
		return "", errorf(CodeInvalidParams, "%s: addr %q is not host:port (the member's client address, -address)", method, p.Addr)
	}
	return p.Addr, nil
}

// MembershipResult is AddServer's and RemoveServer's result.
type MembershipResult struct {
	ID      uint64   `json:"id"`    // the member added or removed
	Index   uint64   `json:"index"` // log index of the applied change
	Members []Member `json:"members"`
}

func (s *Server) addServer(params json.RawMessage) (any, error) {
	addr, err := addrParams("AddServer", params)
	if err != nil {
		return nil, err
	}
	if err := s.leaderOnly(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
	st, err := s.cfg.PeerStatus(ctx, addr)
	cancel()
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, errorf(CodeInvalidParams, "AddServer: %s", status.Convert(err).Message())
		}
		e := errorf(CodeUnavailable, "AddServer: the new node at %s does not answer (start it first, as docs/operating.md's Membership change says): %s",
			addr, status.Convert(err).Message())
		return nil, e
	}
	id := st.GetHeader().GetNodeId()
	r, err := s.adm.AddMember(s.ctx, &kvpb.AddMemberRequest{Id: id, InternalAddress: st.InternalAddress, Address: addr, Promote: true})
	if err != nil {
		return nil, err
	}
	return s.membershipResult(id, r.Index)
}

func (s *Server) removeServer(params json.RawMessage) (any, error) {
	addr, err := addrParams("RemoveServer", params)
	if err != nil {
		return nil, err
	}
	if err := s.leaderOnly(); err != nil {
		return nil, err
	}
	st, err := s.status()
	if err != nil {
		return nil, err
	}
	var id uint64
	for _, m := range st.Members {
		if m.Address == addr {
			id = m.Id
		}
	}
	if id == 0 {
		return nil, errorf(CodeInvalidParams, "RemoveServer: no member has the client address %s", addr)
	}
	r, err := s.adm.RemoveMember(s.ctx, &kvpb.RemoveMemberRequest{Id: id})
	if err != nil {
		return nil, err
	}
	return s.membershipResult(id, r.Index)
}

func (s *Server) membershipResult(id, index uint64) (*MembershipResult, error) {
	st, err := s.status()
	if err != nil {
		return nil, err
	}
	return &MembershipResult{ID: id, Index: index, Members: members(st)}, nil
}

// applyInput is Apply's input: exactly one of the operations.
type applyInput struct {
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

// KeyValue is one pair of a Scan result.
type KeyValue struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (s *Server) apply(params json.RawMessage) (any, error) {
	var p struct {
		Kind  string     `json:"kind"`
		Input applyInput `json:"input"`
	}
	if len(params) == 0 || string(params) == "null" {
		return nil, errorf(CodeInvalidParams, `Apply: params {"kind", "input"} are required`)
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
		return nil, errorf(CodeInvalidParams, `Apply: input must hold exactly one of Put, Delete, Get, Scan (got %d)`, ops)
	}
	var consistency kvpb.ReadConsistency
	switch p.Kind {
	case "Command":
		if in.Get != nil || in.Scan != nil {
			return nil, errorf(CodeInvalidParams, `Apply: Get and Scan are reads: use kind "Query" (linearizable) or "LocalQuery" (stale)`)
		}
	case "Query":
		consistency = kvpb.ReadConsistency_LINEARIZABLE
	case "LocalQuery":
		consistency = kvpb.ReadConsistency_STALE
	default:
		return nil, errorf(CodeInvalidParams, `Apply: kind %q is not "Command", "Query" or "LocalQuery"`, p.Kind)
	}
	if p.Kind != "Command" && (in.Put != nil || in.Delete != nil) {
		return nil, errorf(CodeInvalidParams, `Apply: Put and Delete are writes: use kind "Command"`)
	}
	ctx := s.ctx
	switch {
	case in.Put != nil:
		if in.Put.Key == nil || in.Put.Value == nil {
			return nil, errorf(CodeInvalidParams, `Apply: Put needs "key" and "value"`)
		}
		r, err := s.kv.Put(ctx, &kvpb.PutRequest{Key: []byte(*in.Put.Key), Value: []byte(*in.Put.Value)})
		if err != nil {
			return nil, err
		}
		return map[string]uint64{"index": r.Index}, nil
	case in.Delete != nil:
		if in.Delete.Key == nil {
			return nil, errorf(CodeInvalidParams, `Apply: Delete needs "key"`)
		}
		r, err := s.kv.Delete(ctx, &kvpb.DeleteRequest{Key: []byte(*in.Delete.Key)})
		if err != nil {
			return nil, err
		}
		return map[string]uint64{"index": r.Index}, nil
	case in.Get != nil:
		if in.Get.Key == nil {
			return nil, errorf(CodeInvalidParams, `Apply: Get needs "key"`)
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
	kvs := make([]KeyValue, len(r.Kvs))
	for i, kv := range r.Kvs {
		kvs[i] = KeyValue{Key: string(kv.Key), Value: string(kv.Value)}
	}
	return map[string]any{"kvs": kvs, "more": r.More}, nil
}
