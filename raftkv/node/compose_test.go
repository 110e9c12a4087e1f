package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

func TestParseReplicaName(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		k            int
	}{
		{"deploy_node_1", "deploy_node_", 1},
		{"t-1a2b_node_12", "t-1a2b_node_", 12},
		{"proj-node-3", "proj-node-", 3}, // Compose v2
		{"node_99", "node_", 99},
	} {
		prefix, k, ok := parseReplicaName(c.name)
		if !ok || prefix != c.prefix || k != c.k {
			t.Errorf("parseReplicaName(%q) = %q, %d, %v; want %q, %d", c.name, prefix, k, ok, c.prefix, c.k)
		}
	}
	for _, name := range []string{"", "node", "node_", "_1", "node_0", "node_01", "node_+1", "node_1x", "node_100", "f1c96a7edb3b"} {
		if prefix, k, ok := parseReplicaName(name); ok {
			t.Errorf("parseReplicaName(%q) = %q, %d; want not a replica name", name, prefix, k)
		}
	}
}

// fakePTR answers reverse DNS from a table; an address it lacks is an
// error.
func fakePTR(table map[string][]string) ptrLookup {
	return func(_ context.Context, ip net.IP) ([]string, error) {
		names, ok := table[ip.String()]
		if !ok {
			return nil, errors.New("NXDOMAIN")
		}
		return names, nil
	}
}

func TestComposeContainerName(t *testing.T) {
	ctx := context.Background()
	ips := []net.IP{net.ParseIP("172.18.0.4"), net.ParseIP("fd00::4")}
	name, err := composeContainerName(ctx, fakePTR(map[string][]string{"172.18.0.4": {"p_node_2.p_default."}}), ips)
	if err != nil || name != "p_node_2" {
		t.Fatalf("one replica name: %q, %v", name, err)
	}
	for _, c := range []struct {
		table map[string][]string
		want  string
	}{
		{map[string][]string{"172.18.0.4": {"f1c96a7edb3b."}}, "no PTR name of this host is a Compose replica's container name"},
		{map[string][]string{}, "reverse DNS of 172.18.0.4: NXDOMAIN"},
		{map[string][]string{"172.18.0.4": {"p_node_2.a."}, "fd00::4": {"q_node_1.b."}}, "several Compose replicas [p_node_2 q_node_1]"},
	} {
		if name, err := composeContainerName(ctx, fakePTR(c.table), ips); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %q, %v; want an error with %q", c.table, name, err, c.want)
		}
	}
}

// composeConfig is a valid -composeReplicas n configuration.
func composeConfig(t *testing.T, n int) Config {
	c := Default()
	c.System, c.SystemConfig = memSystem, memConfig{}
	c.ComposeReplicas = n
	c.Address, c.InternalAddress, c.EtcdAddress = ":7000", ":7001", ":2379"
	c.DataDir = t.TempDir()
	c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return c
}

func TestAsComposeReplica(t *testing.T) {
	c := composeConfig(t, 3)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := c.asComposeReplica("p_node_2")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p_node_1:7001", "p_node_2:7001", "p_node_3:7001"}
	if !slices.Equal(r.Peers, want) || r.Address != "p_node_2:7000" || r.InternalAddress != "p_node_2:7001" ||
		r.DataDir != filepath.Join(c.DataDir, "p_node_2") || r.ComposeReplicas != 0 || r.ID() != 2 {
		t.Fatalf("replica 2: %s, compose %d", r.String(), r.ComposeReplicas)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("the replica's configuration: %v", err)
	}
	if got := r.listenAddress(r.Address); got != ":7000" {
		t.Errorf("listen on %q, want :7000", got)
	}
	if got := c.listenAddress("127.0.0.1:7000"); got != "127.0.0.1:7000" {
		t.Errorf("without -composeReplicas: listen on %q", got)
	}
	if _, err := c.asComposeReplica("p_node_4"); err == nil || !strings.Contains(err.Error(), "is replica 4") {
		t.Errorf("replica 4 of 3: %v", err)
	}
}

// TestComposeReplicasValidate: -composeReplicas excludes -peers and
// -dialPeers and wants bare ports; every problem is reported at once.
func TestComposeReplicasValidate(t *testing.T) {
	c := composeConfig(t, 3)
	c.Peers, c.Address, c.InternalAddress = []string{"a:1"}, "10.0.0.1:7000", "n1:7001"
	err := c.Validate()
	var ue *cmdline.UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("want a usage error, got %v", err)
	}
	for _, want := range []string{"give neither -peers nor -dialPeers", `-address "10.0.0.1:7000" gives only a port (:7000)`,
		`-internalAddress "n1:7001" gives only a port (:7001)`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %q", err, want)
		}
	}
	for _, n := range []int{-1, MaxComposeReplicas + 1} {
		c := composeConfig(t, n)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "is outside 0..99") {
			t.Errorf("-composeReplicas %d: %v", n, err)
		}
	}
}

// TestComposeReplicaServes: a one-replica service starts from its
// container name (a fake reverse DNS), listens on every interface and
// advertises that name, and serves writes in <data>/<container name>.
func TestComposeReplicaServes(t *testing.T) {
	if ips, err := hostIPs(); err != nil || len(ips) == 0 {
		t.Skip("network: this host has no global unicast address for a replica to look up")
	}
	addrs := freeAddrs(t, 2)
	_, clientPort, _ := net.SplitHostPort(addrs[0])
	_, peerPort, _ := net.SplitHostPort(addrs[1])
	c := composeConfig(t, 1)
	c.Address, c.InternalAddress, c.EtcdAddress = ":"+clientPort, ":"+peerPort, ""
	c.TickInterval, c.MinFreeDiskBytes = 20*time.Millisecond, 0
	c.lookupPTR = func(context.Context, net.IP) ([]string, error) { return []string{"p_node_1.p_default."}, nil }
	tc := &testCluster{t: t, cfgs: []Config{c}, nodes: make([]*Node, 1)}
	tc.start(0)
	t.Cleanup(func() { tc.nodes[0].Stop() })
	if got := tc.nodes[0].cfg.Address; got != "p_node_1:"+clientPort {
		t.Fatalf("advertised address %q", got)
	}
	tc.cfgs[0].Address = addrs[0] // the client dials the loopback address
	cl := tc.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := cl.Get(ctx, []byte("k")); err != nil || !ok || string(v) != "v" {
		t.Fatalf("get: %q, %v, %v", v, ok, err)
	}
	if m, _ := filepath.Glob(filepath.Join(c.DataDir, "p_node_1", "raftlog", "*")); len(m) == 0 {
		t.Fatalf("no Raft log under %s", filepath.Join(c.DataDir, "p_node_1"))
	}
}
