package node

import (
	"context"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nezha-harness/nezha/client"
)

// waitHealth polls the health service at addr until it reports want, or
// fails the test after deadline with the last answer.
func waitHealth(t *testing.T, c *client.Client, addr string, want healthpb.HealthCheckResponse_ServingStatus, deadline time.Duration) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := c.Health(ctx, addr)
		cancel()
		if err == nil && got == want {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("health of %s: got %v (err %v), want %v within %v", addr, got, err, want, deadline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHealthService: every node's client API and peer transport answer the
// standard gRPC health service; SERVING once a leader is known,
// NOT_SERVING when the node loses its quorum, SERVING again when the
// quorum is back, and no answer once stopped.
func TestHealthService(t *testing.T) {
	tc := startCluster(t, 3)
	c := tc.client(t)
	for i, cfg := range tc.cfgs {
		waitHealth(t, c, cfg.Address, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
		waitHealth(t, c, cfg.InternalAddress, healthpb.HealthCheckResponse_SERVING, time.Second)
		t.Logf("node %d SERVING", i+1)
	}
	// Stop two of three: node 1 has no quorum, so no leader (CheckQuorum
	// makes a leader step down; PreVote makes a follower forget its leader).
	tc.stop(1)
	tc.stop(2)
	waitHealth(t, c, tc.cfgs[0].Address, healthpb.HealthCheckResponse_NOT_SERVING, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if st, err := c.Health(ctx, tc.cfgs[1].Address); err == nil {
		t.Fatalf("stopped node 2 answered health %v", st)
	}
	tc.start(1)
	waitHealth(t, c, tc.cfgs[0].Address, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
	waitHealth(t, c, tc.cfgs[1].Address, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
}
