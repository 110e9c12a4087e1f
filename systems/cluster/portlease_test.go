package cluster

import (
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
