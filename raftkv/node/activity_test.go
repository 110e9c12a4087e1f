package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/systems"
)

// TestStatusReportsLeaderChanges: after the leader stops, each survivor
// reports, on request only, the leader change it saw, ended and naming
// the new leader; the election at the start is not in a window that
// begins after it.
func TestStatusReportsLeaderChanges(t *testing.T) {
	tc := startCluster(t, 3)
	old := tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, nd := range tc.nodes {
		waitFor(t, 10*time.Second, "every node knows the leader", func() bool { return nd.lead.Load() == uint64(old+1) })
	}
	first := old
	for i := range tc.nodes {
		if i != old {
			first = i
			break
		}
	}
	st, err := (&kvServer{n: tc.nodes[first]}).Status(ctx, &kvpb.StatusRequest{ActivitiesSinceUnixNanos: tc.nodes[first].epoch.UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Activities) != 1 || st.Activities[0].Kind != systems.ActivityLeaderChange || st.Activities[0].EndUnixNanos == 0 ||
		st.Activities[0].Detail != fmt.Sprintf("node started, leader %d", old+1) {
		t.Fatalf("activities since the start: %v; want the first election, ended, naming leader %d", st.Activities, old+1)
	}

	stopped := time.Now()
	tc.stop(old)
	next := tc.waitLeader(20 * time.Second)
	for i, nd := range tc.nodes {
		if nd == nil {
			continue
		}
		waitFor(t, 10*time.Second, "the survivor knows the new leader", func() bool { return nd.lead.Load() == uint64(next+1) })
		srv := &kvServer{n: nd}
		st, err := srv.Status(ctx, &kvpb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Activities) != 0 {
			t.Errorf("node %d: activities without asking: %v", i+1, st.Activities)
		}
		st, err = srv.Status(ctx, &kvpb.StatusRequest{ActivitiesSinceUnixNanos: stopped.UnixNano()})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, a := range st.Activities {
			if a.Kind != systems.ActivityLeaderChange {
				t.Errorf("node %d: activity %v of a memory store", i+1, a)
				continue
			}
			if a.StartUnixNanos < stopped.UnixNano() || a.EndUnixNanos < a.StartUnixNanos {
				t.Errorf("node %d: leader change %v outside [stop, now]", i+1, a)
			}
			if strings.HasSuffix(a.Detail, fmt.Sprintf("leader %d", next+1)) || strings.HasSuffix(a.Detail, fmt.Sprintf("-> %d", next+1)) {
				found = true
			}
		}
		if !found {
			t.Errorf("node %d: no ended leader change to %d in %v", i+1, next+1, st.Activities)
		}
	}
}
