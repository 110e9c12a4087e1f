package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Host is one machine of a hosts file (-hosts): one node runs on each.
type Host struct {
	// Target is how the controller reaches the machine: for the ssh
	// backend an ssh destination ([user@]host, with ssh's own config for
	// the rest); for the docker backend a Docker daemon (a DOCKER_HOST
	// value such as ssh://user@host, or context=NAME for a docker
	// context).
	Target string `json:"target"`
	// Address is the machine's address that the other nodes and the
	// controller reach its node at.
	Address string `json:"address"`
	// Dir is the harness's directory on the machine (ssh; default
	// nezha-harness, relative to the login's home).
	Dir string `json:"dir,omitempty"`
	// BasePort is the first of the node's ports: client BasePort,
	// internal +1, metrics +2, JSON-RPC +3, agent +4, etcd API +5,
	// profiler +6. Default 3088.
	BasePort int `json:"base_port,omitempty"`
	// SSHConfig is an ssh_config file for this host (ssh -F).
	SSHConfig string `json:"ssh_config,omitempty"`
}

// DefaultBasePort is a host's first node port when the hosts file names
// none.
const DefaultBasePort = 3088

// port returns the host's k-th node port (0 client, 1 internal, 2
// metrics, 3 JSON-RPC, 4 agent, 5 etcd API, 6 profiler).
func (h Host) port(k int) string {
	base := h.BasePort
	if base == 0 {
		base = DefaultBasePort
	}
	return net.JoinHostPort(h.Address, strconv.Itoa(base+k))
}

// ParseHosts reads a hosts file: one machine per line, `TARGET ADDRESS
// [key=value ...]` with the keys dir, base_port and ssh_config; blank
// lines and lines starting with # are skipped. Every bad line is reported
// (a *cmdline.UsageError naming file and line).
func ParseHosts(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, cmdline.Usagef("-hosts %s: %v", path, err)
	}
	defer f.Close()
	var hosts []Host
	var errs []error
	bad := func(line int, format string, args ...any) {
		errs = append(errs, cmdline.Usagef("%s:%d: %s", path, line, fmt.Sprintf(format, args...)))
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 2 {
			bad(line, "want TARGET ADDRESS [key=value ...], got %q", text)
			continue
		}
		h := Host{Target: fields[0], Address: fields[1]}
		if ip := net.ParseIP(h.Address); ip == nil && strings.ContainsAny(h.Address, ":/ ") {
			bad(line, "address %q is not a host name or IP address (no port: ports come from base_port)", h.Address)
		}
		for _, kv := range fields[2:] {
			k, v, ok := strings.Cut(kv, "=")
			switch {
			case !ok:
				bad(line, "%q is not key=value", kv)
			case k == "dir":
				h.Dir = v
			case k == "ssh_config":
				h.SSHConfig = v
			case k == "base_port":
				p, err := strconv.Atoi(v)
				if err != nil || p < 1 || p > 65535-6 {
					bad(line, "base_port %q is not a port of 1..65529", v)
				}
				h.BasePort = p
			default:
				bad(line, "unknown key %q (want dir, base_port, ssh_config)", k)
			}
		}
		key := h.port(0)
		if first, dup := seen[key]; dup {
			bad(line, "%s is also line %d's (two nodes cannot share an address and ports)", key, first)
		}
		seen[key] = line
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(hosts) == 0 && len(errs) == 0 {
		errs = append(errs, cmdline.Usagef("-hosts %s names no host", path))
	}
	return hosts, errors.Join(errs...)
}

// freeHost returns the first of hosts that no node of s runs on (by
// Node.Host), for a node being placed.
func (s *Spec) freeHost(hosts []Host, placing uint64) (Host, error) {
	used := map[string]bool{}
	for _, n := range s.Nodes {
		if n.ID != placing && n.Host != "" {
			used[n.Host] = true
		}
	}
	for _, h := range hosts {
		if !used[hostKey(h)] {
			return h, nil
		}
	}
	return Host{}, cmdline.Usagef("no host of the cluster's %d is free for node %d (one node per host; add a line to the hosts file and start a new cluster)", len(hosts), placing)
}

// hostKey is Node.Host for a node placed on h.
func hostKey(h Host) string { return h.Target + " " + h.port(0) }

// hostOf returns the host node n was placed on.
func hostOf(hosts []Host, n *Node) (Host, error) {
	for _, h := range hosts {
		if hostKey(h) == n.Host {
			return h, nil
		}
	}
	return Host{}, fmt.Errorf("node %d: its host %q is not among the cluster's hosts", n.ID, n.Host)
}
