// Package node is the Raft node every system shares: one goroutine runs the
// etcd/raft Ready loop over the segmented log of package raftlog, peers talk
// over batched gRPC streams, committed entries are applied to the system's
// StateMachine by one apply goroutine, and the client API (kvpb.KV) is served
// on -address.
//
// Reads are linearizable through ReadIndex (Raft thesis section 6.4), or
// from a leader lease if Config.LeaseRead is set (see extendLease); a
// request may ask for a stale local read instead. PreVote and
// CheckQuorum are always on.
package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
	"github.com/nezha-harness/nezha/systems"
)

// Config configures a Node. Zero values of optional fields take the
// documented defaults through Default.
type Config struct {
	// System is the system under test; SystemConfig its configuration.
	System       systems.System
	SystemConfig systems.SystemConfig
	// Peers are the internal (Raft) addresses of all members, in order; the
	// node's Raft id is the 1-based position of InternalAddress in Peers.
	// Each entry may name its member's id instead, as ID=host:port (all
	// entries or none): a cluster whose membership changed (membership.go)
	// has gaps in its ids.
	Peers []string
	// BootstrapVoters are the ids of the voters a new, empty log starts
	// with. Default: every member of Peers (a new cluster). A node joining
	// a running cluster gets the membership its leader's log starts from
	// (MembershipResponse.bootstrap_voters; cluster.json's
	// bootstrap_voters), which does not name the node itself: it stays
	// silent until the leader adds it and sends it the log or a snapshot.
	BootstrapVoters []uint64
	// DialPeers, if set, are the addresses this node dials to reach each
	// member (same order and length as Peers); default Peers. Fault
	// injection routes each directed link through its own proxy this way.
	DialPeers []string
	// DialPeersFile, if set, names a JSON object {"ID": "host:port"} that
	// this node reads whenever it needs the address of a member -peers does
	// not name (one added since it started): an entry there wins over the
	// internal address the member's conf change carried. A missing file or
	// id means that address. Fault injection writes the proxies of an
	// added member's links here before adding it. Default: none.
	DialPeersFile string
	// Address serves the client API (kvpb.KV); InternalAddress the peer
	// transport (kvpb.Raft). Both host:port.
	Address, InternalAddress string
	// EtcdAddress, if set, serves etcd v3's KV service (package etcdapi)
	// too, host:port; port 0 picks a free port, logged as etcd_address.
	// Default: off.
	EtcdAddress string
	// MetricsAddress, if set, serves Prometheus metrics at /metrics on this
	// loopback or private host:port (metrics.go lists them; AdminHostOK); port 0 picks a free
	// port, logged as metrics_address. Default: off (`cluster up` gives
	// every node a port).
	MetricsAddress string
	// JSONRPCAddress, if set, serves the JSON-RPC 2.0 cluster API
	// (package jsonrpc: raftpico's methods, one JSON object per line over TCP)
	// on this loopback or private host:port; port 0 picks a free port, logged as
	// jsonrpc_address. Default: off.
	JSONRPCAddress string
	// JSONRPCMaxLineBytes bounds one JSON-RPC request line, in bytes; a
	// longer line is refused with an error reply (-32600) and the
	// connection goes on. Default: 4 MiB.
	JSONRPCMaxLineBytes int
	// ClusterID names the cluster; a node refuses peer streams from another
	// cluster. Default: derived from Peers (all members share it).
	ClusterID string
	// DataDir holds the node's files (the Raft log under System.LogDir).
	DataDir string
	// Sync: fdatasync the Raft log before anything it holds is
	// acknowledged (logwrite.go). Default true. false is for comparison
	// only and is labelled in every output.
	Sync bool
	// LogGroupCommitBytes bounds a group commit of the Raft log
	// (logwrite.go): one write takes at most this many bytes of the
	// appends pending (at least one append), and the log writer waits
	// while this much is written and not yet flushed, so that one
	// fdatasync covers about this much. Default 4 MiB
	// (DefaultLogGroupCommitBytes).
	LogGroupCommitBytes int64
	// LogGroupCommitDelay is how long the flusher waits, once appends are
	// written and the previous fdatasync has returned, for more appends to
	// join the flush, unless LogGroupCommitBytes are already written. 0:
	// flush at once; the group is then what was written while the
	// previous flush ran. Default 0 (DefaultLogGroupCommitDelay).
	LogGroupCommitDelay time.Duration
	// FsyncDelay, if positive, is added to every fsync of the node's
	// files from the start: the slow-disk fault (vfs.FaultSlowDisk) set at
	// start, for measurements that need a fixed flush latency (the
	// DiskFaults RPC, if served, replaces it). At most vfs.MaxLatency.
	// Default 0: none.
	FsyncDelay time.Duration
	// SegmentSizeBytes of Raft log segments. Default 64 MiB.
	SegmentSizeBytes int64
	// EntryCacheBytes bounds the payload bytes of the newest Raft entries
	// kept in memory (raftlog.Options.EntryCacheBytes), so that committed
	// entries and MsgApps to followers that trail by little are not read
	// back from the log. 0 disables it. Default 32 MiB.
	EntryCacheBytes int64
	// LogPageCacheBytes bounds the newest Raft log data left in the
	// kernel's page cache once synced (raftlog.Options.PageCacheBytes;
	// negative: no limit). Default 64 MiB.
	LogPageCacheBytes int64
	// LogDirectIO writes the Raft log with O_DIRECT when Sync is on
	// (raftlog.Options.DirectIO). Default true.
	LogDirectIO bool
	// MaxValueBytes is the largest value a Put accepts. Default 64 MiB.
	MaxValueBytes int
	// TickInterval is one Raft tick. Default 100ms.
	TickInterval time.Duration
	// ElectionTicks and HeartbeatTicks are in ticks. Defaults 10 and 1
	// (election timeout 1-2 s, heartbeat 100 ms).
	ElectionTicks, HeartbeatTicks int
	// LeaseRead lets the leader serve linearizable reads locally for 3/4 of
	// an election timeout after a ReadIndex round a quorum confirmed,
	// measured on its monotonic clock (etcd/raft's ReadOnlyLeaseBased counts
	// ticks, which stop while a process is paused, and outlives the
	// followers' vote refusal: the harness's checker caught it serving
	// stale reads). Default false.
	LeaseRead bool
	// RequestTimeout bounds how long a request waits for its proposal to
	// apply or its read index, when the client sets no earlier deadline.
	// Default 5s.
	RequestTimeout time.Duration
	// ScanMaxBytes caps one Scan response. Default 16 MiB.
	ScanMaxBytes int
	// MinFreeDiskBytes: client writes are refused while the data
	// directory's file system has less free space (a leader hands its
	// leadership to a voter with space first; see diskhandoff.go).
	// Default 256 MiB.
	MinFreeDiskBytes int64
	// DiskBallastBytes is the size of the disk ballast, a preallocated file
	// (<data>/DISK_BALLAST) the node deletes when a write meets ENOSPC, so
	// that what it already accepted finds room while it refuses new writes,
	// and puts back once space returned (see diskGuard). Writes are also
	// refused while less than this is free. 0: no ballast. Default 16 MiB.
	DiskBallastBytes int64
	// DiskFaults serves the DiskFaults RPC on Address, which sets the disk
	// faults the node's file layer injects (internal/vfs; `nezha check`'s
	// disk nemeses, tests). Default false: never on a node that matters.
	DiskFaults bool
	// CampaignOnBoot: a node whose Raft log is fresh (term 0, no entry)
	// starts an election as soon as its Ready loop runs, instead of after an
	// election timeout (1-2 s by default). The local launcher sets it on
	// the first node of a new cluster so that experiments do not wait a
	// timeout per cluster; campaigning early is always safe in Raft (a
	// failed election falls back to the timeouts). Default false.
	CampaignOnBoot bool
	// ComposeReplicas, if positive, makes the node one of that many
	// replicas of a Docker Compose service that all run the same command
	// line (deploy/compose.yaml; compose.go): replica k, named by its
	// container name <project>_<service>_<k> (reverse DNS of its address),
	// is Raft id k of the members <project>_<service>_1 .. _N. Address and
	// InternalAddress then give only ports (":7000") and are advertised
	// under the container name, Peers and DialPeers are not given, and
	// DataDir is the parent of the node's directory, DataDir/<container
	// name>. Default 0: off.
	ComposeReplicas int
	// Logger defaults to slog.Default(). The node adds the attributes
	// node (its Raft id) and term (its current Raft term) to every line
	// (termHandler); `serve -logFormat` picks slog's text or JSON handler.
	Logger *slog.Logger

	// listenAll: listen on the ports of Address and InternalAddress on
	// every interface (a Compose replica, whose addresses name its
	// container; set by withComposeIdentity).
	listenAll bool
	// lookupPTR overrides the reverse DNS lookup of -composeReplicas
	// (tests; nil: lookupPTR).
	lookupPTR ptrLookup
	// sessionCheckpointEntries overrides sessionCheckpointEntries (tests;
	// 0: the default).
	sessionCheckpointEntries int
	// env replaces the node's file system, ticks and transport (the
	// deterministic tests; nil: the real ones).
	env *env
}

