package experiments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// Reads that reach the disk. The paper's GET and SCAN figures come from
// 100 GB per node, far more than the page cache: most reads went to the
// SSD. A small run fits in the page cache, so its reads measure only CPU.
// readCache makes the nodes' reads reach the disk in one of two ways, both
// done by the nodes' agents and both needing root and a writable /sys or
// /proc/sys on the node hosts: a memory cgroup per node, or dropping the
// whole page cache before every read run. Where the hosts do not allow it
// (no root; a container without privileges), it falls back, down to warm
// reads, and records which and why (Measurement).
//
// A process moved into a memory cgroup keeps its earlier pages charged
// where they were (cgroup v2 never moves charges; v1 stopped in Linux 6.8):
// only memory it touches afterwards counts against the new group's limit,
// the page cache of its reads first among it. Heap pages count too: a Go
// node returns freed heap to the OS and faults it in again, RocksDB opens
// table readers, so the anonymous memory charged to the group grows during
// the reads, and a fixed limit ends in the group's OOM killer killing the
// node (seen in quick runs: original's leader, in the middle of a read
// run). So a follower (followLimits) resets each group's limit every
// followInterval, through the node's agent, to what it holds besides page
// cache plus Profile.ReadCacheBytes plus anonHeadroomBytes: the page cache stays bounded, heap growth does not
// kill the node. The page cache each node actually held is read back from
// the group (memory.stat) and reported, and a node the OOM killer took
// anyway fails its system in the experiment (oomKilled).

// anonHeadroomBytes is the memory a node may newly fault in, between two
// looks of the follower, besides its page cache and the rest (heap, kernel
// memory) already charged to its group; the page cache gives way to it
// first.
const anonHeadroomBytes = 4 << 20

// followInterval is how often followLimits resets the groups' limits.
const followInterval = 20 * time.Millisecond

// readCache is the arrangement in force for one experiment's read beds.
type readCache struct {
	// Mode is the arrangement in force (ReadCacheCgroup, ReadCacheDrop or
	// ReadCacheWarm); Text says how it was made, or why it fell back, and
	// Short says it in a few words for the headline.
	Mode, Text, Short string
	// grouped are the nodes in memory cgroups, by testbed system and node
	// id: their agents set the limits and read the groups.
	grouped map[string][]groupedNode
	// droppers are one agent per node host, to drop that host's page cache.
	droppers   []agentpb.AgentClient
	stopFollow chan struct{} // closed by release: stops followLimits
	followDone chan struct{} // closed when followLimits returns
	// measurement records how the arrangement was made; how says it
	// without the reasons of a fallback.
	measurement Measurement
	how         string
}

// groupedNode is a node in a memory cgroup its agent made.
type groupedNode struct {
	id    uint64
	agent memoryAgent
}

// memoryAgent is the part of a node's agent that limits and reads its
// memory cgroup (agentpb.AgentClient).
type memoryAgent interface {
	SetMemoryLimit(ctx context.Context, in *agentpb.SetMemoryLimitRequest, opts ...grpc.CallOption) (*agentpb.SetMemoryLimitResponse, error)
	MemoryStats(ctx context.Context, in *agentpb.MemoryStatsRequest, opts ...grpc.CallOption) (*agentpb.MemoryStatsResponse, error)
}

// capabilityGaps returns why the hosts of tbs do not allow a capability
// (one reason per host, naming it), "" if every host allows it.
func capabilityGaps(tbs []*testbed, capOf func(*agentpb.InfoResponse) *agentpb.Capability) string {
	var why []string
	seen := map[string]bool{}
	for _, tb := range tbs {
		for _, h := range tb.hosts {
			// One reason per host: its agents say the same (but for the
			// names of the groups they tried).
			if c := capOf(h.info); !c.GetOk() && !seen[h.host] {
				seen[h.host] = true
				why = append(why, fmt.Sprintf("%s: %s", h.host, c.GetWhy()))
			}
		}
	}
	return strings.Join(why, "; ")
}

