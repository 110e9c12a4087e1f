package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/client"
	"github.com/nezha-harness/nezha/systems/kvpb"
)

func TestSessionTableDecide(t *testing.T) {
	tb := newSessionTable(3)
	check := func(index, client, seq uint64, want sessionVerdict, wantFirst uint64) {
		t.Helper()
		v, first := tb.decide(index, client, seq)
		if v != want || (want != sessionStale && first != wantFirst) {
			t.Fatalf("decide(%d, %d, %d) = %v %d, want %v %d", index, client, seq, v, first, want, wantFirst)
		}
	}
	check(1, 7, 1, sessionApply, 1)
	check(2, 7, 1, sessionDuplicate, 1) // a resend
	check(3, 7, 2, sessionApply, 3)
	check(4, 7, 1, sessionStale, 0) // a late copy of seq 1
	check(5, 8, 1, sessionApply, 5)
	check(6, 9, 1, sessionApply, 6)
	check(7, 7, 2, sessionDuplicate, 3) // touches 7: 8 is now the least recently used
	check(8, 10, 1, sessionApply, 8)    // evicts 8
	if _, ok := tb.m[8]; ok || tb.lru.Len() != 3 {
		t.Fatalf("client 8 not evicted: %d sessions", tb.lru.Len())
	}
	check(9, 8, 1, sessionApply, 9) // forgotten: applied as new; evicts 9
	tb.index = 9

	// The encoding keeps the order of use: a decoded table evicts the same
	// session next.
	dec, err := decodeSessionTable(tb.encode(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if dec.index != 9 || dec.lru.Len() != 3 {
		t.Fatalf("decoded index %d with %d sessions", dec.index, dec.lru.Len())
	}
	for _, x := range []*sessionTable{tb, dec} {
		x.decide(10, 11, 1)
		if _, ok := x.m[7]; ok {
			t.Fatal("client 7 (least recently used) survived an eviction")
		}
	}
	if string(tb.encode()) != string(dec.encode()) {
		t.Fatal("a decoded table diverged from the original")
	}
	bad := tb.encode()
	bad[len(bad)/2] ^= 1
	if _, err := decodeSessionTable(bad, 3); !errors.Is(err, errSessionsCorrupt) {
		t.Fatalf("a flipped byte decoded: %v", err)
	}
	// A decoded table under a smaller limit forgets its oldest sessions.
	if small, err := decodeSessionTable(tb.encode(), 1); err != nil || small.lru.Len() != 1 || small.m[11] == nil {
		t.Fatalf("decode under a limit of 1: %v", err)
	}
}

func TestSessionTableFold(t *testing.T) {
	ents := []raftpb.Entry{{Index: 1}, {Index: 2}, {Index: 3}}
	for i, c := range []systems.Command{
		{Op: systems.OpPut, RequestID: 1, ClientID: 5, Seq: 1, Key: []byte("k"), Value: []byte("a")},
		{Op: systems.OpPut, RequestID: 2, Key: []byte("k"), Value: []byte("b")},
		{Op: systems.OpDelete, RequestID: 3, ClientID: 5, Seq: 1, Key: []byte("k")},
	} {
		ents[i].Data = systems.AppendCommand(nil, &c)
	}
	tb := newSessionTable(10)
	if err := tb.fold(ents); err != nil {
		t.Fatal(err)
	}
	if s := tb.m[5].Value.(*session); tb.index != 3 || s.seq != 1 || s.index != 1 {
		t.Fatalf("folded to index %d, session %+v", tb.index, *s)
	}
	if err := tb.fold(ents[:1]); err == nil {
		t.Fatal("folding entry 1 into a table at 3 succeeded")
	}
}

// rawKV is a kvpb client of one node, to send writes with chosen sessions.
func rawKV(t *testing.T, addr string) kvpb.KVClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, client.DialOptions(1<<20)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return kvpb.NewKVClient(cc)
}

// A write resent under its session is applied once, on any node, and
// answered with the first copy's index; this holds after every node
// restarted (the table is rebuilt from the log).
func TestResentWriteAppliesOnce(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := func(i int) kvpb.KVClient { return rawKV(t, tc.cfgs[i].Address) }
	put := func(node int, client, seq uint64, key, value string) (uint64, error) {
		r, err := kv(node).Put(ctx, &kvpb.PutRequest{Key: []byte(key), Value: []byte(value), ClientId: client, Seq: seq})
		if err != nil {
			return 0, err
		}
		return r.Index, nil
	}
	mustPut := func(node int, client, seq uint64, key, value string) uint64 {
		t.Helper()
		idx, err := put(node, client, seq, key, value)
		if err != nil {
			t.Fatalf("put %s=%s (client %d seq %d) on node %d: %v", key, value, client, seq, node+1, err)
		}
		return idx
	}
	expect := func(key, want string) {
		t.Helper()
		c := tc.client(t)
		v, _, err := c.Get(ctx, []byte(key))
		if err != nil || string(v) != want {
			t.Fatalf("get %s = %q %v, want %q", key, v, err, want)
		}
	}
	first := mustPut(0, 42, 1, "k", "a")
	mustPut(1, 43, 1, "k", "b")
	if again := mustPut(2, 42, 1, "k", "a"); again != first {
		t.Fatalf("the resent write answered index %d, the first copy was applied at %d", again, first)
	}
	expect("k", "b")
	second := mustPut(0, 42, 2, "k", "c")
	mustPut(0, 43, 2, "k", "d")
	if _, err := put(1, 42, 1, "k", "a"); status.Code(err) != codes.Aborted {
		t.Fatalf("a late copy of an earlier write: %v, want Aborted", err)
	}
	if _, err := kv(1).Delete(ctx, &kvpb.DeleteRequest{Key: []byte("k"), ClientId: 42, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	expect("k", "d")

	for i := range tc.nodes {
		tc.stop(i)
	}
	for i := range tc.nodes {
		tc.start(i)
	}
	tc.waitLeader(10 * time.Second)
	if again := mustPut(1, 42, 2, "k", "c"); again != second {
		t.Fatalf("after a restart the resent write answered index %d, first copy at %d", again, second)
	}
	expect("k", "d")
}

// A write through a follower while the leader hangs (its Ready loop is
// blocked, as in a pause) succeeds within a few election timeouts: the
// follower fails the proposal it forwarded to the hung leader as soon as it
// sees the leader change (not at its 5 s request timeout), and the client
// resends it under its session.
func TestWriteAcrossLeaderLoss(t *testing.T) {
	tc := startCluster(t, 3)
	leader := tc.waitLeader(10 * time.Second)
	follower := (leader + 1) % 3
	c, err := client.New(client.DefaultConfig(tc.cfgs[follower].Address))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, []byte("before"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if tc.cfgs[follower].RequestTimeout < 3*time.Second {
		t.Fatalf("request timeout %v: the test needs one above its 3 s bound", tc.cfgs[follower].RequestTimeout)
	}
	release := make(chan struct{})
	blocked := make(chan struct{})
	tc.nodes[leader].ctlc <- func() { close(blocked); <-release }
	<-blocked
	defer close(release)
	start := time.Now()
	if _, err := c.Put(ctx, []byte("after"), []byte("v")); err != nil {
		t.Fatalf("put while the leader hangs: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("put while the leader hangs took %v, want under 3 s", d)
	} else {
		t.Logf("put while the leader hangs took %v", d.Round(time.Millisecond))
	}
}
