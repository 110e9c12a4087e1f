package experiments

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/experiments/probe"
)

// Where the nodes run and what their hosts allow. Every measurement of a
// node or of the machine it runs on goes through the node's agent
// (cluster/agent), whatever the backend: a process on this machine
// (local), a container (docker) or a process on another host (ssh). What
// a host does not allow (a memory cgroup in a container without
// privileges, a read-only /proc/sys) its agent says ahead in Info, and the
// experiments fall back and record it (Measurement).

// agentCallTimeout bounds one call to an agent that answers at once.
const agentCallTimeout = 10 * time.Second

// nodeHost is where one node of a testbed runs, as its agent described it
// when the cluster started.
type nodeHost struct {
	id uint64
	// host names the machine (hostKey): nodes with the same host share
	// its CPUs and, with the same device, its disk counters.
	host   string
	device string
	info   *agentpb.InfoResponse
}

// hostKey names the machine node n runs on, so that counters of the whole
// machine (its CPU time, a data device's bytes) are read once per machine
// and not once per node: every node of the local backend runs on this
// machine, and so does every container of a cluster on the local Docker
// daemon (/proc/stat and /proc/diskstats in a container are the host
// kernel's); on named hosts (ssh, docker -hosts) each node's host is its
// own.
func hostKey(spec *cluster.Spec, n *cluster.Node) string {
	switch spec.BackendName() {
	case cluster.BackendLocal:
		return "this machine"
	case cluster.BackendDocker:
		if spec.Backend.Docker == nil || len(spec.Backend.Docker.Hosts) == 0 {
			return "this machine (local Docker daemon)"
		}
	}
	return n.Host
}

// controllerOnNodeHost reports whether this process (the clients) runs on
// the nodes' host: the local backend's, or the local Docker daemon's.
func controllerOnNodeHost(spec *cluster.Spec) bool {
	return strings.HasPrefix(hostKey(spec, &cluster.Node{}), "this machine")
}

// learnHosts asks every node's agent of spec for its host's description.
func learnHosts(ctx context.Context, spec *cluster.Spec) ([]nodeHost, error) {
	var out []nodeHost
	for i := range spec.Nodes {
		n := &spec.Nodes[i]
		a, err := spec.Agent(n)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		info, err := a.Info(cctx, &agentpb.InfoRequest{})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("node %d's agent: %w", n.ID, err)
		}
		out = append(out, nodeHost{id: n.ID, host: hostKey(spec, n), device: info.GetDataDevice(), info: info})
	}
	return out, nil
}

// byHost returns the first node of each distinct host of hs, in node
// order: the node whose agent reads that host's counters.
func byHost(hs []nodeHost) []nodeHost {
	seen := map[string]bool{}
	var out []nodeHost
	for _, h := range hs {
		if !seen[h.host] {
			seen[h.host] = true
			out = append(out, h)
		}
	}
	return out
}

// byDevice returns the first node of each distinct host and data device.
func byDevice(hs []nodeHost) []nodeHost {
	seen := map[string]bool{}
	var out []nodeHost
	for _, h := range hs {
		if k := h.host + "\x00" + h.device; !seen[k] {
			seen[k] = true
			out = append(out, h)
		}
	}
	return out
}

// agentOf returns the agent of node id of tb.
func (tb *testbed) agentOf(id uint64) (agentpb.AgentClient, error) {
	n, err := tb.spec.Node(id)
	if err != nil {
		return nil, err
	}
	return tb.spec.Agent(n)
}

