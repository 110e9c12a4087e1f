package experiments

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/experiments/probe"
	"github.com/nezha-harness/nezha/systems"
)

// A measurement window: what the nodes, the machine and the disk did
// between two samples. Every ratio the harness reports comes with one, so
// that it can be read in its regime: how many bytes each node wrote per
// user byte (write amplification in the window, not after it), whether
// the CPUs or the disk were the limit, how many GC rounds ran, and the LSM
// shape at the end.

// windowSample is one reading of the counters, each through an agent.
type windowSample struct {
	at    time.Time
	nodes map[uint64]nodeSample
	// hosts are the node hosts' CPU time (/proc/stat), by host key;
	// disks the data devices' bytes (/proc/diskstats), by host key and
	// device, of those whose agent found the device.
	hosts map[string]hostCPUSample
	disks map[string]diskSample
	// noDisk says why a device's counters were missing ("" if none was).
	noDisk string
	// controllerCPUSec is this process's CPU time (the clients'), when it
	// runs on the nodes' host (controllerOnNodeHost); else 0.
	controllerCPUSec float64
}

// hostCPUSample is a host's cumulative CPU time in seconds summed over its
// CPUs: not idle (busy) and in all.
type hostCPUSample struct{ busySec, totalSec float64 }

// diskSample is a data device's cumulative bytes.
type diskSample struct{ writeBytes, readBytes int64 }

type nodeSample struct {
	// writeBytes is write_bytes minus cancelled_write_bytes and readBytes
	// read_bytes (/proc/PID/io): the bytes the node caused to be written
	// to and read from the device.
	writeBytes, readBytes int64
	cpuSec                float64
	// threadCPUSec is the CPU time of the node's live threads by thread
	// name (/proc/PID/task/TID/stat), keyed as agent.ThreadGroup names them.
	threadCPUSec map[string]float64
	// written are the node's cumulative bytes written by cause
	// (probe.WriteCause.Key) and leader whether it was the Raft leader, from its
	// /metrics; scraped reports whether that scrape succeeded.
	written map[string]float64
	leader  bool
	scraped bool
}

// Thread groups of windowStats.NodeCPUByThread besides RocksDB's pools.
const (
	threadGo = agent.ThreadGroupGo
	// threadExited is CPU time of threads that exited in the window: the
	// process's total less its live threads'.
	threadExited = "exited"
)

// windowStats is what happened in a window, per node averages unless
// named otherwise.
type windowStats struct {
	Seconds float64 `json:"seconds"`
	// WriteBytesPerNode: mean over the nodes of write_bytes minus
	// cancelled_write_bytes (/proc/PID/io): bytes the node caused to be
	// written to the device.
	WriteBytesPerNode float64 `json:"write_bytes_per_node"`
	// ReadBytesPerNode: mean read_bytes (/proc/PID/io): bytes the node
	// read from the device (not from the page cache).
	ReadBytesPerNode float64 `json:"read_bytes_per_node"`
	// NodeCPUSeconds: user+system CPU time summed over the nodes.
	NodeCPUSeconds float64 `json:"node_cpu_seconds"`
	// NodeCPUByThread splits NodeCPUSeconds by thread group: "go" (the Go
	// runtime's threads, RocksDB's foreground writes included),
	// "rocksdb:low" (compactions), "rocksdb:high" (flushes) and "exited"
	// (threads gone before the window's end).
	NodeCPUByThread map[string]float64 `json:"node_cpu_seconds_by_thread,omitempty"`
	// MachineBusy: fraction of the node hosts' CPU time that was not idle
	// (each host counted once; clients included where they share one).
	MachineBusy float64 `json:"machine_busy"`
	// RunCPUShare: the share of the node hosts' CPU time the run's own
	// processes used: the nodes, and the harness's process (the clients)
	// where it runs on the nodes' host. Machine busy less this is other
	// work on the host.
	RunCPUShare float64 `json:"run_cpu_share"`
	// DiskWriteMBps and DiskReadMBps: the data devices' throughput (10^6
	// bytes per second, /proc/diskstats), summed over DiskDevices devices
	// (each host's and device's once). DiskFromNodes: a device's counters
	// were missing, and these are the node processes' own bytes
	// (/proc/PID/io) instead.
	DiskWriteMBps float64 `json:"disk_write_mb_per_sec"`
	DiskReadMBps  float64 `json:"disk_read_mb_per_sec"`
	DiskDevices   int     `json:"disk_devices,omitempty"`
	DiskFromNodes bool    `json:"disk_from_node_counters,omitempty"`
	// GCRounds and GCBytesWritten: nezha's GC rounds that started in the
	// window, finished, and copied values (not checkpoint rounds), and
	// the bytes they wrote, mean per node.
	GCRounds       float64 `json:"gc_rounds_per_node"`
	GCBytesWritten float64 `json:"gc_bytes_written_per_node"`
	// Shape is the on-disk shape of the first node that reports one, at
	// the end of the window.
	Shape *systems.StorageShape `json:"shape,omitempty"`
	// Nodes are each node's part of the window, by Raft id.
	Nodes []nodeWindow `json:"nodes,omitempty"`
	// LeaderChanged: the node that led at the window's end did not lead at
	// its start (or no node did), so that its bytes are not a leader's
	// alone.
	LeaderChanged bool `json:"leader_changed,omitempty"`
}

