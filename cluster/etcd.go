package cluster

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// Etcd is the -system name of the external reference system etcd: Debian's
// etcd-server binary (`etcd` on PATH, installed by scripts/setup.sh) with
// its own Raft and storage (WAL and bbolt), driven through etcd's Go client.
// It is no `nezha serve` state machine: what the harness asks of a node and
// etcd cannot answer is degraded (see package client's etcdBackend), and
// what is specific to our log (torn-tail nemeses, GC, the storage shape)
// does not apply.
const Etcd = "etcd"

// External reports whether system runs from its own binary rather than
// `nezha serve`.
func External(system string) bool { return system == Etcd }

// Label names a system for tables and logs, marking an external one.
func Label(system string) string {
	if External(system) {
		return system + " (external: its own Raft and storage)"
	}
	return system
}

// Etcd's launch defaults, beside what the cluster decides (names node<N>,
// addresses, data directory, the initial cluster).
const (
	// etcdQuotaBackendBytes is etcd's backend quota (its documented
	// maximum recommendation, 8 GiB; the default 2 GiB would stop a
	// large load with a NOSPACE alarm).
	etcdQuotaBackendBytes = 8 << 30
	// etcdElectionTicks is the election timeout in heartbeats (etcd's
	// default ratio, as our nodes' 10 ticks).
	etcdElectionTicks = 10
)

// etcdOptions are the harness's serve flags translated for etcd.
type etcdOptions struct {
	noFsync   bool
	args      []string // etcd flags
	dialPeers []string // -dialPeers: the peer address each member advertises, node order
}

// translateEtcd maps the serve flags the harness passes to every system
// onto etcd's flags: -sync=false is --unsafe-no-fsync; -tick D is
// --heartbeat-interval D and --election-timeout 10 D; -maxValueBytes N is
// --max-request-bytes N (etcd limits the whole request, so its largest
// value is that less the key and some framing); -dialPeers (one address per node, the
// same list on every node: a proxy in front of each member) sets the peer
// addresses the members advertise; -campaign is what etcd's
// --initial-election-tick-advance does already. Flags written with two
// dashes are etcd's own and passed as they are. Any other flag has no etcd
// equivalent and is an error, all reported at once.
func translateEtcd(args []string) (etcdOptions, error) {
	var o etcdOptions
	maxValue := systems.DefaultMaxValueBytes
	var errs []error
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "--") {
			o.args = append(o.args, a)
			if a == "--unsafe-no-fsync" || a == "--unsafe-no-fsync=true" {
				o.noFsync = true
			}
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		value := func() string {
			if hasVal {
				return val
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			errs = append(errs, cmdline.Usagef("etcd: flag -%s needs a value", name))
			return ""
		}
		switch name {
		case "sync":
			v := "true"
			if hasVal {
				v = val
			}
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, cmdline.Usagef("etcd: -sync=%s is not a boolean", v))
			}
			o.noFsync = o.noFsync || !b
		case "tick":
			v := value()
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond {
				errs = append(errs, cmdline.Usagef("etcd: -tick %q is not a duration of at least 1ms", v))
				continue
			}
			o.args = append(o.args, "--heartbeat-interval", strconv.FormatInt(d.Milliseconds(), 10),
				"--election-timeout", strconv.FormatInt(etcdElectionTicks*d.Milliseconds(), 10))
		case "maxValueBytes":
			v := value()
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, cmdline.Usagef("etcd: -maxValueBytes %q is not a positive number of bytes", v))
				continue
			}
			maxValue = n
		case "dialPeers":
			o.dialPeers = cmdline.SplitList(value())
		case "logFormat":
			// etcd's zap logger writes JSON; there is no text format to map to.
			if v := value(); v != "json" {
				errs = append(errs, cmdline.Usagef("etcd: -logFormat %q: etcd logs JSON only (zap); give -logFormat json or leave it out", v))
			}
		case "campaign":
		default:
			errs = append(errs, cmdline.Usagef("etcd: flag %s of nezha serve has no etcd equivalent (give etcd's own flags with two dashes, e.g. --snapshot-count=10000)", a))
		}
	}
	o.args = append([]string{"--max-request-bytes", strconv.Itoa(maxValue),
		"--quota-backend-bytes", strconv.Itoa(etcdQuotaBackendBytes)}, o.args...)
	if o.noFsync {
		o.args = append(o.args, "--unsafe-no-fsync")
	}
	return o, errors.Join(errs...)
}

