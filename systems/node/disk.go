package node

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// diskGuard refuses writes while the data directory's file system has less
// than min bytes free, so that a full disk turns into a clear error for the
// client instead of a failed log append. Free space is sampled at most once
// per second.
type diskGuard struct {
	dir string
	min int64

	mu      sync.Mutex
	checked time.Time
	free    int64
}

func (g *diskGuard) check(need int) error {
	if g.min == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) > time.Second {
		var st unix.Statfs_t
		if err := unix.Statfs(g.dir, &st); err != nil {
			return nil // cannot tell; let the append report a real error
		}
		g.free = int64(st.Bavail) * int64(st.Bsize)
		g.checked = time.Now()
	}
	if g.free-int64(need) < g.min {
		return fmt.Errorf("disk reserve reached: %d bytes free under %s, writes need %d bytes free (-minFreeDiskBytes)", g.free, g.dir, g.min)
	}
	g.free -= int64(need)
	return nil
}
