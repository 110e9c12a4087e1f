package systemstest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
)

// A follower whose last log segment lost its tail (fsynced, acknowledged
// records cut away: outside Raft's fault model) is brought back by
// `cluster replace`: it is removed, and a fresh member (new id, empty data)
// catches up through a snapshot of the leader's compacted log and serves
// every acknowledged write, also after its own restart.
func TestReplaceFollowerWithCutSegment(t *testing.T) {
	const seed = 300
	// The victim runs without continuous GC, whose rounds roll the active
	// segment: its last segment keeps the kilobytes to cut.
	const victim = 3
	h := startWith(t, Options{System: "nezha", Binary: binary, Seed: seed,
		ExtraArgs: []string{"-segmentSizeBytes", "65536"}}, func(self cluster.Node, _ []cluster.Node) []string {
		if self.ID == victim {
			return nil
		}
		return []string{"-gcContinuous", "-gcInterval", "20ms"}
	})
	acked := h.writeMany("r", 300, "before")
	ctx, cancel := ctxFor(3 * time.Minute)
	defer cancel()
	leader := h.leader()
	if leader == victim {
		var err error
		if leader, err = h.spec.TransferLeader(ctx, 1); err != nil || leader != 1 {
			t.Fatalf("transfer to node 1: leader %d, %v", leader, err)
		}
	}
	// Write until the leader compacted its log: the new member then
	// catches up through a snapshot (bounded: 20 rounds).
	ln, _ := h.spec.Node(leader)
	for round := 0; ; round++ {
		ctx, cancel := ctxFor(5 * time.Second)
		st, err := h.c.Status(ctx, ln.Address, false)
		cancel()
		if err == nil && st.CompactedIndex > 0 {
			break
		}
		if round == 20 {
			t.Fatalf("leader never compacted its log; log tail:\n%s", cluster.Tail(ln.Log, 20))
		}
		for k, v := range h.writeMany(fmt.Sprintf("c%d-", round), 100, "compact") {
			acked[k] = v
		}
	}
	// The victim's last segment must hold more than the bytes to cut: a
	// segment that rolled just now holds a few hundred (CI saw 693). Write
	// until it does (bounded: 20 rounds of about 22 KB, a third of a
	// segment each, so a round that rolls it leaves the rest in the new one).
	cut := int64(100 + h.rng.Intn(3901)) // 100..4000 bytes, seeded
	vn, _ := h.spec.Node(victim)
	for round := 0; ; round++ {
		if end, err := raftlog.SegmentDataBytes(lastSegment(t, *vn)); err == nil && end > cut+1024 {
			break
		}
		if round == 20 {
			t.Fatalf("the victim's last segment never grew past %d bytes", cut+1024)
		}
		for k, v := range h.writeMany(fmt.Sprintf("g%d-", round), 100, "grow") {
			acked[k] = v
		}
	}
	if err := h.spec.Kill(victim); err != nil {
		t.Fatal(err)
	}
	// Cut records, not the zero padding after them that a node killed
	// while writing with direct I/O leaves (which holds no entry: CI saw a
	// cut of 1107 bytes that took padding only, and a node that rightly
	// lived on).
	seg := lastSegment(t, *vn)
	end, err := raftlog.SegmentDataBytes(seg)
	if err != nil {
		t.Fatal(err)
	}
	if end <= cut {
		t.Fatalf("the last segment %s has %d bytes of records, not more than the %d to cut", seg, end, cut)
	}
	t.Logf("seed %d: cutting %d of the %d bytes of records off %s", seed, cut, end, seg)
	if err := os.Truncate(seg, end-cut); err != nil {
		t.Fatal(err)
	}
	for k, v := range h.writeMany("during", 50, "during") {
		acked[k] = v
	}
	// Restarted, it finds that it lost entries it had acknowledged, refuses
	// to continue, and names the way back.
	_ = h.spec.Restart(victim) // it may or may not still answer when Restart looks
	waitDead(t, h.spec, victim, 30*time.Second)
	logText, _ := os.ReadFile(vn.Log)
	if !strings.Contains(string(logText), "acknowledged entries were lost") || !strings.Contains(string(logText), "nezha cluster replace") {
		t.Fatalf("node %d on a cut log did not refuse naming `nezha cluster replace`; log tail:\n%s", victim, cluster.Tail(vn.Log, 20))
	}
	nn, err := h.spec.Replace(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.spec.Node(victim); err == nil {
		t.Fatalf("node %d is still in %s after replace", victim, cluster.FileName)
	}
	for k, v := range h.writeMany("after", 50, "after") {
		acked[k] = v
	}
	h.convergence()
	h.checkNode(nn.ID, acked, nil)
	logText, _ = os.ReadFile(nn.Log)
	if !strings.Contains(string(logText), "snapshot installed") {
		t.Fatalf("node %d caught up without a snapshot; log tail:\n%s", nn.ID, cluster.Tail(nn.Log, 30))
	}
	// The new member restarts on its own data and membership.
	if err := h.spec.Kill(nn.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.spec.Restart(nn.ID); err != nil {
		t.Fatal(err)
	}
	h.put("last", "v")
	acked["last"] = "v"
	h.convergence()
	h.checkNode(nn.ID, acked, nil)
}

// A member added after the leader compacted its log, with no compaction
// since, catches up through a snapshot whose membership (the compaction
// point's) predates it: the leader sends it with the new member as a
// learner in it, which raft on the new member would otherwise ignore
// ("not in the ConfState"), again and again. Found by check -nemesis
// membership -seed 2.
func TestAddAfterCompaction(t *testing.T) {
	h := startWith(t, Options{System: "original", Binary: binary, Seed: 301,
		ExtraArgs: []string{"-segmentSizeBytes", "65536", "-rocksdb.logRetainBytes", "65536", "-rocksdb.logTruncateInterval", "50ms"}}, nil)
	acked := h.writeMany("a", 300, "before")
	ln, _ := h.spec.Node(h.leader())
	var compacted uint64
	for round := 0; ; round++ {
		ctx, cancel := ctxFor(5 * time.Second)
		st, err := h.c.Status(ctx, ln.Address, false)
		cancel()
		if err == nil && st.CompactedIndex > 0 {
			compacted = st.CompactedIndex
			break
		}
		if round == 20 {
			t.Fatalf("leader never compacted its log; log tail:\n%s", cluster.Tail(ln.Log, 20))
		}
		for k, v := range h.writeMany(fmt.Sprintf("c%d-", round), 100, "compact") {
			acked[k] = v
		}
	}
	ctx, cancel := ctxFor(20 * time.Second)
	defer cancel()
	nn, err := h.spec.AddMember(ctx, true)
	if err != nil {
		t.Fatalf("add a member after compaction to %d: %v", compacted, err)
	}
	h.convergence()
	h.checkNode(nn.ID, acked, nil)
}
