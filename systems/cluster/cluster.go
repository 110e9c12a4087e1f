// Package cluster runs local clusters: N `nezha serve` processes on free
// loopback ports, described by DIR/cluster.json, which every other tool
// (kv, bench, ycsb, check, experiments) reads to find the servers.
//
// Layout of a cluster directory:
//
//	DIR/cluster.json
//	DIR/node1/data/   the node's -data
//	DIR/node1/node.log stdout and stderr of the serve process
package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/client"
	"github.com/nezha-harness/nezha/systems/kvpb"
)

// FileName is the cluster description inside a cluster directory.
const FileName = "cluster.json"

// Node describes one member (cluster.json "nodes" item).
type Node struct {
	// ID is the Raft id, 1..N in the order of -peers.
	ID              uint64 `json:"id"`
	Address         string `json:"address"`
	InternalAddress string `json:"internal_address"`
	// PID of the serve process, 0 when it is known to be stopped.
	PID  int    `json:"pid"`
	Data string `json:"data"`
	Log  string `json:"log"`
	// MetricsAddress serves the node's Prometheus metrics at /metrics
	// (-metricsAddress); empty for clusters started before it existed and
	// for external systems.
	MetricsAddress string `json:"metrics_address,omitempty"`
	// JSONRPCAddress serves the node's JSON-RPC 2.0 cluster API
	// (-jsonrpcAddress; README "JSON-RPC cluster API"); empty for clusters
	// started before it existed and for external systems.
	JSONRPCAddress string `json:"jsonrpc_address,omitempty"`
	// ExtraArgs are this node's own serve flags, after the cluster's.
	ExtraArgs []string `json:"extra_args,omitempty"`
	// BootstrapVoters, for a node added to a running cluster, are the
	// voters its log starts from (serve -bootstrapVoters; members.go).
	BootstrapVoters []uint64 `json:"bootstrap_voters,omitempty"`
}

// Spec is the content of cluster.json.
type Spec struct {
	System string `json:"system"`
	Nodes  []Node `json:"nodes"`
	// Binary is the nezha executable that runs the nodes.
	Binary string `json:"binary"`
	// ExtraArgs are passed to every serve process (after `--` on `cluster up`).
	ExtraArgs []string `json:"extra_args,omitempty"`
	// ClusterID is every node's -clusterID, fixed when the cluster starts
	// (its members change); empty in a cluster.json written before it
	// existed (the nodes derive it from -peers; members.go fixes it before
	// the first membership change).
	ClusterID string `json:"cluster_id,omitempty"`
	// NextID is the Raft id the next added member gets: ids are never
	// reused (0 in an older cluster.json: one above the largest).
	NextID uint64 `json:"next_id,omitempty"`
	// Dir is the cluster directory (not stored).
	Dir string `json:"-"`
	// Detach makes the node processes this Spec starts outlive the process
	// that starts them (`nezha cluster up|restart|add`: a cluster is a
	// long-lived thing). Otherwise (experiments, `nezha check`, tests) each
	// node is killed with SIGKILL when its starter dies, by a signal it does
	// not handle (SIGKILL, or SIGPIPE when its output is cut) included, so
	// that no orphaned node keeps ports, disk and CPU (Linux
	// PR_SET_PDEATHSIG; prctl(2)). Not stored; Load sets it.
	Detach bool `json:"-"`
	// Wrap, if set, returns a command line that node n's process is
	// started through: it must end by exec'ing its remaining arguments (the
	// binary and its arguments, appended), so that the node keeps the pid
	// Wrap's process started with. The harness uses it to place a node in
	// a memory cgroup before the node opens its store. Not stored.
	Wrap func(n *Node) []string `json:"-"`
	// NodeArgs, if set (not stored), gives a member that AddMember adds
	// its own flags, as UpOptions.NodeArgs did at the start (e.g. the
	// per-link proxies of faults.Net): called with the new node, its ports
	// chosen, and every member, the new one last, before it starts.
	NodeArgs func(self Node, all []Node) []string `json:"-"`
}

