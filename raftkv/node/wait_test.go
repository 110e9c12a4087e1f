package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/systems"
)

// TestWaitRegistryGroup covers the waits of a batch's proposals
// (registerGroup): done closes only once every member was answered, in
// any order and by any path (applied, failed by a change of leader,
// failed all), each member's result lands in its own slot, and a member
// answered after cancelGroup is ignored.
func TestWaitRegistryGroup(t *testing.T) {
	w := newWaitRegistry()
	ids := []uint64{7, 3, 9}
	g := w.registerGroup(ids)
	w.proposed(1, 7, 3) // 9 not yet handed to raft
	w.trigger(9, applyResult{index: 90})
	if isDoneOf(g) {
		t.Fatal("done after one of three answers")
	}
	w.failProposedBefore(5, errLeaderChanged) // fails 7 and 3, proposed in epoch 1
	if !isDoneOf(g) {
		t.Fatal("not done after every member was answered")
	}
	if g.results[2].index != 90 || !errors.Is(g.results[0].err, errLeaderChanged) || !errors.Is(g.results[1].err, errLeaderChanged) {
		t.Fatalf("results %+v, want 7 and 3 failed by the change of leader, 9 applied at 90", g.results)
	}
	if len(w.m) != 0 {
		t.Fatalf("%d waiters left", len(w.m))
	}

	g = w.registerGroup(ids)
	w.trigger(3, applyResult{index: 30})
	delivered := w.cancelGroup(ids, g)
	if want := []bool{false, true, false}; delivered[0] != want[0] || delivered[1] != want[1] || delivered[2] != want[2] {
		t.Fatalf("delivered %v, want %v", delivered, want)
	}
	w.trigger(7, applyResult{index: 70}) // after the cancel: nobody waits
	if g.delivered[0] || g.results[0].index != 0 || isDoneOf(g) || len(w.m) != 0 {
		t.Fatalf("an answer after cancelGroup reached the group: %+v, %d waiters", g.results, len(w.m))
	}

	g = w.registerGroup(ids[:2])
	single := w.register(5)
	w.failAll(errStopping)
	if !isDoneOf(g) || !errors.Is(g.results[0].err, errStopping) || !errors.Is(g.results[1].err, errStopping) {
		t.Fatalf("failAll: done %v, results %+v", isDoneOf(g), g.results)
	}
	if r := <-single; !errors.Is(r.err, errStopping) {
		t.Fatalf("failAll: single waiter got %+v", r)
	}
}

func isDoneOf(g *waitGroup) bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// TestBatchDroppedWithoutLeaderFailsAtOnce proposes a batch of writes on a
// node that knows no leader: Raft drops them all, and each waits for a
// leader (resendDropped) side by side, so the batch fails within about
// one leader wait (leaderWaitElectionTimeouts), not one per write.
func TestBatchDroppedWithoutLeaderFailsAtOnce(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitLeader(10 * time.Second)
	tc.stop(1)
	tc.stop(2)
	n := tc.nodes[0]
	waitFor(t, 20*time.Second, "node 1 to know no leader", func() bool { return n.lead.Load() == 0 })

	const writes = 8
	ids := make([]uint64, writes)
	data := make([][]byte, writes)
	for i := range ids {
		c := &systems.Command{Op: systems.OpPut, Key: []byte{'k', byte('a' + i)}, Value: []byte("v"), RequestID: n.nextRequestID()}
		ids[i], data[i] = c.RequestID, systems.AppendCommand(nil, c)
	}
	leaderWait := leaderWaitElectionTimeouts * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
	start := time.Now()
	deadlines := make([]time.Time, writes)
	for i := range deadlines {
		deadlines[i] = start.Add(writes * leaderWait * 2)
	}
	res := n.proposeBatchAndWait(ids, data, deadlines)
	took := time.Since(start)
	for i, r := range res {
		if !errors.Is(r.err, errDropped) {
			t.Fatalf("write %d: %+v, want dropped (no leader)", i, r)
		}
	}
	// One after the other, the writes would take writes x leaderWait.
	if limit := writes / 2 * leaderWait; took > limit {
		t.Fatalf("the batch failed after %v, over %v (leader wait %v): its dropped writes waited one after the other", took, limit, leaderWait)
	}
	t.Logf("batch of %d dropped writes failed after %v (leader wait %v)", writes, took, leaderWait)
}

