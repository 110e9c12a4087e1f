package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"text/tabwriter"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// registerAddress adds -servers, -cluster and -api, the two ways to name a
// cluster, to fs.
func registerAddress(fs *flag.FlagSet, a *cluster.Address) {
	fs.StringVar(&a.Servers, "servers", "", "comma-separated client addresses of cluster members")
	fs.StringVar(&a.Cluster, "cluster", "", "`DIR` written by nezha cluster up (instead of -servers)")
	fs.StringVar(&a.API, "api", "", "client API of -servers: nezha (default) or etcd (an etcd cluster, or our nodes' -etcdAddress, through etcd's Go client); -cluster knows its own")
	fs.BoolVar(&a.Unary, "unary", false, "send every request as a unary gRPC call instead of batching small puts, deletes and gets over one Batch stream per server (for comparison; etcd's API is always unary)")
}

const clusterUsage = `usage: nezha cluster SUBCOMMAND [flags]   (nezha cluster SUBCOMMAND -h lists its flags)
  up -system S [-nodes 3] -cluster DIR [-backend local|docker|ssh -hosts FILE] [-- serve flags]
                                                           start a cluster, return once a leader is elected
  status -cluster DIR [-json]                              leader, term, commit and applied index per node
  kill -cluster DIR -node N                                SIGKILL node N
  restart -cluster DIR -node N                             start node N again, wait until it serves
  down -cluster DIR [-purge]                               stop every node (and delete what the harness made there)
  add -cluster DIR [-learner]                              start a new node, add it as a learner, promote it once caught up
  promote -cluster DIR -node N                             make learner N a voter once it has caught up
  remove -cluster DIR -node N                              remove member N (a leader hands over first), stop its process
  transfer -cluster DIR [-node N]                          move the leadership to N (default: the most caught-up voter)
  replace -cluster DIR -node N                             remove member N and add a fresh one (new id, empty data) in its place
  members -cluster DIR                                     the membership as the leader applied it
  compact -cluster DIR [-node N]                           take a snapshot now: each node compacts its Raft log to its applied index`