// HostInfo is one node host of an experiment (Result.Hosts): what its
// agent's Info said.
type HostInfo struct {
	// Host is the host's key (hostKey): "this machine", a container
	// daemon's, an ssh destination.
	Host        string `json:"host"`
	Backend     string `json:"backend"`
	Hostname    string `json:"hostname"`
	InContainer bool   `json:"in_container"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	Kernel      string `json:"kernel"`
	MemoryBytes int64  `json:"memory_bytes"`
	Root        bool   `json:"root"`
	Build       string `json:"build"`
	DataDevice  string `json:"data_device"`
	ReadAheadKB int64  `json:"read_ahead_kb"`
	// Capabilities: memory_cgroup, drop_caches, read_ahead, packet_filter:
	// whether the agent may use each, and how or why not.
	Capabilities map[string]Capability `json:"capabilities"`
}

// Capability is one thing a node's agent may or may not do on its host.
type Capability struct {
	OK  bool   `json:"ok"`
	Why string `json:"why"`
}

// hostInfoOf converts an agent's Info.
func hostInfoOf(h nodeHost, backend string) HostInfo {
	i := h.info
	capOf := func(c *agentpb.Capability) Capability { return Capability{OK: c.GetOk(), Why: c.GetWhy()} }
	return HostInfo{Host: h.host, Backend: backend, Hostname: i.GetHostname(), InContainer: i.GetInContainer(), CPUs: int(i.GetCpus()),
		CPUModel: i.GetCpuModel(), Kernel: i.GetKernel(), MemoryBytes: i.GetMemoryBytes(), Root: i.GetRoot(), Build: i.GetBuild(),
		DataDevice: i.GetDataDevice(), ReadAheadKB: i.GetReadAheadKb(),
		Capabilities: map[string]Capability{"memory_cgroup": capOf(i.GetMemoryCgroup()), "drop_caches": capOf(i.GetDropCaches()),
			"read_ahead": capOf(i.GetReadAhead()), "packet_filter": capOf(i.GetPacketFilter())}}
}

// noteHosts records the hosts of tb in the experiment's result (each host
// once, as its agent first described it).
func (x *Run) noteHosts(tb *testbed) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range byHost(tb.hosts) {
		if !slices.ContainsFunc(x.res.Hosts, func(o HostInfo) bool { return o.Host == h.host }) {
			x.res.Hosts = append(x.res.Hosts, hostInfoOf(h, tb.spec.BackendName()))
		}
	}
}

// Measurement kinds (Measurement.What).
const (
	measureNodeCounters = "node CPU and I/O counters"
	measureHostCPU      = "host CPU"
	measureDiskCounters = "disk device counters"
	measureDiskUsage    = "disk usage"
	measurePageCache    = "page cache arrangement"
	measureReadAhead    = "readahead"
	measureDiskLimit    = "disk limit"
	measureCalibration  = "calibration"
	measureProfiles     = "CPU profiles"
	measureNodeLogs     = "node logs"
	measureFsyncDelay   = "added fsync latency"
)

// measureOrder is the order of the report's Measurements table.
var measureOrder = []string{measureNodeCounters, measureHostCPU, measureDiskCounters, measureDiskUsage, measurePageCache,
	measureReadAhead, measureDiskLimit, measureCalibration, measureProfiles, measureNodeLogs, measureFsyncDelay}

// Measurement says how an experiment took one kind of measurement: on
// which backend, where (in the nodes' containers, on their hosts, on this
// machine) and from what; and, when the backend did not allow the way the
// profile asks for, what it fell back from and why (the reason the node
// host's agent gave).
type Measurement struct {
	What    string `json:"what"`
	Backend string `json:"backend"`
	Where   string `json:"where"`
	How     string `json:"how"`
	// FellBackFrom is the way the profile asked for and did not get ("":
	// no fallback); Why is the reason.
	FellBackFrom string `json:"fell_back_from,omitempty"`
	Why          string `json:"why,omitempty"`
}

// measured records m in the experiment's result (once: the same kind,
// place and fallback is not repeated).
func (x *Run) measured(m Measurement) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, o := range x.res.Measurements {
		if o == m {
			return
		}
	}
	x.res.Measurements = append(x.res.Measurements, m)
}

// agentWhere says where the agents of backend take their measurements:
// by the backend, not by the agents' in_container (a machine that is
// itself a container says so too).
func agentWhere(backend string, hs []nodeHost) string {
	hosts := len(byHost(hs))
	switch {
	case backend == cluster.BackendDocker && hosts <= 1:
		return "in the nodes' containers (their agents), on one machine: the local Docker daemon's"
	case backend == cluster.BackendDocker:
		return fmt.Sprintf("in the nodes' containers (their agents), on %d hosts", hosts)
	case backend == cluster.BackendSSH:
		return fmt.Sprintf("on the node hosts (their agents), %d of them", hosts)
	}
	return "on this machine (the nodes' agents, local processes)"
}

// measureNodeCounters records how the node processes' counters of tb
// were read.
func (x *Run) measureNodeCounters(tb *testbed) {
	x.measured(Measurement{What: measureNodeCounters, Backend: tb.spec.BackendName(), Where: agentWhere(tb.spec.BackendName(), tb.hosts),
		How: "each node process's /proc/PID/stat, /proc/PID/task/*/stat and /proc/PID/io, read by its agent (Stats)"})
}

// measureWindow records how the window's counters of tb were read;
// diskFallback says why a data device's counters were missing ("": they
// were not).
func (x *Run) measureWindow(tb *testbed, diskFallback string) {
	b, where := tb.spec.BackendName(), agentWhere(tb.spec.BackendName(), tb.hosts)
	x.measureNodeCounters(tb)
	how := "/proc/stat of each node host, read once per host by one agent there (Stats)"
	if b == cluster.BackendDocker {
		how += "; /proc/stat in a container is the host kernel's, so this is the machine's CPU (clients and other containers included), not the container's"
	}
	x.measured(Measurement{What: measureHostCPU, Backend: b, Where: where, How: how})
	m := Measurement{What: measureDiskCounters, Backend: b, Where: where,
		How: "/proc/diskstats of the block device under the nodes' data directories, once per host and device (Stats)"}
	if diskFallback != "" {
		m.FellBackFrom, m.How = m.How, "the sum of the node processes' write_bytes and read_bytes (/proc/PID/io): the nodes' own I/O only"
		m.Why = diskFallback
	}
	x.measured(m)
}

// MeasurementsText renders the measurements of results as a Markdown
// table, one row per kind, place and fallback, naming the experiments
// that took it so; "" if there are none.
func MeasurementsText(results []*Result) string {
	type row struct {
		m    Measurement
		exps []string
	}
	var rows []*row
	for _, r := range results {
		for _, m := range r.Measurements {
			i := slices.IndexFunc(rows, func(o *row) bool { return o.m == m })
			if i < 0 {
				rows = append(rows, &row{m: m})
				i = len(rows) - 1
			}
			if !slices.Contains(rows[i].exps, r.Name) {
				rows[i].exps = append(rows[i].exps, r.Name)
			}
		}
	}
	if len(rows) == 0 {
		return ""
	}
	rank := func(w string) int {
		if i := slices.Index(measureOrder, w); i >= 0 {
			return i
		}
		return len(measureOrder)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rank(rows[i].m.What) < rank(rows[j].m.What) })
	var b strings.Builder
	fmt.Fprintln(&b, "| measurement | backend | where | how | fell back from (why) | experiments |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|")
	for _, r := range rows {
		fb := "-"
		if r.m.FellBackFrom != "" {
			fb = fmt.Sprintf("**%s** (%s)", r.m.FellBackFrom, oneLineText(r.m.Why))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.m.What, r.m.Backend, r.m.Where, r.m.How, fb, strings.Join(r.exps, ", "))
	}
	return b.String()
}

// hostsText renders the node hosts of results as a Markdown table; "" if
// none.
func hostsText(results []*Result) string {
	var hs []HostInfo
	for _, r := range results {
		for _, h := range r.Hosts {
			if !slices.ContainsFunc(hs, func(o HostInfo) bool { return o.Host == h.Host && o.Backend == h.Backend }) {
				hs = append(hs, h)
			}
		}
	}
	if len(hs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintln(&b, "| node host | backend | machine | data device | memory cgroup | drop caches | readahead | packet filter |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|")
	capText := func(c Capability) string {
		if c.OK {
			return "yes (" + c.Why + ")"
		}
		return "no: " + c.Why
	}
	for _, h := range hs {
		where := h.Hostname
		if h.InContainer {
			where += " (in a container, says its agent)"
		}
		machine := fmt.Sprintf("%s: %d CPUs (%s), %s of memory, kernel %s, root %v; %s", where, h.CPUs, h.CPUModel, bytesText(h.MemoryBytes), h.Kernel, h.Root, h.Build)
		fmt.Fprintf(&b, "| %s | %s | %s | %s, readahead %d KiB | %s | %s | %s | %s |\n", h.Host, h.Backend, machine, h.DataDevice, h.ReadAheadKB,
			capText(h.Capabilities["memory_cgroup"]), capText(h.Capabilities["drop_caches"]), capText(h.Capabilities["read_ahead"]), capText(h.Capabilities["packet_filter"]))
	}
	return b.String()
}

// hostPool is what a run knows of its node hosts across experiments: the
// disk and CPU probe of each host, taken once (the disk-limit experiment,
// or put-scale's bounds when disk-limit did not run).
type hostPool struct {
	// dir holds the throwaway cluster the probe runs in.
	dir string
	mu  sync.Mutex
	// probe is the run's probe, once taken.
	probe *probe.Calibration
}
