package experiments

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/cluster"
)

// Waiting for the nodes to go quiet before a measurement: their writes
// (settle), GC (waitGC, waitIdleGC) and replication (awaitReplicated).

// ioSnapshot is every node's cumulative write_bytes minus
// cancelled_write_bytes (/proc/PID/io, through its agent): bytes it caused
// to be written to the device, without pages dirtied then truncated away.
type ioSnapshot map[uint64]int64

func readIO(ctx context.Context, tb *testbed) (ioSnapshot, error) {
	out := ioSnapshot{}
	for _, n := range tb.spec.Nodes {
		st, err := tb.nodeStats(ctx, n.ID, false, false)
		if err != nil {
			return nil, err
		}
		out[n.ID] = st.WriteBytes - st.CancelledWriteBytes
	}
	return out, nil
}

// perNodeWritten is the mean bytes a node wrote between two snapshots.
func perNodeWritten(before, after ioSnapshot) float64 {
	var sum int64
	for id, a := range after {
		sum += a - before[id]
	}
	return float64(sum) / float64(len(after))
}

// settle waits until the nodes stop writing (background flushes,
// compactions and GC done): two consecutive seconds with less than 1 MB
// written per node, at most 60 s.
func settle(ctx context.Context, tb *testbed) error {
	prev, err := readIO(ctx, tb)
	if err != nil {
		return err
	}
	quiet := 0
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && quiet < 2; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		cur, err := readIO(ctx, tb)
		if err != nil {
			return err
		}
		if perNodeWritten(prev, cur) < 1e6 {
			quiet++
		} else {
			quiet = 0
		}
		prev = cur
	}
	return nil
}

// waitGC waits until GC is quiet: no node's GC round count changed and no
// node's Raft log shrank for three seconds (three checks of the default
// -gcInterval), up to two minutes. Strategies differ in what they leave in
// the log, so "quiet" is the only criterion that fits them all.
func (x *Run) waitGC(ctx context.Context, tb *testbed) error {
	if tb.spec == nil {
		return nil
	}
	const window = 3 * time.Second
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	stableSince := time.Now()
	for {
		sts, err := tb.spec.Status(ctx)
		if err != nil {
			return err
		}
		var state []string
		for _, st := range sts {
			r, err := st.Response()
			if err != nil {
				return fmt.Errorf("node %d: %w", st.Node.ID, err)
			}
			state = append(state, fmt.Sprintf("%d/%d", len(r.GcRounds), r.LogBytes))
		}
		cur := strings.Join(state, " ")
		if cur != last {
			last, stableSince = cur, time.Now()
		} else if time.Since(stableSince) >= window {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GC still busy after 2 minutes (rounds/log bytes per node: %s)", cur)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitIdleGC waits, after a write phase that ended at end, until the
// nodes' idle rounds have started (the default -gcIdleAfter plus one
// stagger slot per node) and then until GC is quiet (waitGC).
func (x *Run) waitIdleGC(ctx context.Context, tb *testbed, end time.Time) error {
	if tb.spec != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(end.Add(x.idleGCAfter(len(tb.spec.Nodes))))):
		}
	}
	return x.waitGC(ctx, tb)
}

// replicatedWait bounds awaitReplicated.
const replicatedWait = 10 * time.Second

// awaitReplicated waits, at most wait, until every node that answers has
// in its log every entry committed when the wait began: its last index at
// or past the highest commit index any node reported then. A run ends when
// a quorum has its writes, and a window closed then missed what the
// slowest follower still had to write: after 32 PUTs of 256 KiB (the quick
// profile's put-vsize), nezha's write amplification in the window read
// 0.67, one node's share of the run missing from the mean. Nodes without a
// log range in their status (etcd) and nodes that do not answer are left
// out; past wait, the window closes as it is.
func awaitReplicated(ctx context.Context, spec *cluster.Spec, wait time.Duration) {
	awaitLogs(ctx, func(ctx context.Context) []*kvpb.StatusResponse {
		sts, err := spec.Status(ctx)
		if err != nil {
			return nil
		}
		var rs []*kvpb.StatusResponse
		for _, st := range sts {
			if r, err := st.Response(); err == nil {
				rs = append(rs, r)
			}
		}
		return rs
	}, wait, 20*time.Millisecond)
}

// awaitLogs is awaitReplicated's loop over the answers of status, polled
// every poll; it reports whether the logs caught up.
func awaitLogs(ctx context.Context, status func(context.Context) []*kvpb.StatusResponse, wait, poll time.Duration) bool {
	deadline := time.Now().Add(wait)
	var target uint64
	for first := true; ; first = false {
		low, have := uint64(0), false
		for _, r := range status(ctx) {
			if r.GetLastIndex() == 0 {
				continue
			}
			if first {
				target = max(target, r.GetCommitIndex())
			}
			if !have || r.GetLastIndex() < low {
				low = r.GetLastIndex()
			}
			have = true
		}
		if !have || low >= target {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
	}
}
