package node

import (
	"fmt"
	"slices"
	"testing"
	"testing/cryptotest"

	"go.etcd.io/raft/v3/raftpb"
)

// coalesceHeartbeats keeps each sender's last MsgHeartbeat and last
// MsgHeartbeatResp, whatever their contexts, and every other message, in
// the order received.
func TestCoalesceHeartbeats(t *testing.T) {
	const (
		hb   = raftpb.MsgHeartbeat
		resp = raftpb.MsgHeartbeatResp
	)
	in := []raftpb.Message{
		{Index: 0, From: 2, Type: raftpb.MsgApp},
		{Index: 1, From: 2, Type: resp, Context: []byte("round 1")},
		{Index: 2, From: 3, Type: hb, Commit: 5},
		{Index: 3, From: 3, Type: resp},
		{Index: 4, From: 2, Type: resp, Context: []byte("round 2")},
		{Index: 5, From: 3, Type: raftpb.MsgVote},
		{Index: 6, From: 2, Type: resp, Context: []byte("round 3")},
		{Index: 7, From: 3, Type: hb, Commit: 7},
		{Index: 8, From: 2, Type: raftpb.MsgAppResp},
		{Index: 9, From: 2, Type: hb, Commit: 3},
	}
	got := coalesceHeartbeats(slices.Clone(in))
	var idx []uint64
	for _, m := range got {
		idx = append(idx, m.Index)
	}
	if want := []uint64{0, 3, 5, 6, 7, 8, 9}; !slices.Equal(idx, want) {
		t.Fatalf("kept messages %v, want %v", idx, want)
	}
	if string(got[3].Context) != "round 3" || got[4].Commit != 7 {
		t.Fatalf("kept the wrong copies: %+v", got)
	}

	// More senders than the function's stack buffer holds; a batch
	// without heartbeats stays as it is.
	var many []raftpb.Message
	for round := range 3 {
		for from := uint64(1); from <= 20; from++ {
			many = append(many, raftpb.Message{From: from, Type: resp, Index: uint64(round)})
		}
	}
	got = coalesceHeartbeats(many)
	if len(got) != 20 {
		t.Fatalf("%d heartbeat answers of 20 senders kept, want 20", len(got))
	}
	for i, m := range got {
		if m.From != uint64(i+1) || m.Index != 2 {
			t.Fatalf("kept %d: from %d round %d, want from %d round 2", i, m.From, m.Index, i+1)
		}
	}
	plain := []raftpb.Message{{Type: raftpb.MsgApp, Index: 1}, {Type: raftpb.MsgAppResp, Index: 2}}
	if got := coalesceHeartbeats(slices.Clone(plain)); len(got) != 2 || got[0].Index != 1 || got[1].Index != 2 {
		t.Fatalf("a batch without heartbeats changed: %v", got)
	}
	if got := coalesceHeartbeats(nil); len(got) != 0 {
		t.Fatalf("empty batch: %v", got)
	}
}

