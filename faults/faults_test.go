package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

func isUsage(err error) bool {
	var ue *cmdline.UsageError
	return errors.As(err, &ue)
}

func TestParseNemeses(t *testing.T) {
	all, err := ParseNemeses("all")
	if err != nil || !reflect.DeepEqual(all, Names()) || len(all) != 14 {
		t.Fatalf("all = %v, %v", all, err)
	}
	for _, n := range all {
		if n == LoseTail || n == Membership {
			t.Fatalf("the opt-in %s is part of all", n)
		}
	}
	got, err := ParseNemeses("kill, pause,kill,lose-tail")
	if err != nil || !reflect.DeepEqual(got, []string{Kill, Pause, LoseTail}) {
		t.Fatalf("list = %v, %v", got, err)
	}
	for _, none := range []string{"", "none"} {
		if got, err := ParseNemeses(none); err != nil || len(got) != 0 {
			t.Fatalf("%q = %v, %v", none, got, err)
		}
	}
	_, err = ParseNemeses("kill,partition-everything")
	if !isUsage(err) || !strings.Contains(err.Error(), `"partition-everything"`) {
		t.Fatalf("unknown nemesis: %v", err)
	}
}

func TestValidateNemeses(t *testing.T) {
	if err := ValidateNemeses(Names(), 3); err != nil {
		t.Fatalf("every nemesis on 3 nodes: %v", err)
	}
	for _, c := range []struct {
		name  string
		nodes int
	}{{PartitionHalves, 1}, {PartitionLeader, 1}, {Delay, 1}, {Bridge, 2}} {
		if err := ValidateNemeses([]string{c.name}, c.nodes); !isUsage(err) {
			t.Fatalf("%s on %d nodes: %v, want a usage error", c.name, c.nodes, err)
		}
	}
	if err := ValidateNemeses([]string{Kill, Pause, TornTail}, 1); err != nil {
		t.Fatalf("process nemeses on one node: %v", err)
	}
}

func TestScheduleIsDeterministic(t *testing.T) {
	o := ScheduleOptions{Nemeses: Names(), Nodes: 3, Duration: 120 * time.Second, Seed: 7}
	a, err := NewSchedule(o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSchedule(o)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two schedules of one seed differ")
	}
	o.Seed = 8
	c, _ := NewSchedule(o)
	if reflect.DeepEqual(a.Steps, c.Steps) {
		t.Fatal("seeds 7 and 8 give the same schedule")
	}
	d := DefaultScheduleOptions()
	seen := map[string]bool{}
	var prevEnd time.Duration
	for i, s := range a.Steps {
		seen[s.Nemesis] = true
		if s.Index != i || s.At < d.WarmUp || s.Hold < d.MinHold || s.Hold > d.MaxHold ||
			s.At+s.Hold > o.Duration-d.CoolDown || s.At < prevEnd+d.MinQuiet && i > 0 {
			t.Fatalf("step %+v is out of bounds (previous fault healed at %v)", s, prevEnd)
		}
		prevEnd = s.At + s.Hold
	}
	if len(a.Steps) < len(Names()) {
		t.Fatalf("%d steps in 120 s", len(a.Steps))
	}
	for _, n := range Names() {
		if !seen[n] {
			t.Fatalf("nemesis %s never scheduled in %d steps", n, len(a.Steps))
		}
	}
	// A fixed seed gives a fixed schedule (guards against accidental
	// changes of the generator).
	one, _ := NewSchedule(ScheduleOptions{Nemeses: []string{PartitionLeader}, Nodes: 3, Duration: 30 * time.Second, Seed: 1})
	if len(one.Steps) == 0 || one.Steps[0].At != 3*time.Second {
		t.Fatalf("seed 1 schedule: %+v", one.Steps)
	}
}

// FitAllDuration (check's default -duration) fits every nemesis, whatever
// the seed.
func TestFitAllDuration(t *testing.T) {
	for _, names := range [][]string{Names(), {Kill}, AllNames()} {
		o := ScheduleOptions{Nemeses: names, Nodes: 3}
		o.Duration = o.FitAllDuration()
		for seed := int64(1); seed <= 50; seed++ {
			o.Seed = seed
			s, err := NewSchedule(o)
			if err != nil {
				t.Fatalf("%d nemeses, %v, seed %d: %v", len(names), o.Duration, seed, err)
			}
			if len(s.Steps) < len(names) {
				t.Fatalf("%d nemeses, %v, seed %d: %d steps", len(names), o.Duration, seed, len(s.Steps))
			}
		}
	}
}

