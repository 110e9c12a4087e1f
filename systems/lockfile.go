package systems

import "github.com/nezha-harness/nezha/systems/vfs"

// ErrLocked is returned by LockFile when another open file description
// (this process or another) holds the lock.
var ErrLocked = vfs.ErrLocked

// LockFile creates path if needed and takes an exclusive, non-blocking
// flock(2) on it; the lock ends when the returned function is called or
// the process exits (even by SIGKILL). Errors: ErrLocked (wrapped) if it
// is held, or the error of opening path.
func LockFile(path string) (unlock func(), err error) { return vfs.OS().Lock(path) }