// runCluster is `nezha cluster up|status|...`; known are the -system names
// the binary registers, and checkServe (if set) checks the serve flags of
// `up` before anything starts.
func runCluster(args []string, known []string, stdout, stderr io.Writer, checkServe func(system string, args []string) error) error {
	if len(args) == 0 {
		return cmdline.Usagef("cluster: want a subcommand: up, status, kill, restart, down, add, promote, remove, transfer, replace, members, compact")
	}
	sub, args := args[0], args[1:]
	if err := cmdline.SubcommandHelp(sub, stdout, clusterUsage); err != nil {
		return err
	}
	fs := flag.NewFlagSet("cluster "+sub, flag.ContinueOnError)
	dir := fs.String("cluster", "", "cluster directory")
	ctx := context.Background()
	switch sub {
	case "up":
		o := cluster.UpOptions{}
		fs.StringVar(&o.System, "system", "", "system under test (or etcd: the external reference system, Debian's etcd on PATH)")
		fs.IntVar(&o.Nodes, "nodes", 3, "number of nodes")
		fs.DurationVar(&o.ReadyTimeout, "timeout", 30*time.Second, "how long to wait for a leader")
		hosts := registerBackend(fs, &o.Backend)
		var extra []string
		for i, a := range args {
			if a == "--" {
				args, extra = args[:i], args[i+1:]
				break
			}
		}
		if err := parseCluster(fs, args, stdout); err != nil {
			return err
		}
		if err := hosts.load(&o.Backend); err != nil {
			return err
		}
		if checkServe != nil {
			if err := checkServe(o.System, extra); err != nil {
				return cmdline.OneLine("cluster up", err)
			}
		}
		o.Dir, o.ExtraArgs, o.KnownSystems, o.Detach = *dir, extra, known, true
		if o.Dir == "" {
			return cmdline.Usagef("cluster up: -cluster DIR is required")
		}
		if o.Nodes == 0 { // cluster.UpOptions read 0 as the default; here it was given
			return cmdline.Usagef("cluster up: -nodes 0 is outside 1..%d", cluster.MaxNodes)
		}
		_, statErr := os.Stat(o.Dir)
		created := os.IsNotExist(statErr)
		lockFile := filepath.Join(o.Dir, cluster.LockFile)
		_, lockErr := os.Stat(lockFile)
		unlock, err := cluster.Lock(o.Dir)
		if err != nil {
			return err
		}
		s, leader, err := cluster.Up(ctx, o)
		unlock()
		if err != nil {
			// A failed up leaves no lock file it added (in a directory of
			// the user's, or one a retry should find as it was), and no
			// directory it made itself that is empty without it.
			if os.IsNotExist(lockErr) {
				_ = os.Remove(lockFile)
			}
			if created {
				_ = os.Remove(o.Dir) // only if empty
			}
			return cmdline.OneLine("cluster up", err)
		}
		fmt.Fprintf(stdout, "cluster of %d %s nodes up in %s (backend %s), leader %d\n", len(s.Nodes), cluster.Label(s.System), s.Dir, s.BackendName(), leader)
		for _, n := range s.Nodes {
			fmt.Fprintf(stdout, "  node %d  address %s  internal %s  pid %d  log %s", n.ID, n.Address, n.InternalAddress, n.PID, n.Log)
			if n.Host != "" {
				fmt.Fprintf(stdout, "  on %s", n.Host)
			}
			if n.MetricsAddress != "" {
				fmt.Fprintf(stdout, "  metrics http://%s/metrics", n.MetricsAddress)
			}
			if n.JSONRPCAddress != "" {
				fmt.Fprintf(stdout, "  jsonrpc %s", n.JSONRPCAddress)
			}
			if a := cmp.Or(n.EtcdAddress, loggedEtcdAddress(n.Log)); a != "" {
				fmt.Fprintf(stdout, "  etcd %s", a)
			}
			fmt.Fprintln(stdout)
		}
		return nil
	case "status":
		asJSON := fs.Bool("json", false, "print JSON")
		s, err := parseAndLoad(fs, args, stdout, dir)
		if err != nil {
			return err
		}
		sts, err := s.Status(ctx)
		if err != nil {
			return err
		}
		return printStatus(stdout, s, sts, *asJSON)
	case "kill", "restart":
		id := fs.Uint64("node", 0, "node id (1..N)")
		s, err := parseAndLoad(fs, args, stdout, dir)
		if err != nil {
			return err
		}
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "node" })
		if !set {
			return cmdline.Usagef("cluster %s: -node is required", sub)
		}
		if *id == 0 {
			_, err := s.Node(0) // names the ids there are (1..N, or others after membership changes)
			return cmdline.Usagef("cluster %s: %v", sub, err)
		}
		unlock, err := cluster.Lock(*dir)
		if err != nil {
			return err
		}
		defer unlock()
		if sub == "kill" {
			if err := s.Kill(*id); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "node %d killed (SIGKILL)\n", *id)
			return nil
		}
		if err := s.Restart(*id); err != nil {
			return err
		}
		n, _ := s.Node(*id)
		fmt.Fprintf(stdout, "node %d restarted, pid %d\n", *id, n.PID)
		return nil
	case "down":
		purge := fs.Bool("purge", false, "also delete what the harness made in the cluster directory (its nodes' data and logs, cluster.json), and the directory once empty")
		s, err := parseAndLoad(fs, args, stdout, dir)
		if err != nil {
			return err
		}
		unlock, err := cluster.Lock(*dir)
		if err != nil {
			return err
		}
		defer unlock()
		if err := s.Down(*purge); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "cluster in %s stopped%s\n", s.Dir, map[bool]string{true: " and purged", false: ""}[*purge])
		return nil
	case "add", "promote", "remove", "transfer", "replace", "members":
		return clusterMembership(ctx, sub, fs, dir, args, stdout)
	case "compact":
		return clusterCompact(ctx, fs, dir, args, stdout)
	}
	return cmdline.Usagef("cluster: unknown subcommand %q (want up, status, kill, restart, down, add, promote, remove, transfer, replace, members, compact)", sub)
}

