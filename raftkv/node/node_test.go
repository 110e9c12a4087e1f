package node

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// memSM is an in-memory state machine for testing the node alone.
type memSM struct {
	mu      sync.RWMutex
	m       map[string][]byte
	applied uint64
	// stall, when set, is the error WriteStall returns (a test's GC debt).
	stall atomic.Pointer[error]
}

func (s *memSM) WriteStall() error {
	if e := s.stall.Load(); e != nil {
		return *e
	}
	return nil
}

func (s *memSM) AppliedIndex() uint64 { s.mu.RLock(); defer s.mu.RUnlock(); return s.applied }
func (s *memSM) Apply(ents []systems.AppliedEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ents {
		switch e.Command.Op {
		case systems.OpPut:
			s.m[string(e.Command.Key)] = e.Command.Value
		case systems.OpDelete:
			delete(s.m, string(e.Command.Key))
		}
		s.applied = e.Index
	}
	return nil
}
func (s *memSM) Get(key []byte) ([]byte, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.m[string(key)]
	return append([]byte(nil), v...), ok, nil
}
func (s *memSM) Scan(start, end []byte, limit, maxBytes int) ([]systems.KeyValue, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var keys []string
	for k := range s.m {
		if k >= string(start) && (len(end) == 0 || k < string(end)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []systems.KeyValue
	size := 0
	for _, k := range keys {
		if limit > 0 && len(out) >= limit {
			break
		}
		if len(out) > 0 && size >= maxBytes {
			return out, true, nil
		}
		out = append(out, systems.KeyValue{Key: []byte(k), Value: s.m[k]})
		size += len(k) + len(s.m[k])
	}
	return out, false, nil
}
func (s *memSM) Close() error { return nil }

// memConfig opens memSM; it keeps nothing on disk, so AppliedIndex is 0 after
// a restart and the node replays the whole log.
type memConfig struct{}

func (memConfig) RegisterFlags(*flag.FlagSet) {}
func (memConfig) Validate() error             { return nil }
func (memConfig) Open(systems.Env) (systems.StateMachine, error) {
	return &memSM{m: map[string][]byte{}}, nil
}

var memSystem = systems.System{Name: "mem", Summary: "test", LogDir: "raftlog", Role: systems.RoleBaseline,
	NewConfig: func() systems.SystemConfig { return memConfig{} }}

func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

type testCluster struct {
	t     testing.TB
	cfgs  []Config
	nodes []*Node
}

func startCluster(t testing.TB, n int) *testCluster { return startClusterWith(t, n, nil) }

func startClusterWith(t testing.TB, n int, edit func(*Config)) *testCluster {
	t.Helper()
	return startClusterEach(t, n, func(_ int, c *Config) {
		if edit != nil {
			edit(c)
		}
	})
}

// startClusterEach is startClusterWith with the node's index (0-based).
func startClusterEach(t testing.TB, n int, edit func(i int, c *Config)) *testCluster {
	t.Helper()
	addrs := freeAddrs(t, 2*n)
	tc := &testCluster{t: t}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := 0; i < n; i++ {
		c := Default()
		c.System, c.SystemConfig = memSystem, memConfig{}
		c.Peers = addrs[n:]
		c.Address, c.InternalAddress = addrs[i], addrs[n+i]
		c.DataDir = t.TempDir()
		c.TickInterval = 20 * time.Millisecond
		c.MinFreeDiskBytes = 0
		c.Logger = logger
		edit(i, &c)
		tc.cfgs = append(tc.cfgs, c)
	}
	tc.nodes = make([]*Node, n)
	for i := range tc.cfgs {
		tc.start(i)
	}
	t.Cleanup(func() {
		for _, nd := range tc.nodes {
			if nd != nil {
				nd.Stop()
			}
		}
	})
	return tc
}

func (tc *testCluster) start(i int) {
	nd, err := Start(tc.cfgs[i])
	if err != nil {
		tc.t.Fatalf("start node %d: %v", i+1, err)
	}
	tc.nodes[i] = nd
}

func (tc *testCluster) stop(i int) {
	tc.nodes[i].Stop()
	tc.nodes[i] = nil
}

func (tc *testCluster) client(t testing.TB) *client.Client {
	var addrs []string
	for _, c := range tc.cfgs {
		addrs = append(addrs, c.Address)
	}
	c, err := client.New(client.DefaultConfig(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitLeader waits for a leader among the running nodes and returns its
// index.
func (tc *testCluster) waitLeader(deadline time.Duration) int {
	tc.t.Helper()
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		for i, nd := range tc.nodes {
			if nd != nil && nd.lead.Load() == nd.id {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc.t.Fatalf("no leader within %v", deadline)
	return -1
}

func TestPutGetDeleteScan(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitLeader(10 * time.Second)
	c := tc.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		if _, err := c.Put(ctx, []byte(fmt.Sprintf("k%02d", i)), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	v, ok, err := c.Get(ctx, []byte("k07"))
	if err != nil || !ok || string(v) != "v7" {
		t.Fatalf("get k07 = %q %v %v", v, ok, err)
	}
	if _, err := c.Delete(ctx, []byte("k07")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Get(ctx, []byte("k07")); err != nil || ok {
		t.Fatalf("get after delete: found=%v err=%v", ok, err)
	}
	kvs, err := c.Scan(ctx, []byte("k05"), []byte("k10"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, string(kv.Key))
	}
	if got := strings.Join(keys, ","); got != "k05,k06,k08,k09" {
		t.Fatalf("scan = %s", got)
	}
	// Bad input is rejected with InvalidArgument and the node keeps serving.
	if _, err := c.Put(ctx, nil, []byte("x")); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := c.Put(ctx, bytes.Repeat([]byte("k"), systems.MaxKeyBytes+1), nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("oversized key: %v", err)
	}
	if _, err := c.Put(ctx, []byte("k"), make([]byte, systems.DefaultMaxValueBytes+1)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("oversized value: %v", err)
	}
	if _, err := c.Put(ctx, []byte("after"), []byte("ok")); err != nil {
		t.Fatalf("put after bad input: %v", err)
	}
}

// Every node answers writes and reads: followers forward proposals through
// Raft and serve reads through ReadIndex.
func TestFollowersServe(t *testing.T) {
	tc := startCluster(t, 3)
	leader := tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range tc.nodes {
		if i == leader {
			continue
		}
		c, err := client.New(client.DefaultConfig(tc.cfgs[i].Address))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		key := []byte(fmt.Sprintf("via-%d", i))
		if _, err := c.Put(ctx, key, key); err != nil {
			t.Fatalf("put via follower %d: %v", i+1, err)
		}
		if v, ok, err := c.Get(ctx, key); err != nil || !ok || !bytes.Equal(v, key) {
			t.Fatalf("get via follower %d = %q %v %v", i+1, v, ok, err)
		}
	}
}

func TestStartErrors(t *testing.T) {
	addrs := freeAddrs(t, 2)
	c := Default()
	c.System, c.SystemConfig = memSystem, memConfig{}
	c.Peers = []string{addrs[1]}
	c.Address, c.InternalAddress = addrs[0], "127.0.0.1:1"
	c.DataDir = t.TempDir()
	err := c.Validate()
	var ue *cmdline.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "not in -peers") {
		t.Fatalf("internal address not in peers: %v", err)
	}
	for _, peers := range [][]string{{"18446744073709551615=" + addrs[1]}, {"18446744073709551614=" + addrs[1]}} {
		reserved := c
		reserved.Peers, reserved.InternalAddress = peers, addrs[1]
		if err := reserved.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "reserved by etcd raft") {
			t.Fatalf("-peers %v: %v (etcd raft panics on such an id)", peers, err)
		}
	}
	reservedVoter := c
	reservedVoter.BootstrapVoters = []uint64{math.MaxUint64 - 1}
	if err := reservedVoter.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "reserved by etcd raft") {
		t.Fatalf("-bootstrapVoters %v: %v", reservedVoter.BootstrapVoters, err)
	}
	bad := c
	bad.Address = "x"
	if err := bad.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), `-address "x" is not host:port`) {
		t.Fatalf("malformed -address: %v", err)
	}
	for _, a := range []string{"127.0.0.1:308108", "127.0.0.1:http", "127.0.0.1:-1"} {
		bad.Address = a
		if err := bad.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "is not a number in 0..65535") {
			t.Fatalf("-address %s: %v", a, err)
		}
	}
	bad.EntryCacheBytes = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "entry cache size -1") || !strings.Contains(err.Error(), "-address") {
		t.Fatalf("negative entry cache with a bad -address: %v, want both reported", err)
	}
	// A tick below MinTickInterval: -tick 1ns ran a node that spun a core
	// on its ticker.
	for _, tick := range []time.Duration{time.Nanosecond, time.Microsecond, MinTickInterval - 1} {
		bad = c
		bad.TickInterval = tick
		if err := bad.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "is below the minimum of 1ms") {
			t.Fatalf("-tick %v: %v", tick, err)
		}
	}
	bad = c
	bad.MetricsAddress = "0.0.0.0:9100"
	if err := bad.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), `-metricsAddress "0.0.0.0:9100" is not a loopback or private address`) {
		t.Fatalf("non-loopback -metricsAddress: %v", err)
	}
	bad = c
	bad.JSONRPCAddress, bad.JSONRPCMaxLineBytes = "8.8.8.8:7000", 10
	if err := bad.Validate(); !errors.As(err, &ue) || !strings.Contains(err.Error(), `-jsonrpcAddress "8.8.8.8:7000" is not a loopback or private address`) ||
		!strings.Contains(err.Error(), "JSONRPCMaxLineBytes 10") {
		t.Fatalf("non-loopback -jsonrpcAddress, short lines: %v", err)
	}
	// A container network's or a LAN's private address is allowed.
	for _, a := range []string{"10.213.0.11:3090", "172.17.0.2:3090", "192.168.1.5:3090", "[fd00::5]:3090"} {
		ok := c
		ok.MetricsAddress = a
		if err := ok.Validate(); err != nil && strings.Contains(err.Error(), "-metricsAddress") {
			t.Errorf("-metricsAddress %s: %v", a, err)
		}
	}
	// A port in use is named.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c.InternalAddress = addrs[1]
	c.Address = l.Addr().String()
	c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err = Start(c)
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("port in use: %v", err)
	}
	// The JSON-RPC port in use is named too, before anything is served.
	c.Address, c.JSONRPCAddress = addrs[0], l.Addr().String()
	_, err = Start(c)
	if err == nil || !strings.Contains(err.Error(), "-jsonrpcAddress "+c.JSONRPCAddress) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("JSON-RPC port in use: %v", err)
	}
}