// etcdBinary finds etcd on PATH.
func etcdBinary() (string, error) {
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", cmdline.Usagef("-system etcd needs the etcd binary on PATH (Debian: apt-get install etcd-server; scripts/setup.sh installs it)")
	}
	return p, nil
}

// etcdArgs returns the etcd command line of node n. Its flags were checked
// by Up (checkEtcd).
func (s *Spec) etcdArgs(n *Node) []string {
	o, _ := translateEtcd(append(append([]string(nil), s.ExtraArgs...), n.ExtraArgs...))
	advertise := func(i int, m Node) string {
		if len(o.dialPeers) == len(s.Nodes) {
			return "http://" + o.dialPeers[i]
		}
		return "http://" + m.InternalAddress
	}
	var initial []string
	self := ""
	for i, m := range s.Nodes {
		initial = append(initial, fmt.Sprintf("node%d=%s", m.ID, advertise(i, m)))
		if m.ID == n.ID {
			self = advertise(i, m)
		}
	}
	args := []string{
		"--name", fmt.Sprintf("node%d", n.ID), "--data-dir", n.Data,
		"--listen-client-urls", "http://" + n.Address, "--advertise-client-urls", "http://" + n.Address,
		"--listen-peer-urls", "http://" + n.InternalAddress, "--initial-advertise-peer-urls", self,
		"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
		"--initial-cluster-token", "nezha-harness", "--logger", "zap", "--log-outputs", "stderr",
	}
	return append(args, o.args...)
}

// checkEtcd reports every flag of the cluster that etcd cannot take, and a
// -dialPeers that is not one address per node, the same on every node.
func (s *Spec) checkEtcd() error {
	var errs []error
	var first []string
	seen := map[string]bool{} // the cluster's flags fail on every node: say so once
	for i, n := range s.Nodes {
		o, err := translateEtcd(append(append([]string(nil), s.ExtraArgs...), n.ExtraArgs...))
		if err != nil {
			if !seen[err.Error()] {
				seen[err.Error()] = true
				errs = append(errs, err)
			}
			continue
		}
		if o.dialPeers != nil && len(o.dialPeers) != len(s.Nodes) {
			errs = append(errs, cmdline.Usagef("etcd: -dialPeers of node %d names %d addresses for %d nodes", n.ID, len(o.dialPeers), len(s.Nodes)))
		}
		if i == 0 {
			first = o.dialPeers
		} else if strings.Join(first, ",") != strings.Join(o.dialPeers, ",") {
			errs = append(errs, cmdline.Usagef("etcd: -dialPeers must be the same on every node (a member advertises one peer address to all)"))
		}
	}
	return errors.Join(errs...)
}

// ClientConfig returns the client configuration for this cluster's nodes
// (all of them if addrs is empty): etcd's API for an etcd cluster, with its
// fsync setting, the harness's API otherwise.
func (s *Spec) ClientConfig(addrs ...string) client.Config {
	if len(addrs) == 0 {
		addrs = s.Addresses()
	}
	cfg := client.DefaultConfig(addrs...)
	if External(s.System) {
		cfg.API = client.APIEtcd
		o, _ := translateEtcd(s.ExtraArgs)
		cfg.EtcdNoFsync = o.noFsync
	}
	return cfg
}

// FillPIDs sets the pid of the statuses that carry none (etcd's Status does
// not report it) from this cluster's description, matched by address.
func (s *Spec) FillPIDs(sts []*kvpb.StatusResponse) {
	for _, st := range sts {
		for _, n := range s.Nodes {
			if st.Pid == 0 && st.Address == n.Address {
				st.Pid = int64(n.PID)
			}
		}
	}
}
