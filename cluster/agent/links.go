package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// The node's outgoing peer links: one embedded toxiproxy proxy per member
// the node dials, listening on loopback beside the node and forwarding to
// the member's peer (internal) address; the node dials the proxies (its
// -dialPeersFile). Raft messages from this node to a member travel only on
// connections this node dials, so the proxies carry exactly this node's
// messages to each member. A cut link is a disabled proxy: its listener
// and every connection through it are closed, and the node's dials are
// refused until the link is restored (on the same port). A delay is
// toxiproxy's latency toxic on the upstream direction (this node's
// messages), in whole milliseconds. With a packet filter (Config.
// PacketFilter, on a network namespace of the node's own) a cut also drops
// the packets to the member's address; a node that cannot dial through
// proxies (etcd advertises one peer address to all) has only that.

// links is the state of the node's outgoing peer links.
type links struct {
	mu      sync.Mutex
	server  *toxiproxy.ApiServer
	proxies map[uint64]*toxiproxy.Proxy
	peers   map[uint64]string // member id -> its peer address
	direct  bool              // SetPeers' no_proxies: the node dials peers itself
	cut     map[uint64]bool
	delay   time.Duration
	jitter  time.Duration
	// filter is the packet filter, nil without one.
	filter *packetFilter
	// dialFile is the node's -dialPeersFile.
	dialFile string
}

func newLinks(dialFile string, filter *packetFilter) *links {
	return &links{
		server:   toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies:  map[uint64]*toxiproxy.Proxy{},
		peers:    map[uint64]string{},
		cut:      map[uint64]bool{},
		filter:   filter,
		dialFile: dialFile,
	}
}

// latencyToxic names the delay's toxic.
const latencyToxic = "agent-delay"

// SetPeers creates, updates and removes the proxies of the node's links.
func (s *server) SetPeers(_ context.Context, req *agentpb.SetPeersRequest) (*agentpb.SetPeersResponse, error) {
	for id, addr := range req.GetPeers() {
		if id == 0 {
			return nil, status.Error(codes.InvalidArgument, "member id 0")
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "member %d: address %q is not host:port", id, addr)
		}
	}
	dial, err := s.links.setPeers(req.GetPeers(), req.GetNoProxies())
	if err != nil {
		return nil, err
	}
	resp := &agentpb.SetPeersResponse{Dial: dial}
	if !req.GetNoProxies() {
		resp.DialPeersFile = s.links.dialFile
	}
	return resp, nil
}