// A node whose address (any of them) is taken fails before it creates or
// changes anything in -data: the directory stays absent, or as it was.
func TestBusyAddressLeavesDataAlone(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().String()
	addrs := freeAddrs(t, 2)
	for _, tt := range []struct {
		flag string
		addr func(*Config) *string
	}{
		{"-address", func(c *Config) *string { return &c.Address }},
		{"-internalAddress", func(c *Config) *string { return &c.InternalAddress }},
		{"-etcdAddress", func(c *Config) *string { return &c.EtcdAddress }},
		{"-jsonrpcAddress", func(c *Config) *string { return &c.JSONRPCAddress }},
		{"-metricsAddress", func(c *Config) *string { return &c.MetricsAddress }},
	} {
		flag, addr := tt.flag, tt.addr
		c := Default()
		c.System, c.SystemConfig = memSystem, memConfig{}
		c.Address, c.InternalAddress = addrs[0], addrs[1]
		c.EtcdAddress, c.JSONRPCAddress, c.MetricsAddress = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		*addr(&c) = taken
		c.Peers = []string{c.InternalAddress}
		absent := filepath.Join(t.TempDir(), "data")
		empty := t.TempDir()
		for _, dir := range []string{absent, empty} {
			c.DataDir = dir
			nd, err := Start(c)
			if err == nil {
				nd.Stop()
				t.Fatalf("%s taken: the node started", flag)
			}
			if !strings.Contains(err.Error(), flag+" "+taken) || !strings.Contains(err.Error(), "in use") {
				t.Fatalf("%s taken: %v, want the flag and the address in use named", flag, err)
			}
		}
		if _, err := os.Stat(absent); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s taken: -data %s was created (%v)", flag, absent, err)
		}
		if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
			t.Errorf("%s taken: the empty -data holds %v (%v)", flag, ents, err)
		}
	}
}

