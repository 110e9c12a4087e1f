package node

import (
	"context"
	"errors"
	"testing"
	"time"

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
	isDone := func() bool {
		select {
		case <-g.done:
			return true
		default:
			return false
		}
	}
	w.proposed(1, 7, 3) // 9 not yet handed to raft
	w.trigger(9, applyResult{index: 90})
	if isDone() {
		t.Fatal("done after one of three answers")
	}
	w.failProposedBefore(5, errLeaderChanged) // fails 7 and 3, proposed in epoch 1
	if !isDone() {
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
	ctx, cancel := context.WithTimeout(context.Background(), writes*leaderWait*2)
	defer cancel()
	start := time.Now()
	res := n.proposeBatchAndWait(ctx, ids, data)
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