// simWithLeader returns a sim of nodes nodes (seed 1) that node 1 leads,
// every message delivered and every entry applied; the test's cleanup
// closes it.
func simWithLeader(t *testing.T, nodes int) (*sim, *simNode) {
	t.Helper()
	cryptotest.SetGlobalRandom(t, 1)
	s, err := newSim(1, simOptions{nodes: nodes, clients: 1, keys: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	l := s.node(1)
	l.run(l.n.campaign)
	if err := s.runUntil("elect node 1", func() bool { return s.net.len() == 0 && s.converged() }); err != nil {
		t.Fatal(err)
	}
	if s.leader() != l {
		t.Fatalf("node 1 does not lead:\n%s", s.status())
	}
	return s, l
}

// A leader that steps a backlog of heartbeat answers from a follower it
// probes sends that follower one append, not one per answer; a follower
// that steps a backlog of heartbeats answers once. (The leader sent a
// probe of up to a MiB of entries per answer and, stepping hundreds of
// them before its next Ready, stopped ticking and lost its leadership.)
func TestHeartbeatBacklogOneProbe(t *testing.T) {
	s, l := simWithLeader(t, 3)
	f := s.node(2)
	sent := func(from, to uint64, typ raftpb.MessageType) int {
		c := 0
		for i := range s.net.len() {
			if m := s.net.at(i).m; m.From == from && m.To == to && m.Type == typ {
				c++
			}
		}
		return c
	}
	const backlog = 300
	term := l.n.term.Load()

	// The leader: follower 2 back to StateProbe, as after a lost stream.
	l.run(func() { l.n.rn.ReportUnreachable(f.id) })
	answers := make([]raftpb.Message, backlog)
	for i := range answers {
		answers[i] = raftpb.Message{Type: raftpb.MsgHeartbeatResp, From: f.id, To: l.id, Term: term}
	}
	before := sent(l.id, f.id, raftpb.MsgApp)
	l.run(func() { l.n.stepReceived(answers) })
	if probes := sent(l.id, f.id, raftpb.MsgApp) - before; probes != 1 {
		t.Fatalf("the leader sent %d appends for %d heartbeat answers in one batch, want 1", probes, backlog)
	}

	// The follower.
	commit := f.n.commit.Load()
	beats := make([]raftpb.Message, backlog)
	for i := range beats {
		beats[i] = raftpb.Message{Type: raftpb.MsgHeartbeat, From: l.id, To: f.id, Term: term, Commit: commit,
			Context: []byte(fmt.Sprint("round ", i))}
	}
	before = sent(f.id, l.id, raftpb.MsgHeartbeatResp)
	f.run(func() { f.n.stepReceived(beats) })
	if n := sent(f.id, l.id, raftpb.MsgHeartbeatResp) - before; n != 1 {
		t.Fatalf("the follower answered %d of %d heartbeats in one batch, want 1", n, backlog)
	}
	for i := range s.net.len() {
		if m := s.net.at(i).m; m.Type == raftpb.MsgHeartbeatResp && m.From == f.id && string(m.Context) != fmt.Sprint("round ", backlog-1) {
			t.Fatalf("the follower answered with context %q, want the last heartbeat's", m.Context)
		}
	}
}

// Coalesced heartbeat answers delay a ReadIndex round at most, never lose
// it: a follower's answer for a later round stands for its answers for the
// earlier ones, since the leader releases every round before one a quorum
// acknowledged.
func TestCoalescedAnswersConfirmReads(t *testing.T) {
	_, l := simWithLeader(t, 5)
	n := l.n
	term := n.term.Load()
	// Two rounds in flight at once (issueReads starts one at a time; the
	// leader also holds its followers' rounds).
	var ctxs [2][]byte
	var waits [2]chan readResult
	l.run(func() {
		for i := range ctxs {
			n.readSeq++
			waits[i] = make(chan readResult, 1)
			n.pendingReads[n.readSeq] = &readBatch{waiters: []readRequest{{ch: waits[i]}}, issuedAt: n.ticks}
			ctxs[i] = n.readCtx(n.readSeq)
			n.rn.ReadIndex(ctxs[i])
		}
	})
	answer := func(from uint64, ctx []byte) raftpb.Message {
		return raftpb.Message{Type: raftpb.MsgHeartbeatResp, From: from, To: l.id, Term: term, Context: ctx}
	}
	// Follower 2 answered both rounds (only its second answer is
	// stepped), follower 3 the first so far: a quorum of 3 of 5 for
	// neither round yet. Then follower 3's answer for the second round.
	l.run(func() { n.stepReceived([]raftpb.Message{answer(2, ctxs[0]), answer(2, ctxs[1]), answer(3, ctxs[0])}) })
	l.run(func() { n.stepReceived([]raftpb.Message{answer(3, ctxs[1])}) })
	for i, w := range waits {
		select {
		case r := <-w:
			if r.err != nil {
				t.Fatalf("read round %d: %v", i+1, r.err)
			}
		default:
			t.Fatalf("read round %d not confirmed once a quorum acknowledged the later round", i+1)
		}
	}
}