// clusterMembership is `nezha cluster add|promote|remove|transfer|replace|members`.
func clusterMembership(ctx context.Context, sub string, fs *flag.FlagSet, dir *string, args []string, stdout io.Writer) error {
	id := fs.Uint64("node", 0, "node id")
	learner := fs.Bool("learner", false, "add: leave the new node a learner (cluster promote makes it a voter)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long the change may take (a learner catching up through a large snapshot takes a while)")
	s, err := parseAndLoad(fs, args, stdout, dir)
	if err != nil {
		return err
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "node" })
	if (sub == "promote" || sub == "remove" || sub == "replace") && !set {
		return cmdline.Usagef("cluster %s: -node is required", sub)
	}
	if set && *id == 0 {
		return cmdline.Usagef("cluster %s: no node 0", sub)
	}
	if *timeout <= 0 {
		return cmdline.Usagef("cluster %s: -timeout %v must be positive", sub, *timeout)
	}
	unlock, err := cluster.Lock(*dir)
	if err != nil {
		return err
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch sub {
	case "add":
		n, err := s.AddMember(ctx, !*learner)
		if err != nil {
			return err
		}
		role := "voter"
		if *learner {
			role = "learner"
		}
		fmt.Fprintf(stdout, "node %d added as a %s: address %s internal %s pid %d log %s\n", n.ID, role, n.Address, n.InternalAddress, n.PID, n.Log)
	case "promote":
		if err := s.Promote(ctx, *id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "node %d is a voter\n", *id)
	case "remove":
		n, err := s.Node(*id)
		if err != nil {
			return err
		}
		data := n.Data
		if err := s.RemoveMember(ctx, *id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "node %d removed and stopped; its data is left in %s\n", *id, data)
	case "transfer":
		leader, err := s.TransferLeader(ctx, *id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "leader is node %d\n", leader)
	case "replace":
		n, err := s.Replace(ctx, *id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "node %d removed; node %d added in its place: address %s internal %s pid %d log %s\n", *id, n.ID, n.Address, n.InternalAddress, n.PID, n.Log)
	case "members":
		r, err := s.Members(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "leader %d\n", r.LeaderId)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tROLE\tADDRESS\tINTERNAL\tMATCH")
		for _, m := range r.Members {
			role := "voter"
			if m.Learner {
				role = "learner"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\n", m.Id, role, m.Address, m.InternalAddress, m.MatchIndex)
		}
		return tw.Flush()
	}
	return nil
}

func parseCluster(fs *flag.FlagSet, args []string, w io.Writer) error {
	if err := cmdline.ParseFlags(fs, args, w); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cmdline.Usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// parseAndLoad parses a subcommand's flags, then loads the cluster that
// -cluster (dir) names.
func parseAndLoad(fs *flag.FlagSet, args []string, stdout io.Writer, dir *string) (*cluster.Spec, error) {
	if err := parseCluster(fs, args, stdout); err != nil {
		return nil, err
	}
	return loadCluster(*dir)
}

func loadCluster(dir string) (*cluster.Spec, error) {
	if dir == "" {
		return nil, cmdline.Usagef("-cluster DIR is required")
	}
	return cluster.Load(dir)
}

func printStatus(w io.Writer, s *cluster.Spec, sts []cluster.NodeStatus, asJSON bool) error {
	rows := cluster.StatusRows(sts)
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"system": s.System, "nodes": rows})
	}
	fmt.Fprintf(w, "system %s, cluster %s\n", cluster.Label(s.System), s.Dir)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tPID\tHEALTH\tSTATE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tLOG ENTRIES\tSYNC\tDISK")
	var refusals []string
	for _, r := range rows {
		state := r.State
		if r.Error != "" {
			state = "unreachable"
			if !r.Alive {
				state = "down"
			}
		}
		sync := "on"
		switch {
		case r.Error != "":
			sync = "-"
		case !r.Sync:
			sync = "OFF (comparison only)"
		}
		logRange := fmt.Sprintf("%d..%d", r.FirstIndex, r.LastIndex)
		if r.Error != "" || cluster.External(s.System) {
			logRange = "-" // etcd does not report its log's range
		} else if r.FirstIndex > r.LastIndex {
			logRange = fmt.Sprintf("none after %d", r.LastIndex)
		}
		disk := "ok"
		switch {
		case r.Error != "" || cluster.External(s.System):
			disk = "-"
		case r.DiskRefusal != "":
			disk = "REFUSING"
			refusals = append(refusals, fmt.Sprintf("node %d refuses writes: %s", r.ID, r.DiskRefusal))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r.ID, r.Address, r.PID, r.Health, state, r.Leader, r.Term,
			r.CommitIndex, r.AppliedIndex, logRange, sync, disk)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range refusals {
		fmt.Fprintln(w, line)
	}
	return nil
}

