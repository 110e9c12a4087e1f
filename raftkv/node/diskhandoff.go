package node

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// A leader whose disk refuses writes (diskGuard: free space below
// -minFreeDiskBytes, or the disk full) cannot take a client write, while
// the other voters may well have space; had it kept the leadership, a
// healthy cluster would refuse every write for one node's disk. So it
// hands the leadership to a voter whose disk accepts writes (raft's
// TransferLeader, as RemoveMember does) and meanwhile refuses writes with
// Aborted, which clients retry on another member (a follower forwards
// them). Only when no other voter's disk accepts writes (or none answers)
// does it keep the leadership and refuse with ResourceExhausted, a
// definite answer: then the cluster is out of space.
//
// Every node knows its own disk from its guard, which watchDiskSpace
// consults every diskWatchInterval (statfs against the minimum, the full
// flag a write's ENOSPC set, the probe for space). It publishes the
// verdict on the gRPC health service kvpb.DiskHealthService, in Status
// (disk_refusal) and in the metric nezha_disk_refusing_writes. The leader
// asks the health service of each voter it heard from in the last
// election timeout, on the peer connection, and picks the most caught-up
// one that says SERVING: a voter whose disk refuses writes too is never
// chosen. The chosen voter's disk may fill before it leads; it then hands
// the leadership on in turn.
//
// Ping-pong is bounded: a node starts a search at most once per election
// timeout, and moves its leadership for its disk at most once per
// diskTransferEveryElections election timeouts.

// diskWatchInterval is how often a node consults its disk guard.
const diskWatchInterval = diskProbeInterval

// diskTransferEveryElections bounds, in election timeouts, how often one
// node hands its leadership over for its disk.
const diskTransferEveryElections = 10

// diskHandoff is a node's state of leadership transfers for its disk.
type diskHandoff struct {
	mu      sync.Mutex
	running bool
	// tried and moved are when the last search started and when the last
	// transfer moved the leadership.
	tried, moved time.Time
	// noVoter is when the last search found no other voter whose disk
	// accepts writes (zero: it found one, or none ran).
	noVoter time.Time
}

// electionTimeout is raft's base election timeout.
func (n *Node) electionTimeout() time.Duration {
	return time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
}

// watchDiskSpace publishes the disk guard's verdict every
// diskWatchInterval, until the node stops.
func (n *Node) watchDiskSpace() {
	t := time.NewTicker(diskWatchInterval)
	defer t.Stop()
	for {
		n.noteDisk(n.disk.check(0))
		select {
		case <-t.C:
		case <-n.stopc:
			return
		case <-n.failed:
			return
		}
	}
}

// noteDisk publishes refusal, the disk guard's verdict (nil: the disk
// accepts writes), and, on the leader whose disk refuses writes, starts a
// search for a voter to hand the leadership to. Any goroutine.
func (n *Node) noteDisk(refusal error) {
	var reason *string
	if refusal != nil {
		s := refusal.Error()
		reason = &s
	}
	if old := n.diskRefusal.Swap(reason); (old == nil) != (reason == nil) {
		st, gauge := healthpb.HealthCheckResponse_SERVING, 0.0
		if reason != nil {
			st, gauge = healthpb.HealthCheckResponse_NOT_SERVING, 1
			n.logger.Warn("the disk refuses client writes", "reason", *reason)
		} else {
			n.handoff.mu.Lock()
			n.handoff.noVoter = time.Time{}
			n.handoff.mu.Unlock()
			n.logger.Info("the disk accepts client writes again")
		}
		n.health.SetServingStatus(kvpb.DiskHealthService, st)
		n.metrics.diskRefusing.Set(gauge)
	}
	if refusal != nil && raft.StateType(n.raftState.Load()) == raft.StateLeader {
		n.startDiskHandoff()
	}
}

// noVoterWithSpace reports whether this leader's last search, within the
// last two election timeouts (it searches again every one while its disk
// refuses writes), found no other voter whose disk accepts writes.
func (n *Node) noVoterWithSpace() bool {
	n.handoff.mu.Lock()
	defer n.handoff.mu.Unlock()
	return !n.handoff.noVoter.IsZero() && time.Since(n.handoff.noVoter) < 2*n.electionTimeout()
}

