package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/nezha-harness/nezha/systems"
)

// dataLockName is the file in the data directory that a running node
// holds an exclusive flock(2) on, so that a second node started on the
// same directory (a mistyped -data, a restart while the old process
// still runs) stops before it opens anything: opening a live node's Raft
// log recovers its active segment, which truncates what looks like a torn
// tail, the record the live node is writing, and so destroys entries it
// has acknowledged.
const dataLockName = "NODE.LOCK"

// lockDataDir creates dir if needed and takes its lock. The lock holds
// until the returned file is closed or the process exits (however it
// exits: the kernel drops the lock with the descriptor).
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create -data %s: %w", dir, err)
	}
	path := filepath.Join(dir, dataLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = " (pid " + pid + ")"
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, systems.Usagef("-data %s is in use by another node%s: one node per data directory", dir, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The holder's pid, for the message above; best effort.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
