package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/raftkv/node"
)

// systemFlag finds the value of -system in args without parsing the rest,
// so that the system's own flags can be registered before parsing.
func systemFlag(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "system" {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// serveCommand is `nezha serve`: node.Serve with a node.Config from flags;
// it runs one node until SIGINT or SIGTERM.
//
//	nezha serve -system S -address A -internalAddress I -peers P1,P2,P3 -data D [flags]
//
// The flags of the system named by -system (node.Config.SystemConfig's
// RegisterFlags) are added before parsing.
func (c *cli) serveCommand() *ffcli.Command {
	reg := c.reg
	cfg := node.Default()
	fs := c.flagSet("serve")
	systemName := fs.String("system", "", "system under test: "+strings.Join(reg.Names(), ", "))
	peers := fs.String("peers", "", "comma-separated internal (Raft) addresses of all members; the node's id is the position of -internalAddress in it (1-based), or each entry is ID=host:port")
	dialPeers := fs.String("dialPeers", "", "comma-separated addresses to dial for each member, in -peers order (default -peers; fault injection puts proxies here)")
	fs.StringVar(&cfg.DialPeersFile, "dialPeersFile", "", "JSON object {\"ID\": \"host:port\"}, read when this node needs the address of a member -peers does not name (one added since it started); fault injection puts the proxies of an added member's links here (default none)")
	bootstrapVoters := fs.String("bootstrapVoters", "", "comma-separated ids of the voters a new, empty log starts with (default: every member of -peers); a node joining a running cluster gets its leader's (nezha cluster add sets it)")
	fs.StringVar(&cfg.Address, "address", "", "client API address host:port")
	fs.StringVar(&cfg.InternalAddress, "internalAddress", "", "Raft peer address host:port (must appear in -peers)")
	fs.StringVar(&cfg.EtcdAddress, "etcdAddress", "", "also serve etcd v3's KV API (etcdctl, etcd's benchmark tool) on host:port; port 0: a free port, logged as etcd_address (default off)")
	fs.StringVar(&cfg.MetricsAddress, "metricsAddress", "", "serve Prometheus metrics at /metrics on this loopback or private host:port (no public address: it has no authentication); port 0: a free port, logged as metrics_address (default off; `cluster up` sets it)")
	fs.StringVar(&cfg.JSONRPCAddress, "jsonrpcAddress", "", "serve the JSON-RPC 2.0 cluster API (raftpico's methods, newline-delimited JSON over TCP) on this loopback or private host:port; port 0: a free port, logged as jsonrpc_address (default off)")
	fs.StringVar(&cfg.DataDir, "data", "", "data directory")
	fs.IntVar(&cfg.ComposeReplicas, "composeReplicas", 0, "run as one of N replicas of a Docker Compose service (deploy/compose.yaml): replica k, whose container is <project>_<service>_<k> (reverse DNS of its address), is id k of the members <project>_<service>_1..N; then -address and -internalAddress give only ports (:7000), -peers is not given, and the data directory is -data/<container name> (default 0: off)")
	fs.StringVar(&cfg.ClusterID, "clusterID", "", "cluster name; peers of another cluster are refused (default: derived from -peers)")
	fs.BoolVar(&cfg.Sync, "sync", cfg.Sync, "fdatasync the Raft log before anything in it is acknowledged; false is for comparison only")
	fs.Int64Var(&cfg.LogGroupCommitBytes, "logGroupCommitBytes", cfg.LogGroupCommitBytes, "bytes of Raft log appends one group commit takes at most: one write of what is pending, and what may be written ahead of the fdatasync in flight")
	fs.DurationVar(&cfg.LogGroupCommitDelay, "logGroupCommitDelay", cfg.LogGroupCommitDelay, "how long the Raft log's flusher waits for more appends before an fdatasync, unless -logGroupCommitBytes are written (a duration; 0: flush as soon as the previous fdatasync returned)")
	fs.DurationVar(&cfg.FsyncDelay, "fsyncDelay", cfg.FsyncDelay, "add this to every fsync of this node's files from the start, for measurements (the slow-disk fault; a duration, at most 10s; 0: none)")
	fs.Int64Var(&cfg.SegmentSizeBytes, "segmentSizeBytes", cfg.SegmentSizeBytes, "Raft log segment size in bytes")
	fs.Int64Var(&cfg.EntryCacheBytes, "entryCacheBytes", cfg.EntryCacheBytes, "bytes of the newest Raft entries kept in memory so they are not read back from the log (0: off)")
	fs.BoolVar(&cfg.LogDirectIO, "logDirectIO", cfg.LogDirectIO, "write the Raft log with O_DIRECT (from a block-aligned copy, not through the page cache) when -sync is on; a filesystem without O_DIRECT gets buffered writes")
	fs.Int64Var(&cfg.LogPageCacheBytes, "logPageCacheBytes", cfg.LogPageCacheBytes, "bytes of the newest synced Raft log data left in the kernel's page cache; older synced data is dropped from it (posix_fadvise DONTNEED; negative: no limit)")
	fs.IntVar(&cfg.MaxValueBytes, "maxValueBytes", cfg.MaxValueBytes, "largest value a Put accepts, in bytes")
	fs.DurationVar(&cfg.TickInterval, "tick", cfg.TickInterval, "Raft tick interval (a duration, e.g. 100ms)")
	fs.IntVar(&cfg.ElectionTicks, "electionTicks", cfg.ElectionTicks, "election timeout in ticks")
	fs.IntVar(&cfg.HeartbeatTicks, "heartbeatTicks", cfg.HeartbeatTicks, "heartbeat interval in ticks")
	fs.BoolVar(&cfg.LeaseRead, "leaseRead", cfg.LeaseRead, "serve linearizable reads from the leader lease instead of a ReadIndex round")
	fs.DurationVar(&cfg.RequestTimeout, "requestTimeout", cfg.RequestTimeout, "longest a request waits inside the node (a duration)")
	fs.BoolVar(&cfg.CampaignOnBoot, "campaign", cfg.CampaignOnBoot, "on a fresh log, start an election at once instead of after an election timeout (the local launcher sets it on node 1)")
	fs.Int64Var(&cfg.MinFreeDiskBytes, "minFreeDiskBytes", cfg.MinFreeDiskBytes, "refuse writes below this much free disk space, in bytes")
	fs.Int64Var(&cfg.DiskBallastBytes, "diskBallastBytes", cfg.DiskBallastBytes, "size in bytes of the disk ballast, a file deleted when a write meets a full disk so that accepted writes finish (0: none)")
	fs.BoolVar(&cfg.DiskFaults, "diskFaults", cfg.DiskFaults, "serve the DiskFaults RPC that injects disk faults into this node (tests and nezha check only)")
	logLevel := fs.String("logLevel", "info", "log level: debug, info, warn, error")
	logFormat := fs.String("logFormat", node.LogFormatText, "log format on stderr: text (slog's key=value) or json (one JSON object per line); every line has the node id (node) and Raft term (term)")
	pprofAddr := fs.String("pprofAddress", "", "serve net/http/pprof on this loopback or private host:port (profiling; off by default)")
	usage := "usage: nezha serve -system S -address A -internalAddress I -peers P1,P2,P3 -data D [flags]"
	// Only the serve command line names a system whose flags to add.
	var name string
	if len(c.args) > 0 && c.args[0] == "serve" {
		name = systemFlag(c.args[1:])
	}
	if name != "" {
		s, err := reg.Lookup(name)
		if err != nil {
			c.early = cmdline.Usagef("serve: %v", err)
		} else {
			cfg.System, cfg.SystemConfig = s, s.NewConfig()
			cfg.SystemConfig.RegisterFlags(fs)
		}
	} else {
		usage += fmt.Sprintf("\nThe flags of a system (its engine, GC, RocksDB options) are listed by: nezha serve -system S -h (S: %s)", strings.Join(reg.Names(), ", "))
	}
	return c.command("serve", usage, fs, func(_ context.Context, args []string) error {
		if err := noArgs("serve", args); err != nil {
			return err
		}
		if *systemName == "" {
			return cmdline.Usagef("serve: -system is required (one of %s)", strings.Join(reg.Names(), ", "))
		}
		cfg.Peers = cmdline.SplitList(*peers)
		cfg.DialPeers = cmdline.SplitList(*dialPeers)
		// Flag problems are reported together, with those Validate finds.
		var errs []error
		for _, v := range cmdline.SplitList(*bootstrapVoters) {
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil || id == 0 {
				errs = append(errs, cmdline.Usagef("-bootstrapVoters %q: %q is not a positive id", *bootstrapVoters, v))
				continue
			}
			cfg.BootstrapVoters = append(cfg.BootstrapVoters, id)
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
			errs = append(errs, cmdline.Usagef("-logLevel %q: %v", *logLevel, err))
		}
		h, err := node.NewLogHandler(*logFormat, c.stderr, level)
		if err != nil {
			errs = append(errs, err)
			h = slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})
		}
		cfg.Logger = slog.New(h)
		if err := errors.Join(append(errs, cfg.Validate())...); err != nil {
			return cmdline.OneLine("serve", err)
		}
		return node.Serve(cfg, *pprofAddr)
	})
}
