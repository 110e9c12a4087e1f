// Package systemstest is the conformance suite every system passes on a real
// cluster: N `nezha serve` processes (Options.Nodes, default 3) on any
// backend (Options.Backend: loopback, containers, ssh hosts), driven
// through the Go client and the nodes' agents. It checks put/get/delete/scan semantics, bad input, leader
// failover with no acknowledged write lost, a restarted node catching up,
// and recovery after a torn log tail.
//
// Run it with Run from a test that has built the nezha binary (see
// BuildBinary).
package systemstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

// Options configures a suite run.
type Options struct {
	// System is the -system name.
	System string
	// Binary is the nezha executable.
	Binary string
	// ExtraArgs go to every serve process (e.g. "-index", "memory").
	ExtraArgs []string
	// Seed makes the generated data reproducible. Logged.
	Seed int64
	// ExpectGC: every node must report GC rounds that moved or removed
	// something by the end of the semantics test (a GC that never ran
	// would make a GC configuration's pass meaningless).
	ExpectGC bool
	// Nodes is the cluster size, 3..cluster.MaxNodes. Default 3.
	Nodes int
	// ChangeMembers: while each test runs, a background goroutine adds a
	// node (learner, caught up, promoted) and then removes another member
	// (chosen by Seed among those the test does not act on; the leader
	// too), through cluster.Spec.AddMember and RemoveMember as `nezha
	// cluster add|remove` do, each bounded by MembershipTimeout; the test
	// then checks that the change succeeded and that the leader's
	// membership and cluster.json list exactly the members asked for
	// (membership.go). Not for an external system.
	ChangeMembers bool
	// Backend is where the nodes run (default local). The suite acts on
	// them through their agents only, so it runs on every backend.
	Backend cluster.BackendOptions
}

// nodes returns o.Nodes or its default.
func (o Options) nodes() int {
	if o.Nodes == 0 {
		return 3
	}
	return o.Nodes
}

// BuildBinary builds ./cmd/nezha of the module rooted at moduleDir into
// dir and returns its path.
func BuildBinary(moduleDir, dir string) (string, error) {
	out := filepath.Join(dir, "nezha")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/nezha")
	cmd.Dir = moduleDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/nezha: %v\n%s", err, b)
	}
	return out, nil
}

// harness is one running cluster under test.
type harness struct {
	t *testing.T
	// mu guards spec's node list and PIDs, which the background
	// membership change (Options.ChangeMembers) changes while the test
	// kills and restarts nodes; the suite's tests reach spec through the
	// locked helpers (nodes, kill, restart, node).
	mu   sync.Mutex
	spec *cluster.Spec
	c    *client.Client
	rng  *rand.Rand
	// sessionIndex is where a test's hand-made session write was applied.
	sessionIndex uint64
	// members is the background membership change, if any.
	members *memberChange
}

// nodes returns a copy of the current members.
func (h *harness) nodes() []cluster.Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.spec.Nodes)
}

// node returns a copy of member id; the test fails if it is not a member.
func (h *harness) node(id uint64) cluster.Node {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	n, err := h.spec.Node(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return *n
}

// kill SIGKILLs member id and keeps the background membership change
// away from it for the rest of the test.
func (h *harness) kill(id uint64) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pinLocked(id)
	if err := h.spec.Kill(id); err != nil {
		h.t.Fatal(err)
	}
}

// restart starts member id again.
func (h *harness) restart(id uint64) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.spec.Restart(id); err != nil {
		h.t.Fatal(err)
	}
}

// pinLocked keeps the background membership change from removing id.
func (h *harness) pinLocked(id uint64) {
	if h.members != nil {
		h.members.pinned[id] = true
	}
}

// killLeader SIGKILLs the leader and returns its id.
func (h *harness) killLeader() uint64 { return h.killRole(true) }

// killFollower SIGKILLs the first member (in cluster.json order) that is
// not the leader and returns its id.
func (h *harness) killFollower() uint64 { return h.killRole(false) }

// killRole SIGKILLs the leader or a follower, finding it and killing it
// under one lock (the background membership change cannot remove it in
// between), and pins it.
func (h *harness) killRole(leader bool) uint64 {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	l, err := h.spec.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	pick := l
	if !leader {
		for _, n := range h.spec.Nodes {
			if n.ID != l {
				pick = n.ID
				break
			}
		}
	}
	h.pinLocked(pick)
	if err := h.spec.Kill(pick); err != nil {
		h.t.Fatal(err)
	}
	return pick
}

