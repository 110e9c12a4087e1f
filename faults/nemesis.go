package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
)

// Nemesis names (the -nemesis values).
const (
	PartitionLeader = "partition-leader"
	PartitionHalves = "partition-halves"
	PartitionOneway = "partition-oneway"
	Bridge          = "bridge"
	Delay           = "delay"
	Kill            = "kill"
	KillLeader      = "kill-leader"
	Pause           = "pause"
	PauseLeader     = "pause-leader"
	RestartAll      = "restart-all"
	TornTail        = "torn-tail"
	// LoseTail is opt-in: not part of "all" (see its summary).
	LoseTail = "lose-tail"
	// Membership is opt-in: not part of "all" (see its summary).
	Membership = "membership"
)

// nemesis is one kind of fault. inject breaks something and returns how to
// heal it; both are recorded as events by the schedule runner.
type nemesis struct {
	name    string
	summary string
	// minNodes is the smallest cluster the nemesis means anything on.
	minNodes int
	network  bool
	inject   func(ctx context.Context, e *Env, s Step) (fault, error)
	// optIn nemeses are left out of "all": they break an assumption of
	// Raft itself, so a failure under them says nothing about a system
	// (lose-tail), or they change the cluster the other nemeses act on
	// (membership).
	optIn bool
	// disk nemeses inject faults inside the nodes (Env.DiskFaults).
	disk bool
}

// fault is an injected nemesis: what it did and how to undo it.
type fault struct {
	nodes  []uint64
	detail string
	heal   func() error
}

var nemeses = []nemesis{
	{PartitionLeader, "isolate the leader from every peer, both ways (clients still reach it)", 2, true, injectPartitionLeader, false, false},
	{PartitionHalves, "split the nodes into two halves (1|2 of 3) that cannot talk, chosen by the seed", 2, true, injectPartitionHalves, false, false},
	{PartitionOneway, "drop one node's outgoing or incoming peer messages only (the leader or a random node, by the seed)", 2, true, injectPartitionOneway, false, false},
	{Bridge, "two halves that cannot talk, joined by one bridge node that talks to both (non-transitive)", 3, true, injectBridge, false, false},
	{Delay, "add 50-200 ms (+-25%) latency to every peer message", 2, true, injectDelay, false, false},
	{Kill, "SIGKILL a random node; restart it when healing", 1, false, injectKill, false, false},
	{KillLeader, "SIGKILL the leader; restart it when healing", 1, false, injectKillLeader, false, false},
	{Pause, "SIGSTOP a random node; SIGCONT when healing", 1, false, injectPause, false, false},
	{PauseLeader, "SIGSTOP the leader; SIGCONT when healing", 1, false, injectPauseLeader, false, false},
	{RestartAll, "SIGKILL every node; restart them all when healing", 1, false, injectRestartAll, false, false},
	{TornTail, "SIGKILL a random node, leave its last Raft log segment ending in a torn record (cut short, or whole with a flipped byte: an unsynced write interrupted by the crash), restart it when healing", 1, false, injectTornTail, false, false},
	{DiskFull, "fill a random node's disk (injected in the node: its writes return ENOSPC beyond the room its ballast frees); it refuses writes and serves reads; cleared when healing", 1, false, injectDiskFull, false, true},
	{FsyncError, "make a random node's fsyncs return EIO (injected in the node); it stops at its next fsync without acknowledging what that fsync covered; restarted when healing", 1, false, injectFsyncError, false, true},
	{SlowDisk, "add 20-200 ms to every fsync of a random node or of every node (injected in the nodes); cleared when healing", 1, false, injectSlowDisk, false, true},
	{Membership, "opt-in, not in all: add a node (learner, promoted once caught up; by the seed, leadership then transferred to it), and remove a member chosen by the seed (the leader too) when healing; cluster.json follows. An added node's peer links go through its agent like the others': network nemeses cut them too", 2, false, injectMembership, true, false},
	{LoseTail, "opt-in, not in all: SIGKILL a follower, cut or flip its last fsynced log bytes in place (a disk that lied about fsync; Raft does not tolerate it), restart it when healing", 1, false, injectLoseTail, true, false},
}

func lookup(name string) (nemesis, bool) {
	for _, n := range nemeses {
		if n.name == name {
			return n, true
		}
	}
	return nemesis{}, false
}

// Names returns every nemesis name that "all" stands for, in
// documentation order (opt-in nemeses are not among them).
func Names() []string {
	var out []string
	for _, n := range nemeses {
		if !n.optIn {
			out = append(out, n.name)
		}
	}
	return out
}

// AllNames returns every nemesis name, opt-in ones included.
func AllNames() []string {
	out := make([]string, len(nemeses))
	for i, n := range nemeses {
		out[i] = n.name
	}
	return out
}