func TestScheduleBadInput(t *testing.T) {
	for name, o := range map[string]ScheduleOptions{
		"below warm-up":     {Nemeses: []string{Kill}, Nodes: 3, Duration: 2 * time.Second},
		"no room for fault": {Nemeses: []string{Kill}, Nodes: 3, Duration: 6 * time.Second},
		"no faults, short":  {Nodes: 3, Duration: time.Second},
		"zero duration":     {Nodes: 3},
		"one node halves":   {Nemeses: []string{PartitionHalves}, Nodes: 1, Duration: time.Minute},
		"unknown":           {Nemeses: []string{"flood"}, Nodes: 3, Duration: time.Minute},
	} {
		if _, err := NewSchedule(o); !isUsage(err) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
	if s, err := NewSchedule(ScheduleOptions{Nodes: 3, Duration: 5 * time.Second}); err != nil || len(s.Steps) != 0 {
		t.Fatalf("no nemeses: %+v %v", s, err)
	}
}

func TestWindows(t *testing.T) {
	ev := []Event{
		{Time: 1, Step: 0, Nemesis: Kill, Action: "inject"},
		{Time: 2, Step: 0, Nemesis: Kill, Action: "heal"},
		{Time: 3, Step: 1, Nemesis: Pause, Action: "inject", Error: "boom"},
		{Time: 4, Step: 2, Nemesis: Pause, Action: "inject"},
		{Time: 5, Step: -1, Nemesis: "all", Action: "heal-all"},
		{Time: 6, Step: 3, Nemesis: Delay, Action: "inject"},
	}
	w := Windows(ev, 9)
	want := []Window{{Step: 0, Nemesis: Kill, Start: 1, End: 2}, {Step: 2, Nemesis: Pause, Start: 4, End: 5}, {Step: 3, Nemesis: Delay, Start: 6, End: 9}}
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("windows %+v, want %+v", w, want)
	}
}

// TestHealAt: a step reached late keeps its whole hold when the schedule's
// fault time (duration minus cool-down) allows, keeps what is left of it
// up to that end if that is at least half, and is skipped otherwise;
// without a duration the step's own heal time is the end.
func TestHealAt(t *testing.T) {
	st := Step{At: 10 * time.Second, Hold: 4 * time.Second}
	timed := &Schedule{Options: ScheduleOptions{Duration: 30 * time.Second, CoolDown: 2 * time.Second}}
	untimed := &Schedule{}
	for _, c := range []struct {
		s        *Schedule
		elapsed  time.Duration
		wantAt   time.Duration
		wantKeep bool
	}{
		{timed, 10 * time.Second, 14 * time.Second, true},
		{timed, 13 * time.Second, 17 * time.Second, true}, // late: the whole hold, later
		{timed, 25 * time.Second, 28 * time.Second, true}, // 3 s of 4 left before 28 s
		{timed, 26*time.Second + time.Millisecond, 28 * time.Second, false},
		{timed, 40 * time.Second, 40 * time.Second, false},
		{untimed, 12 * time.Second, 14 * time.Second, true}, // 2 s of 4 left
		{untimed, 12*time.Second + time.Millisecond, 14 * time.Second, false},
		{untimed, 14*time.Second - 2*time.Millisecond, 14 * time.Second, false}, // the 2 ms window a user saw listed as a fault
	} {
		at, keep := c.s.HealAt(st, c.elapsed)
		if keep != c.wantKeep || (keep && at != c.wantAt) {
			t.Errorf("HealAt(at %v hold %v, reached %v, duration %v) = %v, %v; want %v, %v",
				st.At, st.Hold, c.elapsed, c.s.Options.Duration, at, keep, c.wantAt, c.wantKeep)
		}
	}
}

// TestRunSkipsLateStep: Run records a step it reaches too late as "skip"
// and injects nothing for it (the step's nemesis would need a cluster;
// this env has none), and skipped steps open no fault window.
func TestRunSkipsLateStep(t *testing.T) {
	env := &Env{Cluster: &cluster.Spec{}, Start: time.Now().Add(-time.Minute)}
	s := &Schedule{Steps: []Step{{Index: 0, Nemesis: Kill, At: time.Second, Hold: 4 * time.Second}}}
	ev := s.Run(context.Background(), env)
	if len(ev) != 2 || ev[0].Action != "skip" || ev[0].Step != 0 || ev[1].Action != "heal-all" || ev[1].Error != "" {
		t.Fatalf("events %+v, want a skip of step 0 and the heal-all", ev)
	}
	if !strings.Contains(ev[0].Detail, "less than half") {
		t.Errorf("skip detail %q does not say why", ev[0].Detail)
	}
	if w := Windows(ev, 2*time.Minute); len(w) != 0 {
		t.Fatalf("windows %+v for a skipped step", w)
	}
}

