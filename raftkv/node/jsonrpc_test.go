package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/api/jsonrpc"
	"github.com/nezha-harness/nezha/api/kvpb"
)

// rpcConn is a raw TCP connection to a node's JSON-RPC API.
type rpcConn struct {
	t   *testing.T
	c   net.Conn
	r   *bufio.Reader
	seq int
}

func dialRPC(t *testing.T, n *Node) *rpcConn {
	t.Helper()
	if n.jsonrpc == nil {
		t.Fatal("the node serves no JSON-RPC API")
	}
	c, err := net.Dial("tcp", n.jsonrpc.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rpcConn{t: t, c: c, r: bufio.NewReaderSize(c, 1<<20)}
}

type rpcReply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *jsonrpc.Error  `json:"error"`
}

// send writes line and reads one reply (within 60 s).
func (rc *rpcConn) send(line string) rpcReply {
	rc.t.Helper()
	rc.c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := rc.c.Write([]byte(line + "\n")); err != nil {
		rc.t.Fatal(err)
	}
	b, err := rc.r.ReadBytes('\n')
	if err != nil {
		rc.t.Fatalf("reply to %.80s: %v", line, err)
	}
	var r rpcReply
	if err := json.Unmarshal(b, &r); err != nil || r.JSONRPC != "2.0" {
		rc.t.Fatalf("reply %q: not a JSON-RPC 2.0 response (%v)", b, err)
	}
	return r
}

// call sends a request with the next id and decodes its result into out;
// it fails the test on an error reply or an id not echoed.
func (rc *rpcConn) call(method, params string, out any) {
	rc.t.Helper()
	rc.seq++
	r := rc.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, rc.seq, method, params))
	if string(r.ID) != fmt.Sprint(rc.seq) {
		rc.t.Fatalf("%s: reply id %s, want %d", method, r.ID, rc.seq)
	}
	if r.Error != nil {
		rc.t.Fatalf("%s %s: error %d: %s (%v)", method, params, r.Error.Code, r.Error.Message, r.Error.Data)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			rc.t.Fatalf("%s result %s: %v", method, r.Result, err)
		}
	}
}

// callErr sends line and returns its error code (0: none).
func (rc *rpcConn) callErr(line string) (int, rpcReply) {
	rc.t.Helper()
	r := rc.send(line)
	if r.Error == nil {
		return 0, r
	}
	return r.Error.Code, r
}

func memberIDs(ms []jsonrpc.Member) (vs, ls []uint64) {
	for _, m := range ms {
		if m.Learner {
			ls = append(ls, m.ID)
		} else {
			vs = append(vs, m.ID)
		}
	}
	return vs, ls
}

