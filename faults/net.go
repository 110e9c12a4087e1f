package faults

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Link is one directed peer link: the connections node From dials to reach
// node To. Raft messages from From to To travel only on these connections
// (each node sends on its own client streams), so cutting Link{A, B} drops
// A's messages to B and nothing else.
type Link struct{ From, To uint64 }

func (l Link) String() string { return fmt.Sprintf("%d->%d", l.From, l.To) }

// Net is the network of a cluster under test. Clients talk to the nodes
// directly, never through it: an isolated node still serves its clients,
// which is what makes stale reads observable.
//
// A cluster started with cluster.UpOptions.Links (NewNet) has its links
// in its nodes' agents, on every backend: each node dials its peers through
// proxies its own agent runs (and, where the agent has a packet filter, a
// cut also drops the packets in the node's network namespace; etcd's
// members dial their peers themselves, so the filter is all there is).
// Cutting Link{From, To} and delaying links are SetLinks calls to From's
// agent; Net keeps the whole state (cuts, delay) and sends each agent its
// part of it.
//
// A local cluster of a system whose members advertise one peer address to
// all (etcd) and whose nodes share one loopback (no packet filter possible)
// gets one HTTP proxy per member in this process instead (NewHTTPNet).
type Net struct {
	mu sync.Mutex
	// spec is the cluster whose agents own the links (nil for the HTTP
	// net).
	spec    *cluster.Spec
	cut     map[Link]bool
	latency time.Duration
	jitter  time.Duration
	// mechanisms are what each node's agent says it cuts links with
	// (SetLinksResponse.mechanism), by node id.
	mechanisms map[uint64]string
	// createErr is why NodeArgs could not create the HTTP proxies.
	createErr error
	// reserved are listeners that hold loopback ports for the HTTP
	// proxies until NodeArgs creates them (see Reserve).
	reserved []net.Listener
	// http is the HTTP net's per-member proxies (NewHTTPNet).
	http *httpPeers
}

// linkCallTimeout bounds one SetLinks call (stopping and starting a few
// proxies, an nftables transaction).
const linkCallTimeout = 15 * time.Second

// NewNet returns the network of spec, a cluster started with
// cluster.UpOptions.Links: every agent is told that no link is cut or
// delayed (a fresh start, whatever an earlier user left), and answers how
// it cuts links. A cluster without Links, or an agent that cannot cut
// links at all (etcd's node dials its peers itself, and a local agent has
// no packet filter), is an error.
func NewNet(ctx context.Context, spec *cluster.Spec) (*Net, error) {
	if !spec.Links {
		return nil, cmdline.Usagef("the cluster in %s was not started with peer links through its agents (cluster.UpOptions.Links): network faults cannot reach it", spec.Dir)
	}
	n := &Net{spec: spec, cut: map[Link]bool{}, mechanisms: map[uint64]string{}}
	if err := n.applyLocked(ctx, n.idsLocked()); err != nil {
		return nil, err
	}
	var none []string
	for id, m := range n.mechanisms {
		if m == "none" {
			none = append(none, fmt.Sprint(id))
		}
	}
	if len(none) > 0 {
		sort.Strings(none)
		return nil, fmt.Errorf("the agents of nodes %s cannot cut links: their nodes dial peers themselves (%s) and the agents have no packet filter (on the local backend a system such as etcd needs NewHTTPNet)",
			strings.Join(none, ", "), cluster.Label(spec.System))
	}
	return n, nil
}

// idsLocked returns the ids of the cluster's members now (the membership
// nemesis changes them).
func (n *Net) idsLocked() []uint64 {
	ids := make([]uint64, len(n.spec.Nodes))
	for i, m := range n.spec.Nodes {
		ids[i] = m.ID
	}
	return ids
}

// applyLocked sends each of the nodes from their agents' part of the
// state: the members their messages to are dropped, and the delay.
func (n *Net) applyLocked(ctx context.Context, from []uint64) error {
	var errs []error
	for _, id := range from {
		node, err := n.spec.Node(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		a, err := n.spec.Agent(node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		req := &agentpb.SetLinksRequest{DelayNs: int64(n.latency), JitterNs: int64(n.jitter)}
		for l := range n.cut {
			if l.From == id {
				req.Cut = append(req.Cut, l.To)
			}
		}
		slices.Sort(req.Cut)
		cctx, cancel := context.WithTimeout(ctx, linkCallTimeout)
		r, err := a.SetLinks(cctx, req)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("links of node %d (its agent at %s): %w", id, node.Agent, err))
			continue
		}
		n.mechanisms[id] = r.GetMechanism()
	}
	return errors.Join(errs...)
}

// senders returns the distinct senders of links, sorted.
func senders(links []Link) []uint64 {
	var out []uint64
	for _, l := range links {
		if !slices.Contains(out, l.From) {
			out = append(out, l.From)
		}
	}
	slices.Sort(out)
	return out
}