// Addresses returns the client addresses of all nodes.
func (s *Spec) Addresses() []string {
	out := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		out[i] = n.Address
	}
	return out
}

// Node returns the node with the given id.
func (s *Spec) Node(id uint64) (*Node, error) {
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			return &s.Nodes[i], nil
		}
	}
	ids := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		ids[i] = strconv.FormatUint(n.ID, 10)
	}
	return nil, systems.Usagef("no node %d in %s (ids %s)", id, s.Dir, strings.Join(ids, ", "))
}

// UnmarshalJSON reads a cluster.json node, also one written before the
// keys were snake_case (internalAddress, metricsAddress, extraArgs): a
// cluster started by an older binary can still be stopped and restarted.
func (n *Node) UnmarshalJSON(b []byte) error {
	type plain Node
	var v struct {
		plain
		LegacyInternalAddress string   `json:"internalAddress"`
		LegacyMetricsAddress  string   `json:"metricsAddress"`
		LegacyExtraArgs       []string `json:"extraArgs"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*n = Node(v.plain)
	n.InternalAddress = cmp.Or(n.InternalAddress, v.LegacyInternalAddress)
	n.MetricsAddress = cmp.Or(n.MetricsAddress, v.LegacyMetricsAddress)
	if n.ExtraArgs == nil {
		n.ExtraArgs = v.LegacyExtraArgs
	}
	return nil
}

// UnmarshalJSON reads cluster.json, also as written before the keys were
// snake_case (extraArgs; see Node.UnmarshalJSON).
func (s *Spec) UnmarshalJSON(b []byte) error {
	type plain Spec
	var v struct {
		plain
		LegacyExtraArgs []string `json:"extraArgs"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Spec(v.plain)
	if s.ExtraArgs == nil {
		s.ExtraArgs = v.LegacyExtraArgs
	}
	return nil
}

// Load reads DIR/cluster.json.
func Load(dir string) (*Spec, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, systems.Usagef("%s has no %s (start one with `nezha cluster up -cluster %s`)", dir, FileName, dir)
		}
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, systems.Usagef("%s: %v", filepath.Join(dir, FileName), err)
	}
	s.Dir = dir
	s.Detach = true // a loaded cluster is the CLI's, which exits at once
	return &s, nil
}

// Save writes DIR/cluster.json atomically.
func (s *Spec) Save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.Dir, FileName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, FileName))
}

// MaxNodes bounds a local cluster's size (three ports and a process per
// node on one machine).
const MaxNodes = 99

// UpOptions configures Up.
type UpOptions struct {
	// Dir is the cluster directory; it must not hold a running cluster.
	Dir string
	// System is the -system of every node.
	System string
	// Nodes is the cluster size. Default 3.
	Nodes int
	// Binary is the nezha executable. Default: the running executable. An
	// external system (Etcd) runs its own binary from PATH instead.
	Binary string
	// ExtraArgs are appended to every serve command line.
	ExtraArgs []string
	// NodeArgs, if set, returns flags for one node (appended after
	// ExtraArgs), given every node's addresses; e.g. -dialPeers through
	// per-link proxies.
	NodeArgs func(self Node, all []Node) []string
	// Host is the loopback address to bind. Default 127.0.0.1.
	Host string
	// ReadyTimeout bounds the wait for a leader. Default 30s.
	ReadyTimeout time.Duration
	// KnownSystems, if set, are the valid System names (checked before any
	// process starts).
	KnownSystems []string
	// Detach lets the nodes outlive the caller (Spec.Detach); otherwise
	// they die with it.
	Detach bool
}

