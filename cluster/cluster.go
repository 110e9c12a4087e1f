// Package cluster runs clusters: N `nezha serve` processes (or etcd's),
// each supervised by its own agent (`nezha agent`, package agent) wherever
// it runs: on this machine's loopback (the local backend, the default), in
// containers (docker) or on other hosts (ssh). DIR/cluster.json describes
// a cluster; every other tool (kv, bench, ycsb, check, experiments) reads it
// to find the servers and their agents.
//
// Layout of a cluster directory (the local backend keeps the nodes' files
// in it; the others keep them on the nodes' hosts):
//
//	DIR/cluster.json
//	DIR/agent.token     the token every call to the cluster's agents carries
//	DIR/node1/data/     the node's -data
//	DIR/node1/node.log  stdout and stderr of the node's process
//	DIR/node1/agent.log the agent's own log
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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// FileName is the cluster description inside a cluster directory.
const FileName = "cluster.json"

// Node describes one member (cluster.json "nodes" item).
type Node struct {
	// ID is the Raft id, 1..N in the order of -peers.
	ID              uint64 `json:"id"`
	Address         string `json:"address"`
	InternalAddress string `json:"internal_address"`
	// PID of the serve process on its host, 0 when it is known to be
	// stopped.
	PID int `json:"pid"`
	// Dir is the node's directory on its host (its agent's -dir); Data
	// (Dir/data) and Log (Dir/node.log) are paths on that host too.
	Dir  string `json:"dir,omitempty"`
	Data string `json:"data"`
	Log  string `json:"log"`
	// Agent is the address of the node's agent; Host, for the docker and
	// ssh backends, where it runs (a container, an ssh destination).
	Agent string `json:"agent_address,omitempty"`
	Host  string `json:"host,omitempty"`
	// AgentPID is the local backend's agent process.
	AgentPID int `json:"agent_pid,omitempty"`
	// DialPeers are the addresses this node dials for each member, in
	// -peers order, when the cluster's peer links go through the agents'
	// proxies (Spec.Links): its -dialPeers.
	DialPeers []string `json:"dial_peers,omitempty"`
	// DialPeersFile is its -dialPeersFile then (members added later).
	DialPeersFile string `json:"dial_peers_file,omitempty"`
	// MetricsAddress serves the node's Prometheus metrics at /metrics
	// (-metricsAddress); empty for clusters started before it existed and
	// for external systems.
	MetricsAddress string `json:"metrics_address,omitempty"`
	// JSONRPCAddress serves the node's JSON-RPC 2.0 cluster API
	// (-jsonrpcAddress; docs/apis.md); empty for clusters
	// started before it existed and for external systems.
	JSONRPCAddress string `json:"jsonrpc_address,omitempty"`
	// EtcdAddress serves etcd's KV API (-etcdAddress; docs/apis.md),
	// PprofAddress Go's profiler (-pprofAddress); empty for external
	// systems, for clusters started before they were given one, and when
	// the cluster's own flags name them.
	EtcdAddress  string `json:"etcd_address,omitempty"`
	PprofAddress string `json:"pprof_address,omitempty"`
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
	// Binary is the nezha executable that runs the agents (and, on the
	// local and ssh backends, the nodes).
	Binary string `json:"binary"`
	// Backend is where the nodes run (empty: local).
	Backend BackendSpec `json:"backend,omitzero"`
	// Links: the nodes reach each other through their agents' peer-link
	// proxies, which network faults cut and delay (UpOptions.Links).
	Links bool `json:"links,omitempty"`
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
	// StartMemoryLimitBytes, if set, starts nodes inside a memory cgroup
	// of that many bytes (their agents make it), so that the node is
	// limited before it opens its store. Not stored.
	StartMemoryLimitBytes int64 `json:"-"`
	// host is UpOptions.Host while Up runs (not stored).
	host string
	// agents are the connections to the nodes' agents (not stored).
	agents *agentPool
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
	return nil, cmdline.Usagef("no node %d in %s (ids %s)", id, s.Dir, strings.Join(ids, ", "))
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
			return nil, cmdline.Usagef("%s has no %s (start one with `nezha cluster up -cluster %s`)", dir, FileName, dir)
		}
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, cmdline.Usagef("%s: %v", filepath.Join(dir, FileName), err)
	}
	s.Dir = dir
	s.Detach = true // a loaded cluster is the CLI's, which exits at once
	s.pool()
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
	// Binary is the nezha executable (it runs the agents; an external
	// system's nodes run its own binary, which each agent finds on its
	// PATH). Default: the running executable.
	Binary string
	// ExtraArgs are appended to every serve command line.
	ExtraArgs []string
	// NodeArgs, if set, returns flags for one node (appended after
	// ExtraArgs), given every node's addresses; e.g. -dialPeers through
	// faults.NewHTTPNet's proxies.
	NodeArgs func(self Node, all []Node) []string
	// Links makes the nodes reach each other through their agents'
	// peer-link proxies (network faults cut and delay them).
	Links bool
	// Host is the loopback address a local cluster binds. Default
	// 127.0.0.1.
	Host string
	// Backend is where the nodes run. Default: local.
	Backend BackendOptions
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
	if o.Backend.Name == "" {
		o.Backend.Name = BackendLocal
	}
	var errs []error
	if External(o.System) && o.Backend.Name == BackendLocal {
		if _, err := etcdBinary(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, 0, err
		}
		o.Binary = exe
	}
	if o.Dir == "" {
		errs = append(errs, cmdline.Usagef("-cluster DIR is required"))
	}
	if o.System == "" {
		errs = append(errs, cmdline.Usagef("-system is required"))
	} else if len(o.KnownSystems) > 0 && !slices.Contains(o.KnownSystems, o.System) && !External(o.System) {
		errs = append(errs, cmdline.Usagef("unknown system %q (known: %s, and %s)", o.System, strings.Join(o.KnownSystems, ", "), Label(Etcd)))
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		errs = append(errs, cmdline.Usagef("-nodes %d is outside 1..%d", o.Nodes, MaxNodes))
	}
	if ip := net.ParseIP(o.Host); o.Backend.Name == BackendLocal && (ip == nil || !ip.IsLoopback()) {
		errs = append(errs, cmdline.Usagef("host %q is not a loopback address", o.Host))
	}
	errs = append(errs, o.Backend.Validate(o.Nodes))
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	if err := checkForeign(o.Dir); err != nil {
		return nil, 0, err
	}
	if old, err := Load(o.Dir); err == nil {
		for i := range old.Nodes {
			n := &old.Nodes[i]
			if old.running(ctx, n) {
				return nil, 0, cmdline.Usagef("%s already runs a cluster (node %d, pid %d); `nezha cluster down -cluster %s` first", o.Dir, n.ID, n.PID, o.Dir)
			}
		}
		old.closeAgents()
		for _, n := range old.Nodes {
			if des, err := os.ReadDir(n.Data); err == nil && len(des) > 0 {
				return nil, 0, cmdline.Usagef("%s holds the data of a stopped %s cluster; restart its nodes with `nezha cluster restart -cluster %s -node N`, or delete it with `nezha cluster down -cluster %s -purge`",
					o.Dir, old.System, o.Dir, o.Dir)
			}
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, 0, cmdline.Usagef("cluster directory %s: %v", o.Dir, err)
	}
	if err := writeToken(o.Dir); err != nil {
		return nil, 0, err
	}
	s := &Spec{System: o.System, Binary: o.Binary, ExtraArgs: o.ExtraArgs, Dir: o.Dir, NextID: uint64(o.Nodes) + 1,
		Detach: o.Detach, Links: o.Links, Backend: BackendSpec{Name: o.Backend.Name}, host: o.Host}
	s.pool()
	if !External(o.System) {
		s.ClusterID = newClusterID()
	}
	fail := func(err error) (*Spec, uint64, error) {
		// A local cluster keeps its node logs for a look; a failed start
		// elsewhere, or one the nodes' flags refused (the error names
		// them), leaves nothing behind: no container, volume, network,
		// remote directory or file of the cluster's.
		var ue *cmdline.UsageError
		s.Down(s.BackendName() != BackendLocal || errors.As(err, &ue))
		return nil, 0, err
	}
	b, err := s.prepareBackend(ctx, o.Backend)
	if err != nil {
		// No node was placed: take back the token (and what the backend
		// made), so that the same command may be run again in the same
		// directory.
		s.Down(true)
		return nil, 0, err
	}
	for i := 0; i < o.Nodes; i++ {
		s.Nodes = append(s.Nodes, Node{ID: uint64(i + 1)})
		if err := b.place(ctx, s, &s.Nodes[i]); err != nil {
			return fail(err)
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
			return fail(err)
		}
	}
	if err := s.Save(); err != nil {
		return fail(err)
	}
	for k := range s.Nodes {
		i := (k + 1) % len(s.Nodes)
		if err := s.start(ctx, &s.Nodes[i]); err != nil {
			return fail(err)
		}
	}
	if err := s.Save(); err != nil {
		return fail(err)
	}
	leader, err := s.WaitLeader(ctx, o.ReadyTimeout)
	if err != nil {
		return fail(err)
	}
	s.host = ""
	return s, leader, nil
}