// echo serves lines back, prefixed with name.
func echo(t *testing.T, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, name+":"+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(addr string) (string, time.Duration, error) {
	begin := time.Now()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return "", 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), time.Since(begin), err
}

// agents starts n agents in this process (agent.Serve, no nodes), each
// with a line echo server as its node's peer address, and returns a Spec
// of a cluster with agent links whose agents know their peers, as
// cluster.Up leaves one (SetPeers), and each node's dial address for each
// member.
func agents(t *testing.T, ids ...uint64) (*cluster.Spec, map[uint64]map[uint64]string) {
	t.Helper()
	dir := t.TempDir()
	token, err := agent.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.WriteToken(filepath.Join(dir, cluster.TokenFile), token); err != nil {
		t.Fatal(err)
	}
	spec := &cluster.Spec{Dir: dir, Links: true, System: "original"}
	for _, id := range ids {
		spec.Nodes = append(spec.Nodes, startAgent(t, dir, token, id))
	}
	return spec, setPeers(t, spec)
}

// startAgent serves node id's agent in this process until the test ends.
func startAgent(t *testing.T, dir, token string, id uint64) cluster.Node {
	t.Helper()
	nodeDir := filepath.Join(dir, fmt.Sprintf("node%d", id))
	addrFile := filepath.Join(nodeDir, "agent.address")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Serve(ctx, agent.Config{Listen: "127.0.0.1:0", AddressFile: addrFile, Dir: nodeDir, Token: token})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent %d: %v", id, err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(addrFile)
		if err == nil {
			return cluster.Node{ID: id, InternalAddress: echo(t, fmt.Sprintf("n%d", id)), Agent: strings.TrimSpace(string(b)), Dir: nodeDir}
		}
		select {
		case err := <-done:
			t.Fatalf("agent %d ended: %v", id, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %d wrote no address in 10 s", id)
		}
	}
}

// setPeers tells every agent of spec its members (cluster.Spec does it
// when a node starts or a member is added), and returns each node's dial
// address for each other member.
func setPeers(t *testing.T, spec *cluster.Spec) map[uint64]map[uint64]string {
	t.Helper()
	dial := map[uint64]map[uint64]string{}
	for i := range spec.Nodes {
		n := &spec.Nodes[i]
		peers := map[uint64]string{}
		for _, m := range spec.Nodes {
			if m.ID != n.ID {
				peers[m.ID] = m.InternalAddress
			}
		}
		a, err := spec.Agent(n)
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.SetPeers(context.Background(), &agentpb.SetPeersRequest{Peers: peers})
		if err != nil {
			t.Fatalf("SetPeers of node %d: %v", n.ID, err)
		}
		dial[n.ID] = r.Dial
	}
	return dial
}

