package experiments

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/systems/agent"
	"github.com/nezha-harness/nezha/systems/cluster"
	"github.com/nezha-harness/nezha/systems/machine"
)

// Reads that reach the disk. The paper's GET and SCAN figures come from
// 100 GB per node, far more than the page cache: most reads went to the
// SSD. A small run fits in the page cache, so its reads measure only CPU.
// readCache makes the nodes' reads reach the disk in one of two ways, both
// root only: a memory cgroup per node, or dropping the whole page cache
// before every read run. Without root it falls back to warm reads and says
// so.
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
// followInterval to what it holds besides page cache plus Profile.ReadCacheBytes plus
// anonHeadroomBytes: the page cache stays bounded, heap growth does not
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
	groups            []string       // cgroup directories to remove
	byPID             map[int]string // each node's cgroup directory
	stopFollow        chan struct{}  // closed by release: stops followLimits
	followDone        chan struct{}  // closed when followLimits returns
}

// arrangeReads applies the profile's read cache arrangement to the nodes
// of specs (all read beds of one experiment, loaded and quiet).
func (x *Run) arrangeReads(specs []*cluster.Spec) *readCache {
	p := x.Profile
	rc := &readCache{Mode: ReadCacheWarm, Text: "page cache (warm): reads are served from memory", Short: "page cache (warm)", byPID: map[int]string{}}
	want := p.ReadCache
	if want == ReadCacheWarm {
		return rc
	}
	if !isRoot() {
		rc.Text = fmt.Sprintf("page cache (warm): read_cache %s needs root, and this run is not root; reads are served from memory", want)
		x.logf("%s", rc.Text)
		return rc
	}
	if want == ReadCacheCgroup {
		agent.RemoveStaleMemoryGroups(groupPrefix)
		var errs []error
		for _, s := range specs {
			for _, n := range s.Nodes {
				if dir := x.beds.startedInGroup(groupName(s.System, n.ID)); dir != "" {
					// Restarted into its group (restartQuiet).
					rc.groups = append(rc.groups, dir)
					rc.byPID[n.PID] = dir
					continue
				}
				dir, err := agent.LimitMemory(groupName(s.System, n.ID), n.PID, p.ReadCacheBytes+anonHeadroomBytes)
				if dir != "" {
					rc.groups = append(rc.groups, dir)
					rc.byPID[n.PID] = dir
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s node %d: %w", s.System, n.ID, err))
				}
			}
		}
		if err := errors.Join(errs...); err != nil {
			rc.release()
			want = ReadCacheDrop
			x.logf("memory cgroups not available (%v); dropping the page cache before each read run instead", err)
		} else {
			rc.Mode = ReadCacheCgroup
			rc.Short = fmt.Sprintf("disk (%s page cache per node, %s memory cgroup)", bytesText(p.ReadCacheBytes), agent.CgroupVersion())
			rc.Text = fmt.Sprintf("disk: the memory each node touches after the load limited to %s of page cache + %s of slack above the heap it faults in (%s memory cgroup whose limit follows the heap every %v), page cache dropped once",
				bytesText(p.ReadCacheBytes), bytesText(anonHeadroomBytes), agent.CgroupVersion(), followInterval)
			rc.stopFollow, rc.followDone = make(chan struct{}), make(chan struct{})
			go rc.followLimits(slices.Clone(rc.groups), p.ReadCacheBytes+anonHeadroomBytes)
		}
	}
	if want == ReadCacheDrop {
		rc.Mode = ReadCacheDrop
		rc.Short = "disk (page cache dropped before each run)"
		rc.Text = "disk: the page cache is dropped (/proc/sys/vm/drop_caches) before every read run; hot keys are cached again during a run"
	}
	if err := agent.DropCaches(); err != nil {
		rc.release()
		rc.Mode, rc.Short, rc.Text = ReadCacheWarm, "page cache (warm)", fmt.Sprintf("page cache (warm): dropping the page cache failed (%v); reads are served from memory", err)
	}
	if rc.Mode != ReadCacheWarm && x.beds.readAheadText != "" {
		rc.Text += "; " + x.beds.readAheadText
	}
	x.logf("reads: %s", rc.Text)
	return rc
}

// again prepares a further experiment on the same beds: the page cache
// is dropped again (the cgroups stay), so that it starts as cold as the
// first.
func (rc *readCache) again() error {
	if rc.Mode == ReadCacheWarm {
		return nil
	}
	return agent.DropCaches()
}

// beforeRun prepares one read run: with ReadCacheDrop, drops the cache.
func (rc *readCache) beforeRun() error {
	if rc.Mode != ReadCacheDrop {
		return nil
	}
	return agent.DropCaches()
}