// writeToken makes DIR/agent.token if it does not exist.
func writeToken(dir string) error {
	path := filepath.Join(dir, TokenFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	t, err := agent.NewToken()
	if err != nil {
		return err
	}
	return agent.WriteToken(path, t)
}

// Args returns the serve command line of node n, without "serve" (for an
// external system, its own command line).
func (s *Spec) Args(n *Node) []string {
	if External(s.System) {
		return s.etcdArgs(n)
	}
	args := []string{"-system", s.System, "-address", n.Address,
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
	if n.EtcdAddress != "" {
		args = append(args, "-etcdAddress", n.EtcdAddress)
	}
	if n.PprofAddress != "" {
		args = append(args, "-pprofAddress", n.PprofAddress)
	}
	if s.Links && len(n.DialPeers) == len(s.Nodes) {
		args = append(args, "-dialPeers", strings.Join(n.DialPeers, ","))
	}
	if s.Links && n.DialPeersFile != "" {
		args = append(args, "-dialPeersFile", n.DialPeersFile)
	}
	args = append(args, s.ExtraArgs...)
	return append(args, n.ExtraArgs...)
}

// start starts node n's process through its agent (started again first if
// it is gone), with its peer-link proxies first when the cluster has them.
func (s *Spec) start(ctx context.Context, n *Node) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	if err := b.revive(ctx, s, n); err != nil {
		return fmt.Errorf("start node %d: %w", n.ID, err)
	}
	if s.Links {
		if err := s.linkPeers(ctx, n); err != nil {
			return fmt.Errorf("start node %d: %w", n.ID, err)
		}
	}
	if s.BackendName() == BackendLocal {
		// On a restart, its metrics, JSON-RPC, etcd API or profiler port
		// may have been taken while it was down (another cluster on this
		// machine picked it). Nothing but the harness dials those (a user
		// of the etcd API reads its address from cluster.json), so a taken
		// one is moved
		// (and saved with the spec); the client and peer ports cannot be.
		for _, a := range []*string{&n.MetricsAddress, &n.JSONRPCAddress, &n.EtcdAddress, &n.PprofAddress} {
			if err := movePortIfTaken(a); err != nil {
				return fmt.Errorf("start node %d: %w", n.ID, err)
			}
		}
		renewPorts(time.Now(), n.ports()...)
	}
	a, err := s.Agent(n)
	if err != nil {
		return err
	}
	req := &agentpb.StartRequest{Program: agentpb.Program_SERVE, Args: s.Args(n), MemoryLimitBytes: s.StartMemoryLimitBytes}
	if External(s.System) {
		req.Program = agentpb.Program_ETCD
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	r, err := a.Start(cctx, req)
	if err != nil {
		return fmt.Errorf("start node %d: %w", n.ID, err)
	}
	n.PID = int(r.Pid)
	return nil
}

// linkPeers gives node n a proxy in its agent for every other member
// (SetPeers is idempotent: an existing proxy keeps its port) and records
// the addresses n dials; an external system's nodes dial their peers
// directly, so their agents only learn the addresses (to filter packets).
func (s *Spec) linkPeers(ctx context.Context, n *Node) error {
	a, err := s.Agent(n)
	if err != nil {
		return err
	}
	peers := map[uint64]string{}
	for _, m := range s.Nodes {
		if m.ID != n.ID {
			peers[m.ID] = m.InternalAddress
		}
	}
	cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	r, err := a.SetPeers(cctx, &agentpb.SetPeersRequest{Peers: peers, NoProxies: External(s.System)})
	if err != nil {
		return fmt.Errorf("peer links of node %d: %w", n.ID, err)
	}
	if External(s.System) {
		return nil
	}
	n.DialPeers = make([]string, len(s.Nodes))
	for i, m := range s.Nodes {
		if m.ID == n.ID {
			n.DialPeers[i] = m.InternalAddress
		} else if d := r.Dial[m.ID]; d != "" {
			n.DialPeers[i] = d
		} else {
			return fmt.Errorf("peer links of node %d: its agent made no proxy for node %d", n.ID, m.ID)
		}
	}
	n.DialPeersFile = r.DialPeersFile
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
		sts := s.statuses(ctx, c)
		for _, st := range sts {
			if exits && st.exited != "" {
				n := st.Node
				tail := s.NodeTail(&n, 20)
				if st.exited == usageExit {
					// serve refused its flags (Validate): the same for
					// every node, so a usage error, with serve's line.
					return 0, cmdline.Usagef("node %d refused its serve flags: %s", n.ID, serveComplaint(tail))
				}
				return 0, fmt.Errorf("node %d exited (%s); last lines of its log (%s):\n%s", n.ID, st.exited, n.Log, tail)
			}
		}
		if id := pick(sts); id != 0 {
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

// usageExit is how the agent reports a process that exited with status 2,
// the binary's exit code for a usage error.
const usageExit = "exit status 2"

// serveComplaint picks the line in which serve named its bad flags from
// a node's log tail ("nezha: serve: ..."), or the last line.
func serveComplaint(tail string) string {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; strings.Contains(l, "serve: ") && !strings.HasPrefix(l, "===") {
			return strings.TrimSpace(l[strings.Index(l, "serve: ")+len("serve: "):])
		}
	}
	return lines[len(lines)-1]
}

// NodeStatus is one node's answer to Status, or why there is none.
type NodeStatus struct {
	Node Node
	// Alive: its agent says its process runs.
	Alive bool
	// Health is the node's answer to the standard gRPC health service
	// (SERVING, NOT_SERVING), or why there is none ("unreachable", "-" for
	// etcd, which is not asked).
	Health string
	resp   *kvpb.StatusResponse
	err    error
	// exited says how the node's process ended, when its agent says it
	// ran and no longer runs.
	exited string
}

// Response returns the node's status response, or the error.
func (ns NodeStatus) Response() (*kvpb.StatusResponse, error) { return ns.resp, ns.err }

func (s *Spec) statuses(ctx context.Context, c *client.Client) []NodeStatus {
	out := make([]NodeStatus, len(s.Nodes))
	done := make(chan struct{}, len(s.Nodes))
	for i, n := range s.Nodes {
		go func(i int, n Node) {
			defer func() { done <- struct{}{} }()
			// The agent is asked on its own clock: a node that hangs
			// (etcd without a quorum accepts connections and says
			// nothing) must not make a running process look down.
			st := s.State(ctx, &n)
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			r, err := c.Status(sctx, n.Address, false)
			out[i] = NodeStatus{Node: n, Alive: st.Alive(), resp: r, err: err, Health: health(sctx, c, n.Address)}
			if st.Err == nil && !st.Running && st.LastExit != "" {
				out[i].exited = st.LastExit
			}
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
	if err := s.signalNode(context.Background(), n, agentpb.Sig_KILL, 10*time.Second); err != nil {
		return err
	}
	if s.BackendName() == BackendLocal {
		renewPorts(time.Now(), n.ports()...)
	}
	return s.Save()
}

// Signal sends sig to node id: SIGSTOP and SIGCONT for pauses, SIGKILL or
// SIGTERM (which then wait until the process is gone, as Kill does).
func (s *Spec) Signal(id uint64, sig syscall.Signal) error {
	n, err := s.Node(id)
	if err != nil {
		return err
	}
	m := map[syscall.Signal]agentpb.Sig{syscall.SIGSTOP: agentpb.Sig_STOP, syscall.SIGCONT: agentpb.Sig_CONT,
		syscall.SIGKILL: agentpb.Sig_KILL, syscall.SIGTERM: agentpb.Sig_TERM}
	as, ok := m[sig]
	if !ok {
		return fmt.Errorf("signal %v: the agents send SIGSTOP, SIGCONT, SIGKILL and SIGTERM only", sig)
	}
	return s.signalNode(context.Background(), n, as, 10*time.Second)
}

// Restart starts node id again with its original command line and waits
// (up to 30 s) until it answers; a node that exits instead is an error with
// its log tail. The node must not be running.
func (s *Spec) Restart(id uint64) error {
	n, err := s.Node(id)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if st := s.State(ctx, n); st.Alive() {
		return cmdline.Usagef("node %d is still running (pid %d); kill it first", id, st.Pid)
	}
	if err := s.start(ctx, n); err != nil {
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
	started := time.Now()
	deadline := started.Add(timeout)
	var serving time.Time
	for {
		pid := n.PID
		if st := s.State(context.Background(), n); st.Err == nil && !st.Alive() {
			return fmt.Errorf("node %d (pid %d) exited after its restart (%s); last lines of its log (%s):\n%s", n.ID, pid, st.LastExit, n.Log, s.NodeTail(n, 20))
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
		case err != nil && External(s.System) && time.Since(started) > 3*time.Second:
			// etcd serves no client before its member has published
			// itself through a quorum: a member restarted alone runs and
			// waits for the others (restart them too).
			return nil
		case err != nil && time.Now().After(deadline):
			return fmt.Errorf("node %d (pid %d) does not answer %v after its restart: %v", n.ID, n.PID, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LockFile is the file in a cluster directory that Lock locks.
const LockFile = ".lock"

// Lock takes an exclusive lock on the cluster directory (creating it), so
// that two commands do not start, restart or stop the same cluster at once.
// Call the returned function to release it.
func Lock(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, cmdline.Usagef("cluster directory %s: %v", dir, err)
	}
	unlock, err := vfs.OS().Lock(filepath.Join(dir, LockFile))
	if errors.Is(err, vfs.ErrLocked) {
		return nil, cmdline.Usagef("another nezha command is using the cluster in %s", dir)
	}
	return unlock, err
}

// running reports whether node n's process runs: its agent says so, or,
// for a node of a cluster started before agents existed, its pid is alive.
func (s *Spec) running(ctx context.Context, n *Node) bool {
	if n.Agent == "" {
		return n.PID != 0 && Alive(n.PID)
	}
	return s.State(ctx, n).Alive()
}

// Down stops every node (SIGTERM, then SIGKILL after 10 s) and their
// agents and, if purge, removes what the harness made for the cluster: on
// the nodes' hosts (containers, volumes, directories) and in the cluster
// directory (purge), and the directory itself once nothing else is left in
// it.
func (s *Spec) Down(purge bool) error {
	ctx := context.Background()
	b, err := s.backend()
	if err != nil {
		return err
	}
	errs := make([]error, len(s.Nodes))
	var wg sync.WaitGroup
	for i := range s.Nodes {
		n := &s.Nodes[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n.Agent == "" {
				errs[i] = s.downLegacy(n)
				return
			}
			if err := s.signalNode(ctx, n, agentpb.Sig_TERM, 10*time.Second); err != nil && agentAnswers(ctx, s, n) && !strings.Contains(err.Error(), "is not running") {
				errs[i] = err
			}
			n.PID = 0
			if err := b.remove(ctx, s, n, purge); err != nil {
				errs[i] = errors.Join(errs[i], err)
			}
		}()
	}
	wg.Wait()
	errs = append(errs, b.close(ctx, s, purge))
	s.closeAgents()
	if purge {
		errs = append(errs, s.purge())
		if s.BackendName() == BackendLocal {
			for _, n := range s.Nodes {
				releasePorts(n.ports()...)
			}
		}
	} else if _, err := os.Stat(s.Dir); err == nil {
		errs = append(errs, s.Save())
		if s.BackendName() == BackendLocal {
			for _, n := range s.Nodes {
				renewPorts(time.Now(), n.ports()...)
			}
		}
	}
	return errors.Join(errs...)
}

// downLegacy stops a node of a cluster started before agents existed
// (cluster.json without agent addresses): SIGTERM to its pid, SIGKILL
// after 10 s.
func (s *Spec) downLegacy(n *Node) error {
	if n.PID == 0 || !Alive(n.PID) {
		n.PID = 0
		return nil
	}
	if err := s.checkOwned(n); err != nil {
		return err
	}
	_ = syscall.Kill(n.PID, syscall.SIGCONT) // a paused node cannot exit
	_ = syscall.Kill(n.PID, syscall.SIGTERM)
	if err := waitGone(n.PID, 10*time.Second); err != nil {
		_ = syscall.Kill(n.PID, syscall.SIGKILL)
		if err := waitGone(n.PID, 5*time.Second); err != nil {
			return err
		}
	}
	n.PID = 0
	return nil
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

// setAdminAddresses gives node n its metrics, JSON-RPC, etcd API and
// profiler addresses, from at (the backend's k-th port of the node:
// 2 metrics, 3 JSON-RPC, 5 etcd, 6 pprof), unless the system is external
// (etcd serves none of ours) or the cluster's flags name the address
// themselves (a test's -etcdAddress 127.0.0.1:0: the flag given last wins,
// so cluster.json would be wrong).
func (s *Spec) setAdminAddresses(n *Node, at func(k int) string) {
	if External(s.System) {
		return
	}
	named := func(flag string) bool {
		for _, a := range append(slices.Clone(s.ExtraArgs), n.ExtraArgs...) {
			if a == flag || strings.HasPrefix(a, flag+"=") || a == "-"+flag || strings.HasPrefix(a, "-"+flag+"=") {
				return true
			}
		}
		return false
	}
	for _, f := range []struct {
		flag string
		k    int
		addr *string
	}{{"-metricsAddress", 2, &n.MetricsAddress}, {"-jsonrpcAddress", 3, &n.JSONRPCAddress},
		{"-etcdAddress", 5, &n.EtcdAddress}, {"-pprofAddress", 6, &n.PprofAddress}} {
		if !named(f.flag) {
			*f.addr = at(f.k)
		}
	}
}

// ports are node n's addresses that a local cluster leases (portlease.go).
func (n *Node) ports() []string {
	return []string{n.Address, n.InternalAddress, n.MetricsAddress, n.JSONRPCAddress, n.EtcdAddress, n.PprofAddress}
}
