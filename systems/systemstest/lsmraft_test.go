package systemstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
)

// The span crash points of the lsm-raft system (baseline.LSMRaftCrashPoints),
// named here so that this package stays free of concrete systems: whether
// the victim is the leader (it sends spans) or a follower (it takes them).
var lsmRaftCrashPoints = []struct {
	point  string
	leader bool
}{
	{"span-send", true},
	{"span-transfer", false},
	{"span-ingest", false},
	{"span-after-ingest", false},
}

// lsmRaftSpanArgs make spans small and frequent (a span per few hundred of
// writeMany's writes).
var lsmRaftSpanArgs = []string{"-lsmraft.spanBytes", "65536", "-lsmraft.spanIdle", "100ms"}

// Kill an lsm-raft node at each named point of span handling (the leader
// while it sends a span, a follower while it receives or ingests one),
// restart it, and check that no acknowledged write is lost, no deleted key
// is back, and the nodes converge. Node 1 campaigns at once, so it leads
// (the victim of span-send) and node 2 follows.
func TestLSMRaftCrashPoints(t *testing.T) {
	for i, cp := range lsmRaftCrashPoints {
		t.Run(cp.point, func(t *testing.T) {
			victim := uint64(2)
			if cp.leader {
				victim = 1
			}
			h := startWith(t, Options{System: "lsm-raft", Binary: binary, Seed: int64(700 + i), ExtraArgs: lsmRaftSpanArgs},
				victimArgs(victim, "-lsmraft.crashPoint", cp.point))
			acked, deleted := h.writeBeforeCrash()
			// Spans come with writes: write until the victim died (it may
			// have caught up by a replay instead of spans for a while).
			n, _ := h.spec.Node(victim)
			deadline := time.Now().Add(60 * time.Second)
			for round := 0; cluster.Alive(n.PID) && time.Now().Before(deadline); round++ {
				for k, v := range h.writeMany(fmt.Sprintf("c%d-", round), 200, "more") {
					acked[k] = v
				}
			}
			waitDead(t, h.spec, victim, 10*time.Second)
			h.recoverFromCrashPoint(victim, cp.point, acked, deleted, "a00007")
		})
	}
}
