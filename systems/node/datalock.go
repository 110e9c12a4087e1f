package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// lockDataDir creates dir if needed and takes its lock (systems.LockFile);
// the returned function releases it, as does the process's end however it
// ends. A directory in use is a usage error naming the holder's pid.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create -data %s: %w", dir, err)
	}
	path := filepath.Join(dir, dataLockName)
	unlock, err = systems.LockFile(path)
	if errors.Is(err, systems.ErrLocked) {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = " (pid " + pid + ")"
			}
		}
		return nil, systems.Usagef("-data %s is in use by another node%s: one node per data directory", dir, holder)
	}
	if err != nil {
		return nil, err
	}
	// The holder's pid, for the message above; best effort (the lock is
	// on the descriptor LockFile holds, which this write does not touch).
	_ = os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	return unlock, nil
}