// Up starts a cluster and returns once a leader is elected, with the
// leader's id. On failure it stops whatever it started and returns the
// failing node's log tail.
func Up(ctx context.Context, o UpOptions) (*Spec, uint64, error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	var errs []error
	switch {
	case External(o.System):
		exe, err := etcdBinary()
		if err != nil {
			errs = append(errs, err)
		}
		o.Binary = exe
	case o.Binary == "":
		exe, err := os.Executable()
		if err != nil {
			return nil, 0, err
		}
		o.Binary = exe
	}
	if o.Dir == "" {
		errs = append(errs, systems.Usagef("-cluster DIR is required"))
	}
	if o.System == "" {
		errs = append(errs, systems.Usagef("-system is required"))
	} else if len(o.KnownSystems) > 0 && !slices.Contains(o.KnownSystems, o.System) && !External(o.System) {
		errs = append(errs, systems.Usagef("unknown system %q (known: %s, and %s)", o.System, strings.Join(o.KnownSystems, ", "), Label(Etcd)))
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		errs = append(errs, systems.Usagef("-nodes %d is outside 1..%d", o.Nodes, MaxNodes))
	}
	if ip := net.ParseIP(o.Host); ip == nil || !ip.IsLoopback() {
		errs = append(errs, systems.Usagef("host %q is not a loopback address", o.Host))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	if err := checkForeign(o.Dir); err != nil {
		return nil, 0, err
	}
	if old, err := Load(o.Dir); err == nil {
		for _, n := range old.Nodes {
			if Alive(n.PID) {
				return nil, 0, systems.Usagef("%s already runs a cluster (node %d, pid %d); `nezha cluster down -cluster %s` first", o.Dir, n.ID, n.PID, o.Dir)
			}
		}
		for _, n := range old.Nodes {
			if des, err := os.ReadDir(n.Data); err == nil && len(des) > 0 {
				return nil, 0, systems.Usagef("%s holds the data of a stopped %s cluster; restart its nodes with `nezha cluster restart -cluster %s -node N`, or delete it with `nezha cluster down -cluster %s -purge`",
					o.Dir, old.System, o.Dir, o.Dir)
			}
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, 0, systems.Usagef("cluster directory %s: %v", o.Dir, err)
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, 0, err
	}
	// Client, internal, metrics and JSON-RPC port per node.
	ports, err := freePorts(o.Host, 4*o.Nodes)
	if err != nil {
		return nil, 0, err
	}
	for i := 1; i <= o.Nodes; i++ {
		// A member removed from an earlier cluster here left its data.
		data := filepath.Join(abs, fmt.Sprintf("node%d", i), "data")
		if des, err := os.ReadDir(data); err == nil && len(des) > 0 {
			return nil, 0, systems.Usagef("%s holds the data of an earlier node; delete it, or the whole cluster with `nezha cluster down -cluster %s -purge`", data, o.Dir)
		}
	}
	s := &Spec{System: o.System, Binary: o.Binary, ExtraArgs: o.ExtraArgs, Dir: o.Dir, NextID: uint64(o.Nodes) + 1, Detach: o.Detach}
	if !External(o.System) {
		s.ClusterID = newClusterID()
	}
	for i := 0; i < o.Nodes; i++ {
		nd := filepath.Join(abs, fmt.Sprintf("node%d", i+1))
		s.Nodes = append(s.Nodes, Node{
			ID:              uint64(i + 1),
			Address:         net.JoinHostPort(o.Host, strconv.Itoa(ports[i])),
			InternalAddress: net.JoinHostPort(o.Host, strconv.Itoa(ports[o.Nodes+i])),
			Data:            filepath.Join(nd, "data"),
			Log:             filepath.Join(nd, "node.log"),
		})
		if !External(o.System) {
			s.Nodes[i].MetricsAddress = net.JoinHostPort(o.Host, strconv.Itoa(ports[2*o.Nodes+i]))
			s.Nodes[i].JSONRPCAddress = net.JoinHostPort(o.Host, strconv.Itoa(ports[3*o.Nodes+i]))
		}
	}
	if o.NodeArgs != nil {
		for i := range s.Nodes {
			s.Nodes[i].ExtraArgs = o.NodeArgs(s.Nodes[i], s.Nodes)
		}
	}
	// The first node of a new cluster campaigns as soon as it runs (a
	// fresh log only; a restart waits for the timeouts as usual): a leader
	// in milliseconds rather than after a 1-2 s election timeout. It
	// starts last, so that its peers are there to vote.
	s.Nodes[0].ExtraArgs = append(s.Nodes[0].ExtraArgs, "-campaign")
	if External(s.System) {
		if err := s.checkEtcd(); err != nil {
			return nil, 0, err
		}
	}
	for k := range s.Nodes {
		i := (k + 1) % len(s.Nodes)
		if err := s.start(&s.Nodes[i]); err != nil {
			s.Down(false)
			return nil, 0, err
		}
	}
	if err := s.Save(); err != nil {
		s.Down(false)
		return nil, 0, err
	}
	leader, err := s.WaitLeader(ctx, o.ReadyTimeout)
	if err != nil {
		s.Down(false)
		return nil, 0, err
	}
	return s, leader, nil
}

// Args returns the serve command line of node n (for an external system,
// its own command line).
func (s *Spec) Args(n *Node) []string {
	if External(s.System) {
		return s.etcdArgs(n)
	}
	args := []string{"serve", "-system", s.System, "-address", n.Address,
		"-internalAddress", n.InternalAddress, "-peers", s.peersFlag(), "-data", n.Data}
	if s.ClusterID != "" {
		args = append(args, "-clusterID", s.ClusterID)
	}
	if len(n.BootstrapVoters) > 0 {
		ids := make([]string, len(n.BootstrapVoters))
		for i, id := range n.BootstrapVoters {
			ids[i] = strconv.FormatUint(id, 10)
		}
		args = append(args, "-bootstrapVoters", strings.Join(ids, ","))
	}
	if n.MetricsAddress != "" {
		args = append(args, "-metricsAddress", n.MetricsAddress)
	}
	if n.JSONRPCAddress != "" {
		args = append(args, "-jsonrpcAddress", n.JSONRPCAddress)
	}
	args = append(args, s.ExtraArgs...)
	return append(args, n.ExtraArgs...)
}

// start launches node n's serve process in its own session (a terminal's
// ^C reaches the starter, which stops the nodes itself), detached or tied
// to the starter's life as s.Detach says.
func (s *Spec) start(n *Node) error {
	if err := os.MkdirAll(filepath.Dir(n.Log), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s start: %s %s\n", time.Now().Format(time.RFC3339Nano), s.Binary, strings.Join(s.Args(n), " "))
	// On a restart, its metrics or JSON-RPC port may have been taken while
	// it was down (another cluster on this machine picked it). Nothing but
	// the harness dials those two, so a taken one is moved (and saved with
	// the spec); the client and peer ports cannot be.
	for _, a := range []*string{&n.MetricsAddress, &n.JSONRPCAddress} {
		if err := movePortIfTaken(a); err != nil {
			return fmt.Errorf("start node %d: %w", n.ID, err)
		}
	}
	renewPorts(time.Now(), n.Address, n.InternalAddress, n.MetricsAddress, n.JSONRPCAddress)
	argv := append([]string{s.Binary}, s.Args(n)...)
	if s.Wrap != nil {
		argv = append(s.Wrap(n), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !s.Detach {
		// Delivered when the thread that forked exits; Go keeps its
		// threads for the life of the process unless a goroutine locked to
		// one exits, which nothing here does (golang/go#27505).
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node %d: %w", n.ID, err)
	}
	n.PID = cmd.Process.Pid
	// Reap the child if this process outlives it (tests, experiments);
	// otherwise init adopts it.
	go cmd.Wait()
	return nil
}

// WaitLeader polls the nodes until one reports itself leader and a
// majority agrees on it, or timeout passes. It fails early, with the log
// tail, if a node process exits.
func (s *Spec) WaitLeader(ctx context.Context, timeout time.Duration) (uint64, error) {
	return s.pollLeader(ctx, timeout, true, func(sts []NodeStatus) uint64 {
		votes := map[uint64]int{}
		for _, st := range sts {
			if st.err == nil && st.resp.Header.LeaderId != 0 {
				votes[st.resp.Header.LeaderId]++
			}
		}
		for id, v := range votes {
			if v > len(s.Nodes)/2 {
				return id
			}
		}
		return 0
	})
}

// pollLeader polls the nodes' statuses until pick names a leader or
// timeout passes; with exits, it fails early, with the log tail, if a
// node process exits.
func (s *Spec) pollLeader(ctx context.Context, timeout time.Duration, exits bool, pick func([]NodeStatus) uint64) (uint64, error) {
	c, err := client.New(s.ClientConfig())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		for _, n := range s.Nodes {
			if exits && n.PID != 0 && !Alive(n.PID) {
				return 0, fmt.Errorf("node %d (pid %d) exited; last lines of %s:\n%s", n.ID, n.PID, n.Log, Tail(n.Log, 20))
			}
		}
		if id := pick(s.statuses(ctx, c)); id != 0 {
			return id, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no leader elected within %v (logs under %s)", timeout, s.Dir)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// NodeStatus is one node's answer to Status, or why there is none.
type NodeStatus struct {
	Node  Node
	Alive bool
	// Health is the node's answer to the standard gRPC health service
	// (SERVING, NOT_SERVING), or why there is none ("unreachable", "-" for
	// etcd, which is not asked).
	Health string
	resp   *kvpb.StatusResponse
	err    error
}

// Response returns the node's status response, or the error.
func (ns NodeStatus) Response() (*kvpb.StatusResponse, error) { return ns.resp, ns.err }

func (s *Spec) statuses(ctx context.Context, c *client.Client) []NodeStatus {
	out := make([]NodeStatus, len(s.Nodes))
	done := make(chan struct{}, len(s.Nodes))
	for i, n := range s.Nodes {
		go func(i int, n Node) {
			defer func() { done <- struct{}{} }()
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			r, err := c.Status(sctx, n.Address, false)
			out[i] = NodeStatus{Node: n, Alive: n.PID != 0 && Alive(n.PID), resp: r, err: err, Health: health(sctx, c, n.Address)}
		}(i, n)
	}
	for range s.Nodes {
		<-done
	}
	return out
}

// health is the node's health-service status as text.
func health(ctx context.Context, c *client.Client, addr string) string {
	st, err := c.Health(ctx, addr)
	switch {
	case errors.Is(err, client.ErrHealthNotAsked):
		return "-"
	case err != nil:
		return "unreachable"
	}
	return st.String()
}

// Status asks every node for its status and its health.
func (s *Spec) Status(ctx context.Context) ([]NodeStatus, error) {
	c, err := client.New(s.ClientConfig())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return s.statuses(ctx, c), nil
}

// Kill sends SIGKILL to node id and waits until the process is gone.
func (s *Spec) Kill(id uint64) error {
	n, err := s.Node(id)
	if err != nil {
		return err
	}
	if n.PID == 0 || !Alive(n.PID) {
		return systems.Usagef("node %d is not running", id)
	}
	if err := s.checkOwned(n); err != nil {
		return err
	}
	if err := syscall.Kill(n.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill node %d (pid %d): %w", id, n.PID, err)
	}
	renewPorts(time.Now(), n.Address, n.InternalAddress, n.MetricsAddress, n.JSONRPCAddress)
	if err := waitGone(n.PID, 10*time.Second); err != nil {
		return err
	}
	n.PID = 0
	return s.Save()
}

// Signal sends sig to node id (SIGSTOP and SIGCONT for pauses).
func (s *Spec) Signal(id uint64, sig syscall.Signal) error {
	n, err := s.Node(id)
	if err != nil {
		return err
	}
	if n.PID == 0 || !Alive(n.PID) {
		return systems.Usagef("node %d is not running", id)
	}
	if err := s.checkOwned(n); err != nil {
		return err
	}
	return syscall.Kill(n.PID, sig)
}

// Restart starts node id again with its original command line and waits
// (up to 30 s) until it answers; a node that exits instead is an error with
// its log tail. The node must not be running.
func (s *Spec) Restart(id uint64) error {
	n, err := s.Node(id)
	if err != nil {
		return err
	}
	if n.PID != 0 && Alive(n.PID) {
		return systems.Usagef("node %d is still running (pid %d); kill it first", id, n.PID)
	}
	if err := s.start(n); err != nil {
		return err
	}
	if err := s.Save(); err != nil {
		return err
	}
	return s.waitServing(n, 30*time.Second)
}

// waitServing waits until node n answers Status and, for up to a few
// seconds more, until it knows a leader (so that a node that stops as soon
// as it hears from the leader, e.g. one that lost its data, is reported
// here); it fails if the node exits. A node that finds no leader (no
// quorum yet) is not an error.
func (s *Spec) waitServing(n *Node, timeout time.Duration) error {
	c, err := client.New(s.ClientConfig(n.Address))
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	var serving time.Time
	for {
		if !Alive(n.PID) {
			return fmt.Errorf("node %d (pid %d) exited after its restart; last lines of %s:\n%s", n.ID, n.PID, n.Log, Tail(n.Log, 20))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, n.Address, false)
		cancel()
		switch {
		case err == nil && st.Header.LeaderId != 0:
			return nil
		case err == nil && serving.IsZero():
			serving = time.Now()
		case err == nil && time.Since(serving) > 3*time.Second:
			return nil
		case err != nil && time.Now().After(deadline):
			return fmt.Errorf("node %d (pid %d) does not answer %v after its restart: %v", n.ID, n.PID, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Lock takes an exclusive lock on the cluster directory (creating it), so
// that two commands do not start, restart or stop the same cluster at once.
// Call the returned function to release it.
func Lock(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, systems.Usagef("cluster directory %s: %v", dir, err)
	}
	unlock, err := systems.LockFile(filepath.Join(dir, ".lock"))
	if errors.Is(err, systems.ErrLocked) {
		return nil, systems.Usagef("another nezha command is using the cluster in %s", dir)
	}
	return unlock, err
}

// Down stops every node (SIGTERM, then SIGKILL after 10 s) and, if purge,
// removes what the harness made in the cluster directory (purge), and the
// directory itself once nothing else is left in it.
func (s *Spec) Down(purge bool) error {
	var errs []error
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.PID == 0 || !Alive(n.PID) {
			n.PID = 0
			continue
		}
		if err := s.checkOwned(n); err != nil {
			errs = append(errs, err)
			continue
		}
		_ = syscall.Kill(n.PID, syscall.SIGCONT) // a paused node cannot exit
		_ = syscall.Kill(n.PID, syscall.SIGTERM)
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.PID == 0 {
			continue
		}
		if err := waitGone(n.PID, 10*time.Second); err != nil {
			_ = syscall.Kill(n.PID, syscall.SIGKILL)
			if err := waitGone(n.PID, 5*time.Second); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		n.PID = 0
	}
	if purge {
		errs = append(errs, s.purge())
		for _, n := range s.Nodes {
			releasePorts(n.Address, n.InternalAddress, n.MetricsAddress, n.JSONRPCAddress)
		}
	} else if _, err := os.Stat(s.Dir); err == nil {
		errs = append(errs, s.Save())
		for _, n := range s.Nodes {
			renewPorts(time.Now(), n.Address, n.InternalAddress, n.MetricsAddress, n.JSONRPCAddress)
		}
	}
	return errors.Join(errs...)
}

// checkOwned refuses to signal a pid that is not this cluster's node (the
// pid may have been reused after the node died).
func (s *Spec) checkOwned(n *Node) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.PID))
	if err != nil {
		return fmt.Errorf("node %d (pid %d): %w", n.ID, n.PID, err)
	}
	cmdline := strings.ReplaceAll(string(b), "\x00", " ")
	marker := " serve "
	if External(s.System) {
		marker = " --data-dir "
	}
	if !strings.Contains(cmdline, marker) || !strings.Contains(cmdline, n.Data) {
		return fmt.Errorf("pid %d is not node %d of %s (it runs %q); refusing to signal it", n.PID, n.ID, s.Dir, cmdline)
	}
	return nil
}

// Alive reports whether pid is a running process, or one still exiting: a
// zombie thread-group leader whose other threads have not all exited yet
// (one finishing an fsync after SIGKILL) still holds the process's files
// and their locks (LevelDB's and RocksDB's LOCK), so a restart must wait
// for it. A zombie with no other thread left is not alive.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		if st := b[i+2]; st == 'Z' || st == 'X' {
			tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			return err == nil && len(tasks) > 1
		}
	}
	return true
}

// WaitGone waits up to timeout for process pid to end (a node that stops
// on its own, e.g. after a failed fsync).
func WaitGone(pid int, timeout time.Duration) error { return waitGone(pid, timeout) }

func waitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for Alive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still running after %v", pid, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Tail returns the last n lines of the file at path.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts reserves n distinct free TCP ports on host. They are released
// before the nodes bind them, but each is leased (leasePort) for
// portLeaseTTL, so that another process of ours does not pick it in
// between; a process that is not ours can still take it, and its node
// then fails with a clear "address already in use" error. The ports are
// picked below the kernel's ephemeral range when it leaves room (from
// 10000 up): a port from that range can be taken as the local port of some
// outgoing connection while its node is down (killed, restarting), and the
// restart then fails.
func freePorts(host string, n int) ([]int, error) { return pickPorts(host, n, 10000, ephemeralLow()) }

// pickPorts is freePorts picking first in [lo, hi) (none if hi-lo < 1000),
// then from the kernel's ephemeral range.
func pickPorts(host string, n, lo, hi int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n && hi-lo >= 1000 && tries < 100*n; tries++ {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(lo+mrand.IntN(hi-lo))))
		if err != nil {
			continue
		}
		if !leasePort(host, l.Addr().(*net.TCPAddr).Port, time.Now()) {
			l.Close()
			continue
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	// A port the kernel picks that another process has leased stays bound
	// (in ls, not in ports) until the end, so that the kernel picks another.
	for refused := 0; len(ports) < n; {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		ls = append(ls, l)
		if !leasePort(host, l.Addr().(*net.TCPAddr).Port, time.Now()) {
			if refused++; refused > 100*n {
				return nil, fmt.Errorf("find a free port on %s: %d ports the kernel picked are leased by other processes (%s)", host, refused, portLeaseDir())
			}
			continue
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// movePortIfTaken replaces *addr (host:port; empty: none) by a free port
// of the same host if nothing can listen on it now.
func movePortIfTaken(addr *string) error {
	if *addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", *addr)
	if err == nil {
		return l.Close()
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return err
	}
	ports, err := freePorts(host, 1)
	if err != nil {
		return err
	}
	*addr = net.JoinHostPort(host, strconv.Itoa(ports[0]))
	return nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768 if unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// StorageShapeOf converts the storage shape of a Status response; nil if
// the node's system reports none.
func StorageShapeOf(resp *kvpb.StatusResponse) *systems.StorageShape {
	p := resp.GetStorage()
	if p == nil {
		return nil
	}
	sh := &systems.StorageShape{ValueLogBytes: p.ValueLogBytes, SortedRunBytes: p.SortedRunBytes,
		BlobFileBytes: p.BlobFileBytes, LiveBytes: p.LiveBytes}
	for _, l := range p.Levels {
		sh.Levels = append(sh.Levels, systems.LevelShape{Level: int(l.Level), Files: l.Files, Bytes: l.Bytes})
	}
	return sh
}