// etcdAddressPattern finds the address a node logs when it serves etcd's
// API (-etcdAddress; serve's "etcd_address" attribute, text or JSON logs).
var etcdAddressPattern = regexp.MustCompile(`etcd_address(?:=|":")([^\s"]+)`)

// loggedEtcdAddress returns the last etcd API address in a node's log, or
// "" if it serves none (a node logs it as it starts, before cluster up
// returns).
func loggedEtcdAddress(log string) string {
	b, err := os.ReadFile(log)
	if err != nil {
		return ""
	}
	ms := etcdAddressPattern.FindAllSubmatch(b, -1)
	if len(ms) == 0 {
		return ""
	}
	return string(ms[len(ms)-1][1])
}

// backendFlags are the flags that choose where a new cluster's nodes run.
type backendFlags struct {
	hosts string
}

// registerBackend adds -backend, -hosts, -image, -privileged and
// -hostBinary to fs, filling o; load reads -hosts once fs is parsed.
func registerBackend(fs *flag.FlagSet, o *cluster.BackendOptions) *backendFlags {
	f := &backendFlags{}
	fs.StringVar(&o.Name, "backend", cluster.BackendLocal, "where the nodes run: local (processes on this machine's loopback), docker (containers of the nezha image: scripts/image.sh builds it), ssh (one node per host of -hosts)")
	fs.StringVar(&f.hosts, "hosts", "", "`FILE` of hosts, one node per host (ssh; docker: one daemon per node): lines `TARGET ADDRESS [dir=D] [base_port=P] [ssh_config=F]`, TARGET an ssh destination or a DOCKER_HOST value (docs/multi-machine.md)")
	fs.StringVar(&o.Docker.Image, "image", "", "docker: the image the nodes run (default nezha:<this binary's revision>, what scripts/image.sh builds)")
	fs.BoolVar(&o.Docker.Privileged, "privileged", false, "docker: run the containers privileged, so that their agents may limit page cache, drop caches and set readahead, where the daemon allows it (default: CAP_NET_ADMIN only; those measurements then fall back, and results say so)")
	fs.StringVar(&o.Binary, "hostBinary", "", "ssh: the nezha binary copied to the hosts (default this one; bin/nezha-static, which scripts/image.sh builds, needs no librocksdb there)")
	return f
}

// load reads -hosts into o.
func (f *backendFlags) load(o *cluster.BackendOptions) error {
	if f.hosts == "" {
		return nil
	}
	hosts, err := cluster.ParseHosts(f.hosts)
	if err != nil {
		return err
	}
	o.Hosts = hosts
	return nil
}
