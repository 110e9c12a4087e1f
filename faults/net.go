package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/cluster"
)

// Link is one directed peer link: the connections node From dials to reach
// node To. Raft messages from From to To travel only on these connections
// (each node sends on its own client streams), so cutting Link{A, B} drops
// A's messages to B and nothing else.
type Link struct{ From, To uint64 }

func (l Link) String() string { return fmt.Sprintf("%d->%d", l.From, l.To) }

// Net is the network of a local cluster under test: one embedded toxiproxy
// proxy per directed peer link, all in this process, on loopback. Nodes
// reach each other only through it (their -dialPeers point at the proxies),
// while clients talk to nodes directly: an isolated node still serves its
// clients, which is what makes stale reads observable.
//
// A cut link is a disabled proxy: its listener and every connection through
// it are closed, so the sender's dials are refused until the link is
// restored. Delay is toxiproxy's latency toxic on the link's upstream
// direction (the sender's messages).
type Net struct {
	mu      sync.Mutex
	server  *toxiproxy.ApiServer
	proxies map[Link]*toxiproxy.Proxy
	cut     map[Link]bool
	latency time.Duration
	jitter  time.Duration
	// createErr is why NodeArgs could not create the proxies.
	createErr error
	// reserved are listeners that hold loopback ports for the proxies
	// until NodeArgs creates them (see Reserve).
	reserved []net.Listener
	// http, if set, replaces the per-link proxies by one HTTP proxy per
	// node (NewHTTPNet).
	http *httpPeers
}

// NewNet returns an empty network; the proxies are created by NodeArgs.
func NewNet() *Net {
	return &Net{
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[Link]*toxiproxy.Proxy{},
		cut:     map[Link]bool{},
	}
}

// Reserve holds free loopback ports for the proxies of a cluster of the
// given size until NodeArgs creates them on exactly those ports. Call it
// before cluster.Up: Up picks its nodes' ports while these are held, so
// that a proxy can never take a port a node is about to bind.
func (n *Net) Reserve(nodes int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	count := nodes * (nodes - 1)
	if n.http != nil {
		count = nodes
	}
	for i := 0; i < count; i++ {
		l, err := listenBelowEphemeral()
		if err != nil {
			return fmt.Errorf("reserve a port for a peer link proxy: %w", err)
		}
		n.reserved = append(n.reserved, l)
	}
	return nil
}

// listenBelowEphemeral listens on a free loopback port below the kernel's
// ephemeral range if it can (else on any free port). A cut link's proxy
// stops listening until the link is restored; a port from the ephemeral
// range could meanwhile become the local port of some outgoing connection.
func listenBelowEphemeral() (net.Listener, error) {
	lo, hi := 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				hi = v
			}
		}
	}
	for tries := 0; hi-lo >= 1000 && tries < 100; tries++ {
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo)))); err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// NodeArgs is a cluster.UpOptions.NodeArgs and a cluster.Spec.NodeArgs.
// On its first call it creates a proxy for every directed link between the
// members (listening on a free loopback port, forwarding to the member's
// internal address); called for a member added later (one without links
// yet), it creates the proxies of the new member's links both ways and
// writes each other member's -dialPeersFile (DialPeersFile), so that the
// running members reach the new one through them too. It returns
// `-dialPeers` and `-dialPeersFile` for self. Errors (a port that cannot
// be bound, a member that is not on loopback) make it return an unusable
// -dialPeers value, so that the node refuses to start with a clear
// message; call Err after cluster.Up to get the cause of a failure at the
// start.
func (n *Net) NodeArgs(self cluster.Node, all []cluster.Node) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	create := n.createLocked
	if n.http != nil {
		create = n.createHTTPLocked
	}
	if n.createErr == nil && len(n.proxies) == 0 && (n.http == nil || len(n.http.nodes) == 0) && len(all) > 1 {
		if err := create(all); err != nil {
			n.closeLocked()
			n.createErr = err
		}
	}
	if n.createErr != nil {
		return []string{"-dialPeers", "proxy-setup-failed"}
	}
	dial := make([]string, len(all))
	if n.http != nil {
		// Every member dials the same proxy in front of each member.
		for i, m := range all {
			dial[i] = n.http.listen[m.ID]
		}
		return []string{"-dialPeers", strings.Join(dial, ",")}
	}
	if len(all) > 1 && !n.hasLinksLocked(self.ID) {
		if err := n.addMemberLocked(self, all); err != nil {
			return []string{"-dialPeers", "proxy-setup-failed:" + strings.ReplaceAll(err.Error(), ",", ";")}
		}
	}
	for i, m := range all {
		if m.ID == self.ID {
			dial[i] = m.InternalAddress
			continue
		}
		dial[i] = n.proxies[Link{From: self.ID, To: m.ID}].Listen
	}
	return []string{"-dialPeers", strings.Join(dial, ","), "-dialPeersFile", DialPeersFile(self)}
}

