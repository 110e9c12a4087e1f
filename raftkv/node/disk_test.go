package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
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
	// The leader reports the stall as one write-stall activity, ended by
	// the held write that saw it end.
	st, err := kv.Status(ctx, &kvpb.StatusRequest{ActivitiesSinceUnixNanos: tc.nodes[leader].epoch.UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	var stallActs []*kvpb.Activity
	for _, a := range st.Activities {
		if a.Kind == systems.ActivityWriteStall {
			stallActs = append(stallActs, a)
		}
	}
	if len(stallActs) != 1 || stallActs[0].EndUnixNanos <= stallActs[0].StartUnixNanos || stallActs[0].Detail != debt.Error() {
		t.Fatalf("write-stall activities %v; want one, ended, saying %q", stallActs, debt)
	}
}

// writeLoad is a closed-loop put load (a bench put) of writers through one
// client: it counts the acknowledged puts and the refusals.
type writeLoad struct {
	ok, exhausted, other atomic.Int64
	mu                   sync.Mutex
	lastErr              error
	stop                 chan struct{}
	wg                   sync.WaitGroup
}

// startLoad runs writers putting fresh keys through c until the test ends.
func startLoad(t *testing.T, c *client.Client, writers int) *writeLoad {
	l := &writeLoad{stop: make(chan struct{})}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := c.Put(ctx, []byte(fmt.Sprintf("load-%d-%06d", w, i)), []byte("v"))
				cancel()
				switch {
				case err == nil:
					l.ok.Add(1)
					continue
				case status.Code(err) == codes.ResourceExhausted:
					l.exhausted.Add(1)
				default:
					l.other.Add(1)
				}
				l.mu.Lock()
				l.lastErr = err
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { close(l.stop); l.wg.Wait() })
	return l
}

func (l *writeLoad) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d acknowledged, %d refused (ResourceExhausted), %d other errors (last: %v)", l.ok.Load(), l.exhausted.Load(), l.other.Load(), l.lastErr)
}

// leaderIndex returns the index of the node that leads now, or -1.
func (tc *testCluster) leaderIndex() int {
	for i, nd := range tc.nodes {
		if nd != nil && nd.lead.Load() == nd.id {
			return i
		}
	}
	return -1
}

// diskHealth asks node i's internal address for kvpb.DiskHealthService.
func (tc *testCluster) diskHealth(t *testing.T, i int) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	cc, err := grpc.NewClient(tc.cfgs[i].InternalAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: kvpb.DiskHealthService})
	if err != nil {
		t.Fatalf("node %d: disk health: %v", i+1, err)
	}
	return resp.Status
}