// startDiskHandoff starts a search and transfer (handOffForDisk) unless
// one runs or the bounds of ping-pong forbid it now.
func (n *Node) startDiskHandoff() {
	if !n.handoff.begin(time.Now(), n.electionTimeout()) {
		return
	}
	go func() {
		moved, noVoter := n.handOffForDisk()
		n.handoff.end(time.Now(), moved, noVoter)
	}()
}

// begin reports whether a search may start at now (et: the election
// timeout), and if so marks it running: none runs, none started in the
// last election timeout, and the leadership did not move for the disk in
// the last diskTransferEveryElections election timeouts.
func (h *diskHandoff) begin(now time.Time, et time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running || now.Sub(h.tried) < et || !h.moved.IsZero() && now.Sub(h.moved) < diskTransferEveryElections*et {
		return false
	}
	h.running, h.tried = true, now
	return true
}

// end records the outcome of the search begun last.
func (h *diskHandoff) end(now time.Time, moved, noVoter bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = false
	if moved {
		h.moved = now
	}
	h.noVoter = time.Time{}
	if noVoter {
		h.noVoter = now
	}
}

// errNoLongerLeader ends a disk handoff whose node lost the leadership
// (or whose disk accepts writes again) meanwhile.
var errNoLongerLeader = errors.New("no longer the leader with a refusing disk")

// handOffForDisk hands this leader's leadership to the most caught-up
// voter, among those heard from in the last election timeout, whose disk
// accepts writes, and waits up to an election timeout for it to lead. It
// reports whether the leadership moved, and whether no such voter was
// found.
func (n *Node) handOffForDisk() (moved, noVoter bool) {
	et := n.electionTimeout()
	ctx, cancel := context.WithTimeout(context.Background(), 3*et)
	defer cancel()
	var voters []uint64
	err := n.inLoop(ctx, func() error {
		if n.rn.BasicStatus().RaftState != raft.StateLeader {
			return errNoLongerLeader
		}
		prs, _ := n.progress()
		for _, id := range n.confState.Voters {
			if id != n.id && prs[id].RecentActive {
				voters = append(voters, id)
			}
		}
		slices.SortStableFunc(voters, func(a, b uint64) int { return cmp.Compare(prs[b].Match, prs[a].Match) })
		return nil
	})
	if err != nil {
		return false, false
	}
	to := n.voterWithSpace(ctx, voters)
	if to == raft.None {
		n.metrics.diskTransfers.WithLabelValues("no_voter_with_space").Inc()
		n.logger.Warn("the disk refuses client writes and no other voter's disk accepts them: keeping the leadership, writes are refused",
			"voters_asked", voters)
		return false, true
	}
	err = n.inLoop(ctx, func() error {
		if n.rn.BasicStatus().RaftState != raft.StateLeader || n.diskRefusal.Load() == nil {
			return errNoLongerLeader
		}
		n.rn.TransferLeader(to)
		return nil
	})
	if err != nil {
		return false, false
	}
	n.logger.Warn("the disk refuses client writes: handing the leadership to a voter whose disk accepts them", "to", to)
	// raft gives a transfer up after an election timeout.
	deadline := time.NewTimer(et)
	defer deadline.Stop()
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	for n.lead.Load() == n.id {
		select {
		case <-tick.C:
			continue
		case <-deadline.C:
		case <-n.stopc:
		case <-n.failed:
		}
		break
	}
	if lead := n.lead.Load(); lead == n.id || lead == raft.None {
		n.metrics.diskTransfers.WithLabelValues("not_taken").Inc()
		n.logger.Warn("leadership transfer for the disk not completed within an election timeout", "to", to, "leader", lead)
		return false, false
	}
	n.metrics.diskTransfers.WithLabelValues("transferred").Inc()
	n.logger.Info("leadership handed over for the disk", "to", to, "leader", n.lead.Load())
	return true, false
}

// voterWithSpace asks the voters (most caught-up first) whether their
// disks accept writes, each within an election timeout, and returns the
// first that says so, or raft.None.
func (n *Node) voterWithSpace(ctx context.Context, voters []uint64) uint64 {
	ctx, cancel := context.WithTimeout(ctx, n.electionTimeout())
	defer cancel()
	ok := make([]bool, len(voters))
	var wg sync.WaitGroup
	for i, id := range voters {
		conn := n.transport.conn(id)
		if conn == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: kvpb.DiskHealthService})
			ok[i] = err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING
		}()
	}
	wg.Wait()
	for i, id := range voters {
		if ok[i] {
			return id
		}
	}
	return raft.None
}
