package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// A node started with Config.ComposeReplicas = N is one of the N replicas
// of one Docker Compose service (deploy/compose.yaml): every replica runs
// the same command line, so a replica learns who it is from its container
// name, <project>_<service>_<k> (docker-compose v1; <project>-<service>-<k>
// for Compose v2), which Docker's embedded DNS server gives as the PTR name
// of the container's address. Replica k is Raft id k; the members are the
// containers <project>_<service>_1 .. _N, which the same DNS server
// resolves, so a member that restarts on another address is still found.

// MaxComposeReplicas is the largest -composeReplicas: far more members
// than a Raft group of one service on one Docker host can use.
const MaxComposeReplicas = 99

// composeLookupTimeout bounds how long a replica asks DNS for its name
// before it gives up (the name is registered before the container's
// process starts; the time covers a busy DNS server).
const composeLookupTimeout = 10 * time.Second

// resolvConf is where a container's DNS server is named.
const resolvConf = "/etc/resolv.conf"

// ptrLookup returns the PTR names of ip.
type ptrLookup func(ctx context.Context, ip net.IP) ([]string, error)

// withComposeIdentity returns c as replica k of ComposeReplicas, named by
// reverse DNS of this host's addresses: ComposeReplicas cleared, Peers the
// N containers at the port of InternalAddress, Address and InternalAddress
// under the container's name (the node listens on the same ports on every
// interface: Config.listenAll), DataDir the container's directory under
// DataDir.
func (c Config) withComposeIdentity(ctx context.Context, lookup ptrLookup) (Config, error) {
	ips, err := hostIPs()
	if err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(ctx, composeLookupTimeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		name, err := composeContainerName(ctx, lookup, ips)
		if err == nil {
			return c.asComposeReplica(name)
		}
		select {
		case <-ctx.Done():
			return c, cmdline.Usagef("-composeReplicas %d: %v", c.ComposeReplicas, err)
		case <-tick.C:
		}
	}
}

// hostIPs returns this host's global unicast addresses.
func hostIPs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("-composeReplicas: the host's addresses: %w", err)
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			ips = append(ips, n.IP)
		}
	}
	return ips, nil
}

// composeContainerName returns the one container name of a Compose replica
// (<prefix><k>, k a positive number) that the PTR names of ips give: the
// first label of a name such as "proj_node_2.proj_default.".
func composeContainerName(ctx context.Context, lookup ptrLookup, ips []net.IP) (string, error) {
	var names, seen []string
	var errs []error
	for _, ip := range ips {
		ptrs, err := lookup(ctx, ip)
		if err != nil {
			errs = append(errs, fmt.Errorf("reverse DNS of %s: %w", ip, err))
			continue
		}
		for _, p := range ptrs {
			label, _, _ := strings.Cut(p, ".")
			seen = append(seen, ip.String()+" is "+p)
			if _, _, ok := parseReplicaName(label); ok && !slices.Contains(names, label) {
				names = append(names, label)
			}
		}
	}
	switch {
	case len(names) == 1:
		return names[0], nil
	case len(names) > 1:
		return "", fmt.Errorf("this container has the names of several Compose replicas %v: run it on one network", names)
	case len(ips) == 0:
		return "", errors.New("this host has no global unicast address to look up")
	}
	msg := "no PTR name of this host is a Compose replica's container name <project>_<service>_<k>"
	if len(seen) > 0 {
		msg += " (" + strings.Join(seen, ", ") + ")"
	}
	return "", errors.Join(append([]error{errors.New(msg)}, errs...)...)
}

// parseReplicaName splits a container name of a Compose replica,
// <project>_<service>_<k> or <project>-<service>-<k>, into its prefix
// (everything up to k) and k.
func parseReplicaName(name string) (prefix string, k int, ok bool) {
	i := strings.LastIndexAny(name, "_-")
	digits := name[i+1:]
	if i <= 0 || digits == "" || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return "", 0, false
	}
	k, err := strconv.Atoi(digits)
	if err != nil || k > MaxComposeReplicas {
		return "", 0, false
	}
	return name[:i+1], k, true
}

// asComposeReplica returns c as the replica whose container is name.
func (c Config) asComposeReplica(name string) (Config, error) {
	prefix, k, ok := parseReplicaName(name)
	if !ok {
		return c, cmdline.Usagef("-composeReplicas: container name %q is not <project>_<service>_<k>", name)
	}
	if k > c.ComposeReplicas {
		return c, cmdline.Usagef("-composeReplicas %d: this container, %s, is replica %d: give the service's replica count", c.ComposeReplicas, name, k)
	}
	_, clientPort, _ := net.SplitHostPort(c.Address)
	_, peerPort, _ := net.SplitHostPort(c.InternalAddress)
	c.Peers = make([]string, c.ComposeReplicas)
	for i := range c.Peers {
		c.Peers[i] = net.JoinHostPort(prefix+strconv.Itoa(i+1), peerPort)
	}
	c.Address = net.JoinHostPort(name, clientPort)
	c.InternalAddress = net.JoinHostPort(name, peerPort)
	c.DataDir = filepath.Join(c.DataDir, name)
	c.ComposeReplicas = 0
	c.listenAll = true
	return c, nil
}

// listenAddress is where the node listens for what addr names: addr, or
// with listenAll its port on every interface.
func (c *Config) listenAddress(addr string) string {
	if !c.listenAll {
		return addr
	}
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort("", port)
}

// lookupPTR asks the DNS servers of /etc/resolv.conf for the PTR names of
// ip. Go's resolver (net.LookupAddr) answers from /etc/hosts first, where
// Docker writes the container's address under its host name (its id), not
// its container name.
func lookupPTR(ctx context.Context, ip net.IP) ([]string, error) {
	conf, err := dns.ClientConfigFromFile(resolvConf)
	if err != nil {
		return nil, err
	}
	arpa, err := dns.ReverseAddr(ip.String())
	if err != nil {
		return nil, err
	}
	q := new(dns.Msg).SetQuestion(arpa, dns.TypePTR)
	var errs []error
	for _, s := range conf.Servers {
		r, _, err := new(dns.Client).ExchangeContext(ctx, q, net.JoinHostPort(s, conf.Port))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Rcode != dns.RcodeSuccess {
			errs = append(errs, fmt.Errorf("%s answers %s", s, dns.RcodeToString[r.Rcode]))
			continue
		}
		var names []string
		for _, rr := range r.Answer {
			if p, ok := rr.(*dns.PTR); ok {
				names = append(names, p.Ptr)
			}
		}
		return names, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%s names no DNS server", resolvConf)
	}
	return nil, errors.Join(errs...)
}
