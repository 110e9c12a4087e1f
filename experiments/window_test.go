package experiments

import (
	"context"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// TestAwaitLogs: the window waits until the slowest log holds what was
// committed when the wait began (not what is committed later), leaves out
// nodes without a log range, and gives up after its bound.
func TestAwaitLogs(t *testing.T) {
	st := func(commit, last uint64) *kvpb.StatusResponse {
		return &kvpb.StatusResponse{CommitIndex: commit, LastIndex: last}
	}
	ctx := context.Background()
	// The slowest follower catches up on the third poll, while the leader
	// commits more (which the wait does not chase).
	polls := [][]*kvpb.StatusResponse{
		{st(100, 100), st(100, 100), st(40, 40), st(0, 0)},
		{st(120, 120), st(120, 120), st(80, 80), st(0, 0)},
		{st(150, 150), st(150, 150), st(100, 100), st(0, 0)},
		{st(150, 150), st(150, 150), st(100, 100), st(0, 0)},
	}
	n := 0
	status := func(context.Context) []*kvpb.StatusResponse {
		p := polls[min(n, len(polls)-1)]
		n++
		return p
	}
	if !awaitLogs(ctx, status, 10*time.Second, time.Millisecond) || n != 3 {
		t.Fatalf("caught up after %d polls, want 3", n)
	}
	// A follower that never catches up: the wait ends at its bound.
	n = 0
	polls = [][]*kvpb.StatusResponse{{st(100, 100), st(100, 100), st(40, 40)}}
	start := time.Now()
	if awaitLogs(ctx, status, 50*time.Millisecond, time.Millisecond) {
		t.Fatal("a log stuck at 40 of 100 counted as caught up")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the wait took %v, its bound is 50ms", d)
	}
	// No node with a log range (etcd): nothing to wait for.
	n = 0
	polls = [][]*kvpb.StatusResponse{{st(0, 0), st(0, 0)}}
	if !awaitLogs(ctx, status, 10*time.Second, time.Millisecond) || n != 1 {
		t.Fatalf("without log ranges: %d polls, want 1", n)
	}
}