// TestBatchWritesKeepTheirOwnDeadlines proposes two writes together while
// the state machine holds applies: the one with the short deadline fails
// at it (DeadlineExceeded: outcome unknown), alone, and the other is
// applied once applies resume. The batch used to wait for all of its
// writes up to the longest deadline.
func TestBatchWritesKeepTheirOwnDeadlines(t *testing.T) {
	ag, n, _, _ := startGatedNode(t)
	g := ag.shut()
	ids := make([]uint64, 2)
	data := make([][]byte, 2)
	for i := range ids {
		c := &systems.Command{Op: systems.OpPut, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v"), RequestID: n.nextRequestID()}
		ids[i], data[i] = c.RequestID, systems.AppendCommand(nil, c)
	}
	now := time.Now()
	deadlines := []time.Time{now.Add(200 * time.Millisecond), now.Add(20 * time.Second)}
	res := make(chan []applyResult, 1)
	go func() { res <- n.proposeBatchAndWait(ids, data, deadlines) }()
	<-ag.entered // the apply goroutine holds the batch
	waitFor(t, 10*time.Second, "the short write to give up", func() bool {
		n.proposals.mu.Lock()
		defer n.proposals.mu.Unlock()
		_, waiting := n.proposals.m[ids[0]]
		return !waiting
	})
	close(g)
	ag.pass()
	r := <-res
	if !errors.Is(r[0].err, context.DeadlineExceeded) {
		t.Fatalf("short write: %+v, want DeadlineExceeded", r[0])
	}
	if r[1].err != nil || r[1].index == 0 {
		t.Fatalf("long write: %+v, want applied", r[1])
	}
}

// TestBatchPutRefusedAtItsOwnTimeoutUnderStall sends two PUTs in one
// BatchRequest while the state machine stalls writes: the one with a
// 100 ms timeout is refused (ResourceExhausted: not applied) at about its
// timeout, not at the other's (the node's 3 s request timeout).
func TestBatchPutRefusedAtItsOwnTimeoutUnderStall(t *testing.T) {
	tc := startClusterWith(t, 3, func(c *Config) { c.RequestTimeout = 3 * time.Second })
	leader := tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, s := openBatch(ctx, t, tc.cfgs[leader].Address)
	stall := errors.New("test stall")
	tc.nodes[leader].sm.(*memSM).stall.Store(&stall)
	put := func(id uint64, k string) *kvpb.BatchOp {
		return &kvpb.BatchOp{Id: id, Op: &kvpb.BatchOp_Put{Put: &kvpb.PutRequest{Key: []byte(k), Value: []byte("1")}}}
	}
	short := put(1, "b")
	short.TimeoutNs = int64(100 * time.Millisecond)
	start := time.Now()
	if err := s.Send(&kvpb.BatchRequest{Ops: []*kvpb.BatchOp{short, put(2, "c")}}); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 2; {
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Results {
			n++
			if r.Id != 1 {
				continue
			}
			// The other PUT is answered at 3 s: well before that.
			if took := time.Since(start); codes.Code(r.Code) != codes.ResourceExhausted || took > 2*time.Second {
				t.Fatalf("the 100 ms PUT: %v after %v, want ResourceExhausted at about 100 ms", r, took)
			}
		}
	}
}

// TestProposalChunks: a batch is split in order into proposal messages of
// at most the given bytes (data and each entry's overhead), a larger
// write alone.
func TestProposalChunks(t *testing.T) {
	mk := func(sizes ...int) []proposal {
		var b []proposal
		for i, n := range sizes {
			b = append(b, proposal{id: uint64(i + 1), data: make([]byte, n)})
		}
		return b
	}
	for _, tc := range []struct {
		sizes []int
		want  string
	}{
		{[]int{1, 2}, "[[1 2]]"},
		{[]int{4, 4, 4}, "[[1 2] [3]]"},
		{[]int{3, 3, 3}, "[[1 2] [3]]"}, // 9 bytes of data fit; a third entry's overhead does not
		{[]int{100, 1, 1}, "[[1] [2 3]]"},
		{[]int{1, 100, 1}, "[[1] [2] [3]]"},
		{[]int{10, 10}, "[[1] [2]]"},
		{nil, "[]"},
	} {
		var got [][]uint64
		for _, c := range proposalChunks(mk(tc.sizes...), 9+2*entryOverheadBytes) {
			var ids []uint64
			for _, q := range c {
				ids = append(ids, q.id)
			}
			got = append(got, ids)
		}
		if g := fmt.Sprint(got); g != tc.want { // a nil [][]uint64 prints as []
			t.Errorf("sizes %v: chunks %s, want %s", tc.sizes, g, tc.want)
		}
	}
}