// Default returns a Config holding every documented default.
func Default() Config {
	return Config{
		Sync:                true,
		SegmentSizeBytes:    raftlog.DefaultSegmentSizeBytes,
		EntryCacheBytes:     raftlog.DefaultEntryCacheBytes,
		LogPageCacheBytes:   raftlog.DefaultPageCacheBytes,
		LogDirectIO:         true,
		MaxValueBytes:       systems.DefaultMaxValueBytes,
		LogGroupCommitBytes: DefaultLogGroupCommitBytes,
		LogGroupCommitDelay: DefaultLogGroupCommitDelay,
		TickInterval:        100 * time.Millisecond,
		ElectionTicks:       10,
		HeartbeatTicks:      1,
		RequestTimeout:      5 * time.Second,
		ScanMaxBytes:        16 << 20,
		MinFreeDiskBytes:    256 << 20,
		DiskBallastBytes:    16 << 20,

		JSONRPCMaxLineBytes: 4 << 20,
	}
}

// ID returns the node's Raft id (its ID= in Peers, else its 1-based
// position), or 0 if InternalAddress is not in Peers.
func (c *Config) ID() uint64 {
	ids, addrs, err := c.members()
	if err != nil {
		return 0
	}
	if i := slices.Index(addrs, c.InternalAddress); i >= 0 {
		return ids[i]
	}
	return 0
}