// A 1-node cluster grows to 3 through AddServer, serves Apply's Command,
// Query and LocalQuery, and answers bad lines with errors on a connection
// that stays usable; RemoveServer shrinks it again.
func TestJSONRPC(t *testing.T) {
	tc := startClusterWith(t, 1, func(c *Config) {
		c.JSONRPCAddress = "127.0.0.1:0"
		c.JSONRPCMaxLineBytes = 4096
		c.CampaignOnBoot = true
	})
	tc.waitLeader(10 * time.Second)
	rc := dialRPC(t, tc.nodes[0])

	var created jsonrpc.ServerState
	rc.call("CreateCluster", `{}`, &created)
	if created.Created == nil || *created.Created || created.ID != 1 || created.Role != "Leader" || len(created.Members) != 1 {
		t.Fatalf("CreateCluster on a running cluster: %+v", created)
	}

	// Two nodes started to join, then added by their client address.
	for id := uint64(2); id <= 3; id++ {
		var st jsonrpc.ServerState
		rc.call("GetServerState", `null`, &st)
		i := tc.addNode(t, id, []uint64{1})
		var r jsonrpc.MembershipResult
		rc.call("AddServer", fmt.Sprintf(`{"addr":%q}`, tc.cfgs[i].Address), &r)
		if vs, ls := memberIDs(r.Members); r.ID != id || r.Index == 0 || !slices.Contains(vs, id) || len(ls) != 0 {
			t.Fatalf("AddServer %d: %+v", id, r)
		}
	}
	var st jsonrpc.ServerState
	rc.call("GetServerState", `{}`, &st)
	if vs, _ := memberIDs(st.Members); !slices.Equal(vs, []uint64{1, 2, 3}) || st.Leader != 1 || st.Term == 0 ||
		st.CommitIndex == 0 || st.AppliedIndex == 0 {
		t.Fatalf("GetServerState after two AddServer: %+v", st)
	}

	// Adding a member again is bad input.
	code, r := rc.callErr(fmt.Sprintf(`{"jsonrpc":"2.0","id":"again","method":"AddServer","params":{"addr":%q}}`, tc.cfgs[1].Address))
	if code != jsonrpc.CodeInvalidParams || string(r.ID) != `"again"` {
		t.Fatalf("AddServer of a member: code %d, id %s, want %d", code, r.ID, jsonrpc.CodeInvalidParams)
	}

	var put struct{ Index uint64 }
	rc.call("Apply", `{"kind":"Command","input":{"Put":{"key":"k1","value":"v1"}}}`, &put)
	if put.Index == 0 {
		t.Fatal("Put: no index")
	}
	var get struct {
		Found bool
		Value string
	}
	for _, kind := range []string{"Query", "LocalQuery"} {
		get.Found, get.Value = false, ""
		rc.call("Apply", fmt.Sprintf(`{"kind":%q,"input":{"Get":{"key":"k1"}}}`, kind), &get)
		if !get.Found || get.Value != "v1" {
			t.Fatalf("%s Get k1: %+v, want v1", kind, get)
		}
	}
	var scan struct {
		Kvs  []jsonrpc.KeyValue
		More bool
	}
	rc.call("Apply", `{"kind":"Query","input":{"Scan":{"start":"k","end":"l","limit":10}}}`, &scan)
	if len(scan.Kvs) != 1 || scan.Kvs[0] != (jsonrpc.KeyValue{Key: "k1", Value: "v1"}) {
		t.Fatalf("Scan: %+v", scan)
	}
	// A follower's LocalQuery sees the put once it applied it.
	fc := dialRPC(t, tc.nodes[2])
	waitFor(t, 10*time.Second, "node 3 applies the put", func() bool {
		get.Found = false
		fc.call("Apply", `{"kind":"LocalQuery","input":{"Get":{"key":"k1"}}}`, &get)
		return get.Found && get.Value == "v1"
	})
	// A follower refuses a membership change, naming the leader.
	if code, r := fc.callErr(`{"jsonrpc":"2.0","id":7,"method":"RemoveServer","params":{"addr":"127.0.0.1:1"}}`); code != jsonrpc.CodeNotLeader ||
		r.Error.Data["leader_addr"] != tc.cfgs[0].Address {
		t.Fatalf("RemoveServer on a follower: %d %+v", code, r.Error)
	}

	// Errors; each leaves the connection usable.
	for _, c := range []struct {
		line string
		code int
		id   string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":`, jsonrpc.CodeParseError, "null"},
		{`not json at all`, jsonrpc.CodeParseError, "null"},
		{`{"jsonrpc":"2.0","id":2,"method":"NoSuchMethod"}`, jsonrpc.CodeMethodNotFound, "2"},
		{`{"jsonrpc":"1.0","id":3,"method":"GetServerState"}`, jsonrpc.CodeInvalidRequest, "3"},
		{`{"jsonrpc":"2.0","id":{},"method":"GetServerState"}`, jsonrpc.CodeInvalidRequest, "null"},
		{`[{"jsonrpc":"2.0","id":4,"method":"GetServerState"}]`, jsonrpc.CodeInvalidRequest, "null"},
		{`{"jsonrpc":"2.0","id":5,"method":"Apply","params":{"kind":"Query","input":{"Put":{"key":"a","value":"b"}}}}`, jsonrpc.CodeInvalidParams, "5"},
		{`{"jsonrpc":"2.0","id":6,"method":"Apply","params":{"kind":"Command","input":{}}}`, jsonrpc.CodeInvalidParams, "6"},
		{`{"jsonrpc":"2.0","id":7,"method":"Apply","params":{"kind":"Bogus","input":{"Get":{"key":"a"}}}}`, jsonrpc.CodeInvalidParams, "7"},
		{`{"jsonrpc":"2.0","id":8,"method":"GetServerState","params":{"x":1}}`, jsonrpc.CodeInvalidParams, "8"},
		{`{"jsonrpc":"2.0","id":9,"method":"TakeSnapshot"}`, jsonrpc.CodeNotSupported, "9"},
		{`{"jsonrpc":"2.0","id":10,"method":"Apply","params":{"kind":"Command","input":{"Put":{"key":"","value":"b"}}}}`, jsonrpc.CodeInvalidParams, "10"},
		{`{"jsonrpc":"2.0","id":11,"method":"RemoveServer","params":{"addr":"127.0.0.1:1"}}`, jsonrpc.CodeInvalidParams, "11"},
		{`{"jsonrpc":"2.0","id":12,"method":"AddServer","params":{"addr":"nope"}}`, jsonrpc.CodeInvalidParams, "12"},
		{`{"jsonrpc":"2.0","id":13,"method":"Apply","params":{"kind":"Command","input":{"Put":{"key":"k","value":"` +
			strings.Repeat("x", 5000) + `"}}}}`, jsonrpc.CodeInvalidRequest, "null"},
	} {
		code, r := rc.callErr(c.line)
		if code != c.code || string(r.ID) != c.id {
			t.Fatalf("%.100s: code %d id %s, want %d id %s", c.line, code, r.ID, c.code, c.id)
		}
		var st jsonrpc.ServerState
		rc.call("GetServerState", `{}`, &st) // still usable
		if st.ID != 1 {
			t.Fatalf("after %.60s: GetServerState %+v", c.line, st)
		}
	}
	// A notification gets no reply: the next reply is the next request's.
	if _, err := rc.c.Write([]byte(`{"jsonrpc":"2.0","method":"Apply","params":{"kind":"Command","input":{"Put":{"key":"n","value":"1"}}}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the notification's put is applied", func() bool {
		rc.call("Apply", `{"kind":"LocalQuery","input":{"Get":{"key":"n"}}}`, &get)
		return get.Found
	})

	rc.call("Apply", `{"kind":"Command","input":{"Delete":{"key":"k1"}}}`, &put)
	get.Found = true
	rc.call("Apply", `{"kind":"Query","input":{"Get":{"key":"k1"}}}`, &get)
	if get.Found {
		t.Fatal("k1 found after Delete")
	}

	var rm jsonrpc.MembershipResult
	rc.call("RemoveServer", fmt.Sprintf(`{"addr":%q}`, tc.cfgs[1].Address), &rm)
	if vs, _ := memberIDs(rm.Members); rm.ID != 2 || !slices.Equal(vs, []uint64{1, 3}) {
		t.Fatalf("RemoveServer 2: %+v", rm)
	}
	// The removed node says so in its Status (`nezha cluster status`'s
	// STATE) and its GetServerState, not Follower.
	tc.waitRemoved(t, 1)
	ss, err := (&kvServer{n: tc.nodes[1]}).Status(context.Background(), &kvpb.StatusRequest{})
	if err != nil || ss.RaftState != "StateRemoved" {
		t.Fatalf("Status of the removed node: raft_state %q, %v; want StateRemoved", ss.GetRaftState(), err)
	}
	dialRPC(t, tc.nodes[1]).call("GetServerState", `{}`, &st)
	if st.Role != "Removed" {
		t.Fatalf("GetServerState of the removed node: role %q, want Removed", st.Role)
	}
}