// arrangeReads applies the profile's read cache arrangement to the nodes
// of tbs (all read beds of one experiment, loaded and quiet), through
// their agents; where the node hosts do not allow it (their agents' Info),
// it falls back (memory cgroups to dropping the page cache, that to warm
// reads) and records why.
func (x *Run) arrangeReads(ctx context.Context, tbs []*testbed) *readCache {
	p := x.Profile
	rc := &readCache{Mode: ReadCacheWarm, Text: "page cache (warm): reads are served from memory", Short: "page cache (warm)", grouped: map[string][]groupedNode{}}
	rc.how = rc.Text
	want := p.ReadCache
	var hosts []nodeHost
	for _, tb := range tbs {
		hosts = append(hosts, tb.hosts...)
	}
	backend := cmp.Or(x.Backend.Name, cluster.BackendLocal)
	m := Measurement{What: measurePageCache, Backend: backend, Where: agentWhere(backend, hosts)}
	defer func() {
		m.How = rc.how
		if rc.Mode != p.ReadCache {
			m.FellBackFrom = p.ReadCache
		}
		x.measured(m)
		rc.measurement = m
		x.logf("reads: %s", rc.Text)
	}()
	if want == ReadCacheWarm || len(tbs) == 0 {
		return rc
	}
	var why []string
	if want == ReadCacheCgroup {
		if gap := capabilityGaps(tbs, (*agentpb.InfoResponse).GetMemoryCgroup); gap != "" {
			why = append(why, "no memory cgroup: "+gap)
			want = ReadCacheDrop
		} else if err := rc.limitNodes(ctx, tbs, p.ReadCacheBytes+anonHeadroomBytes); err != nil {
			rc.release()
			why = append(why, "memory cgroups failed: "+err.Error())
			want = ReadCacheDrop
		} else {
			rc.Mode = ReadCacheCgroup
			rc.Short = fmt.Sprintf("disk (%s page cache per node, memory cgroup)", bytesText(p.ReadCacheBytes))
			rc.Text = fmt.Sprintf("disk: the memory each node touches after the load limited to %s of page cache + %s of slack above the heap it faults in (a memory cgroup per node, made by its agent, whose limit follows the heap every %v), page cache dropped once",
				bytesText(p.ReadCacheBytes), bytesText(anonHeadroomBytes), followInterval)
			rc.stopFollow, rc.followDone = make(chan struct{}), make(chan struct{})
			go rc.followLimits(rc.allGrouped(), p.ReadCacheBytes+anonHeadroomBytes)
		}
	}
	if want == ReadCacheDrop {
		if gap := capabilityGaps(tbs, (*agentpb.InfoResponse).GetDropCaches); gap != "" {
			why = append(why, "no dropping the page cache: "+gap)
			want = ReadCacheWarm
		} else {
			rc.Mode = ReadCacheDrop
			rc.Short = "disk (page cache dropped before each run)"
			rc.Text = "disk: the page cache is dropped (/proc/sys/vm/drop_caches, by an agent on each node host) before every read run; hot keys are cached again during a run"
		}
	}
	if want != ReadCacheWarm {
		rc.droppers = distinctHostAgents(tbs)
		if err := rc.dropCaches(ctx); err != nil {
			rc.release()
			why = append(why, "dropping the page cache failed: "+err.Error())
			want = ReadCacheWarm
		}
	}
	m.Why = strings.Join(why, "; ")
	rc.how = rc.Text
	if want == ReadCacheWarm {
		rc.Mode, rc.Short = ReadCacheWarm, "page cache (warm)"
		rc.how = "page cache (warm): reads are served from memory"
		rc.Text = fmt.Sprintf("page cache (warm): read_cache %s is not possible on these node hosts (%s); reads are served from memory", p.ReadCache, m.Why)
		return rc
	}
	if m.Why != "" {
		rc.Text += fmt.Sprintf(" (read_cache %s is not possible on these node hosts: %s)", p.ReadCache, m.Why)
	}
	if t := x.beds.readAheadText; t != "" {
		rc.Text += "; " + t
	}
	return rc
}