// A leader whose disk fills while the other voters have space hands its
// leadership to one of them, and a put load goes on: writes succeed again
// within a few election timeouts and none is refused as final
// (ResourceExhausted). The full node says why in Status, on the disk
// health service and in its metrics; once its disk has space again it
// says so.
func TestLeaderWithFullDiskHandsOverLeadership(t *testing.T) {
	tc := startCluster(t, 3)
	old := tc.waitLeader(10 * time.Second)
	load := startLoad(t, tc.client(t), 4)
	waitFor(t, 10*time.Second, "100 puts before the fault", func() bool { return load.ok.Load() >= 100 })

	if err := tc.nodes[old].DiskFS().SetFaults(vfs.Fault{Kind: vfs.FaultDiskFull}); err != nil {
		t.Fatal(err)
	}
	injected := time.Now()
	waitFor(t, 10*time.Second, "the leadership off the full disk", func() bool {
		l := tc.leaderIndex()
		return l >= 0 && l != old
	})
	moved := time.Since(injected)
	acked := load.ok.Load()
	waitFor(t, 10*time.Second, "100 puts under the new leader", func() bool { return load.ok.Load() >= acked+100 })
	et := tc.nodes[old].electionTimeout()
	t.Logf("leadership moved %v after the disk filled (election timeout %v); writes went on: %v", moved, et, load)
	if n := load.exhausted.Load(); n > 0 {
		t.Fatalf("%d puts refused as final with a healthy quorum: %v", n, load)
	}
	if got := testutil.ToFloat64(tc.nodes[old].metrics.diskTransfers.WithLabelValues("transferred")); got != 1 {
		t.Fatalf("node %d counted %v transfers for its disk, want 1", old+1, got)
	}

	st, err := rawKV(t, tc.cfgs[old].Address).Status(context.Background(), &kvpb.StatusRequest{})
	if err != nil || !strings.Contains(st.DiskRefusal, "disk full") {
		t.Fatalf("node %d's Status: disk_refusal %q (%v), want it to say the disk is full", old+1, st.GetDiskRefusal(), err)
	}
	for i := range tc.nodes {
		want := healthpb.HealthCheckResponse_SERVING
		if i == old {
			want = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if got := tc.diskHealth(t, i); got != want {
			t.Fatalf("node %d: disk health %v, want %v", i+1, got, want)
		}
	}
	if got := testutil.ToFloat64(tc.nodes[old].metrics.diskRefusing); got != 1 {
		t.Fatalf("node %d: nezha_disk_refusing_writes %v, want 1", old+1, got)
	}

	if err := tc.nodes[old].DiskFS().SetFaults(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the disk accepting writes again", func() bool { return tc.diskHealth(t, old) == healthpb.HealthCheckResponse_SERVING })
	if r := tc.nodes[old].diskRefusal.Load(); r != nil {
		t.Fatalf("node %d healthy again still reports a disk refusal: %s", old+1, *r)
	}
}

// The leader hands its leadership only to a voter whose disk accepts
// writes: nodes 1 and 2 are below their free-space minimum (node 1 leads
// first), so node 3 must lead, and stays leader; writes go on.
func TestDiskHandoffSkipsVotersWithoutSpace(t *testing.T) {
	tc := startClusterEach(t, 3, func(i int, c *Config) {
		if i < 2 {
			c.MinFreeDiskBytes = 1 << 62
		}
		c.CampaignOnBoot = i == 0
	})
	waitFor(t, 10*time.Second, "node 3 leading", func() bool { return tc.leaderIndex() == 2 })
	load := startLoad(t, tc.client(t), 2)
	waitFor(t, 10*time.Second, "100 puts", func() bool { return load.ok.Load() >= 100 })
	if l := tc.leaderIndex(); l != 2 || load.exhausted.Load() > 0 {
		t.Fatalf("leader node %d, load: %v; want node 3 leading, no put refused as final", l+1, load)
	}
	for i := range 2 {
		if got := testutil.ToFloat64(tc.nodes[i].metrics.diskTransfers.WithLabelValues("not_taken")); got != 0 {
			t.Fatalf("node %d: %v transfers not taken: one went to a voter without space", i+1, got)
		}
	}
}

// A cluster whose every voter is below its free-space minimum refuses
// writes as final (ResourceExhausted), and its leader keeps the
// leadership: there is no voter to hand it to.
func TestNoVoterWithSpaceRefusesWrites(t *testing.T) {
	tc := startClusterWith(t, 3, func(c *Config) { c.MinFreeDiskBytes = 1 << 62 })
	lead := tc.waitLeader(10 * time.Second)
	c := tc.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Put(ctx, []byte("k"), []byte("v"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "no other voter's disk accepts writes either") {
		t.Fatalf("put with every disk below its minimum: %v, want ResourceExhausted naming the voters", err)
	}
	if l := tc.leaderIndex(); l != lead {
		t.Fatalf("the leadership moved from node %d to node %d with no voter to take it", lead+1, l+1)
	}
	for i, nd := range tc.nodes {
		if got := testutil.ToFloat64(nd.metrics.diskTransfers.WithLabelValues("transferred")); got != 0 {
			t.Fatalf("node %d handed its leadership over %v times", i+1, got)
		}
	}
}

// A node starts a search at most once per election timeout, and moves its
// leadership for its disk at most once per diskTransferEveryElections of
// them: no ping-pong when disks fill and free by turns.
func TestDiskHandoffBounds(t *testing.T) {
	const et = time.Second
	var h diskHandoff
	t0 := time.Unix(1000, 0)
	if !h.begin(t0, et) {
		t.Fatal("the first search did not start")
	}
	if h.begin(t0.Add(2*et), et) {
		t.Fatal("a second search started while one runs")
	}
	h.end(t0.Add(et/2), false, true)
	if h.begin(t0.Add(et/2), et) {
		t.Fatal("a search started within an election timeout of the last")
	}
	if !h.begin(t0.Add(et), et) {
		t.Fatal("no search an election timeout after one that moved nothing")
	}
	h.end(t0.Add(et), true, false)
	for _, d := range []time.Duration{2 * et, diskTransferEveryElections*et - time.Millisecond} {
		if h.begin(t0.Add(et+d), et) {
			t.Fatalf("a search started %v after the leadership moved", d)
		}
	}
	if !h.begin(t0.Add(et+diskTransferEveryElections*et), et) {
		t.Fatalf("no search %d election timeouts after the leadership moved", diskTransferEveryElections)
	}
}
