package cluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A leased port is refused to a second pick until its lease expires or is
// released; freePorts never returns a port another process has leased.
func TestPortLease(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	now := time.Now()
	if !leasePort("127.0.0.1", 12345, now) {
		t.Fatal("first lease of a free port refused")
	}
	if leasePort("127.0.0.1", 12345, now.Add(time.Second)) {
		t.Fatal("a port leased a second ago was leased again")
	}
	if !leasePort("127.0.0.2", 12345, now) {
		t.Fatal("the same port on another host was refused")
	}
	if !leasePort("127.0.0.1", 12345, now.Add(portLeaseTTL+time.Minute)) {
		t.Fatal("an expired lease was not taken over")
	}
	releasePorts(net.JoinHostPort("127.0.0.1", "12345"), "", "no-port")
	if !leasePort("127.0.0.1", 12345, now) {
		t.Fatal("a released port was refused")
	}

	// Every port freePorts returns is leased, and a second call skips them.
	ports, err := freePorts("127.0.0.1", 8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice: %v", p, ports)
		}
		seen[p] = true
		if _, err := os.Stat(filepath.Join(portLeaseDir(), leaseName("127.0.0.1", p))); err != nil {
			t.Fatalf("port %d returned without a lease: %v", p, err)
		}
		if leasePort("127.0.0.1", p, time.Now()) {
			t.Fatalf("port %d returned by freePorts could be leased again", p)
		}
	}
	again, err := freePorts("127.0.0.1", 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range again {
		if seen[p] {
			t.Fatalf("freePorts returned port %d, leased by the first call", p)
		}
	}
	t.Logf("first %v, second %v (lease dir %s)", ports, again, portLeaseDir())
}

// Ports the kernel picks (the fallback when the range below its ephemeral
// range leaves no room) are refused when another process leased them, as
// ports picked below that range are. Nine in ten ports of the ephemeral
// range are leased (all but those ≡ 1 mod 10: the kernel's picks for
// listeners are odd); before the fix, a leased port was returned (and
// leased again over the other process's lease).
func TestPortLeaseKernelPicks(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip(err)
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(portLeaseDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	leased := func(p int) bool { return p%10 != 1 }
	for p := lo; p <= hi; p++ {
		if leased(p) {
			if err := os.WriteFile(filepath.Join(portLeaseDir(), leaseName("127.0.0.1", p)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	const n = 8
	ports, err := pickPorts("127.0.0.1", n, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != n {
		t.Fatalf("%d ports, want %d: %v", len(ports), n, ports)
	}
	for _, p := range ports {
		if p < lo || p > hi || leased(p) {
			t.Fatalf("pickPorts returned port %d, leased by another process (%v)", p, ports)
		}
	}
}

// A node's ports stay leased while it is down however long its cluster has
// been up: starting a node, killing it and a Down that keeps the cluster
// renew the leases of its ports (before, a lease counted only from
// freePorts' pick, so a node killed more than portLeaseTTL later had
// unleased ports until its restart bound them again), and a purge
// releases them.
func TestNodePortLeasesRenewed(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	// The agent and the node are the test binary (helperRole).
	dir := t.TempDir()
	if err := writeToken(dir); err != nil {
		t.Fatal(err)
	}
	s := &Spec{System: "nezha", Binary: os.Args[0], Dir: dir, NextID: 2}
	s.Nodes = []Node{{ID: 1}}
	n := &s.Nodes[0]
	if err := (localBackend{}).place(t.Context(), s, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Down(true) })
	leaseFiles := func() []string {
		var ps []string
		for _, a := range n.ports() {
			_, port, _ := net.SplitHostPort(a)
			ps = append(ps, filepath.Join(portLeaseDir(), "127.0.0.1_"+port))
		}
		return ps
	}
	lapse := func() {
		old := time.Now().Add(-portLeaseTTL - time.Minute)
		for _, p := range leaseFiles() {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkFresh := func(after string) {
		t.Helper()
		for _, p := range leaseFiles() {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatalf("after %s: %v", after, err)
			}
			if age := time.Since(st.ModTime()); age >= portLeaseTTL {
				t.Fatalf("after %s: the lease %s is %v old: lapsed", after, filepath.Base(p), age.Round(time.Second))
			}
		}
	}
	lapse()
	if err := s.start(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	checkFresh("start")
	lapse()
	if err := s.Kill(1); err != nil {
		t.Fatal(err)
	}
	checkFresh("Kill")
	lapse()
	if err := s.Down(false); err != nil {
		t.Fatal(err)
	}
	checkFresh("Down without purge")
	if err := s.Down(true); err != nil {
		t.Fatal(err)
	}
	for _, p := range leaseFiles() {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("after a purge, lease %s: %v", filepath.Base(p), err)
		}
	}
}
