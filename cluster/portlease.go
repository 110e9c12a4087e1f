package cluster

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// portLeaseTTL is how long a port picked by freePorts stays leased to its
// cluster: long enough for its node to start and bind it, and to cover the
// window in which a killed node is down before its restart binds the port
// again (the lease is renewed when the node is killed or started:
// renewPorts).
const portLeaseTTL = 5 * time.Minute

// portLeaseDir holds one empty file per leased port, named host_port. It is
// shared by every process of this user on the machine (tests of several
// packages, experiments, `nezha cluster up`), so that two of them do not
// pick the same port between one's choice and its node's bind: freePorts
// can only see a port that is bound, and a node binds its ports some
// hundred milliseconds after the choice (the race behind a CI failure,
// "address already in use", in a test running beside others).
func portLeaseDir() string { return filepath.Join(os.TempDir(), "nezha-port-leases") }

// leasePort takes the lease of host:port, unless another process holds a
// lease on it younger than portLeaseTTL. It reports whether the lease was
// taken. Errors of the lease directory (read-only /tmp, say) do not stop
// the pick: the port is taken unleased, as before leases existed.
func leasePort(host string, port int, now time.Time) bool {
	dir := portLeaseDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return true
	}
	p := filepath.Join(dir, leaseName(host, port))
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			f.Close()
			return true
		}
		if !errors.Is(err, fs.ErrExist) {
			return true
		}
		st, err := os.Stat(p)
		if err != nil {
			continue // removed meanwhile: try to create it again
		}
		if now.Sub(st.ModTime()) < portLeaseTTL {
			return false
		}
		// Expired. Two processes may both see it expired; the O_EXCL
		// create above lets only one of them take it.
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

// releasePorts drops the leases of the ports of addrs (host:port; empty
// strings are skipped), once a cluster is down for good.
func releasePorts(addrs ...string) {
	for _, a := range addrs {
		if p, ok := leasePath(a); ok {
			os.Remove(p)
		}
	}
}

// leasePath is the lease file of addr (host:port); false for an address
// that is empty or not host:port.
func leasePath(addr string) (string, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return "", false
	}
	return filepath.Join(portLeaseDir(), leaseName(host, n)), true
}

// renewPorts restarts from now the leases of the ports of addrs (host:port;
// empty strings are skipped), taking any that lapsed. A lease counts from
// when freePorts picked the port, so without renewal a node killed more
// than portLeaseTTL after its cluster came up would have its ports
// unleased while it is down, and another process could pick them before
// its restart binds them ("address already in use"). Kill and a Down that
// keeps the cluster renew the leases of the nodes they stop, and start
// those of the node it starts. Errors of the lease directory are ignored,
// as leasePort ignores them.
func renewPorts(now time.Time, addrs ...string) {
	for _, a := range addrs {
		p, ok := leasePath(a)
		if !ok {
			continue
		}
		if err := os.Chtimes(p, now, now); errors.Is(err, fs.ErrNotExist) {
			if os.MkdirAll(portLeaseDir(), 0o755) == nil && os.WriteFile(p, nil, 0o644) == nil {
				os.Chtimes(p, now, now)
			}
		}
	}
}

func leaseName(host string, port int) string { return host + "_" + strconv.Itoa(port) }
