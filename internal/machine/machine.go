// Package machine describes the host a harness process runs on, as a run's
// record (workloads.RunInfo) and a node's agent (cluster/agent Info) both
// report it: the CPU model, the kernel, and the block device under a
// directory with its readahead.
package machine

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CPUModel is the first "model name" of /proc/cpuinfo ("unknown" if none).
func CPUModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Kernel is the kernel's release (/proc/sys/kernel/osrelease), "" if
// unknown.
func Kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// DataDevice names the block device that holds dir ("vda (254:0)") and
// gives the path of its readahead setting in /sys (read_ahead_kb, KiB);
// both are "" where /sys does not say.
func DataDevice(dir string) (name, readAheadPath string) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return "", ""
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys := filepath.Join("/sys/dev/block", dev)
	name = dev
	if target, err := filepath.EvalSymlinks(sys); err == nil {
		name = filepath.Base(target) + " (" + dev + ")"
	}
	// A partition has no queue of its own: its disk's is one level up.
	for _, q := range []string{filepath.Join(sys, "queue", "read_ahead_kb"), filepath.Join(sys, "..", "queue", "read_ahead_kb")} {
		if _, err := os.Stat(q); err == nil {
			return name, q
		}
	}
	return name, ""
}

// ReadAheadKB reads a read_ahead_kb file (DataDevice's path); 0 if it
// cannot.
func ReadAheadKB(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	kb, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return kb
}
