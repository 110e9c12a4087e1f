package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// fakeNode answers the services the adapter calls: node 1 of members 1
// (at a1) and 2 (at a2, the leader unless leader is set), failing every
// data call with err when it is set.
type fakeNode struct {
	kvpb.UnimplementedKVServer
	kvpb.UnimplementedAdminServer
	raftState string
	err       error
	puts      chan *kvpb.PutRequest
}

func (f *fakeNode) Status(context.Context, *kvpb.StatusRequest) (*kvpb.StatusResponse, error) {
	return &kvpb.StatusResponse{Header: &kvpb.ResponseHeader{NodeId: 1, LeaderId: 2, Term: 3, AppliedIndex: 7},
		RaftState: f.raftState, CommitIndex: 8, Address: "a1:1",
		Members: []*kvpb.Member{{Id: 1, Address: "a1:1"}, {Id: 2, Address: "a2:1"}}}, nil
}

func (f *fakeNode) Put(_ context.Context, r *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.puts <- r
	return &kvpb.PutResponse{Index: 9}, nil
}

func (f *fakeNode) Get(context.Context, *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	return nil, f.err
}

func serveFake(t *testing.T, f *fakeNode, peer error) (*bufio.Reader, net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.MaxLineBytes = 1024
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.PeerStatus = func(context.Context, string) (*kvpb.StatusResponse, error) { return nil, peer }
	s, err := Serve(lis, f, f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	return bufio.NewReader(c), c
}

type reply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

func roundTrip(t *testing.T, r *bufio.Reader, c net.Conn, line string) reply {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	b, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var rep reply
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return rep
}

// The node's gRPC codes map to the API's error codes with the node's
// message and code in the error; a follower refuses membership changes
// naming the leader; AddServer tells bad params from a node that does not
// answer.
func TestErrorMapping(t *testing.T) {
	for _, c := range []struct {
		grpc codes.Code
		want int
	}{
		{codes.InvalidArgument, CodeInvalidParams}, {codes.Unavailable, CodeUnavailable},
		{codes.Aborted, CodeUnavailable}, {codes.DeadlineExceeded, CodeUnavailable},
		{codes.FailedPrecondition, CodeFailedPrecondition}, {codes.ResourceExhausted, CodeResourceExhausted},
		{codes.Unimplemented, CodeNotSupported}, {codes.DataLoss, CodeInternalError},
	} {
		r, c2 := serveFake(t, &fakeNode{err: status.Error(c.grpc, "node says no")}, nil)
		rep := roundTrip(t, r, c2, `{"jsonrpc":"2.0","id":1,"method":"Apply","params":{"kind":"Query","input":{"Get":{"key":"k"}}}}`)
		if rep.Error == nil || rep.Error.Code != c.want || rep.Error.Message != "node says no" || rep.Error.Data["grpc_code"] != c.grpc.String() {
			t.Errorf("%v: %+v, want code %d", c.grpc, rep.Error, c.want)
		}
	}

	r, c := serveFake(t, &fakeNode{raftState: "StateFollower"}, nil)
	rep := roundTrip(t, r, c, `{"jsonrpc":"2.0","id":2,"method":"RemoveServer","params":{"addr":"a2:1"}}`)
	if rep.Error == nil || rep.Error.Code != CodeNotLeader || rep.Error.Data["leader_addr"] != "a2:1" ||
		rep.Error.Message != "node 1 is not the leader; node 2 is (addr a2:1)" {
		t.Fatalf("RemoveServer on a follower: %+v", rep.Error)
	}
	var st ServerState
	rep = roundTrip(t, r, c, `{"jsonrpc":"2.0","id":3,"method":"GetServerState"}`)
	if err := json.Unmarshal(rep.Result, &st); err != nil || st.Role != "Follower" || st.Leader != 2 || st.CommitIndex != 8 ||
		st.AppliedIndex != 7 || len(st.Members) != 2 {
		t.Fatalf("GetServerState: %s (%v)", rep.Result, err)
	}

	for _, c := range []struct {
		peer error
		want int
	}{
		{status.Error(codes.InvalidArgument, "bad address"), CodeInvalidParams},
		{status.Error(codes.Unavailable, "connection refused"), CodeUnavailable},
	} {
		r, conn := serveFake(t, &fakeNode{raftState: "StateLeader"}, c.peer)
		rep := roundTrip(t, r, conn, `{"jsonrpc":"2.0","id":4,"method":"AddServer","params":{"addr":"a3:1"}}`)
		if rep.Error == nil || rep.Error.Code != c.want || !strings.Contains(rep.Error.Message, status.Convert(c.peer).Message()) {
			t.Errorf("AddServer, peer %v: %+v, want code %d", c.peer, rep.Error, c.want)
		}
	}
}

// Bad lines get errors on a connection that stays usable, a notification
// gets no reply, and Apply's Put reaches the node as a plain put.
func TestFraming(t *testing.T) {
	f := &fakeNode{raftState: "StateLeader", puts: make(chan *kvpb.PutRequest, 1)}
	r, c := serveFake(t, f, nil)
	for i, line := range []struct {
		line string
		code int
		id   string
	}{
		{`not json`, CodeParseError, "null"},
		{`[{"jsonrpc":"2.0","id":1,"method":"GetServerState"}]`, CodeInvalidRequest, "null"},
		{`{"jsonrpc":"2.0","id":{},"method":"GetServerState"}`, CodeInvalidRequest, "null"},
		{`{"jsonrpc":"2.0","id":"x","method":"Nope"}`, CodeMethodNotFound, `"x"`},
		{`{"jsonrpc":"2.0","id":5,"method":"Apply","params":{"kind":"Query","input":{"Put":{"key":"a","value":"b"}}}}`, CodeInvalidParams, "5"},
		{`{"jsonrpc":"2.0","id":6,"method":"RemoveServer","params":{"addr":"a9:1"}}`, CodeInvalidParams, "6"},
		{`{"jsonrpc":"2.0","id":7,"method":"GetServerState","params":{"x":1}}`, CodeInvalidParams, "7"},
		{`{"jsonrpc":"2.0","id":8,"method":"Apply","params":{"kind":"Command","input":{"Put":{"key":"k","value":"` +
			strings.Repeat("x", 2000) + `"}}}}`, CodeInvalidRequest, "null"},
	} {
		rep := roundTrip(t, r, c, line.line)
		if rep.Error == nil || rep.Error.Code != line.code || string(rep.ID) != line.id {
			t.Errorf("line %d %.60s: %+v id %s, want %d id %s", i, line.line, rep.Error, rep.ID, line.code, line.id)
		}
	}
	if _, err := c.Write([]byte(`{"jsonrpc":"2.0","method":"Apply","params":{"kind":"Command","input":{"Put":{"key":"n","value":"1"}}}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if p := <-f.puts; string(p.Key) != "n" || string(p.Value) != "1" || p.ClientId != 0 || p.Seq != 0 || p.TtlMs != 0 {
		t.Fatalf("the notification's put: %v", p)
	}
	rep := roundTrip(t, r, c, `{"jsonrpc":"2.0","id":10,"method":"Apply","params":{"kind":"Command","input":{"Put":{"key":"k","value":"v"}}}}`)
	if string(rep.ID) != "10" || string(rep.Result) != `{"index":9}` {
		t.Fatalf("the reply after a notification: id %s result %s", rep.ID, rep.Result)
	}
	<-f.puts
}

func TestConfigValidate(t *testing.T) {
	err := Config{}.Validate()
	for _, want := range []string{"MaxLineBytes 0", "Logger", "PeerStatus"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Config{}.Validate() = %v, want it to name %s", err, want)
		}
	}
}
