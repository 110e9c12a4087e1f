package systems

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrLocked is returned by LockFile when another open file description
// (this process or another) holds the lock.
var ErrLocked = errors.New("locked by another process or handle")

// LockFile creates path if needed and takes an exclusive, non-blocking
// flock(2) on it; the lock ends when the returned function is called or
// the process exits (even by SIGKILL). Errors: ErrLocked (wrapped) if it
// is held, or the error of opening path.
func LockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
