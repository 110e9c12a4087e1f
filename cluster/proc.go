package cluster

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nezha-harness/nezha/cluster/agent"
)

// IOStats are a process's cumulative I/O counters from /proc/<pid>/io.
// WriteBytes is what the process caused to be written to storage (the
// numerator of write amplification); WChar counts every write() call,
// page cache included.
type IOStats struct {
	ReadBytes  int64 `json:"read_bytes"`
	WriteBytes int64 `json:"write_bytes"`
	RChar      int64 `json:"rchar"`
	WChar      int64 `json:"wchar"`
	// CancelledWriteBytes were dirtied then truncated away before writeback.
	CancelledWriteBytes int64 `json:"cancelled_write_bytes"`
}

// ReadIOStats reads /proc/<pid>/io.
func ReadIOStats(pid int) (IOStats, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return IOStats{}, err
	}
	defer f.Close()
	var st IOStats
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "read_bytes":
			st.ReadBytes = n
		case "write_bytes":
			st.WriteBytes = n
		case "rchar":
			st.RChar = n
		case "wchar":
			st.WChar = n
		case "cancelled_write_bytes":
			st.CancelledWriteBytes = n
		}
	}
	return st, sc.Err()
}

// DiskUsage is agent.DiskUsage.
func DiskUsage(dir string) (int64, error) { return agent.DiskUsage(dir) }
