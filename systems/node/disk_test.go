package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/systems/kvpb"
)

// A state machine's write stall (systems.WriteStaller) holds client writes
// without proposing them: a write that outlasts the request timeout is
// refused with ResourceExhausted and is not applied; a write held when the
// stall ends goes through.
func TestWriteStallHoldsWrites(t *testing.T) {
	tc := startClusterWith(t, 3, func(c *Config) { c.RequestTimeout = 500 * time.Millisecond })
	leader := tc.waitLeader(10 * time.Second)
	kv := rawKV(t, tc.cfgs[leader].Address)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sm := tc.nodes[leader].sm.(*memSM)
	debt := errors.New("write stall: test debt")
	sm.stall.Store(&debt)

	_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte("refused"), Value: []byte("v")})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("put during a stall longer than the request timeout: %v, want ResourceExhausted", err)
	}
	if _, err := kv.Delete(ctx, &kvpb.DeleteRequest{Key: []byte("refused")}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("delete during the stall: %v, want ResourceExhausted", err)
	}

	// A write sent during the stall completes once the stall ends. The
	// stall is lifted only after the write is seen waiting (the metric).
	done := make(chan error, 1)
	go func() {
		_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte("held"), Value: []byte("v")})
		done <- err
	}()
	stalls := func() float64 { return testutil.ToFloat64(tc.nodes[leader].metrics.writeStalls) }
	for deadline := time.Now().Add(10 * time.Second); stalls() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second put never waited in the stall (%v stalls counted)", stalls())
		}
	}
	sm.stall.Store(nil)
	if err := <-done; err != nil {
		t.Fatalf("put held by the stall, after it ended: %v", err)
	}
	c := tc.client(t)
	if _, found, err := c.Get(ctx, []byte("refused")); err != nil || found {
		t.Fatalf("the refused put was applied: found %v, err %v", found, err)
	}
	if v, found, err := c.Get(ctx, []byte("held")); err != nil || !found || string(v) != "v" {
		t.Fatalf("get held = %q %v %v", v, found, err)
	}
}
