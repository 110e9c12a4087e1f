package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Memory cgroups, page cache and readahead: the host's knobs that make a
// node's reads reach the disk (experiments' read arrangements), all root
// only. A process moved into a memory cgroup keeps its earlier pages
// charged where they were (cgroup v2 never moves charges; v1 stopped in
// Linux 6.8): only memory it touches afterwards counts against the new
// group's limit, which is why a node can also be started inside its group
// (Start's memory_limit_bytes, through CgroupExecCommand).

// CgroupRoot is where the cgroup file systems are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// errNoController: no memory cgroup controller is mounted.
var errNoController = errors.New("no memory cgroup controller is mounted")

// MemoryController names what differs between the two cgroup versions'
// memory controllers: where groups are made, and the files and
// memory.stat key read and written.
type MemoryController struct {
	Version   string // "v1" or "v2"
	Parent    string // directory that holds the groups
	LimitFile string // the hard limit (bytes)
	UsageFile string // current usage (bytes)
	CacheKey  string // memory.stat's page cache counter
	OOMFile   string // the file whose "oom_kill N" counts OOM kills
}

// FindMemoryController returns the layout of the mounted memory
// controller; ok is false if none is mounted.
func FindMemoryController() (l MemoryController, ok bool) {
	switch CgroupVersion() {
	case "v1":
		return MemoryController{"v1", filepath.Join(CgroupRoot, "memory"), "memory.limit_in_bytes", "memory.usage_in_bytes", "cache", "memory.oom_control"}, true
	case "v2":
		return MemoryController{"v2", CgroupRoot, "memory.max", "memory.current", "file", "memory.events"}, true
	}
	return l, false
}

// CgroupVersion is "v1" if the memory controller is mounted on its own,
// "v2" for the unified hierarchy, "" if neither.
func CgroupVersion() string {
	if _, err := os.Stat(filepath.Join(CgroupRoot, "memory", "memory.limit_in_bytes")); err == nil {
		return "v1"
	}
	if b, err := os.ReadFile(filepath.Join(CgroupRoot, "cgroup.controllers")); err == nil && strings.Contains(string(b), "memory") {
		return "v2"
	}
	return ""
}

// NewMemoryGroup creates cgroup name with a memory limit of limitBytes
// (none if limitBytes <= 0) and returns its directory once created (to
// remove later), and any error.
func NewMemoryGroup(name string, limitBytes int64) (string, error) {
	l, ok := FindMemoryController()
	if !ok {
		return "", errNoController
	}
	dir := filepath.Join(l.Parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if limitBytes <= 0 {
		return dir, nil
	}
	return dir, SetMemoryGroupLimit(dir, limitBytes)
}

// SetMemoryGroupLimit sets the memory limit of the group in dir.
func SetMemoryGroupLimit(dir string, limitBytes int64) error {
	l, ok := FindMemoryController()
	if !ok {
		return errNoController
	}
	if err := os.WriteFile(filepath.Join(dir, l.LimitFile), []byte(strconv.FormatInt(limitBytes, 10)), 0o644); err != nil {
		return fmt.Errorf("set %s: %w", l.LimitFile, err)
	}
	return nil
}

// joinGroup moves pid (every thread) into the group in dir.
func joinGroup(dir string, pid int) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move pid %d: %w", pid, err)
	}
	return nil
}

// RemoveMemoryGroup moves the processes still in the group in dir to its
// parent group and removes it.
func RemoveMemoryGroup(dir string) error {
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		parent := filepath.Dir(dir)
		for _, pid := range strings.Fields(string(b)) {
			_ = os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0o644)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// RemoveStaleMemoryGroups removes the empty memory cgroups named prefix +
// PID (+ anything after a "-") whose PID is not this process and is gone:
// groups an earlier harness or agent, killed before it released them,
// left behind.
func RemoveStaleMemoryGroups(prefix string) {
	l, ok := FindMemoryController()
	if !ok {
		return
	}
	des, err := os.ReadDir(l.Parent)
	if err != nil {
		return
	}
	for _, de := range des {
		rest, ok := strings.CutPrefix(de.Name(), prefix)
		if !ok || !de.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidText); err == nil && pid != os.Getpid() && !alive(pid) {
			_ = os.Remove(filepath.Join(l.Parent, de.Name())) // fails, harmlessly, if a process is still in it
		}
	}
}

// alive reports whether pid names a process (or a zombie).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// MemoryStat reads one counter (bytes) of a group's memory.stat.
func MemoryStat(dir, key string) (int64, bool) { return MemoryCounter(dir, "memory.stat", key) }

// MemoryCounter reads the counter key of a group's file of "key value"
// lines (memory.stat, memory.oom_control, memory.events).
func MemoryCounter(dir, file, key string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		if k == key {
			x, err := strconv.ParseInt(v, 10, 64)
			return x, err == nil
		}
	}
	return 0, false
}

// OOMKills is how many processes of the group in dir its OOM killer has
// killed (v1 memory.oom_control, v2 memory.events: "oom_kill N").
func OOMKills(dir string) (int64, bool) {
	l, ok := FindMemoryController()
	if !ok {
		return 0, false
	}
	return MemoryCounter(dir, l.OOMFile, "oom_kill")
}

// memoryFile reads a group file holding one number of bytes (usage, limit);
// v2's "max" is 0.
func memoryFile(dir, file string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// DropCaches writes back dirty pages and drops the clean page cache,
// dentries and inodes (root only, and not in a container whose /proc/sys
// is read-only).
func DropCaches() error {
	unix.Sync()
	return os.WriteFile(dropCachesPath, []byte("3"), 0o200)
}

const dropCachesPath = "/proc/sys/vm/drop_caches"

// SetReadAhead writes kb to the read_ahead_kb file at path (a device's
// readahead in KiB) and returns what it said before. It writes nothing
// when it already says kb (changed is false).
func SetReadAhead(path string, kb int64) (wasKB int64, changed bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false, err
	}
	was, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s holds %q, not a number", path, strings.TrimSpace(string(b)))
	}
	if was == kb {
		return was, false, nil
	}
	if err := os.WriteFile(path, []byte(strconv.FormatInt(kb, 10)), 0o644); err != nil {
		return was, false, err
	}
	return was, true, nil
}

// writable reports whether path can be opened for writing (nothing is
// written): Info's probe of a knob.
func writable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return f.Close()
}