// DialPeersFile is node n's -dialPeersFile: dial-peers.json beside its
// data directory.
func DialPeersFile(n cluster.Node) string {
	return filepath.Join(filepath.Dir(n.Data), "dial-peers.json")
}

func (n *Net) hasLinksLocked(id uint64) bool {
	for l := range n.proxies {
		if l.From == id || l.To == id {
			return true
		}
	}
	return false
}

// addMemberLocked creates the proxies of the links between the added
// member self and every other member of all (with the delay in force, if
// any), and rewrites each other member's -dialPeersFile with the proxies
// of every link it dials.
func (n *Net) addMemberLocked(self cluster.Node, all []cluster.Node) error {
	if err := checkLoopback(self.InternalAddress); err != nil {
		return err
	}
	// The members' ports are free while a member is down or, for self,
	// not yet bound (cluster.Spec.AddMember chose them and let them go):
	// a proxy must not take one.
	taken := map[string]bool{}
	for _, m := range all {
		for _, a := range []string{m.Address, m.InternalAddress, m.MetricsAddress, m.JSONRPCAddress} {
			if _, port, err := net.SplitHostPort(a); err == nil {
				taken[port] = true
			}
		}
	}
	for _, m := range all {
		if m.ID == self.ID {
			continue
		}
		for _, l := range []struct {
			link Link
			to   string
		}{{Link{From: self.ID, To: m.ID}, m.InternalAddress}, {Link{From: m.ID, To: self.ID}, self.InternalAddress}} {
			if err := n.startProxyLocked(l.link, l.to, taken); err != nil {
				return err
			}
		}
	}
	for _, m := range all {
		if m.ID == self.ID {
			continue
		}
		addrs := map[string]string{}
		for l, p := range n.proxies {
			if l.From == m.ID {
				addrs[strconv.FormatUint(l.To, 10)] = p.Listen
			}
		}
		if err := writeFileAtomic(DialPeersFile(m), addrs); err != nil {
			return fmt.Errorf("dial peers file of node %d: %w", m.ID, err)
		}
	}
	return nil
}

// startProxyLocked creates and starts the proxy of link l to address to,
// on a free port below the ephemeral range that is not in taken (nor the
// port of another proxy, which a cut link leaves unbound), with the delay
// in force.
func (n *Net) startProxyLocked(l Link, to string, taken map[string]bool) error {
	for _, p := range n.proxies {
		if _, port, err := net.SplitHostPort(p.Listen); err == nil {
			taken[port] = true
		}
	}
	var listen string
	for attempt := 0; listen == "" && attempt < 100; attempt++ {
		lis, err := listenBelowEphemeral()
		if err != nil {
			return fmt.Errorf("proxy for link %s: %w", l, err)
		}
		if _, port, _ := net.SplitHostPort(lis.Addr().String()); !taken[port] {
			listen = lis.Addr().String()
		}
		lis.Close()
	}
	if listen == "" {
		return fmt.Errorf("proxy for link %s: no free port outside the members' in 100 attempts", l)
	}
	p := toxiproxy.NewProxy(n.server, "link-"+l.String(), listen, to)
	if err := p.Start(); err != nil {
		return fmt.Errorf("proxy for link %s: %w", l, err)
	}
	n.proxies[l] = p
	if n.latency != 0 || n.jitter != 0 {
		if err := n.addDelayLocked(l, p); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes v as JSON to path through a rename, so that a
// node never reads half of it.
func writeFileAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (n *Net) createLocked(all []cluster.Node) error {
	for _, m := range all {
		if err := checkLoopback(m.InternalAddress); err != nil {
			return err
		}
	}
	for _, from := range all {
		for _, to := range all {
			if from.ID == to.ID {
				continue
			}
			l := Link{From: from.ID, To: to.ID}
			listen := "127.0.0.1:0"
			if len(n.reserved) > 0 {
				// Hand the reserved port over to the proxy.
				listen = n.reserved[0].Addr().String()
				n.reserved[0].Close()
				n.reserved = n.reserved[1:]
			}
			p := toxiproxy.NewProxy(n.server, "link-"+l.String(), listen, to.InternalAddress)
			err := p.Start()
			if err != nil && listen != "127.0.0.1:0" {
				p = toxiproxy.NewProxy(n.server, "link-"+l.String(), "127.0.0.1:0", to.InternalAddress)
				err = p.Start()
			}
			if err != nil {
				return fmt.Errorf("proxy for link %s: %w", l, err)
			}
			n.proxies[l] = p
		}
	}
	return nil
}

// Err reports why the proxies could not be created, if they could not.
func (n *Net) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.createErr
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return systems.Usagef("address %s is not on loopback: faults act on local clusters only", addr)
	}
	return nil
}