// distinctHostAgents returns one agent per node host of tbs.
func distinctHostAgents(tbs []*testbed) []agentpb.AgentClient {
	seen := map[string]bool{}
	var out []agentpb.AgentClient
	for _, tb := range tbs {
		for _, h := range tb.hosts {
			if seen[h.host] {
				continue
			}
			if a, err := tb.agentOf(h.id); err == nil {
				seen[h.host] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// limitNodes puts every node of tbs into a memory cgroup that limits
// what it touches from now on to aboveAnonBytes above what it holds
// besides page cache: a node new to its group has nothing charged there
// yet (its earlier pages stay charged where they were), a node started in
// its group (restartQuiet) has all of its heap and mappings there already,
// which the limit must leave room for.
func (rc *readCache) limitNodes(ctx context.Context, tbs []*testbed, aboveAnonBytes int64) error {
	var errs []string
	for _, tb := range tbs {
		for _, n := range tb.spec.Nodes {
			a, err := tb.agentOf(n.ID)
			if err == nil {
				cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
				var st *agentpb.MemoryStatsResponse
				if st, err = a.MemoryStats(cctx, &agentpb.MemoryStatsRequest{}); err == nil {
					held := int64(0)
					if st.InGroup {
						held = max(st.UsageBytes-st.PageCacheBytes, 0)
					}
					_, err = a.SetMemoryLimit(cctx, &agentpb.SetMemoryLimitRequest{LimitBytes: held + aboveAnonBytes})
				}
				cancel()
			}
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s node %d: %v", tb.system, n.ID, err))
				continue
			}
			rc.grouped[tb.system] = append(rc.grouped[tb.system], groupedNode{id: n.ID, agent: a})
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// allGrouped is every grouped node.
func (rc *readCache) allGrouped() []groupedNode {
	var out []groupedNode
	for _, sys := range slices.Sorted(maps.Keys(rc.grouped)) {
		out = append(out, rc.grouped[sys]...)
	}
	return out
}

// dropCaches drops the page cache of every node host.
func (rc *readCache) dropCaches(ctx context.Context) error {
	var errs []string
	for _, a := range rc.droppers {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		if _, err := a.DropCaches(cctx, &agentpb.DropCachesRequest{}); err != nil {
			errs = append(errs, err.Error())
		}
		cancel()
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// again prepares a further experiment on the same beds: the page cache
// is dropped again (the cgroups stay), so that it starts as cold as the
// first.
func (rc *readCache) again(ctx context.Context) error {
	if rc.Mode == ReadCacheWarm {
		return nil
	}
	return rc.dropCaches(ctx)
}

// beforeRun prepares one read run: with ReadCacheDrop, drops the cache.
func (rc *readCache) beforeRun(ctx context.Context) error {
	if rc.Mode != ReadCacheDrop {
		return nil
	}
	return rc.dropCaches(ctx)
}

// followLimits sets each group's limit to what it holds besides page
// cache (heap, kernel memory: usage minus cache) plus aboveAnonBytes, every
// followInterval, until release.
func (rc *readCache) followLimits(nodes []groupedNode, aboveAnonBytes int64) {
	defer close(rc.followDone)
	set := map[int]int64{}
	t := time.NewTicker(followInterval)
	defer t.Stop()
	for {
		for i, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := n.agent.MemoryStats(ctx, &agentpb.MemoryStatsRequest{})
			if err != nil || !st.InGroup {
				cancel()
				continue
			}
			limit := max(st.UsageBytes-st.PageCacheBytes, 0) + aboveAnonBytes
			// Lowering the limit reclaims clean page cache (the nodes are
			// quiet: no dirty pages), never what is not page cache.
			if d := limit - set[i]; d > 1<<20 || d < -(1<<20) {
				if _, err := n.agent.SetMemoryLimit(ctx, &agentpb.SetMemoryLimitRequest{LimitBytes: limit}); err == nil {
					set[i] = limit
				}
			}
			cancel()
		}
		select {
		case <-rc.stopFollow:
			return
		case <-t.C:
		}
	}
}

// oomKilled returns an error naming the nodes of the testbed of system sys
// that their group's OOM killer has killed, nil if none (or without
// cgroups).
func (rc *readCache) oomKilled(ctx context.Context, sys string) error {
	if rc.Mode != ReadCacheCgroup {
		return nil
	}
	var killed []string
	for _, n := range rc.grouped[sys] {
		cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		st, err := n.agent.MemoryStats(cctx, &agentpb.MemoryStatsRequest{})
		cancel()
		if err == nil && st.OomKills > 0 {
			killed = append(killed, fmt.Sprintf("node %d (%d kills)", n.id, st.OomKills))
		}
	}
	if len(killed) == 0 {
		return nil
	}
	return fmt.Errorf("the memory cgroup's OOM killer killed %s during the reads: its heap outgrew the limit between two looks of the follower (%v, %s of slack); the run's figures are not comparable", strings.Join(killed, ", "), followInterval, bytesText(anonHeadroomBytes))
}

// release stops the follower and takes the nodes out of their memory
// cgroups (their agents remove the groups; an agent already gone removed
// its own).
func (rc *readCache) release() {
	if rc.stopFollow != nil {
		close(rc.stopFollow)
		<-rc.followDone
		rc.stopFollow = nil
	}
	for _, n := range rc.allGrouped() {
		ctx, cancel := context.WithTimeout(context.Background(), agentCallTimeout)
		_, _ = n.agent.SetMemoryLimit(ctx, &agentpb.SetMemoryLimitRequest{LimitBytes: 0})
		cancel()
	}
	rc.grouped = map[string][]groupedNode{}
}

// pageCacheBytes is the page cache charged to the cgroups of the nodes of
// the testbed of system sys (memory.stat: "cache" in v1, "file" in v2),
// -1 without cgroups.
func (rc *readCache) pageCacheBytes(ctx context.Context, sys string) int64 {
	if rc.Mode != ReadCacheCgroup {
		return -1
	}
	var total int64
	for _, n := range rc.grouped[sys] {
		cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
		st, err := n.agent.MemoryStats(cctx, &agentpb.MemoryStatsRequest{})
		cancel()
		if err == nil {
			total += st.PageCacheBytes
		}
	}
	return total
}

// setReadAhead sets the readahead of the data devices of tb's nodes to kb
// KiB through an agent on each host and device, before the bed is loaded
// (a file's readahead window is fixed when it is opened), and says so in
// p.readAheadText; the agent that changed a device puts its own value back
// when it stops. A host that does not allow it (Info) keeps its readahead,
// and the measurement records why.
func (x *Run) setReadAhead(ctx context.Context, tb *testbed, kb int) {
	p := x.beds
	m := Measurement{What: measureReadAhead, Backend: tb.spec.BackendName(), Where: agentWhere(tb.spec.BackendName(), tb.hosts)}
	var set, why []string
	for _, h := range byDevice(tb.hosts) {
		if c := h.info.GetReadAhead(); !c.GetOk() {
			why = append(why, fmt.Sprintf("%s (%s): %s", h.host, h.device, c.GetWhy()))
			continue
		}
		a, err := tb.agentOf(h.id)
		var r *agentpb.SetReadAheadResponse
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
			r, err = a.SetReadAhead(cctx, &agentpb.SetReadAheadRequest{Kb: int64(kb)})
			cancel()
		}
		if err != nil {
			why = append(why, fmt.Sprintf("%s (%s): %v", h.host, h.device, err))
			continue
		}
		if r.WasKb != int64(kb) {
			set = append(set, fmt.Sprintf("%s on %s (it was %d KiB)", r.Device, h.host, r.WasKb))
		}
	}
	if len(set) > 0 && p.readAheadText == "" {
		p.readAheadText = fmt.Sprintf("the data device's readahead set to %d KiB from the beds' load to their end: %s", kb, strings.Join(set, ", "))
	}
	m.How = fmt.Sprintf("read_ahead_kb of the data device set to %d KiB by an agent on each host (SetReadAhead), put back when it stops", kb)
	if len(why) > 0 {
		m.FellBackFrom, m.Why = m.How, strings.Join(why, "; ")
		m.How = "left as the device says"
		x.logf("readahead left as it is: %s", m.Why)
	}
	x.measured(m)
	if !slices.Contains(p.readAhead, m) {
		p.readAhead = append(p.readAhead, m)
	}
}