// nodeWindow is one node's part of a window.
type nodeWindow struct {
	ID uint64 `json:"id"`
	// Leader: the node was the Raft leader at the window's end
	// (windowStats.LeaderChanged says whether it was at its start).
	// Unknown when its /metrics could not be read (Scraped false).
	Leader  bool `json:"leader"`
	Scraped bool `json:"scraped"`
	// WriteBytes is write_bytes minus cancelled_write_bytes (/proc/PID/io)
	// and CPUSeconds user+system time, in the window.
	WriteBytes float64 `json:"write_bytes"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// WrittenBytesByCause splits what the node's /metrics counted it
	// write, by cause (probe.WriteCause.Key; causes that wrote nothing left
	// out). WriteBytes less their sum is what no counter names.
	WrittenBytesByCause map[string]float64 `json:"written_bytes_by_cause,omitempty"`
}

// roles returns the node that led at the window's end and the others;
// ok is false unless exactly one node led and at least one followed, as
// every node's /metrics said.
func (w windowStats) roles() (leader nodeWindow, followers []nodeWindow, ok bool) {
	leaders := 0
	for _, n := range w.Nodes {
		if !n.Scraped {
			return nodeWindow{}, nil, false
		}
		if n.Leader {
			leader = n
			leaders++
		} else {
			followers = append(followers, n)
		}
	}
	return leader, followers, leaders == 1 && len(followers) > 0
}

// roleWriteBytes returns the bytes the leader wrote in the window and the
// followers' mean (roles).
func (w windowStats) roleWriteBytes() (leader, followers float64, ok bool) {
	l, fs, ok := w.roles()
	if !ok {
		return 0, 0, false
	}
	for _, f := range fs {
		followers += f.WriteBytes
	}
	return l.WriteBytes, followers / float64(len(fs)), true
}

// roleCauseBytes is roleWriteBytes by cause (probe.WriteCause.Key).
func (w windowStats) roleCauseBytes() (leader, followers map[string]float64, ok bool) {
	l, fs, ok := w.roles()
	if !ok {
		return nil, nil, false
	}
	leader, followers = map[string]float64{}, map[string]float64{}
	for k, v := range l.WrittenBytesByCause {
		leader[k] = v
	}
	for _, f := range fs {
		for k, v := range f.WrittenBytesByCause {
			followers[k] += v / float64(len(fs))
		}
	}
	return leader, followers, true
}

// nodeStats asks node id's agent of tb for its counters (with threads, the
// CPU by thread group; with diskUsage, the data directory's size).
func (tb *testbed) nodeStats(ctx context.Context, id uint64, threads, diskUsage bool) (*agentpb.StatsResponse, error) {
	a, err := tb.agentOf(id)
	if err != nil {
		return nil, err
	}
	// A walk of a large data directory takes a while.
	cctx, cancel := context.WithTimeout(ctx, map[bool]time.Duration{false: agentCallTimeout, true: time.Minute}[diskUsage])
	defer cancel()
	st, err := a.Stats(cctx, &agentpb.StatsRequest{Threads: threads, DiskUsage: diskUsage})
	if err != nil {
		return nil, fmt.Errorf("node %d's agent: %w", id, err)
	}
	if st.Pid == 0 {
		return nil, fmt.Errorf("node %d is not running (its agent has no process to read)", id)
	}
	return st, nil
}

// sample reads every counter of the window's cluster: each node's from
// its agent, each host's and data device's from one agent there.
func (x *Run) sample(ctx context.Context, tb *testbed) (windowSample, error) {
	w := windowSample{at: time.Now(), nodes: map[uint64]nodeSample{}, hosts: map[string]hostCPUSample{}, disks: map[string]diskSample{}}
	disk := map[uint64]bool{}
	for _, h := range byDevice(tb.hosts) {
		disk[h.id] = true
	}
	host := map[uint64]bool{}
	for _, h := range byHost(tb.hosts) {
		host[h.id] = true
	}
	if controllerOnNodeHost(tb.spec) {
		if p, err := procfs.Self(); err == nil {
			if st, err := p.Stat(); err == nil {
				w.controllerCPUSec = st.CPUTime()
			}
		}
	}
	for _, h := range tb.hosts {
		st, err := tb.nodeStats(ctx, h.id, true, false)
		if err != nil {
			return w, err
		}
		ns := nodeSample{writeBytes: st.WriteBytes - st.CancelledWriteBytes, readBytes: st.ReadBytes,
			cpuSec: st.CpuSeconds, threadCPUSec: st.ThreadCpuSeconds}
		ns.written, ns.leader, ns.scraped = scrapeWrites(ctx, tb, h.id)
		w.nodes[h.id] = ns
		if host[h.id] {
			w.hosts[h.host] = hostCPUSample{busySec: st.HostCpuBusySeconds, totalSec: st.HostCpuTotalSeconds}
		}
		switch {
		case !disk[h.id]:
		case st.HaveDisk:
			w.disks[h.host+" "+h.device] = diskSample{writeBytes: st.DiskWriteBytes, readBytes: st.DiskReadBytes}
		default:
			w.noDisk = fmt.Sprintf("the agent on %s found no block device in /proc/diskstats for its data directory (device %q)", h.host, h.device)
		}
	}
	return w, nil
}

// scrapeWrites reads node id's /metrics: its cumulative bytes written by
// cause (probe.WriteCauses) and whether it leads; ok is false when the node has
// no metrics address or did not answer (the window then has no causes nor
// roles for it, and says nothing wrong).
func scrapeWrites(ctx context.Context, tb *testbed, id uint64) (written map[string]float64, leader, ok bool) {
	if tb.spec == nil {
		return nil, false, false
	}
	n, err := tb.spec.Node(id)
	if err != nil || n.MetricsAddress == "" {
		return nil, false, false
	}
	samples, err := probe.ScrapeNode(ctx, &http.Client{Timeout: agentCallTimeout}, *n, 0)
	if err != nil {
		return nil, false, false
	}
	return writesOf(samples)
}

// writesOf picks the bytes written by cause and the leader flag out of
// one node's scrape; ok is false without the leader flag.
func writesOf(samples []probe.Sample) (written map[string]float64, leader, ok bool) {
	written = map[string]float64{}
	for _, s := range samples {
		if s.Series == probe.SeriesIsLeader {
			leader, ok = s.Value == 1, true
		}
		for _, c := range probe.WriteCauses() {
			if s.Series == c.Series {
				written[c.Key] = s.Value
			}
		}
	}
	return written, leader, ok
}

// since computes the window from an earlier sample to a new one, with the
// GC rounds and storage shape read from the nodes' Status. The new sample
// is taken once every node holds what the run wrote (awaitReplicated).
func (x *Run) since(ctx context.Context, tb *testbed, from windowSample) (windowStats, error) {
	spec := tb.spec
	awaitReplicated(ctx, spec, replicatedWait)
	to, err := x.sample(ctx, tb)
	if err != nil {
		return windowStats{}, err
	}
	ws := windowBetween(from, to, len(byDevice(tb.hosts)))
	x.measureWindow(tb, cmp.Or(from.noDisk, to.noDisk))
	sts, err := spec.Status(ctx)
	if err != nil {
		return ws, err
	}
	for _, st := range sts {
		resp, err := st.Response()
		if err != nil {
			continue
		}
		if ws.Shape == nil {
			ws.Shape = cluster.StorageShapeOf(resp)
		}
		if spec.System != sysNezha {
			continue // the baselines' rounds are log truncations
		}
		for _, r := range resp.GcRounds {
			// Rounds that copied values; checkpoint rounds (index synced,
			// log compacted, nothing copied) do not count.
			if r.StartUnixNanos >= from.at.UnixNano() && r.Error == "" && r.BytesWritten > 0 {
				ws.GCRounds++
				ws.GCBytesWritten += float64(r.BytesWritten)
			}
		}
	}
	if n := float64(len(to.nodes)); n > 0 {
		ws.GCRounds /= n
		ws.GCBytesWritten /= n
	}
	return ws, nil
}

// windowBetween computes the counters' part of a window between two
// samples of the same nodes: the nodes' I/O and CPU, the hosts' CPU (each
// host once) and the data devices' bytes (each once), or, when a device's
// counters were missing, the nodes' own I/O over the devices instead.
func windowBetween(from, to windowSample, devices int) windowStats {
	ws := windowStats{Seconds: to.at.Sub(from.at).Seconds()}
	n := float64(len(to.nodes))
	var nodeWrite, nodeRead float64
	ledAtStart := map[uint64]bool{}
	for id, b := range from.nodes {
		ledAtStart[id] = b.scraped && b.leader
	}
	for _, id := range slices.Sorted(maps.Keys(to.nodes)) {
		a, b := to.nodes[id], from.nodes[id]
		nodeWrite += float64(a.writeBytes - b.writeBytes)
		nodeRead += float64(a.readBytes - b.readBytes)
		ws.NodeCPUSeconds += a.cpuSec - b.cpuSec
		nw := nodeWindow{ID: id, Leader: a.scraped && a.leader, Scraped: a.scraped && b.scraped,
			WriteBytes: float64(a.writeBytes - b.writeBytes), CPUSeconds: a.cpuSec - b.cpuSec}
		if nw.Scraped {
			for k, v := range a.written {
				d := v - b.written[k]
				if d < 0 {
					d = v // the counter restarted (a Raft snapshot restore swapped RocksDB)
				}
				if d > 0 {
					if nw.WrittenBytesByCause == nil {
						nw.WrittenBytesByCause = map[string]float64{}
					}
					nw.WrittenBytesByCause[k] = d
				}
			}
			if nw.Leader && !ledAtStart[id] {
				ws.LeaderChanged = true
			}
		}
		ws.Nodes = append(ws.Nodes, nw)
		if ws.NodeCPUByThread == nil {
			ws.NodeCPUByThread = map[string]float64{}
		}
		live := 0.0
		for g, sec := range a.threadCPUSec {
			d := max(sec-b.threadCPUSec[g], 0) // a thread that exited takes its past time with it
			ws.NodeCPUByThread[g] += d
			live += d
		}
		if e := (a.cpuSec - b.cpuSec) - live; e > 0.005 {
			ws.NodeCPUByThread[threadExited] += e
		}
	}
	if n > 0 {
		ws.WriteBytesPerNode = nodeWrite / n
		ws.ReadBytesPerNode = nodeRead / n
	}
	var busy, total float64
	for h, a := range to.hosts {
		b := from.hosts[h]
		busy, total = busy+a.busySec-b.busySec, total+a.totalSec-b.totalSec
	}
	if total > 0 {
		ws.MachineBusy = busy / total
		ws.RunCPUShare = (ws.NodeCPUSeconds + to.controllerCPUSec - from.controllerCPUSec) / total
	}
	noDisk := cmp.Or(from.noDisk, to.noDisk)
	if ws.Seconds > 0 {
		if noDisk == "" {
			for d, a := range to.disks {
				b := from.disks[d]
				ws.DiskWriteMBps += float64(a.writeBytes-b.writeBytes) / ws.Seconds / 1e6
				ws.DiskReadMBps += float64(a.readBytes-b.readBytes) / ws.Seconds / 1e6
			}
			ws.DiskDevices = len(to.disks)
		} else {
			ws.DiskWriteMBps, ws.DiskReadMBps = nodeWrite/ws.Seconds/1e6, nodeRead/ws.Seconds/1e6
			ws.DiskDevices, ws.DiskFromNodes = devices, true
		}
	}
	return ws
}

// shapeOf returns the storage shape of the first node of tb that reports
// one (nil if none does or tb is not a local cluster).
func (x *Run) shapeOf(ctx context.Context, tb *testbed) *systems.StorageShape {
	if tb.spec == nil {
		return nil
	}
	sts, err := tb.spec.Status(ctx)
	if err != nil {
		return nil
	}
	for _, st := range sts {
		if resp, err := st.Response(); err == nil {
			if sh := cluster.StorageShapeOf(resp); sh != nil {
				return sh
			}
		}
	}
	return nil
}

// shapeText renders a storage shape in one line: the LSM levels that hold
// files ("L0 2/13MB L1 4/9MB ..."), blob files, and nezha's value log and
// sorted runs.
func shapeText(sh *systems.StorageShape) string {
	if sh == nil {
		return "-"
	}
	var parts []string
	for _, l := range sh.Levels {
		if l.Files > 0 {
			parts = append(parts, fmt.Sprintf("L%d %d/%s", l.Level, l.Files, bytesText(l.Bytes)))
		}
	}
	if sh.BlobFileBytes > 0 {
		parts = append(parts, "blobs "+bytesText(sh.BlobFileBytes))
	}
	if sh.ValueLogBytes > 0 || sh.SortedRunBytes > 0 {
		parts = append(parts, "log "+bytesText(sh.ValueLogBytes), "runs "+bytesText(sh.SortedRunBytes))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// deepestLevel is the deepest LSM level holding files (-1 if none).
func deepestLevel(sh *systems.StorageShape) int {
	d := -1
	if sh != nil {
		for _, l := range sh.Levels {
			if l.Files > 0 {
				d = max(d, l.Level)
			}
		}
	}
	return d
}