// Describe returns "name: summary" lines for usage texts.
func Describe() string {
	var b strings.Builder
	for _, n := range nemeses {
		fmt.Fprintf(&b, "  %-17s %s\n", n.name, n.summary)
	}
	return b.String()
}

// ParseNemeses parses a -nemesis value: a comma-separated list of names,
// "all" for every nemesis, or "none" (or empty) for no faults. Unknown names
// are a *cmdline.UsageError. Duplicates are dropped; order is kept.
func ParseNemeses(list string) ([]string, error) {
	var out []string
	var unknown []string
	for _, name := range cmdline.SplitList(list) {
		switch name {
		case "none":
			continue
		case "all":
			for _, n := range Names() {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
			continue
		}
		if _, ok := lookup(name); !ok {
			unknown = append(unknown, fmt.Sprintf("%q", name))
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	if len(unknown) > 0 {
		return nil, cmdline.Usagef("unknown nemesis %s (want a comma-separated list of %s, or all, or none)",
			strings.Join(unknown, ", "), strings.Join(AllNames(), ", "))
	}
	return out, nil
}

// ValidateNemeses reports, as a *cmdline.UsageError, nemeses that a
// cluster of the given size cannot take (e.g. partition-halves on one node).
func ValidateNemeses(names []string, nodes int) error {
	var errs []error
	for _, name := range names {
		n, ok := lookup(name)
		if !ok {
			errs = append(errs, cmdline.Usagef("unknown nemesis %q", name))
			continue
		}
		if nodes < n.minNodes {
			errs = append(errs, cmdline.Usagef("nemesis %s needs at least %d nodes; the cluster has %d", name, n.minNodes, nodes))
		}
	}
	return errors.Join(errs...)
}

// Env is what nemeses act on: a cluster on any backend (every action on a
// node goes through its agent) and, for network faults, its Net.
type Env struct {
	Cluster *cluster.Spec
	// Net is nil if the cluster's peer links cannot be cut; network
	// nemeses then fail.
	Net *Net
	// DiskFaults: the nodes run with DiskNodeArgs (disk nemeses need it).
	DiskFaults bool
	// Start is the origin of event times (the history's clock).
	Start time.Time
	// Logf, if set, receives one line per injection and heal.
	Logf func(format string, args ...any)
}

func (e *Env) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

func (e *Env) ids() []uint64 {
	out := make([]uint64, len(e.Cluster.Nodes))
	for i, n := range e.Cluster.Nodes {
		out[i] = n.ID
	}
	return out
}

// leader returns the current leader (agreed by a majority), or, if none is
// known within a few seconds, a node chosen by pick and a note saying so.
func (e *Env) leader(ctx context.Context, pick uint64) (uint64, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	id, err := e.Cluster.WaitLeader(ctx, 5*time.Second)
	if err == nil && id != 0 {
		return id, ""
	}
	ids := e.ids()
	return ids[pick%uint64(len(ids))], fmt.Sprintf(" (no leader known: %v; chose node %d)", err, ids[pick%uint64(len(ids))])
}

// shuffled returns the node ids in an order chosen by pick.
func (e *Env) shuffled(pick uint64) []uint64 {
	ids := e.ids()
	r := rand.New(rand.NewSource(int64(pick)))
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

func (e *Env) needNet() error {
	if e.Net == nil {
		return errors.New("the cluster's peer links cannot be cut (no faults.Net)")
	}
	return nil
}

// between returns the links from every node of a to every node of b, and,
// if both, back.
func between(a, b []uint64, both bool) []Link {
	var out []Link
	for _, x := range a {
		for _, y := range b {
			out = append(out, Link{From: x, To: y})
			if both {
				out = append(out, Link{From: y, To: x})
			}
		}
	}
	return out
}

func without(ids []uint64, x uint64) []uint64 {
	var out []uint64
	for _, id := range ids {
		if id != x {
			out = append(out, id)
		}
	}
	return out
}

func (e *Env) cutFault(links []Link, nodes []uint64, detail string) (fault, error) {
	if err := e.Net.Cut(links...); err != nil {
		_ = e.Net.Restore(links...)
		return fault{}, err
	}
	return fault{nodes: nodes, detail: detail + "; cut " + linkList(links), heal: func() error { return e.Net.Restore(links...) }}, nil
}

func linkList(links []Link) string {
	s := make([]string, len(links))
	for i, l := range links {
		s[i] = l.String()
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

func injectPartitionLeader(ctx context.Context, e *Env, s Step) (fault, error) {
	if err := e.needNet(); err != nil {
		return fault{}, err
	}
	l, note := e.leader(ctx, s.Pick)
	others := without(e.ids(), l)
	return e.cutFault(between([]uint64{l}, others, true), []uint64{l}, fmt.Sprintf("leader %d isolated from %v%s", l, others, note))
}

func injectPartitionHalves(ctx context.Context, e *Env, s Step) (fault, error) {
	if err := e.needNet(); err != nil {
		return fault{}, err
	}
	ids := e.shuffled(s.Pick)
	a, b := ids[:len(ids)/2], ids[len(ids)/2:]
	sort.Slice(a, func(i, j int) bool { return a[i] < a[j] })
	sort.Slice(b, func(i, j int) bool { return b[i] < b[j] })
	return e.cutFault(between(a, b, true), a, fmt.Sprintf("halves %v | %v", a, b))
}

func injectPartitionOneway(ctx context.Context, e *Env, s Step) (fault, error) {
	if err := e.needNet(); err != nil {
		return fault{}, err
	}
	var x uint64
	var note, who string
	if (s.Pick>>1)%2 == 0 {
		x, note = e.leader(ctx, s.Pick)
		who = "leader"
	} else {
		ids := e.ids()
		x, who = ids[(s.Pick>>2)%uint64(len(ids))], "node"
	}
	others := without(e.ids(), x)
	if s.Pick%2 == 0 {
		return e.cutFault(between([]uint64{x}, others, false), []uint64{x},
			fmt.Sprintf("%s %d cannot send to %v (it still receives)%s", who, x, others, note))
	}
	return e.cutFault(between(others, []uint64{x}, false), []uint64{x},
		fmt.Sprintf("%s %d cannot receive from %v (it still sends)%s", who, x, others, note))
}

func injectBridge(ctx context.Context, e *Env, s Step) (fault, error) {
	if err := e.needNet(); err != nil {
		return fault{}, err
	}
	ids := e.shuffled(s.Pick)
	bridge, rest := ids[0], ids[1:]
	a, b := rest[:len(rest)/2], rest[len(rest)/2:]
	return e.cutFault(between(a, b, true), []uint64{bridge},
		fmt.Sprintf("bridge %d joins %v and %v, which cannot talk", bridge, a, b))
}

func injectDelay(ctx context.Context, e *Env, s Step) (fault, error) {
	if err := e.needNet(); err != nil {
		return fault{}, err
	}
	latency := time.Duration(50+s.Pick%151) * time.Millisecond
	jitter := latency / 4
	if err := e.Net.Delay(latency, jitter); err != nil {
		_ = e.Net.ClearDelay()
		return fault{}, err
	}
	return fault{detail: fmt.Sprintf("latency %v +- %v on every peer link", latency, jitter), heal: e.Net.ClearDelay}, nil
}

func (e *Env) killFault(ids []uint64, detail string) (fault, error) {
	var killed []uint64
	for _, id := range ids {
		if err := e.Cluster.Kill(id); err != nil {
			for _, k := range killed {
				_ = e.Cluster.Restart(k)
			}
			return fault{}, err
		}
		killed = append(killed, id)
	}
	return fault{nodes: ids, detail: detail, heal: func() error {
		var errs []error
		for _, id := range ids {
			errs = append(errs, e.Cluster.Restart(id))
		}
		return errors.Join(errs...)
	}}, nil
}

func injectKill(ctx context.Context, e *Env, s Step) (fault, error) {
	ids := e.ids()
	id := ids[s.Pick%uint64(len(ids))]
	return e.killFault([]uint64{id}, fmt.Sprintf("SIGKILL node %d", id))
}

func injectKillLeader(ctx context.Context, e *Env, s Step) (fault, error) {
	l, note := e.leader(ctx, s.Pick)
	return e.killFault([]uint64{l}, fmt.Sprintf("SIGKILL leader %d%s", l, note))
}

func injectRestartAll(ctx context.Context, e *Env, s Step) (fault, error) {
	return e.killFault(e.ids(), "SIGKILL every node")
}

func (e *Env) pauseFault(id uint64, detail string) (fault, error) {
	if err := e.Cluster.Signal(id, syscall.SIGSTOP); err != nil {
		return fault{}, err
	}
	return fault{nodes: []uint64{id}, detail: detail, heal: func() error { return e.Cluster.Signal(id, syscall.SIGCONT) }}, nil
}

func injectPause(ctx context.Context, e *Env, s Step) (fault, error) {
	ids := e.ids()
	id := ids[s.Pick%uint64(len(ids))]
	return e.pauseFault(id, fmt.Sprintf("SIGSTOP node %d", id))
}

func injectPauseLeader(ctx context.Context, e *Env, s Step) (fault, error) {
	l, note := e.leader(ctx, s.Pick)
	return e.pauseFault(l, fmt.Sprintf("SIGSTOP leader %d%s", l, note))
}

func injectTornTail(ctx context.Context, e *Env, s Step) (fault, error) {
	ids := e.ids()
	id := ids[s.Pick%uint64(len(ids))]
	return e.killAndDamage(id, &agentpb.DamageRequest{Kind: agentpb.DamageKind_TEAR_TAIL, Mode: damageMode(s.Pick), Pick: s.Pick >> 9},
		fmt.Sprintf("SIGKILL node %d, ", id), "")
}

func injectLoseTail(ctx context.Context, e *Env, s Step) (fault, error) {
	ids := e.ids()
	l, note := e.leader(ctx, s.Pick)
	victims := without(ids, l)
	if len(victims) == 0 {
		victims = ids
	}
	id := victims[s.Pick%uint64(len(victims))]
	return e.killAndDamage(id, &agentpb.DamageRequest{Kind: agentpb.DamageKind_LOSE_SYNCED_TAIL, Mode: damageMode(s.Pick),
		Bytes: int64(1 + (s.Pick>>9)%raftlog.MaxLoseBytes)}, fmt.Sprintf("SIGKILL follower %d, ", id), note)
}

// damageMode is the damage a disk nemesis does to a log, by bit 8 of
// pick: raftlog.TearCut or raftlog.TearCorrupt.
func damageMode(pick uint64) string {
	if (pick>>8)%2 == 1 {
		return raftlog.TearCorrupt
	}
	return raftlog.TearCut
}

// damageTimeout bounds one Damage call (it reads and rewrites the end of
// a log segment).
const damageTimeout = 30 * time.Second

// killAndDamage SIGKILLs node id, then has its agent damage its Raft log
// as req says (the node's files are wherever the node runs); the fault's
// detail is prefix, what the damage did, then suffix. On an error the node
// is restarted.
func (e *Env) killAndDamage(id uint64, req *agentpb.DamageRequest, prefix, suffix string) (fault, error) {
	f, err := e.killFault([]uint64{id}, "")
	if err != nil {
		return fault{}, err
	}
	what, err := e.damage(id, req)
	if err != nil {
		return fault{}, errors.Join(err, f.heal())
	}
	f.detail = prefix + what + suffix
	return f, nil
}

// damage asks node id's agent to damage the stopped node's Raft log.
func (e *Env) damage(id uint64, req *agentpb.DamageRequest) (string, error) {
	n, err := e.Cluster.Node(id)
	if err != nil {
		return "", err
	}
	a, err := e.Cluster.Agent(n)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), damageTimeout)
	defer cancel()
	r, err := a.Damage(ctx, req)
	if err != nil {
		return "", fmt.Errorf("damage node %d's log: %w", id, err)
	}
	return r.GetDetail(), nil
}

// membershipTimeout bounds each membership change of the membership
// nemesis (adding a node includes its catching up).
const membershipTimeout = 20 * time.Second

// injectMembership adds a node (cluster.Spec.AddMember: learner, then
// voter), by s.Pick transfers the leadership to it, and on healing removes
// a member chosen by s.Pick (possibly the new node or the leader), so that
// the cluster keeps its size and changes its members.
func injectMembership(ctx context.Context, e *Env, s Step) (fault, error) {
	if cluster.External(e.Cluster.System) {
		return fault{}, fmt.Errorf("membership: %s clusters are not changed by nezha", cluster.Label(e.Cluster.System))
	}
	actx, cancel := context.WithTimeout(ctx, membershipTimeout)
	defer cancel()
	nd, err := e.Cluster.AddMember(actx, true)
	if rerr := e.refreshNet(actx); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fault{}, fmt.Errorf("add a node: %w", err)
	}
	added := nd.ID
	detail := fmt.Sprintf("node %d added and promoted", added)
	if s.Pick%2 == 0 {
		if to, err := e.Cluster.TransferLeader(actx, added); err != nil {
			detail += fmt.Sprintf("; leadership transfer to it failed: %v", err)
		} else {
			detail += fmt.Sprintf("; leadership transferred to node %d", to)
		}
	}
	heal := func() error {
		hctx, cancel := context.WithTimeout(context.Background(), membershipTimeout)
		defer cancel()
		victim := e.shuffled(s.Pick / 2)[0]
		e.logf("membership: removing node %d", victim)
		err := e.Cluster.RemoveMember(hctx, victim)
		if rerr := e.refreshNet(hctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if err != nil {
			return fmt.Errorf("remove node %d: %w", victim, err)
		}
		return nil
	}
	return fault{nodes: []uint64{added}, detail: detail, heal: heal}, nil
}

// refreshNet gives every member's agent, the added one's too, the links'
// state after a membership change (cluster.Spec.AddMember already told
// every agent of the new member's address).
func (e *Env) refreshNet(ctx context.Context) error {
	if e.Net == nil {
		return nil
	}
	return e.Net.Refresh(ctx)
}
