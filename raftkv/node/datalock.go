package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/internal/vfs"
)

// dataLockName is the file in the data directory that a running node
// holds an exclusive flock(2) on, so that a second node started on the
// same directory (a mistyped -data, a restart while the old process
// still runs) stops before it opens anything: opening a live node's Raft
// log recovers its active segment, which truncates what looks like a torn
// tail, the record the live node is writing, and so destroys entries it
// has acknowledged.
const dataLockName = "NODE.LOCK"

// lockDataDir creates dir in fsys if needed (durably: the directories it
// creates are synced into their parents) and takes its lock
// (vfs.FileSystem.Lock: flock on the OS); the returned function releases
// it, as does the process's end however it ends. A directory in use is a
// usage error naming the holder's pid.
func lockDataDir(fsys vfs.FileSystem, dir string) (unlock func(), err error) {
	if err := vfs.MkdirAllSynced(fsys, dir, 0o755); err != nil {
		return nil, fmt.Errorf("create -data %s: %w", dir, err)
	}
	path := filepath.Join(dir, dataLockName)
	unlock, err = fsys.Lock(path)
	if errors.Is(err, vfs.ErrLocked) {
		return nil, inUseError(fsys, dir)
	}
	if err != nil {
		return nil, err
	}
	// The holder's pid, for the message above; best effort (the lock is
	// on the descriptor LockFile holds, which this write does not touch).
	_ = vfs.WriteFile(fsys, path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	return unlock, nil
}

// checkDataDirFree returns inUseError if a running node holds dir's lock,
// else nil; it creates and changes nothing (Start asks before it binds
// its addresses, which that node would hold too).
func checkDataDirFree(dir string) error {
	f, err := os.Open(filepath.Join(dir, dataLockName))
	if err != nil {
		return nil // no lock file: no node holds it (lockDataDir says more)
	}
	defer f.Close() // releases the lock if this took it
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
		return inUseError(vfs.OS(), dir)
	}
	return nil
}

// inUseError says that dir is another node's, naming its pid if the lock
// file holds one.
func inUseError(fsys vfs.FileSystem, dir string) error {
	holder := ""
	if b, err := vfs.ReadFile(fsys, filepath.Join(dir, dataLockName)); err == nil {
		if pid := strings.TrimSpace(string(b)); pid != "" {
			holder = " (pid " + pid + ")"
		}
	}
	return cmdline.Usagef("-data %s is in use by another node%s: one node per data directory", dir, holder)
}