// Suite timing: a 50 ms tick (election timeout 0.5-1 s) keeps the suite
// short; the node defaults run in the README's tour and in the experiments.
var suiteArgs = []string{"-tick", "50ms", "-minFreeDiskBytes", "0"}

// externalSuiteArgs are the suite's flags for an external system (etcd
// takes -tick; it has no disk reserve).
var externalSuiteArgs = []string{"-tick", "50ms"}

func start(t *testing.T, o Options) *harness { return startWith(t, o, nil) }

// startWith starts a cluster of o.Nodes nodes; nodeArgs (optional) adds flags per node.
func startWith(t *testing.T, o Options, nodeArgs func(self cluster.Node, all []cluster.Node) []string) *harness {
	t.Helper()
	return startAt(t, o, t.TempDir(), nodeArgs)
}

// startIn starts a cluster of o.Nodes nodes in dir.
func startIn(t *testing.T, o Options, dir string) *harness {
	t.Helper()
	return startAt(t, o, dir, nil)
}

func startAt(t *testing.T, o Options, dir string, nodeArgs func(self cluster.Node, all []cluster.Node) []string) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := suiteArgs
	if cluster.External(o.System) {
		args = externalSuiteArgs
	}
	spec, _, err := cluster.Up(ctx, cluster.UpOptions{
		Dir: dir, System: o.System, Nodes: o.nodes(), Binary: o.Binary,
		ExtraArgs: append(append([]string(nil), args...), o.ExtraArgs...),
		NodeArgs:  nodeArgs, Backend: o.Backend,
	})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range spec.Nodes {
				t.Logf("node %d log tail:\n%s", n.ID, spec.NodeTail(&n, 15))
			}
		}
		// A local cluster's files go with the test's directory; on other
		// backends nothing may stay behind (containers, volumes, a
		// network, the hosts' directories).
		if err := spec.Down(o.Backend.Name != "" && o.Backend.Name != cluster.BackendLocal); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	c, err := client.New(spec.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Logf("system %s, %d nodes, seed %d, cluster in %s", o.System, o.nodes(), o.Seed, dir)
	h := &harness{t: t, spec: spec, c: c, rng: rand.New(rand.NewSource(o.Seed))}
	if o.ChangeMembers {
		h.startMemberChange(o.Seed)
	}
	return h
}

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// put writes k = v and fails the test unless it is acknowledged.
//
// An external system (etcd) has no client sessions: a put whose connection
// dies with the node it was sent to (a killed follower that forwarded it)
// has an unknown outcome, and the suite resends it. That is safe here: the
// suite writes each key from one goroutine, so a resent put of the same
// value leaves the same state whether or not the first one was applied.
// The harness's own systems must never return an ambiguous outcome to
// these puts (their client resends under its session).
func (h *harness) put(k, v string) {
	h.t.Helper()
	ctx, cancel := ctxFor(20 * time.Second)
	defer cancel()
	for {
		_, err := h.c.Put(ctx, []byte(k), []byte(v))
		var amb *client.AmbiguousError
		switch {
		case err == nil:
			return
		case cluster.External(h.spec.System) && errors.As(err, &amb) && ctx.Err() == nil:
			h.t.Logf("%s: put %q: %v; resent (an external system has no client sessions)", h.spec.System, k, err)
		default:
			h.t.Fatalf("put %q: %v", k, err)
		}
	}
}

func (h *harness) mustGet(k string) (string, bool) {
	h.t.Helper()
	ctx, cancel := ctxFor(20 * time.Second)
	defer cancel()
	v, ok, err := h.c.Get(ctx, []byte(k))
	if err != nil {
		h.t.Fatalf("get %q: %v", k, err)
	}
	return string(v), ok
}

func (h *harness) expect(k, want string) {
	h.t.Helper()
	got, ok := h.mustGet(k)
	if !ok || got != want {
		h.t.Fatalf("get %q = %q (found %v), want %q", k, trunc(got), ok, trunc(want))
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%s... (%d bytes)", s[:40], len(s))
	}
	return s
}