// MinTickInterval is the shortest -tick a node takes: its Ready loop
// wakes once a tick, and below this it spins a core doing nothing else.
const MinTickInterval = time.Millisecond

// MaxNodeID is the largest Raft id a member may have: etcd raft takes
// math.MaxUint64 and math.MaxUint64-1 for its local storage threads
// (raft.LocalAppendThread, raft.LocalApplyThread) and panics on a peer
// that has one ("cannot use local target as id").
const MaxNodeID = math.MaxUint64 - 2

// members returns the ids and internal addresses of Peers, in order.
func (c *Config) members() (ids []uint64, addrs []string, err error) {
	explicit := 0
	for i, p := range c.Peers {
		id, addr := uint64(i+1), p
		if idText, a, ok := strings.Cut(p, "="); ok {
			explicit++
			v, perr := strconv.ParseUint(idText, 10, 64)
			if perr != nil || v == 0 {
				return nil, nil, fmt.Errorf("-peers entry %q: the id before = is not a positive integer", p)
			}
			if v > MaxNodeID {
				return nil, nil, fmt.Errorf("-peers entry %q: ids above %d are reserved by etcd raft", p, uint64(MaxNodeID))
			}
			id, addr = v, a
		}
		ids, addrs = append(ids, id), append(addrs, addr)
	}
	if explicit != 0 && explicit != len(c.Peers) {
		return nil, nil, fmt.Errorf("-peers names the ids of %d of its %d members (ID=host:port): all or none", explicit, len(c.Peers))
	}
	for i := range ids {
		if slices.Index(ids, ids[i]) != i {
			return nil, nil, fmt.Errorf("-peers names id %d twice", ids[i])
		}
	}
	return ids, addrs, nil
}

// bootstrapVoters returns BootstrapVoters, or the ids of Peers.
func (c *Config) bootstrapVoters() []uint64 {
	if len(c.BootstrapVoters) > 0 {
		return c.BootstrapVoters
	}
	ids, _, _ := c.members()
	return ids
}

