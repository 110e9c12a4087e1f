package systemstest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
)

// The GC crash points of the nezha package (nezha.CrashPoints), named here
// so that this package stays free of concrete systems, with the node flags
// that make a round reach each: with the default (tiered) strategy, the
// writes below only make checkpoint rounds, and the idle round after them
// copies; runs are merged (a tier merge, input runs removed from the
// manifest) under -gcContinuous with a fan-out of 2.
var gcCrashPoints = []struct {
	point string
	args  []string
	// memoryIndex: also run the point with -index memory (a subset, to
	// keep the suite short; every point passed with it when MemoryIndex
	// was introduced).
	memoryIndex bool
}{
	{"gc-during-copy", nil, false},
	{"gc-before-switch", nil, false},
	{"gc-during-switch", nil, true},
	{"gc-after-switch", nil, false},
	{"gc-before-delete", nil, false},
	{"gc-after-manifest", []string{"-gcContinuous", "-gcFanout", "2"}, false},
	{"gc-tier-merge-during-switch", []string{"-gcContinuous", "-gcFanout", "2"}, false},
	{"gc-idle-after-freeze", nil, false},
	{"gc-checkpoint-after-compact", nil, true},
}

// writeMany puts n keys (prefix%05d) with 200-byte values from 16 writers
// and returns the acknowledged ones. A write whose outcome is unknown (the
// node it went to died) is left out: it may or may not be there.
func (h *harness) writeMany(prefix string, n int, tag string) map[string]string {
	h.t.Helper()
	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				k := fmt.Sprintf("%s%05d", prefix, i)
				v := fmt.Sprintf("%s-%s-%s", tag, k, strings.Repeat("v", 180))
				if _, err := h.c.Put(ctx, []byte(k), []byte(v)); errors.Is(err, client.ErrAmbiguous) {
					continue
				} else if err != nil {
					errs <- fmt.Errorf("put %s: %w", k, err)
					return
				}
				mu.Lock()
				acked[k] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		h.t.Fatal(err)
	}
	return acked
}

func (h *harness) deleteKeys(keys []string) {
	h.t.Helper()
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	for _, k := range keys {
		if _, err := h.c.Delete(ctx, []byte(k)); err != nil {
			h.t.Fatalf("delete %s: %v", k, err)
		}
	}
}

// checkNode verifies, with local reads on node id, every acknowledged
// write and that no deleted key came back.
func (h *harness) checkNode(id uint64, acked map[string]string, deleted []string) {
	h.t.Helper()
	n, _ := h.spec.Node(id)
	for k, want := range acked {
		got, ok, err := h.staleGet(*n, k)
		if err != nil || !ok || got != want {
			h.t.Fatalf("node %d: %s = %q (found %v, err %v), want %q", id, k, trunc(got), ok, err, trunc(want))
		}
	}
	for _, k := range deleted {
		if got, ok, err := h.staleGet(*n, k); err != nil || ok {
			h.t.Fatalf("node %d: deleted key %s is back: %q (err %v)", id, k, trunc(got), err)
		}
	}
}