// TestNet: links cut, restored and delayed through the agents that own
// them; a cut is made at the sender's agent only.
func TestNet(t *testing.T) {
	spec, dial := agents(t, 1, 2, 3)
	n, err := NewNet(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if m, d := n.Mechanism(), n.Describe(); m != "proxy" || !strings.Contains(d, "agent") {
		t.Fatalf("mechanism %q (%q), want proxy in the agents", m, d)
	}
	if len(n.Links()) != 6 {
		t.Fatalf("%d links, want 6", len(n.Links()))
	}
	via := func(from, to uint64) string { return dial[from][to] }
	for _, l := range n.Links() {
		got, _, err := roundTrip(via(l.From, l.To))
		if err != nil || got != fmt.Sprintf("n%d:ping", l.To) {
			t.Fatalf("link %s: %q %v", l, got, err)
		}
	}
	// An open connection dies with the cut, new ones are refused, the
	// reverse direction still works.
	conn, err := net.Dial("tcp", via(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := n.Cut(Link{1, 2}); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection through a cut link still delivers")
	}
	if _, _, err := roundTrip(via(1, 2)); err == nil {
		t.Fatal("a cut link accepts connections")
	}
	for _, l := range []Link{{2, 1}, {1, 3}} {
		if got, _, err := roundTrip(via(l.From, l.To)); err != nil || got != fmt.Sprintf("n%d:ping", l.To) {
			t.Fatalf("link %s, not cut: %q %v", l, got, err)
		}
	}
	if c := n.Cuts(); !reflect.DeepEqual(c, []Link{{1, 2}}) {
		t.Fatalf("cuts %v", c)
	}
	if err := n.Cut(Link{1, 9}); err == nil || !strings.Contains(err.Error(), "no link 1->9") {
		t.Fatalf("cut of a link to a non-member: %v", err)
	}
	if err := n.Restore(Link{1, 2}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := roundTrip(via(1, 2)); err != nil || got != "n2:ping" {
		t.Fatalf("restored link: %q %v", got, err)
	}
	// Delay.
	if err := n.Delay(150*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if _, d, err := roundTrip(via(3, 1)); err != nil || d < 150*time.Millisecond {
		t.Fatalf("delayed round trip took %v (%v), want >= 150ms", d, err)
	}
	// HealAll clears cuts and delay.
	if err := n.Cut(n.Links()...); err != nil {
		t.Fatal(err)
	}
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	if c := n.Cuts(); len(c) != 0 {
		t.Fatalf("cuts after HealAll: %v", c)
	}
	for _, l := range n.Links() {
		got, d, err := roundTrip(via(l.From, l.To))
		if err != nil || got != fmt.Sprintf("n%d:ping", l.To) || d > 100*time.Millisecond {
			t.Fatalf("after HealAll, link %s: %q in %v, %v", l, got, d, err)
		}
	}
}

// A member added later (its agent told of the members, and theirs of it,
// as cluster.Spec.AddMember does) gets the links' state with Refresh: the
// delay in force on its own links, and its links can be cut like the
// others; a removed member's cuts are forgotten.
func TestNetAddedMember(t *testing.T) {
	spec, _ := agents(t, 1, 2, 3)
	n, err := NewNet(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Delay(150*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if err := n.Cut(Link{3, 1}); err != nil {
		t.Fatal(err)
	}
	token, err := spec.Token()
	if err != nil {
		t.Fatal(err)
	}
	spec.Nodes = append(spec.Nodes, startAgent(t, spec.Dir, token, 4))
	dial := setPeers(t, spec)
	if err := n.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(n.Links()) != 12 {
		t.Fatalf("%d links after adding node 4, want 12", len(n.Links()))
	}
	for _, m := range spec.Nodes[:3] {
		got, d, err := roundTrip(dial[4][m.ID])
		if err != nil || got != fmt.Sprintf("n%d:ping", m.ID) || d < 150*time.Millisecond {
			t.Fatalf("link 4->%d: %q in %v (the delay in force: 150ms), %v", m.ID, got, d, err)
		}
	}
	if _, _, err := roundTrip(dial[3][1]); err == nil {
		t.Fatal("the cut link 3->1 accepts connections after the refresh")
	}
	if err := n.Cut(Link{1, 4}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := roundTrip(dial[1][4]); err == nil {
		t.Fatal("the cut link 1->4 accepts connections")
	}
	// Node 3 leaves: its cut is forgotten.
	spec.Nodes = slices.DeleteFunc(spec.Nodes, func(m cluster.Node) bool { return m.ID == 3 })
	if err := n.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := n.Cuts(); !reflect.DeepEqual(c, []Link{{1, 4}}) {
		t.Fatalf("cuts after node 3 left: %v", c)
	}
}

// NewNet refuses a cluster without agent links, and agents that cannot
// cut (a node that dials its peers itself, no packet filter).
func TestNetRefuses(t *testing.T) {
	spec, _ := agents(t, 1, 2)
	spec.Links = false
	if _, err := NewNet(context.Background(), spec); !isUsage(err) {
		t.Fatalf("a cluster without links: %v, want a usage error", err)
	}
	spec.Links = true
	a, err := spec.Agent(&spec.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetPeers(context.Background(), &agentpb.SetPeersRequest{Peers: map[uint64]string{1: spec.Nodes[0].InternalAddress}, NoProxies: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewNet(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "nodes 2 cannot cut links") {
		t.Fatalf("an agent without proxies nor packet filter: %v", err)
	}
}

// The disk nemeses ask for -diskFaults on the nodes, and refuse to inject
// into nodes started without it.
func TestDiskNemesesNeedDiskFaults(t *testing.T) {
	if !NeedsDiskFaults([]string{Kill, SlowDisk}) || NeedsDiskFaults([]string{Kill, TornTail}) {
		t.Fatal("NeedsDiskFaults is wrong")
	}
	e := &Env{Cluster: &cluster.Spec{Nodes: []cluster.Node{{ID: 1, Address: "127.0.0.1:1"}}}}
	for _, name := range []string{DiskFull, FsyncError, SlowDisk} {
		n, _ := lookup(name)
		if _, err := n.inject(context.Background(), e, Step{Nemesis: name}); err == nil || !strings.Contains(err.Error(), "-diskFaults") {
			t.Fatalf("%s without -diskFaults: %v", name, err)
		}
	}
}
