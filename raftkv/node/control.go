package node

import (
	"context"
	"math"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/nezha-harness/nezha/systems"
)

// logControl implements systems.LogControl for the node's state machine.
type logControl struct{ n *Node }

var _ systems.LogControl = logControl{}

func (c logControl) Segments() []systems.SegmentInfo { return c.n.log.Segments() }

func (c logControl) Roll(ctx context.Context) error {
	return c.n.inLoop(ctx, func() error { return c.n.log.Roll() })
}

func (c logControl) Compact(ctx context.Context, index uint64) error {
	return c.n.compactLog(ctx, index)
}

func (c logControl) CompactedIndex() uint64 { return c.n.log.CompactedIndex() }

func (c logControl) CompactBound() uint64 {
	return min(c.n.applied.Load(), c.n.minFollowerMatch.Load())
}

func (c logControl) RemoveSegment(id uint64) error { return c.n.log.RemoveSegment(id) }

// inLoop runs f on the Ready loop goroutine and returns its error.
func (n *Node) inLoop(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	select {
	case n.ctlc <- func() { done <- f() }:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return errStopping
	case <-n.failed:
		return errStopping
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.failed:
		return errStopping
	}
}

// updateCompactBound publishes, on the leader, the lowest match index of the
// recently active followers (math.MaxUint64 elsewhere, or when none is
// active): entries above it are still needed by a live follower.
func (n *Node) updateCompactBound() {
	bound := uint64(math.MaxUint64)
	if n.rn.BasicStatus().RaftState == raft.StateLeader {
		n.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id != n.id && pr.RecentActive && pr.Match < bound {
				bound = pr.Match
			}
		})
	}
	n.minFollowerMatch.Store(bound)
}