// Mechanism says how links are cut: the agents' mechanism ("proxy",
// "proxy+nftables", "nftables"; one per node, "node 1: ...; node 2:
// ...", where they differ), or "http-proxy" for the HTTP net.
func (n *Net) Mechanism() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http != nil {
		return "http-proxy"
	}
	seen := map[string]bool{}
	for _, m := range n.mechanisms {
		seen[m] = true
	}
	if len(seen) == 1 {
		for m := range seen {
			return m
		}
	}
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(n.mechanisms)) {
		parts = append(parts, fmt.Sprintf("node %d: %s", id, n.mechanisms[id]))
	}
	return strings.Join(parts, "; ")
}

// Describe says how and where links are cut, for reports: e.g.
// "proxy+nftables in each container".
func (n *Net) Describe() string {
	m := n.Mechanism()
	if n.http != nil {
		return m + " in the controller, one per member (the nodes share one loopback)"
	}
	where := map[string]string{
		cluster.BackendLocal:  "in each node's agent on this machine",
		cluster.BackendDocker: "in each container",
		cluster.BackendSSH:    "on each host",
	}[n.spec.BackendName()]
	return m + " " + where
}

// Links returns every link, sorted.
func (n *Net) Links() []Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.linksLocked()
}

func (n *Net) linksLocked() []Link {
	var ids []uint64
	if n.http != nil {
		ids = n.http.nodes
	} else {
		ids = n.idsLocked()
	}
	var out []Link
	for _, a := range ids {
		for _, b := range ids {
			if a != b {
				out = append(out, Link{From: a, To: b})
			}
		}
	}
	sortLinks(out)
	return out
}

func sortLinks(links []Link) {
	sort.Slice(links, func(i, j int) bool {
		if links[i].From != links[j].From {
			return links[i].From < links[j].From
		}
		return links[i].To < links[j].To
	})
}

// Cut cuts the given links (idempotent).
func (n *Net) Cut(links ...Link) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	known := n.linksLocked()
	var errs []error
	var cut []Link
	for _, l := range links {
		if !slices.Contains(known, l) {
			errs = append(errs, fmt.Errorf("no link %s", l))
			continue
		}
		n.cut[l] = true
		cut = append(cut, l)
		if n.http != nil {
			n.cutHTTPLocked(l)
		}
	}
	if n.http == nil {
		errs = append(errs, n.applyLocked(context.Background(), senders(cut)))
	}
	return errors.Join(errs...)
}

// Restore restores the given links (idempotent).
func (n *Net) Restore(links ...Link) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range links {
		delete(n.cut, l)
	}
	if n.http != nil {
		return nil
	}
	return n.applyLocked(context.Background(), senders(links))
}

// Cuts returns the links that are cut now, sorted.
func (n *Net) Cuts() []Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Link
	for l := range n.cut {
		out = append(out, l)
	}
	sortLinks(out)
	return out
}

// Delay adds latency (plus or minus jitter) to every message on every link
// (the agents' proxies count whole milliseconds). A second call replaces
// the first.
func (n *Net) Delay(latency, jitter time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http != nil {
		return errNoHTTPDelay
	}
	n.latency, n.jitter = latency, jitter
	return n.applyLocked(context.Background(), n.idsLocked())
}

// ClearDelay removes the latency added by Delay.
func (n *Net) ClearDelay() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http != nil {
		return nil
	}
	n.latency, n.jitter = 0, 0
	return n.applyLocked(context.Background(), n.idsLocked())
}

// HealAll restores every link and removes every delay, on every member's
// agent (also one whose state this Net did not change).
func (n *Net) HealAll() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[Link]bool{}
	n.latency, n.jitter = 0, 0
	if n.http != nil {
		return nil
	}
	return n.applyLocked(context.Background(), n.idsLocked())
}

// Refresh follows a membership change: it forgets the cuts of links to
// and from former members and sends every member's agent its part of the
// state, so that an added member's links are cut and delayed like the
// others (its agent starts with none).
func (n *Net) Refresh(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http != nil {
		return nil
	}
	ids := n.idsLocked()
	for l := range n.cut {
		if !slices.Contains(ids, l.From) || !slices.Contains(ids, l.To) {
			delete(n.cut, l)
		}
	}
	for id := range n.mechanisms {
		if !slices.Contains(ids, id) {
			delete(n.mechanisms, id)
		}
	}
	return n.applyLocked(ctx, ids)
}

// Close stops the HTTP net's proxies; the agents' links end with the
// cluster. The network cannot be used afterwards.
func (n *Net) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range n.reserved {
		l.Close()
	}
	n.reserved = nil
	if n.http != nil {
		n.closeHTTPLocked()
	}
	n.cut = map[Link]bool{}
}