func (h *harness) scanKeys(start, end string, limit int) string {
	h.t.Helper()
	ctx, cancel := ctxFor(20 * time.Second)
	defer cancel()
	var e []byte
	if end != "" {
		e = []byte(end)
	}
	kvs, err := h.c.Scan(ctx, []byte(start), e, limit)
	if err != nil {
		h.t.Fatalf("scan [%q, %q) limit %d: %v", start, end, limit, err)
	}
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, string(kv.Key))
	}
	return strings.Join(keys, ",")
}

// Run runs the whole suite for one system. An external system (etcd)
// skips TornTail, which tears our Raft log's segment format, and cannot
// take Options.ChangeMembers.
func Run(t *testing.T, o Options) {
	if o.ChangeMembers && cluster.External(o.System) {
		t.Fatalf("%s: Options.ChangeMembers needs a system whose members nezha changes", o.System)
	}
	t.Run("Semantics", func(t *testing.T) { testSemantics(t, o) })
	t.Run("FailoverAndCatchUp", func(t *testing.T) { testFailover(t, o) })
	if !cluster.External(o.System) {
		t.Run("TornTail", func(t *testing.T) { testTornTail(t, o) })
	}
}

func testSemantics(t *testing.T, o Options) {
	h := start(t, o)
	// Put, overwrite, delete.
	h.put("alpha", "1")
	h.expect("alpha", "1")
	h.put("alpha", "2")
	h.expect("alpha", "2")
	ctx, cancel := ctxFor(20 * time.Second)
	defer cancel()
	if _, err := h.c.Delete(ctx, []byte("alpha")); err != nil {
		t.Fatal(err)
	}
	if v, ok := h.mustGet("alpha"); ok {
		t.Fatalf("get after delete found %q", v)
	}
	if _, err := h.c.Delete(ctx, []byte("never-written")); err != nil {
		t.Fatalf("delete of a missing key: %v", err)
	}
	if _, ok := h.mustGet("never-written"); ok {
		t.Fatal("found a key that was never written")
	}
	// Empty and large values.
	h.put("empty", "")
	h.expect("empty", "")
	big := make([]byte, 1<<20)
	h.rng.Read(big)
	h.put("big", string(big))
	h.expect("big", string(big))

	// Ordered scan, limit, bounds, empty range.
	for _, k := range h.rng.Perm(20) {
		h.put(fmt.Sprintf("s%02d", k), fmt.Sprintf("v%d", k))
	}
	if got := h.scanKeys("s05", "s09", 0); got != "s05,s06,s07,s08" {
		t.Fatalf("scan [s05, s09) = %s", got)
	}
	if got := h.scanKeys("s00", "s99", 3); got != "s00,s01,s02" {
		t.Fatalf("scan limit 3 = %s", got)
	}
	if got := h.scanKeys("s10", "s10", 0); got != "" {
		t.Fatalf("empty range scan = %s", got)
	}
	if got := h.scanKeys("s18", "", 0); got != "s18,s19" {
		t.Fatalf("scan to the end = %s", got)
	}
	ctx2, cancel2 := ctxFor(20 * time.Second)
	defer cancel2()
	if _, err := h.c.Delete(ctx2, []byte("s06")); err != nil {
		t.Fatal(err)
	}
	if got := h.scanKeys("s05", "s08", 0); got != "s05,s07" {
		t.Fatalf("scan after delete = %s", got)
	}
	kvs, err := h.c.Scan(ctx2, []byte("s03"), []byte("s04"), 0)
	if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "v3" {
		t.Fatalf("scan value: %v %v", kvs, err)
	}

	// Bad input: InvalidArgument, and the cluster keeps serving.
	for name, f := range map[string]func() error{
		"empty key": func() error { _, err := h.c.Put(ctx2, nil, []byte("v")); return err },
		"oversized key": func() error {
			_, err := h.c.Put(ctx2, bytes.Repeat([]byte("k"), systems.MaxKeyBytes+1), nil)
			return err
		},
		"oversized value": func() error {
			_, err := h.c.Put(ctx2, []byte("k"), make([]byte, systems.DefaultMaxValueBytes+1))
			return err
		},
		"get empty key":  func() error { _, _, err := h.c.Get(ctx2, nil); return err },
		"scan start>end": func() error { _, err := h.c.Scan(ctx2, []byte("b"), []byte("a"), 0); return err },
	} {
		if err := f(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: got %v, want InvalidArgument", name, err)
		}
	}
	h.put("after-bad-input", "ok")
	h.expect("after-bad-input", "ok")

	// Concurrent writers, then every acknowledged write is readable.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				k := fmt.Sprintf("c%d-%02d", w, i)
				if _, err := h.c.Put(ctx2, []byte(k), []byte(k)); err != nil {
					errs <- fmt.Errorf("%s: %w", k, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < 8; w++ {
		for i := 0; i < 25; i++ {
			k := fmt.Sprintf("c%d-%02d", w, i)
			h.expect(k, k)
		}
	}
	h.convergence()
	if o.ExpectGC {
		h.expectGC()
	}
	h.finishMemberChange()
}

func (h *harness) expectGC() {
	h.t.Helper()
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	for _, n := range h.nodes() {
		st, err := h.c.Status(ctx, n.Address, false)
		if err != nil {
			h.t.Fatal(err)
		}
		worked := 0
		for _, r := range st.GcRounds {
			if r.Error == "" && (r.KeysMoved > 0 || r.SegmentsRemoved > 0) {
				worked++
			}
		}
		if worked == 0 {
			h.t.Fatalf("node %d reports no GC round that did anything (%d rounds)", n.ID, len(st.GcRounds))
		}
		h.t.Logf("node %d: %d GC rounds, compacted index %d", n.ID, worked, st.CompactedIndex)
	}
}

// convergence waits until every live node has applied the same index and,
// if the system supports it, reports the same state hash there.
func (h *harness) convergence() {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := ctxFor(5 * time.Second)
		var applied []uint64
		var hashes []string
		var hashIdx []uint64
		ok := true
		for _, n := range h.nodes() {
			if n.PID == 0 {
				continue
			}
			st, err := h.c.Status(ctx, n.Address, true)
			if err != nil {
				ok = false
				break
			}
			applied = append(applied, st.Header.AppliedIndex)
			hashes = append(hashes, fmt.Sprintf("%x", st.StateHash))
			hashIdx = append(hashIdx, st.StateHashIndex)
		}
		cancel()
		same := ok && len(applied) > 0
		for i := range applied {
			same = same && applied[i] == applied[0] && hashIdx[i] == hashIdx[0] && hashes[i] == hashes[0]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("nodes did not converge: applied %v, hash indexes %v, hashes %v", applied, hashIdx, hashes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *harness) leader() uint64 {
	h.t.Helper()
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	id, err := h.spec.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// staleGet reads key from one node's local state machine.
func (h *harness) staleGet(n cluster.Node, key string) (string, bool, error) {
	cfg := h.spec.ClientConfig(n.Address)
	cfg.Consistency = kvpb.ReadConsistency_STALE
	c, err := client.New(cfg)
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	v, ok, err := c.Get(ctx, []byte(key))
	return string(v), ok, err
}

func testFailover(t *testing.T, o Options) {
	h := start(t, o)
	acked := map[string]string{}
	for i := 0; i < 50; i++ {
		k, v := fmt.Sprintf("f%03d", i), fmt.Sprintf("value-%d-%d", i, h.rng.Int())
		h.put(k, v)
		acked[k] = v
	}
	old := h.killLeader()
	killed := time.Now()
	// A write issued at once with a 10 s deadline succeeds within 3 s: the
	// nodes fail what they forwarded to the dead leader once a new one is
	// elected, and the client resends it under its session.
	// An external system (etcd) has neither: its outcome is logged, not
	// asserted.
	ctx, cancel := ctxFor(10 * time.Second)
	_, err := h.c.Put(ctx, []byte("f-after-kill"), []byte("v"))
	cancel()
	switch {
	case err != nil && cluster.External(o.System):
		t.Logf("%s: put at once after killing leader %d: %v (an external system; not asserted)", o.System, old, err)
	case err != nil:
		t.Fatalf("put at once after killing leader %d: %v", old, err)
	case time.Since(killed) > 3*time.Second && !cluster.External(o.System):
		t.Fatalf("put at once after killing leader %d took %v, want under 3 s", old, time.Since(killed))
	default:
		acked["f-after-kill"] = "v"
		t.Logf("put at once after killing leader %d succeeded in %v", old, time.Since(killed).Round(time.Millisecond))
	}
	// A read succeeds within 5 s of the kill.
	ctx, cancel = ctxFor(5 * time.Second)
	v, ok, err := h.c.Get(ctx, []byte("f000"))
	cancel()
	if err != nil || !ok || string(v) != acked["f000"] {
		t.Fatalf("get 5 s after killing leader %d: %q %v %v", old, v, ok, err)
	}
	t.Logf("first read served %v after killing leader %d", time.Since(killed).Round(time.Millisecond), old)
	for k, v := range acked {
		h.expect(k, v)
	}
	// Writes continue; the old leader restarts and catches up.
	for i := 50; i < 80; i++ {
		k, v := fmt.Sprintf("f%03d", i), fmt.Sprintf("value-%d", i)
		h.put(k, v)
		acked[k] = v
	}
	// Also kill and restart a follower that misses writes.
	h.restart(old)
	h.convergence()
	n := h.node(old)
	for k, want := range acked {
		got, ok, err := h.staleGet(n, k)
		if err != nil || !ok || got != want {
			t.Fatalf("restarted node %d: %s = %q %v %v, want %q", old, k, got, ok, err, want)
		}
	}
	follower := h.killFollower()
	for i := 80; i < 100; i++ {
		k, v := fmt.Sprintf("f%03d", i), fmt.Sprintf("value-%d", i)
		h.put(k, v)
		acked[k] = v
	}
	h.restart(follower)
	h.convergence()
	fn := h.node(follower)
	for k, want := range acked {
		got, ok, err := h.staleGet(fn, k)
		if err != nil || !ok || got != want {
			t.Fatalf("restarted follower %d: %s = %q %v %v, want %q", follower, k, got, ok, err, want)
		}
	}
	h.finishMemberChange()
}

// lastSegment returns the newest Raft log segment of a node.
func lastSegment(t *testing.T, n cluster.Node) string {
	t.Helper()
	var segs []string
	for _, dir := range []string{"valuelog", "raftlog"} {
		m, _ := filepath.Glob(filepath.Join(n.Data, dir, "*.log"))
		segs = append(segs, m...)
	}
	if len(segs) == 0 {
		t.Fatalf("no log segments under %s", n.Data)
	}
	sort.Strings(segs)
	return segs[len(segs)-1]
}

func testTornTail(t *testing.T, o Options) {
	h := start(t, o)
	for i := 0; i < 30; i++ {
		h.put(fmt.Sprintf("t%02d", i), strings.Repeat("x", 100+i))
	}
	victim := h.killFollower()
	n := h.node(victim)
	// A torn write: the crash left the first bytes of a record that was
	// never fsynced (so never acknowledged), done by the node's agent
	// wherever the node runs. (Cutting bytes off fsynced records is
	// another fault, outside Raft's model: see the lose-tail nemesis.)
	a, err := h.spec.Agent(&n)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := ctxFor(20 * time.Second)
	defer cancel()
	torn, err := a.Damage(ctx, &agentpb.DamageRequest{Kind: agentpb.DamageKind_TEAR_TAIL, Mode: raftlog.TearCut, Pick: uint64(h.rng.Int63())})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d: %s", victim, torn.Detail)
	h.put("after-tear", "y")
	h.restart(victim)
	h.convergence()
	if logText := h.spec.NodeTail(&n, 5000); !strings.Contains(logText, "truncating torn tail") {
		t.Fatalf("node %d did not report the torn tail; log tail:\n%s", victim, h.spec.NodeTail(&n, 20))
	}
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("t%02d", i)
		got, ok, err := h.staleGet(n, k)
		if err != nil || !ok || got != strings.Repeat("x", 100+i) {
			t.Fatalf("node %d after torn tail: %s = %q %v %v", victim, k, trunc(got), ok, err)
		}
	}
	if got, ok, _ := h.staleGet(n, "after-tear"); !ok || got != "y" {
		t.Fatalf("node %d did not catch up after the torn tail", victim)
	}
	h.finishMemberChange()
}
