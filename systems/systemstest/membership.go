package systemstest

import (
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/nezha-harness/nezha/cluster"
)

// MembershipTimeout bounds each step of the background membership change
// (Options.ChangeMembers): adding a node, which includes its catching up
// and promotion, and removing one.
const MembershipTimeout = 30 * time.Second

// memberChange is the background membership change of one test: add a
// node, then remove another.
type memberChange struct {
	// pinned are the members the test kills, restarts or reads from: never
	// removed. Guarded by harness.mu.
	pinned map[uint64]bool
	// initial are the member ids at the start.
	initial []uint64
	done    chan struct{}
	// Set before done is closed.
	added, removed uint64
	err            error
}

// startMemberChange starts the background membership change (the test's
// cleanup waits for it before the cluster goes down).
func (h *harness) startMemberChange(seed int64) {
	m := &memberChange{pinned: map[uint64]bool{}, done: make(chan struct{})}
	for _, n := range h.spec.Nodes {
		m.initial = append(m.initial, n.ID)
	}
	h.members = m
	go func() {
		defer close(m.done)
		m.err = h.changeMembers(m, rand.New(rand.NewSource(seed)))
	}()
	h.t.Cleanup(func() { <-m.done })
}

// changeMembers adds a node (learner, caught up, promoted) and then
// removes a member chosen by rng among the live ones the test has not
// pinned (the leader too, never the node just added). Each step holds
// harness.mu (the test's kills and restarts wait) and is bounded by
// MembershipTimeout.
func (h *harness) changeMembers(m *memberChange, rng *rand.Rand) error {
	ctx, cancel := ctxFor(MembershipTimeout)
	defer cancel()
	h.mu.Lock()
	n, err := h.spec.AddMember(ctx, true)
	if err == nil {
		m.added = n.ID
	}
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("add a node: %w", err)
	}
	h.t.Logf("membership change: node %d added and promoted", m.added)
	ctx, cancel = ctxFor(MembershipTimeout)
	defer cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	var candidates []uint64
	for _, n := range h.spec.Nodes {
		if n.ID != m.added && n.PID != 0 && !m.pinned[n.ID] {
			candidates = append(candidates, n.ID)
		}
	}
	if len(candidates) == 0 {
		return fmt.Errorf("no member to remove: every live member is the new one or used by the test")
	}
	victim := candidates[rng.Intn(len(candidates))]
	if err := h.spec.RemoveMember(ctx, victim); err != nil {
		return fmt.Errorf("remove node %d: %w", victim, err)
	}
	m.removed = victim
	h.t.Logf("membership change: node %d removed", victim)
	return nil
}

// finishMemberChange, if the test runs one, waits for the background
// membership change and checks that it succeeded, that the leader's
// membership and cluster.json both list exactly the members asked for
// (the initial ones, less the removed, plus the added, all voters), and
// that every member converges. A no-op without Options.ChangeMembers.
func (h *harness) finishMemberChange() {
	h.t.Helper()
	m := h.members
	if m == nil {
		return
	}
	select {
	case <-m.done:
	case <-time.After(3 * MembershipTimeout):
		h.t.Fatalf("the background membership change did not end within %v", 3*MembershipTimeout)
	}
	if m.err != nil {
		h.t.Fatalf("background membership change: %v", m.err)
	}
	var want []uint64
	for _, id := range m.initial {
		if id != m.removed {
			want = append(want, id)
		}
	}
	want = append(want, m.added)
	slices.Sort(want)
	var listed []uint64
	for _, n := range h.nodes() {
		listed = append(listed, n.ID)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, want) {
		h.t.Fatalf("members after the change: the harness lists %v, want %v", listed, want)
	}
	saved, err := cluster.Load(h.spec.Dir)
	if err != nil {
		h.t.Fatal(err)
	}
	var stored []uint64
	for _, n := range saved.Nodes {
		stored = append(stored, n.ID)
	}
	slices.Sort(stored)
	if !slices.Equal(stored, want) {
		h.t.Fatalf("members after the change: %s lists %v, want %v", cluster.FileName, stored, want)
	}
	ctx, cancel := ctxFor(MembershipTimeout)
	defer cancel()
	h.mu.Lock()
	ml, err := h.spec.Members(ctx)
	h.mu.Unlock()
	if err != nil {
		h.t.Fatal(err)
	}
	var voters []uint64
	for _, mb := range ml.Members {
		if mb.Learner {
			h.t.Fatalf("members after the change: node %d is still a learner", mb.Id)
		}
		voters = append(voters, mb.Id)
	}
	slices.Sort(voters)
	if !slices.Equal(voters, want) {
		h.t.Fatalf("members after the change: the leader lists %v, want %v", voters, want)
	}
	h.convergence()
	h.t.Logf("membership change checked: node %d added, node %d removed, members %v", m.added, m.removed, want)
}