// setPeers makes peers the node's members (see SetPeers) and returns the
// address the node dials for each (none when direct); errors are gRPC
// statuses.
func (l *links) setPeers(peers map[uint64]string, direct bool) (map[uint64]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if direct && (l.delay != 0 || l.jitter != 0) {
		return nil, status.Error(codes.FailedPrecondition, "links are delayed, which needs proxies: clear the delay first")
	}
	l.peers = map[uint64]string{}
	for id, a := range peers {
		l.peers[id] = a
	}
	for id := range l.cut {
		if _, ok := peers[id]; !ok {
			delete(l.cut, id)
		}
	}
	for id, p := range l.proxies {
		if _, ok := peers[id]; !ok || direct {
			p.Stop()
			delete(l.proxies, id)
		}
	}
	l.direct = direct
	var errs []error
	if !direct {
		// The members' ports must stay free for them (a member on this
		// host may be down now), as must the ports of this agent's other
		// proxies (a cut one is not listening).
		taken := map[string]bool{}
		for _, a := range peers {
			if _, port, err := net.SplitHostPort(a); err == nil {
				taken[port] = true
			}
		}
		for _, p := range l.proxies {
			if _, port, err := net.SplitHostPort(p.Listen); err == nil {
				taken[port] = true
			}
		}
		for _, id := range sortedIDs(peers) {
			if p, ok := l.proxies[id]; ok {
				if p.Upstream != peers[id] {
					if err := p.Update(&toxiproxy.Proxy{Listen: p.Listen, Upstream: peers[id], Enabled: !l.cut[id]}); err != nil {
						errs = append(errs, fmt.Errorf("proxy to member %d: %w", id, err))
					}
				}
				continue
			}
			if err := l.startProxyLocked(id, peers[id], taken); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := l.filterLocked(); err != nil {
		errs = append(errs, err)
	}
	dial := map[uint64]string{}
	files := map[string]string{}
	for id, p := range l.proxies {
		dial[id] = p.Listen
		files[strconv.FormatUint(id, 10)] = p.Listen
	}
	if !direct {
		if err := writeJSONAtomic(l.dialFile, files); err != nil {
			errs = append(errs, fmt.Errorf("dial peers file: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, status.Errorf(codes.Internal, "peer links: %v", err)
	}
	return dial, nil
}

// startProxyLocked creates and starts the proxy to member id at address
// to, on a free loopback port not in taken (then taken too), with the
// delay in force; a cut link's proxy is stopped again once its port is
// known.
func (l *links) startProxyLocked(id uint64, to string, taken map[string]bool) error {
	var listen string
	for attempt := 0; listen == "" && attempt < 100; attempt++ {
		lis, err := listenBelowEphemeral()
		if err != nil {
			return fmt.Errorf("proxy to member %d: %w", id, err)
		}
		if _, port, _ := net.SplitHostPort(lis.Addr().String()); !taken[port] {
			listen = lis.Addr().String()
			taken[port] = true
		}
		lis.Close()
	}
	if listen == "" {
		return fmt.Errorf("proxy to member %d: no free port outside the members' in 100 attempts", id)
	}
	p := toxiproxy.NewProxy(l.server, fmt.Sprintf("member-%d", id), listen, to)
	if err := p.Start(); err != nil {
		return fmt.Errorf("proxy to member %d: %w", id, err)
	}
	l.proxies[id] = p
	if l.cut[id] {
		p.Stop()
	}
	if l.delay != 0 || l.jitter != 0 {
		return addDelay(id, p, l.delay, l.jitter)
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

// SetLinks sets which links are cut and the delay on every one.
func (s *server) SetLinks(_ context.Context, req *agentpb.SetLinksRequest) (*agentpb.SetLinksResponse, error) {
	if req.GetDelayNs() < 0 || req.GetJitterNs() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "delay %d ns +- %d ns: negative", req.GetDelayNs(), req.GetJitterNs())
	}
	mech, err := s.links.setLinks(req.GetCut(), time.Duration(req.GetDelayNs()), time.Duration(req.GetJitterNs()))
	if err != nil {
		return nil, err
	}
	return &agentpb.SetLinksResponse{Mechanism: mech}, nil
}

// setLinks is SetLinks; errors are gRPC statuses.
func (l *links) setLinks(cut []uint64, delay, jitter time.Duration) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	want := map[uint64]bool{}
	for _, id := range cut {
		if _, ok := l.peers[id]; !ok {
			return "", status.Errorf(codes.InvalidArgument, "member %d is not among the peers (SetPeers)", id)
		}
		want[id] = true
	}
	if l.direct && l.filter == nil && len(want) > 0 {
		return "", status.Error(codes.FailedPrecondition, "cannot cut links: the node dials its peers itself (no proxies) and this agent has no packet filter")
	}
	if l.direct && (delay != 0 || jitter != 0) {
		return "", status.Error(codes.FailedPrecondition, "cannot delay links: the node dials its peers itself (no proxies)")
	}
	var errs []error
	for id, p := range l.proxies {
		switch {
		case want[id] && !l.cut[id]:
			p.Stop()
		case !want[id] && l.cut[id]:
			if err := restartProxy(p); err != nil {
				errs = append(errs, fmt.Errorf("restore link to member %d: %w", id, err))
			}
		}
	}
	l.cut = want
	if err := l.filterLocked(); err != nil {
		errs = append(errs, err)
	}
	if delay != l.delay || jitter != l.jitter {
		for id, p := range l.proxies {
			if p.Toxics.GetToxic(latencyToxic) != nil {
				if err := p.Toxics.RemoveToxic(context.Background(), latencyToxic); err != nil {
					errs = append(errs, fmt.Errorf("remove the delay to member %d: %w", id, err))
				}
			}
			if delay != 0 || jitter != 0 {
				if err := addDelay(id, p, delay, jitter); err != nil {
					errs = append(errs, err)
				}
			}
		}
		l.delay, l.jitter = delay, jitter
	}
	if err := errors.Join(errs...); err != nil {
		return "", status.Errorf(codes.Internal, "links: %v", err)
	}
	return l.mechanismLocked(), nil
}

// mechanismLocked says how links are cut: "proxy", "proxy+nftables" or
// "nftables".
func (l *links) mechanismLocked() string {
	switch {
	case l.direct && l.filter != nil:
		return "nftables"
	case l.direct:
		return "none"
	case l.filter != nil:
		return "proxy+nftables"
	}
	return "proxy"
}

// restartProxy starts a stopped proxy on its port again, retrying for a
// while in case the port is briefly taken.
func restartProxy(p *toxiproxy.Proxy) error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = p.Start(); err == nil || errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("listen %s: %w", p.Listen, err)
}

// addDelay adds the latency toxic to p (toxiproxy counts whole
// milliseconds).
func addDelay(id uint64, p *toxiproxy.Proxy, delay, jitter time.Duration) error {
	body := fmt.Sprintf(`{"name":%q,"type":"latency","stream":"upstream","toxicity":1,"attributes":{"latency":%d,"jitter":%d}}`,
		latencyToxic, delay.Round(time.Millisecond).Milliseconds(), jitter.Round(time.Millisecond).Milliseconds())
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("delay the link to member %d: %w", id, err)
	}
	return nil
}

// filterLocked makes the packet filter drop what goes to the cut members'
// addresses (host names resolved now).
func (l *links) filterLocked() error {
	if l.filter == nil {
		return nil
	}
	var dests []netip.AddrPort
	var errs []error
	for _, id := range sortedIDs(l.cut) {
		ds, err := resolve(l.peers[id])
		if err != nil {
			errs = append(errs, fmt.Errorf("member %d: %w", id, err))
			continue
		}
		dests = append(dests, ds...)
	}
	if err := l.filter.drop(dests); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// resolve returns the addresses of host:port.
func resolve(hostPort string) ([]netip.AddrPort, error) {
	host, portText, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port of %q: %w", hostPort, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, ip := range ips {
		out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	return out, nil
}

// close stops every proxy and deletes the packet filter's table.
func (l *links) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.Stop()
	}
	l.proxies = map[uint64]*toxiproxy.Proxy{}
	if l.filter == nil {
		return nil
	}
	err := l.filter.close()
	l.filter = nil
	return err
}

func sortedIDs[V any](m map[uint64]V) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// writeJSONAtomic writes v as JSON to path through a rename, so that a
// reader never sees half of it.
func writeJSONAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b, 0o644)
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