// Links returns every link, sorted.
func (n *Net) Links() []Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Link, 0, len(n.proxies))
	for l := range n.proxies {
		out = append(out, l)
	}
	if n.http != nil {
		out = n.httpLinksLocked()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}

// Cut disables the given links (idempotent).
func (n *Net) Cut(links ...Link) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, l := range links {
		if n.http != nil {
			if !slices.Contains(n.httpLinksLocked(), l) {
				errs = append(errs, fmt.Errorf("no link %s", l))
				continue
			}
			n.cut[l] = true
			n.cutHTTPLocked(l)
			continue
		}
		p, ok := n.proxies[l]
		if !ok {
			errs = append(errs, fmt.Errorf("no link %s", l))
			continue
		}
		p.Stop()
		n.cut[l] = true
	}
	return errors.Join(errs...)
}

// Restore enables the given links again (idempotent). The proxy listens on
// the port it had; binding is retried for a while in case the port is
// briefly taken.
func (n *Net) Restore(links ...Link) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, l := range links {
		if err := n.restoreLocked(l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (n *Net) restoreLocked(l Link) error {
	if n.http != nil {
		delete(n.cut, l)
		return nil
	}
	p, ok := n.proxies[l]
	if !ok {
		return fmt.Errorf("no link %s", l)
	}
	if !n.cut[l] {
		return nil
	}
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = p.Start(); err == nil || errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
			delete(n.cut, l)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restore link %s (listen %s): %w", l, p.Listen, err)
}

// Cuts returns the links that are cut now, sorted.
func (n *Net) Cuts() []Link {
	var out []Link
	for _, l := range n.Links() {
		n.mu.Lock()
		c := n.cut[l]
		n.mu.Unlock()
		if c {
			out = append(out, l)
		}
	}
	return out
}

const latencyToxic = "nemesis-delay"

// Delay adds latency (plus or minus jitter) to every message on every link.
// A second call replaces the first.
func (n *Net) Delay(latency, jitter time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http != nil {
		return errNoHTTPDelay
	}
	if err := n.clearDelayLocked(); err != nil {
		return err
	}
	var errs []error
	n.latency, n.jitter = latency, jitter
	for l, p := range n.proxies {
		if err := n.addDelayLocked(l, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// addDelayLocked adds the latency in force to link l's proxy p.
func (n *Net) addDelayLocked(l Link, p *toxiproxy.Proxy) error {
	body := fmt.Sprintf(`{"name":%q,"type":"latency","stream":"upstream","toxicity":1,"attributes":{"latency":%d,"jitter":%d}}`,
		latencyToxic, n.latency.Milliseconds(), n.jitter.Milliseconds())
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("delay link %s: %w", l, err)
	}
	return nil
}

// ClearDelay removes the latency added by Delay.
func (n *Net) ClearDelay() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.clearDelayLocked()
}

func (n *Net) clearDelayLocked() error {
	if n.latency == 0 && n.jitter == 0 {
		return nil
	}
	var errs []error
	for l, p := range n.proxies {
		if p.Toxics.GetToxic(latencyToxic) == nil {
			continue
		}
		if err := p.Toxics.RemoveToxic(context.Background(), latencyToxic); err != nil {
			errs = append(errs, fmt.Errorf("remove delay from link %s: %w", l, err))
		}
	}
	n.latency, n.jitter = 0, 0
	return errors.Join(errs...)
}

// HealAll restores every link and removes every delay.
func (n *Net) HealAll() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	if err := n.clearDelayLocked(); err != nil {
		errs = append(errs, err)
	}
	for l := range n.cut {
		if err := n.restoreLocked(l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close stops every proxy. The network cannot be used afterwards.
func (n *Net) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closeLocked()
}

func (n *Net) closeLocked() {
	for _, l := range n.reserved {
		l.Close()
	}
	n.reserved = nil
	for _, p := range n.proxies {
		p.Stop()
	}
	if n.http != nil {
		n.closeHTTPLocked()
	}
	n.proxies = map[Link]*toxiproxy.Proxy{}
	n.cut = map[Link]bool{}
}

// DialPeers returns self's -dialPeers value for the members all (in
// -peers order) after a membership change: the proxy of each link that
// has one, the member's own internal address for a link without one (and
// for self). The HTTP net (etcd) keeps its
// members: "" there.
func (n *Net) DialPeers(self cluster.Node, all []cluster.Node) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http != nil || n.createErr != nil {
		return ""
	}
	dial := make([]string, len(all))
	for i, m := range all {
		dial[i] = m.InternalAddress
		if p, ok := n.proxies[Link{From: self.ID, To: m.ID}]; ok && m.ID != self.ID {
			dial[i] = p.Listen
		}
	}
	return strings.Join(dial, ",")
}