// followLimits sets each group's limit to what it holds besides page
// cache (heap, kernel memory: usage minus cache) plus aboveAnonBytes, every
// followInterval, until release.
func (rc *readCache) followLimits(groups []string, aboveAnonBytes int64) {
	defer close(rc.followDone)
	l, _ := agent.FindMemoryController() // the groups exist, so a controller is mounted
	set := map[string]int64{}
	t := time.NewTicker(followInterval)
	defer t.Stop()
	for {
		for _, dir := range groups {
			b, err := os.ReadFile(filepath.Join(dir, l.UsageFile))
			usage, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			cache, ok := agent.MemoryStat(dir, l.CacheKey)
			if err != nil || perr != nil || !ok {
				continue
			}
			limit := max(usage-cache, 0) + aboveAnonBytes
			// Lowering the limit reclaims clean page cache (the nodes are
			// quiet: no dirty pages), never what is not page cache.
			if d := limit - set[dir]; d > 1<<20 || d < -(1<<20) {
				if agent.SetMemoryGroupLimit(dir, limit) == nil {
					set[dir] = limit
				}
			}
		}
		select {
		case <-rc.stopFollow:
			return
		case <-t.C:
		}
	}
}

// oomKilled returns an error naming the nodes of spec that their group's
// OOM killer has killed (v1 memory.oom_control, v2 memory.events:
// "oom_kill N"), nil if none (or without cgroups).
func (rc *readCache) oomKilled(spec *cluster.Spec) error {
	if rc.Mode != ReadCacheCgroup {
		return nil
	}
	var killed []string
	for _, n := range spec.Nodes {
		if dir := rc.byPID[n.PID]; dir != "" {
			if v, ok := agent.OOMKills(dir); ok && v > 0 {
				killed = append(killed, fmt.Sprintf("node %d (%d kills)", n.ID, v))
			}
		}
	}
	if len(killed) == 0 {
		return nil
	}
	return fmt.Errorf("the memory cgroup's OOM killer killed %s during the reads: its heap outgrew the limit between two looks of the follower (%v, %s of slack); the run's figures are not comparable", strings.Join(killed, ", "), followInterval, bytesText(anonHeadroomBytes))
}

// release removes the cgroups (their processes must have exited or be
// moved back: the nodes are moved to the root group first).
func (rc *readCache) release() {
	if rc.stopFollow != nil {
		close(rc.stopFollow)
		<-rc.followDone
		rc.stopFollow = nil
	}
	for _, dir := range rc.groups {
		_ = agent.RemoveMemoryGroup(dir)
	}
	rc.groups = nil
}

// groupPrefix names this harness's memory cgroups: groupPrefix + the
// harness's pid + "-" + system + "-" + node id.
const groupPrefix = "nezha-harness-"

// groupName is the memory cgroup of node id of system sys in this run.
func groupName(sys string, id uint64) string {
	return fmt.Sprintf("%s%d-%s-%d", groupPrefix, os.Getpid(), sys, id)
}

// intoGroupWrap is a cluster.Spec.Wrap that starts each node in the
// memory group dirs[node id] (made by agent.NewMemoryGroup): a shell writes its
// own pid into the group, then execs the node.
func intoGroupWrap(dirs map[uint64]string) func(n *cluster.Node) []string {
	return func(n *cluster.Node) []string {
		return []string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(dirs[n.ID], "cgroup.procs")}
	}
}

// pageCacheBytes is the page cache charged to the cgroups of the nodes of
// spec (memory.stat: "cache" in v1, "file" in v2), -1 without cgroups.
func (rc *readCache) pageCacheBytes(spec *cluster.Spec) int64 {
	if rc.Mode != ReadCacheCgroup {
		return -1
	}
	l, _ := agent.FindMemoryController() // the groups exist, so a controller is mounted
	var total int64
	for _, n := range spec.Nodes {
		if dir := rc.byPID[n.PID]; dir != "" {
			if v, ok := agent.MemoryStat(dir, l.CacheKey); ok {
				total += v
			}
		}
	}
	return total
}

// setReadAhead sets the readahead of the block device holding the beds'
// directory to kb KiB, before the beds are loaded (a file's readahead
// window is fixed when it is opened), and remembers the old value for
// restoreReadAhead; it changes nothing when the device already says kb.
func (p *bedPool) setReadAhead(kb int) error {
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return err
	}
	_, path := machine.DataDevice(p.dir)
	if path == "" {
		return fmt.Errorf("no read_ahead_kb in /sys for the device of %s", p.dir)
	}
	return p.setReadAheadFile(path, kb)
}

// setReadAheadFile is setReadAhead on the read_ahead_kb file at path.
func (p *bedPool) setReadAheadFile(path string, kb int) error {
	was, changed, err := agent.SetReadAhead(path, int64(kb))
	if err != nil || !changed {
		return err
	}
	p.readAheadPath, p.readAheadWas = path, strconv.FormatInt(was, 10)
	p.readAheadText = fmt.Sprintf("the data device's readahead set to %d KiB (it was %d KiB) from the beds' load to their end", kb, was)
	return nil
}

// restoreReadAhead puts back the readahead setReadAhead changed.
func (p *bedPool) restoreReadAhead() {
	if p.readAheadPath != "" {
		_ = os.WriteFile(p.readAheadPath, []byte(p.readAheadWas), 0o644)
		p.readAheadPath = ""
	}
}