// Validate reports every problem with c at once. Problems with user input
// are *cmdline.UsageError values joined together.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, cmdline.Usagef(format, args...)) }
	if c.System.Name == "" || c.SystemConfig == nil {
		bad("-system is required")
	} else if err := c.SystemConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	compose := c.ComposeReplicas != 0
	switch {
	case c.ComposeReplicas < 0 || c.ComposeReplicas > MaxComposeReplicas:
		bad("-composeReplicas %d is outside 0..%d", c.ComposeReplicas, MaxComposeReplicas)
	case compose && (len(c.Peers) > 0 || len(c.DialPeers) > 0):
		bad("-composeReplicas derives -peers from the container names: give neither -peers nor -dialPeers")
	case !compose && len(c.Peers) == 0:
		bad("-peers is required")
	}
	for _, a := range [][2]string{{"-address", c.Address}, {"-internalAddress", c.InternalAddress}} {
		if host, port, err := net.SplitHostPort(a[1]); compose && err == nil && host != "" {
			bad("with -composeReplicas, %s %q gives only a port (:%s): the node is advertised under its container name", a[0], a[1], port)
		}
	}
	_, addrs, perr := c.members()
	if perr != nil {
		bad("%v", perr)
	}
	seen := map[string]bool{}
	for _, p := range addrs {
		if p == "" {
			bad("-peers has an empty address")
		} else if seen[p] {
			bad("-peers lists %s twice", p)
		}
		seen[p] = true
	}
	if len(c.DialPeers) > 0 && len(c.DialPeers) != len(c.Peers) {
		bad("-dialPeers has %d addresses, -peers %d", len(c.DialPeers), len(c.Peers))
	}
	if c.Address == "" {
		bad("-address is required")
	}
	if c.InternalAddress == "" {
		bad("-internalAddress is required")
	} else if !compose && len(c.Peers) > 0 && perr == nil && c.ID() == 0 {
		bad("-internalAddress %s is not in -peers %v", c.InternalAddress, c.Peers)
	}
	for _, v := range c.BootstrapVoters {
		if v == 0 {
			bad("-bootstrapVoters names id 0")
		} else if v > MaxNodeID {
			bad("-bootstrapVoters names id %d: ids above %d are reserved by etcd raft", v, uint64(MaxNodeID))
		}
	}
	hostPort := func(flagName, a string) {
		if a == "" {
			return
		}
		_, port, err := net.SplitHostPort(a)
		if err != nil || port == "" {
			bad("%s %q is not host:port", flagName, a)
			return
		}
		// Checked here, before the data directory is touched, not when
		// the listener fails after the stores were opened.
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("%s %q: port %q is not a number in 0..65535", flagName, a, port)
		}
	}
	hostPort("-address", c.Address)
	hostPort("-internalAddress", c.InternalAddress)
	hostPort("-etcdAddress", c.EtcdAddress)
	hostPort("-metricsAddress", c.MetricsAddress)
	hostPort("-jsonrpcAddress", c.JSONRPCAddress)
	for _, a := range [][2]string{{"-metricsAddress", c.MetricsAddress}, {"-jsonrpcAddress", c.JSONRPCAddress}} {
		if host, _, err := net.SplitHostPort(a[1]); err == nil {
			if !AdminHostOK(host) {
				bad("%s %q is not a loopback or private address", a[0], a[1])
			}
		}
	}
	if c.JSONRPCMaxLineBytes < 1024 {
		bad("JSONRPCMaxLineBytes %d is below 1024 bytes", c.JSONRPCMaxLineBytes)
	}
	for _, p := range addrs {
		hostPort("-peers", p)
	}
	for _, p := range c.DialPeers {
		hostPort("-dialPeers", p)
	}
	if c.Address != "" && c.Address == c.InternalAddress {
		bad("-address and -internalAddress are both %s", c.Address)
	}
	if c.DataDir == "" {
		bad("-data is required")
	} else if err := checkDataDir(c.env.fileSystem(), c.DataDir); err != nil {
		bad("-data %s is unusable: %v", c.DataDir, err)
	}
	if c.SegmentSizeBytes < 4096 {
		bad("segment size %d bytes is below 4096", c.SegmentSizeBytes)
	}
	if c.EntryCacheBytes < 0 {
		bad("entry cache size %d bytes must not be negative", c.EntryCacheBytes)
	}
	if c.LogGroupCommitBytes < MinLogGroupCommitBytes || c.LogGroupCommitBytes > MaxLogGroupCommitBytes {
		bad("-logGroupCommitBytes %d is outside [%d, %d] bytes", c.LogGroupCommitBytes, MinLogGroupCommitBytes, MaxLogGroupCommitBytes)
	}
	if c.LogGroupCommitDelay < 0 || c.LogGroupCommitDelay > MaxLogGroupCommitDelay {
		bad("-logGroupCommitDelay %v is outside [0, %v]", c.LogGroupCommitDelay, MaxLogGroupCommitDelay)
	}
	if c.FsyncDelay < 0 || c.FsyncDelay > vfs.MaxLatency {
		bad("-fsyncDelay %v is outside [0, %v]", c.FsyncDelay, vfs.MaxLatency)
	}
	if c.MaxValueBytes <= 0 || c.MaxValueBytes > 1<<30 {
		bad("max value size %d bytes is outside (0, 1 GiB]", c.MaxValueBytes)
	}
	if c.TickInterval <= 0 {
		bad("tick interval %v must be positive", c.TickInterval)
	} else if c.TickInterval < MinTickInterval {
		bad("tick interval %v is below the minimum of %v", c.TickInterval, MinTickInterval)
	}
	if c.HeartbeatTicks <= 0 || c.ElectionTicks <= c.HeartbeatTicks {
		bad("election ticks (%d) must exceed heartbeat ticks (%d) > 0", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.RequestTimeout <= 0 {
		bad("request timeout %v must be positive", c.RequestTimeout)
	}
	if c.ScanMaxBytes <= 0 {
		bad("scan response cap %d bytes must be positive", c.ScanMaxBytes)
	}
	if c.MinFreeDiskBytes < 0 {
		bad("minimum free disk %d bytes must not be negative", c.MinFreeDiskBytes)
	}
	if c.DiskBallastBytes < 0 {
		bad("disk ballast %d bytes must not be negative", c.DiskBallastBytes)
	}
	return errors.Join(errs...)
}

// checkDataDir checks that dir, or the directory it would be created in,
// is a writable directory of fsys, leaving nothing behind.
func checkDataDir(fsys vfs.FileSystem, dir string) error {
	for {
		st, err := fsys.Stat(dir)
		if errors.Is(err, os.ErrNotExist) {
			parent := filepath.Dir(dir)
			if parent == dir {
				return err
			}
			dir = parent
			continue
		}
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		break
	}
	f, err := fsys.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return fsys.Remove(name)
}

// clusterID returns ClusterID, or a stable id derived from Peers.
func (c *Config) clusterID() string {
	if c.ClusterID != "" {
		return c.ClusterID
	}
	sum := sha256.Sum256([]byte(strings.Join(c.Peers, ",")))
	return hex.EncodeToString(sum[:8])
}

// dialAddress returns the address this node dials for member id of Peers
// ("" if Peers does not name id).
func (c *Config) dialAddress(id uint64) string {
	ids, addrs, _ := c.members()
	i := slices.Index(ids, id)
	switch {
	case i < 0:
		return ""
	case len(c.DialPeers) > 0:
		return c.DialPeers[i]
	}
	return addrs[i]
}

// logDir is where the Raft log lives.
func (c *Config) logDir() string { return filepath.Join(c.DataDir, c.System.LogDir) }

func (c *Config) String() string {
	return fmt.Sprintf("system=%s id=%d address=%s internal=%s peers=%v data=%s sync=%v",
		c.System.Name, c.ID(), c.Address, c.InternalAddress, c.Peers, c.DataDir, c.Sync)
}

// AdminHostOK reports whether host may serve a node's administrative
// endpoints (metrics, JSON-RPC, the profiler): localhost, a loopback
// address, or a private one (RFC 1918, RFC 4193, link-local: a container
// network, a cluster's own LAN). They carry no authentication, so a public
// or unspecified address (0.0.0.0) is refused.
func AdminHostOK(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast())
}
