package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/cluster"
)

func isUsage(err error) bool {
	var ue *systems.UsageError
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

func TestNet(t *testing.T) {
	all := []cluster.Node{
		{ID: 1, InternalAddress: echo(t, "n1")},
		{ID: 2, InternalAddress: echo(t, "n2")},
		{ID: 3, InternalAddress: echo(t, "n3")},
	}
	n := NewNet()
	defer n.Close()
	dial := map[uint64][]string{}
	for _, self := range all {
		args := n.NodeArgs(self, all)
		if len(args) != 4 || args[0] != "-dialPeers" || args[2] != "-dialPeersFile" {
			t.Fatalf("node args %v", args)
		}
		dial[self.ID] = strings.Split(args[1], ",")
		if dial[self.ID][self.ID-1] != self.InternalAddress {
			t.Fatalf("node %d dials itself at %s", self.ID, dial[self.ID][self.ID-1])
		}
	}
	if len(n.Links()) != 6 {
		t.Fatalf("%d links, want 6", len(n.Links()))
	}
	via := func(from, to uint64) string { return dial[from][to-1] }
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
	if got, _, err := roundTrip(via(2, 1)); err != nil || got != "n1:ping" {
		t.Fatalf("reverse link: %q %v", got, err)
	}
	if c := n.Cuts(); !reflect.DeepEqual(c, []Link{{1, 2}}) {
		t.Fatalf("cuts %v", c)
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
	for _, l := range n.Links() {
		got, d, err := roundTrip(via(l.From, l.To))
		if err != nil || got != fmt.Sprintf("n%d:ping", l.To) || d > 100*time.Millisecond {
			t.Fatalf("after HealAll, link %s: %q in %v, %v", l, got, d, err)
		}
	}
}

// A member added later (cluster.Spec.NodeArgs) gets proxies for its links
// both ways: its own -dialPeers, and the other members' -dialPeersFile
// (which they read for a member -peers does not name); its links can be
// cut like the others.
func TestNetAddedMember(t *testing.T) {
	dir := t.TempDir()
	var all []cluster.Node
	for id := uint64(1); id <= 4; id++ {
		data := filepath.Join(dir, fmt.Sprintf("node%d", id), "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		all = append(all, cluster.Node{ID: id, InternalAddress: echo(t, fmt.Sprintf("n%d", id)), Data: data})
	}
	n := NewNet()
	defer n.Close()
	for _, self := range all[:3] {
		n.NodeArgs(self, all[:3])
	}
	if err := n.Delay(150*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	args := n.NodeArgs(all[3], all)
	if len(args) != 4 || args[0] != "-dialPeers" || args[3] != DialPeersFile(all[3]) {
		t.Fatalf("added node's args %v", args)
	}
	if len(n.Links()) != 12 {
		t.Fatalf("%d links after adding node 4, want 12", len(n.Links()))
	}
	dial := strings.Split(args[1], ",")
	for i, m := range all[:3] {
		got, d, err := roundTrip(dial[i])
		if err != nil || got != fmt.Sprintf("n%d:ping", m.ID) || d < 150*time.Millisecond {
			t.Fatalf("link 4->%d: %q in %v (the delay in force: 150ms), %v", m.ID, got, d, err)
		}
	}
	for _, m := range all[:3] {
		b, err := os.ReadFile(DialPeersFile(m))
		if err != nil {
			t.Fatal(err)
		}
		var addrs map[string]string
		if err := json.Unmarshal(b, &addrs); err != nil || len(addrs) != 3 || addrs["4"] == "" {
			t.Fatalf("node %d's dial peers file: %s (%v)", m.ID, b, err)
		}
		if got, _, err := roundTrip(addrs["4"]); err != nil || got != "n4:ping" {
			t.Fatalf("link %d->4: %q %v", m.ID, got, err)
		}
		if got := n.DialPeers(m, all); !strings.HasSuffix(got, ","+addrs["4"]) {
			t.Fatalf("node %d's -dialPeers after the change %s does not end with its proxy to node 4 %s", m.ID, got, addrs["4"])
		}
	}
	if err := n.Cut(Link{1, 4}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(DialPeersFile(all[0]))
	var addrs map[string]string
	_ = json.Unmarshal(b, &addrs)
	if _, _, err := roundTrip(addrs["4"]); err == nil {
		t.Fatal("the cut link 1->4 accepts connections")
	}
}

func TestNetRefusesNonLoopback(t *testing.T) {
	n := NewNet()
	defer n.Close()
	all := []cluster.Node{{ID: 1, InternalAddress: "10.1.2.3:5000"}, {ID: 2, InternalAddress: "127.0.0.1:5001"}}
	args := n.NodeArgs(all[0], all)
	if n.Err() == nil || !strings.Contains(n.Err().Error(), "loopback") || args[1] != "proxy-setup-failed" {
		t.Fatalf("non-loopback member: args %v, err %v", args, n.Err())
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
