package experiments

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nezha-harness/nezha/systems/cluster"
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
// the page cache of its reads first among it. So the limit is
// Profile.ReadCacheBytes plus anonHeadroomBytes for heap pages the node
// faults in later, and the page cache it actually held is read back from
// the group (memory.stat) and reported.

// cgroupRoot is where the cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// anonHeadroomBytes is the memory a node may newly fault in besides its
// page cache once moved into its group (heap it returned to the OS and
// takes back); the page cache gives way to it first.
const anonHeadroomBytes = 32 << 20

// readCache is the arrangement in force for one experiment's read beds.
type readCache struct {
	// Mode is the arrangement in force (ReadCacheCgroup, ReadCacheDrop or
	// ReadCacheWarm); Text says how it was made, or why it fell back, and
	// Short says it in a few words for the headline.
	Mode, Text, Short string
	groups            []string       // cgroup directories to remove
	byPID             map[int]string // each node's cgroup directory
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
		var errs []error
		for _, s := range specs {
			for _, n := range s.Nodes {
				dir, err := limitMemory(fmt.Sprintf("nezha-harness-%d-%s-%d", os.Getpid(), s.System, n.ID), n.PID, p.ReadCacheBytes+anonHeadroomBytes)
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
			rc.Short = fmt.Sprintf("disk (%s page cache per node, %s memory cgroup)", bytesText(p.ReadCacheBytes), cgroupVersion())
			rc.Text = fmt.Sprintf("disk: the memory each node touches after the load limited to %s of page cache + %s of heap (%s memory cgroup), page cache dropped once",
				bytesText(p.ReadCacheBytes), bytesText(anonHeadroomBytes), cgroupVersion())
		}
	}
	if want == ReadCacheDrop {
		rc.Mode = ReadCacheDrop
		rc.Short = "disk (page cache dropped before each run)"
		rc.Text = "disk: the page cache is dropped (/proc/sys/vm/drop_caches) before every read run; hot keys are cached again during a run"
	}
	if err := dropCaches(); err != nil {
		rc.release()
		rc.Mode, rc.Short, rc.Text = ReadCacheWarm, "page cache (warm)", fmt.Sprintf("page cache (warm): dropping the page cache failed (%v); reads are served from memory", err)
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
	return dropCaches()
}

// beforeRun prepares one read run: with ReadCacheDrop, drops the cache.
func (rc *readCache) beforeRun() error {
	if rc.Mode != ReadCacheDrop {
		return nil
	}
	return dropCaches()
}

// release removes the cgroups (their processes must have exited or be
// moved back: the nodes are moved to the root group first).
func (rc *readCache) release() {
	for _, dir := range rc.groups {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			parent := filepath.Dir(dir)
			for _, pid := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		_ = os.Remove(dir)
	}
	rc.groups = nil
}

// cgroupVersion is "v1" if the memory controller is mounted on its own,
// "v2" for the unified hierarchy, "" if neither.
func cgroupVersion() string {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.limit_in_bytes")); err == nil {
		return "v1"
	}
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
		return "v2"
	}
	return ""
}

// limitMemory creates cgroup name with a memory limit of limitBytes and
// moves pid (every thread) into it. It returns the group's directory once
// created (to remove later), and any error.
func limitMemory(name string, pid int, limitBytes int64) (string, error) {
	var dir, limitFile string
	switch cgroupVersion() {
	case "v1":
		dir, limitFile = filepath.Join(cgroupRoot, "memory", name), "memory.limit_in_bytes"
	case "v2":
		dir, limitFile = filepath.Join(cgroupRoot, name), "memory.max"
	default:
		return "", errors.New("no memory cgroup controller is mounted")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limitBytes, 10)), 0o644); err != nil {
		return dir, fmt.Errorf("set %s: %w", limitFile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return dir, fmt.Errorf("move pid %d: %w", pid, err)
	}
	return dir, nil
}

// pageCacheBytes is the page cache charged to the cgroups of the nodes of
// spec (memory.stat: "cache" in v1, "file" in v2), -1 without cgroups.
func (rc *readCache) pageCacheBytes(spec *cluster.Spec) int64 {
	if rc.Mode != ReadCacheCgroup {
		return -1
	}
	var total int64
	for _, n := range spec.Nodes {
		dir := rc.byPID[n.PID]
		if dir == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			if k == "cache" || k == "file" {
				if x, err := strconv.ParseInt(v, 10, 64); err == nil {
					total += x
				}
				break
			}
		}
	}
	return total
}

// dropCaches writes back dirty pages and drops the clean page cache,
// dentries and inodes (root only).
func dropCaches() error {
	unix.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200)
}