// A node of another cluster that reached this node's port (a reused local
// port) is refused, as are bad sender ids.
func TestAdmitPeer(t *testing.T) {
	c := Default()
	c.Peers = []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	c.InternalAddress = "127.0.0.1:2"
	c.DataDir = "/data"
	// A member's announced address goes to the address book: in memory.
	n := &Node{cfg: c, id: c.ID(), logger: slog.New(slog.NewTextHandler(io.Discard, nil)), fsys: vfs.NewMem()}
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	if id, err := n.admitPeer(md(mdCluster, c.clusterID(), mdFrom, "1", mdAddress, "127.0.0.1:9")); err != nil || id != 1 {
		t.Fatalf("member: %d %v", id, err)
	}
	other := c
	other.Peers = []string{"127.0.0.1:7", "127.0.0.1:8", "127.0.0.1:2"}
	for name, ctx := range map[string]context.Context{
		"other cluster": md(mdCluster, other.clusterID(), mdFrom, "1"),
		"no cluster":    md(mdFrom, "1"),
		"itself":        md(mdCluster, c.clusterID(), mdFrom, "2"),
		"bad id":        md(mdCluster, c.clusterID(), mdFrom, "x"),
	} {
		if _, err := n.admitPeer(ctx); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%s: %v, want PermissionDenied", name, err)
		}
	}
	// An id -peers does not name may be a member being added (its conf
	// change tells); a removed member is told so.
	if id, err := n.admitPeer(md(mdCluster, c.clusterID(), mdFrom, "9")); err != nil || id != 9 {
		t.Fatalf("new member: %d %v", id, err)
	}
	n.removedIDs.Store(uint64(3), uint64(10))
	if _, err := n.admitPeer(md(mdCluster, c.clusterID(), mdFrom, "3")); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), removedMarker) {
		t.Fatalf("removed member: %v, want FailedPrecondition saying %q", err, removedMarker)
	}
}