func waitDead(t *testing.T, spec *cluster.Spec, id uint64, timeout time.Duration) {
	t.Helper()
	n, _ := spec.Node(id)
	deadline := time.Now().Add(timeout)
	for cluster.Alive(n.PID) {
		if time.Now().After(deadline) {
			t.Fatalf("node %d still alive after %v; log tail:\n%s", id, timeout, cluster.Tail(n.Log, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.PID = 0
}

// Kill a node at each named point of a GC round, restart it, and check
// that no acknowledged write is lost and no deleted key resurrected.
// Each point runs with the default index (LevelDB), some also with the
// memory index (its GC checkpoint is what a restart after compaction
// loads).
func TestGCCrashPoints(t *testing.T) {
	for i, cp := range gcCrashPoints {
		testGCCrashPoint(t, cp.point, cp.point, int64(100+i), cp.args)
		if cp.memoryIndex {
			testGCCrashPoint(t, cp.point+"-memory-index", cp.point, int64(100+i), append([]string{"-index", "memory"}, cp.args...))
		}
	}
}

// testGCCrashPoint runs one crash point as subtest name.
func testGCCrashPoint(t *testing.T, name, point string, seed int64, args []string) {
	t.Run(name, func(t *testing.T) {
		const victim = uint64(2)
		h := startWith(t, Options{System: "nezha", Binary: binary, Seed: seed,
			ExtraArgs: append([]string{"-segmentSizeBytes", "65536", "-gcThresholdBytes", "300000", "-gcInterval", "50ms"}, args...)},
			victimArgs(victim, "-gcCrashPoint", point))
		acked, deleted := h.writeBeforeCrash()
		more := h.writeMany("b", 600, "second") // pushes the log over the GC threshold
		for k, v := range more {
			acked[k] = v
		}
		waitDead(t, h.spec, victim, 60*time.Second)
		h.recoverFromCrashPoint(victim, point, acked, deleted, "b00007")
	})
}

// victimArgs gives node victim the flags args (a crash point), the other
// nodes none.
func victimArgs(victim uint64, args ...string) func(cluster.Node, []cluster.Node) []string {
	return func(self cluster.Node, _ []cluster.Node) []string {
		if self.ID == victim {
			return args
		}
		return nil
	}
}

// writeBeforeCrash writes a00000..a01199 and deletes three of them
// (outside the a00000..a00099 that recoverFromCrashPoint overwrites); it
// returns the acknowledged writes and the deleted keys.
func (h *harness) writeBeforeCrash() (acked map[string]string, deleted []string) {
	deleted = []string{"a00150", "a00500", "a01100"}
	acked = h.writeMany("a", 1200, "first")
	h.deleteKeys(deleted)
	for _, k := range deleted {
		delete(acked, k)
	}
	return acked, deleted
}

// recoverFromCrashPoint checks that node victim, dead, died at crash point
// point; writes (overwriting a00000..a00099) and deletes del without it;
// restarts it without its extra flags (the crash point); and checks that
// the nodes converge and victim holds every acknowledged write and no
// deleted key.
func (h *harness) recoverFromCrashPoint(victim uint64, point string, acked map[string]string, deleted []string, del string) {
	t := h.t
	t.Helper()
	n, _ := h.spec.Node(victim)
	logText, _ := os.ReadFile(n.Log)
	if !strings.Contains(string(logText), point) {
		t.Fatalf("node %d died, but not at %s; log tail:\n%s", victim, point, cluster.Tail(n.Log, 20))
	}
	// Writes and deletes continue without it.
	over := h.writeMany("a", 100, "overwrite")
	for k, v := range over {
		acked[k] = v
	}
	h.deleteKeys([]string{del})
	delete(acked, del)
	deleted = append(deleted, del)
	n.ExtraArgs = nil
	if err := h.spec.Restart(victim); err != nil {
		t.Fatal(err)
	}
	h.convergence()
	h.checkNode(victim, acked, deleted)
}

// rejoinThroughSnapshot kills a follower, writes until the leader's log is
// compacted past the follower's last entry (Raft-aware compaction first
// waits for the follower to count as down), restarts the follower and
// checks that it caught up through a Raft snapshot with every
// acknowledged write and no deleted key. It returns the follower's id.
func (h *harness) rejoinThroughSnapshot(acked map[string]string, deleted []string) (follower, leader uint64) {
	t := h.t
	t.Helper()
	leader = h.leader()
	follower = uint64(1)
	if leader == follower {
		follower = 2
	}
	fn, _ := h.spec.Node(follower)
	// A write under a client session, then overwritten: resent later, after
	// the log was compacted past it and the follower restored a snapshot,
	// it must still be recognized (on the follower too) and not applied.
	h.sessionIndex = h.sessionPut(*fn, sessionClient, 1, "session-key", "first")
	h.put("session-key", "second")
	acked["session-key"] = "second"
	if err := h.spec.Kill(follower); err != nil {
		t.Fatal(err)
	}
	// A bound on what the dead follower holds: the leader's last index
	// after the kill (a follower never holds more than its leader). The
	// follower's own last index read before the kill is not one: an entry
	// can reach it between that read and the kill (GC's own proposals
	// come at any time), and it would then catch up from the log.
	ln, _ := h.spec.Node(leader)
	ctx, cancel := ctxFor(5 * time.Second)
	st, err := h.c.Status(ctx, ln.Address, false)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	followerLast := st.LastIndex
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		for k, v := range h.writeMany(fmt.Sprintf("t%d-", round), 100, "during") {
			acked[k] = v
		}
		ctx, cancel := ctxFor(5 * time.Second)
		ls, err := h.c.Status(ctx, ln.Address, false)
		cancel()
		if err == nil && ls.CompactedIndex > followerLast {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader never compacted past %d; log tail:\n%s", followerLast, cluster.Tail(ln.Log, 20))
		}
	}
	if err := h.spec.Restart(follower); err != nil {
		t.Fatal(err)
	}
	h.convergence()
	logText, _ := os.ReadFile(fn.Log)
	if !strings.Contains(string(logText), "snapshot installed") {
		t.Fatalf("follower %d caught up without a snapshot; log tail:\n%s", follower, cluster.Tail(fn.Log, 30))
	}
	h.checkNode(follower, acked, deleted)
	h.resendSessionWrite(follower, leader)
	h.convergence()
	h.checkNode(follower, acked, deleted)
	return follower, leader
}

// resendSessionWrite resends rejoinThroughSnapshot's session write through
// each of nodes: each must answer with the first copy's index (and apply
// nothing: checkNode and convergence see the later value).
func (h *harness) resendSessionWrite(nodes ...uint64) {
	h.t.Helper()
	for _, n := range nodes {
		nd, _ := h.spec.Node(n)
		if got := h.sessionPut(*nd, sessionClient, 1, "session-key", "first"); got != h.sessionIndex {
			h.t.Fatalf("node %d answered a resent write with index %d; its first copy was applied at %d", n, got, h.sessionIndex)
		}
	}
}

// sessionClient is the client id of the suite's hand-made session writes.
const sessionClient = 0x5e55

// sessionPut sends one put under a client session to node n and returns
// the index the cluster reports for it.
func (h *harness) sessionPut(n cluster.Node, clientID, seq uint64, key, value string) uint64 {
	h.t.Helper()
	cc, err := grpc.NewClient(n.Address, client.DialOptions(1<<20)...)
	if err != nil {
		h.t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	r, err := kvpb.NewKVClient(cc).Put(ctx, &kvpb.PutRequest{Key: []byte(key), Value: []byte(value), ClientId: clientID, Seq: seq})
	if err != nil {
		h.t.Fatalf("put %s under session %d/%d on node %d: %v", key, clientID, seq, n.ID, err)
	}
	return r.Index
}

// A follower that is down while the leader compacts its log rejoins
// through a Raft snapshot.
func TestGCFollowerRejoinsThroughSnapshot(t *testing.T) {
	h := startWith(t, Options{System: "nezha", Binary: binary, Seed: 200,
		ExtraArgs: []string{"-segmentSizeBytes", "65536", "-gcContinuous", "-gcInterval", "20ms"}}, nil)
	acked := h.writeMany("s", 200, "before")
	follower, leader := h.rejoinThroughSnapshot(acked, nil)
	// It keeps up after the snapshot.
	for k, v := range h.writeMany("after", 50, "after") {
		acked[k] = v
	}
	h.convergence()
	h.checkNode(follower, acked, nil)
	// The old leader, restarted on its compacted log, still knows the
	// session (from the table of its compaction point and its log).
	if err := h.spec.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if err := h.spec.Restart(leader); err != nil {
		t.Fatal(err)
	}
	h.convergence()
	h.resendSessionWrite(leader, follower)
	h.convergence()
	h.checkNode(leader, acked, nil)
}

// The Raft + RocksDB baselines truncate their Raft log (package baseline,
// -rocksdb.logRetainBytes): a follower that is down while the leader
// truncates rejoins through a Raft snapshot of the leader's RocksDB, and
// the log stays bounded.
func TestGCBaselineFollowerRejoinsThroughSnapshot(t *testing.T) {
	const retain, segment = 262144, 65536
	for i, system := range []string{"original", "pasv", "lsm-raft"} {
		t.Run(system, func(t *testing.T) {
			h := startWith(t, Options{System: system, Binary: binary, Seed: int64(300 + i),
				ExtraArgs: []string{"-segmentSizeBytes", fmt.Sprint(segment),
					"-rocksdb.logRetainBytes", fmt.Sprint(retain), "-rocksdb.logTruncateInterval", "50ms"}}, nil)
			acked := h.writeMany("s", 200, "before")
			deleted := []string{"s00010", "s00020"}
			h.deleteKeys(deleted)
			for _, k := range deleted {
				delete(acked, k)
			}
			follower, leader := h.rejoinThroughSnapshot(acked, deleted)
			// It keeps up after the snapshot, and survives a restart on
			// the restored database.
			for k, v := range h.writeMany("after", 50, "after") {
				acked[k] = v
			}
			h.convergence()
			h.checkNode(follower, acked, deleted)
			if err := h.spec.Kill(follower); err != nil {
				t.Fatal(err)
			}
			if err := h.spec.Restart(follower); err != nil {
				t.Fatal(err)
			}
			h.convergence()
			h.resendSessionWrite(follower)
			h.convergence()
			h.checkNode(follower, acked, deleted)
			// Every node's log ends up within the budget plus one segment,
			// and the leader reports its truncation rounds (a round is
			// recorded just after its compaction is visible: poll).
			for _, n := range h.spec.Nodes {
				deadline := time.Now().Add(20 * time.Second)
				for {
					ctx, cancel := ctxFor(5 * time.Second)
					st, err := h.c.Status(ctx, n.Address, false)
					cancel()
					reported := n.ID != leader
					for _, r := range st.GetGcRounds() {
						if r.Strategy == "raft-log-truncation" && r.Error == "" && r.SegmentsRemoved > 0 {
							reported = true
						}
					}
					if err == nil && st.LogBytes <= retain+segment && reported {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("node %d: Raft log holds %d bytes (err %v), want at most %d; truncation rounds %v",
							n.ID, st.GetLogBytes(), err, retain+segment, st.GetGcRounds())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
}