// With LeaseRead the leader confirms its leadership once per lease, not
// once per read, and reads stay correct.
func TestLeaseReadsSkipRounds(t *testing.T) {
	tc := startClusterWith(t, 3, func(c *Config) { c.LeaseRead = true })
	leader := tc.waitLeader(10 * time.Second)
	c, err := client.New(client.DefaultConfig(tc.cfgs[leader].Address))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, []byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	ln := tc.nodes[leader]
	for i := 0; i < 50; i++ {
		if _, err := c.Put(ctx, []byte("k"), []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
		v, ok, err := c.Get(ctx, []byte("k"))
		if err != nil || !ok || string(v) != fmt.Sprint("v", i) {
			t.Fatalf("read %d after write: %q %v %v", i, v, ok, err)
		}
	}
	// 50 reads within a few lease periods (election timeout 200 ms here).
	if _, ok := ln.leaseRead(); !ok {
		t.Fatal("the leader holds no lease right after reads")
	}
	if rounds := tc.readRounds(leader); rounds > 25 {
		t.Fatalf("%d ReadIndex rounds for 51 lease reads", rounds)
	}
}

// readRounds returns how many ReadIndex rounds node i issued (read on its
// loop).
func (tc *testCluster) readRounds(i int) uint64 {
	done := make(chan uint64, 1)
	n := tc.nodes[i]
	_ = n.inLoop(context.Background(), func() error { done <- n.readSeq; return nil })
	return <-done
}

// Reads arriving at every node at once: each node's ReadIndex rounds must
// not collide with another's at the leader (raft drops a request whose
// context is already pending). The election and request timeouts are far
// beyond the test's deadline and the client makes one attempt per read, so
// a dropped round is never expired and retried: the read fails with its
// deadline instead of passing slowly, whatever the machine's speed.
func TestConcurrentReadsOnEveryNode(t *testing.T) {
	tc := startClusterEach(t, 3, func(i int, c *Config) {
		c.ElectionTicks = 100_000 // 2000 s at 20 ms ticks
		c.RequestTimeout = time.Hour
		c.CampaignOnBoot = i == 0
	})
	tc.waitLeader(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := tc.client(t).Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*8)
	for i := range tc.nodes {
		cfg := client.DefaultConfig(tc.cfgs[i].Address)
		cfg.RetryBackoff = 0
		cfg.AttemptTimeout = time.Hour // one attempt, bounded by the read's deadline
		c, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 40; j++ {
					rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
					_, _, err := c.Get(rctx, []byte("k"))
					rcancel()
					if err != nil {
						errs <- fmt.Errorf("read %d on node %d: %w", j, i+1, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestCampaignOnBoot: with an election timeout far beyond the test's
// deadline, a cluster only gets a leader because node 1 campaigns on its
// fresh log (-campaign), retrying at each tick until its peers answer.
func TestCampaignOnBoot(t *testing.T) {
	tc := startClusterEach(t, 3, func(i int, c *Config) {
		c.ElectionTicks = 100_000 // 2000 s at 20 ms ticks: no timeout fires in this test
		c.CampaignOnBoot = i == 0
	})
	if l := tc.waitLeader(30 * time.Second); l != 0 {
		t.Fatalf("leader is node %d, want node 1 (the one that campaigned)", l+1)
	}
}

// gatedConfig opens a memSM whose Apply first calls hold (a test's gate).
type gatedConfig struct {
	memConfig
	hold func()
}

func (g gatedConfig) Open(systems.Env) (systems.StateMachine, error) {
	return &gatedSM{memSM: &memSM{m: map[string][]byte{}}, hold: g.hold}, nil
}

type gatedSM struct {
	*memSM
	hold func()
}

func (s *gatedSM) Apply(ents []systems.AppliedEntry) error {
	s.hold()
	return s.memSM.Apply(ents)
}

// applyGate is a test's gate for gatedConfig.hold: once shut, an Apply
// signals entered and waits until the channel shut returned is closed;
// after pass, Applies go through again (one already waiting still waits).
type applyGate struct {
	mu      sync.Mutex
	gate    chan struct{} // non-nil: Apply waits for it to close
	entered chan struct{}
}

// startGatedNode starts a one-node cluster whose state machine applies
// through ag, waits for its leader, and returns the node, a client of it
// and a 20 s context ended with the test.
func startGatedNode(t *testing.T) (ag *applyGate, n *Node, c *client.Client, ctx context.Context) {
	ag = newApplyGate()
	tc := startClusterWith(t, 1, func(c *Config) { c.SystemConfig = gatedConfig{hold: ag.hold} })
	tc.waitLeader(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ag, tc.nodes[0], tc.client(t), ctx
}

func newApplyGate() *applyGate { return &applyGate{entered: make(chan struct{}, 1)} }

func (g *applyGate) hold() {
	g.mu.Lock()
	c := g.gate
	g.mu.Unlock()
	if c != nil {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-c
	}
}

func (g *applyGate) shut() chan struct{} {
	c := make(chan struct{})
	g.mu.Lock()
	g.gate = c
	g.mu.Unlock()
	return c
}

func (g *applyGate) pass() {
	g.mu.Lock()
	g.gate = nil
	g.mu.Unlock()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", deadline, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestApplyBarrierAfterEntries: the apply goroutine drains committed
// entries and a barrier (as installSnapshot sends) in one go; it applies
// the entries once, then releases the barrier.
func TestApplyBarrierAfterEntries(t *testing.T) {
	ag, n, c, ctx := startGatedNode(t)
	if _, err := c.Put(ctx, []byte("k0"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	g := ag.shut()
	errs := make(chan error, 2)
	go func() { _, err := c.Put(ctx, []byte("k1"), []byte("v")); errs <- err }()
	<-ag.entered // the apply goroutine holds k1's batch
	ag.pass()
	go func() { _, err := c.Put(ctx, []byte("k2"), []byte("v")); errs <- err }()
	waitFor(t, 10*time.Second, "k2's batch queued for the apply goroutine", func() bool { return len(n.applyc) > 0 })
	barrier := make(chan struct{})
	if err := n.inLoop(ctx, func() error { n.applyc <- applyBatch{barrier: barrier}; return nil }); err != nil {
		t.Fatal(err)
	}
	close(g)
	select {
	case <-barrier:
	case <-n.Failed():
		t.Fatalf("node failed: %v", n.Err())
	case <-ctx.Done():
		t.Fatal("the barrier was not released")
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"k0", "k1", "k2"} {
		if _, ok, _ := n.sm.Get([]byte(k)); !ok {
			t.Fatalf("%s not applied", k)
		}
	}
	if err := n.Err(); err != nil {
		t.Fatalf("node failed: %v", err)
	}
}

// TestStopWhileApplyQueueFull: when a node stops while its Ready loop
// waits to hand committed entries to a busy apply goroutine, handleReady
// reports the stop (errStopping), so that the loop ends. (It once returned
// nil without advancing the Ready it held, and raft, then driven through
// Ready and Advance, panicked at the next Ready.) The test runs the loop's
// steps itself, in the loop goroutine, stepping the responses of the log
// writer as runLoop does.
func TestStopWhileApplyQueueFull(t *testing.T) {
	ag, n, c, ctx := startGatedNode(t)
	gate := ag.shut()
	go c.Put(ctx, []byte("k0"), []byte("v")) // its Apply holds the apply goroutine
	select {
	case <-ag.entered:
	case <-ctx.Done():
		t.Fatal("the apply goroutine never entered Apply")
	}
	var commitBefore atomic.Uint64
	result := make(chan error, 1)
	go func() {
		result <- n.inLoop(ctx, func() error {
			for len(n.applyc) < cap(n.applyc) { // the apply queue is full
				n.applyc <- applyBatch{barrier: make(chan struct{})}
			}
			commitBefore.Store(n.commit.Load())
			if err := n.rn.Propose(systems.AppendCommand(nil, &systems.Command{Op: systems.OpPut, Key: []byte("k1"), Value: []byte("v")})); err != nil {
				return err
			}
			for { // what runLoop does next, until k1 is committed and handed over
				if err := n.processReadies(); err != nil {
					return err
				}
				select {
				case <-n.logw.localc:
				case <-ctx.Done():
					return fmt.Errorf("handleReady returned nil for every Ready, and raft has no other")
				}
			}
		})
	}()
	// k1 committed: the loop is at, or about to be at, the hand-off of
	// k1 to the full apply queue.
	waitFor(t, 10*time.Second, "k1 committed", func() bool {
		b := commitBefore.Load()
		return b != 0 && n.commit.Load() > b
	})
	stopped := make(chan struct{})
	go func() { n.Stop(); close(stopped) }()
	var err error
	select {
	case err = <-result:
	case <-ctx.Done():
		t.Fatal("handleReady did not return on Stop")
	}
	close(gate)
	<-stopped
	if !errors.Is(err, errStopping) {
		t.Fatalf("handleReady interrupted by Stop returned %v, want errStopping", err)
	}
}

// A second node started on a running node's data directory stops before
// it opens anything there (before, serve -data of a live node
// recovered the node's active Raft log segment, truncating the record
// being written as a "torn tail"; the node's acknowledged entries read
// back as corrupt). Stop releases the directory for the next start.
func TestSecondNodeOnDataDirRefused(t *testing.T) {
	tc := startCluster(t, 1)
	tc.waitLeader(10 * time.Second)
	ctx, cancel := ctxFor(10 * time.Second)
	defer cancel()
	c := tc.client(t)
	if _, err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	second := tc.cfgs[0]
	addrs := freeAddrs(t, 2)
	second.Address, second.InternalAddress, second.Peers = addrs[0], addrs[1], addrs[1:]
	nd, err := Start(second)
	if err == nil {
		nd.Stop()
		t.Fatal("a second node started on a running node's data directory")
	}
	var ue *cmdline.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "in use by another node") {
		t.Fatalf("second node: got %v (%T), want a usage error naming the directory in use", err, err)
	}
	// The same node started again (its addresses are taken too) is told
	// the same, not that its port is in use.
	if nd, err := Start(tc.cfgs[0]); err == nil {
		nd.Stop()
		t.Fatal("the running node started a second time")
	} else if !errors.As(err, &ue) || !strings.Contains(err.Error(), "in use by another node") {
		t.Fatalf("the same node again: got %v, want a usage error naming the directory in use", err)
	}
	tc.stop(0)
	tc.start(0)
	tc.waitLeader(10 * time.Second)
	ctx2, cancel2 := ctxFor(10 * time.Second)
	defer cancel2()
	if v, found, err := c.Get(ctx2, []byte("k")); err != nil || !found || string(v) != "v" {
		t.Fatalf("after restart: get k = %q %v %v", v, found, err)
	}
}
