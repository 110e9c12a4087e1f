package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// diskProbeName is the file a node without a ballast writes to learn that
// space returned.
const diskProbeName = "DISK_PROBE"

// diskProbeInterval: while the disk is full, the front door probes for
// space at most this often.
const diskProbeInterval = 500 * time.Millisecond

// diskGuard is the front door's view of the disk. It refuses writes
//
//   - while the data directory's file system has less than min bytes free
//     (-minFreeDiskBytes, and at least the ballast's size), sampled at most
//     once per second, so that a full disk turns into a clear error for the
//     client instead of a failed log append;
//   - while the disk is full: some write of the node met ENOSPC (real or
//     injected, vfs.FS.Full), until a probe finds space again.
//
// The ballast (etcd's and TiKV's reserve-space idea, CockroachDB's
// emergency ballast) is a preallocated file the node deletes the moment it
// meets ENOSPC, so that what it already accepted (the Raft log append it
// retries, entries to apply) finds room while it refuses new writes; it is
// put back, as the probe, once space returned.
type diskGuard struct {
	dir          string
	min          int64
	fs           *vfs.FS
	ballastBytes int64
	logger       *slog.Logger

	mu      sync.Mutex
	checked time.Time
	free    int64
	probed  time.Time
	// ballast: the ballast file exists (it is created at start).
	ballast bool
	// reported: the current full-disk streak was logged.
	reported bool
}

func newDiskGuard(dir string, min int64, fs *vfs.FS, ballastBytes int64, logger *slog.Logger) *diskGuard {
	return &diskGuard{dir: dir, min: max(min, ballastBytes), fs: fs, ballastBytes: ballastBytes, logger: logger}
}

// start creates the ballast if it is missing (a full disk at start marks
// the disk full; the node still starts and serves reads).
func (g *diskGuard) start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ballastBytes == 0 {
		return
	}
	err := g.createBallast()
	switch {
	case err == nil:
		g.ballast = true
	case errors.Is(err, syscall.ENOSPC):
		// The FS marked the disk full.
		g.logger.Warn("no room for the disk ballast; writes are refused until space returns", "err", err)
	default:
		g.logger.Warn("cannot create the disk ballast; running without one", "err", err)
		g.ballastBytes = 0
	}
}

func (g *diskGuard) ballastPath() string { return filepath.Join(g.dir, vfs.BallastName) }

// createBallast (re)creates the ballast file with its full size.
func (g *diskGuard) createBallast() error {
	p := g.ballastPath()
	f, err := g.fs.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	err = f.Preallocate(g.ballastBytes)
	if err != nil {
		f.Close()
		g.fs.Base().Remove(p)
		return err
	}
	return f.Close()
}

// noteFull records that a write met ENOSPC: it releases the ballast and
// logs once per streak. Safe from any goroutine.
func (g *diskGuard) noteFull(err error) {
	g.fs.Observe(vfs.Op{Kind: vfs.OpWrite, Path: g.dir}, err)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseBallast()
	if !g.reported {
		g.reported = true
		g.logger.Warn("disk full: writes are refused until space returns; reads are served", "err", err)
	}
}

// releaseBallast deletes the ballast, if it exists. Holds mu.
func (g *diskGuard) releaseBallast() {
	if !g.ballast {
		return
	}
	if err := g.fs.Base().Remove(g.ballastPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		g.logger.Warn("cannot delete the disk ballast", "err", err)
		return
	}
	g.fs.Free(g.ballastBytes)
	g.ballast = false
	g.logger.Warn("disk ballast released", "bytes", g.ballastBytes)
}

// statfs returns the bytes free to unprivileged users under dir.
func (g *diskGuard) statfs() (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(g.dir, &st); err != nil {
		return 0, false // cannot tell; let the append report a real error
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// check is the front door of a write of need bytes.
func (g *diskGuard) check(need int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if full := g.fs.Full(); full != nil {
		g.releaseBallast()
		if !g.probe() {
			return fmt.Errorf("disk full: %v; writes are refused until space returns (reads are served)", full)
		}
	}
	if g.min == 0 {
		return nil
	}
	if time.Since(g.checked) > time.Second {
		free, ok := g.statfs()
		if !ok {
			return nil
		}
		g.free, g.checked = free, time.Now()
	}
	if g.free-int64(need) < g.min {
		return fmt.Errorf("disk reserve reached: %d bytes free under %s, writes need %d bytes free (-minFreeDiskBytes, -diskBallastBytes)", g.free, g.dir, g.min)
	}
	g.free -= int64(need)
	return nil
}

// probe looks for space again, at most every diskProbeInterval: the file
// system must have room for the ballast and the reserve, and the ballast
// (or, without one, a small probe file) must be written through the FS,
// where an injected full disk still fails it. On success the disk is no
// longer full. Holds mu.
func (g *diskGuard) probe() bool {
	if time.Since(g.probed) < diskProbeInterval {
		return false
	}
	g.probed = time.Now()
	if free, ok := g.statfs(); ok && free < g.ballastBytes+g.min {
		return false
	}
	var err error
	if g.ballastBytes > 0 {
		err = g.createBallast()
	} else {
		err = g.writeProbe()
	}
	if err != nil {
		return false
	}
	g.ballast = g.ballastBytes > 0
	g.fs.ClearFull()
	g.reported = false
	g.checked = time.Time{}
	g.logger.Info("disk has space again: writes are accepted")
	return true
}

// writeProbe writes and removes a 4 KiB file through the FS.
func (g *diskGuard) writeProbe() error {
	p := filepath.Join(g.dir, diskProbeName)
	f, err := g.fs.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer g.fs.Base().Remove(p)
	_, err = f.Write(make([]byte, 4096))
	return errors.Join(err, f.Close())
}

// watchDisk stops the node once its file layer saw a failed fsync: what it
// wrote since its last good fsync may not be on the disk, and retrying the
// fsync can report success for data the kernel dropped.
func (n *Node) watchDisk() {
	select {
	case <-n.fs.Failed():
		n.fail(fmt.Errorf("disk: %w", n.fs.Err()))
	case <-n.stopc:
	case <-n.failed:
	}
}

// retryFullDisk runs op until it returns anything but ENOSPC, waiting 10 ms
// doubling to 1 s between tries; it returns errStopping if the node stops
// meanwhile. op must change nothing when it fails with ENOSPC. ENOSPC is
// not fatal: the log writer (logwrite.go) retries its append this way (the
// log cut the partial write), while the node releases its ballast and
// refuses client writes; the apply goroutine its Apply.
func (n *Node) retryFullDisk(op func() error) error {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := op()
		if err == nil || !errors.Is(err, syscall.ENOSPC) {
			return err
		}
		n.disk.noteFull(err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-n.stopc:
			t.Stop()
			return errStopping
		case <-n.failed:
			t.Stop()
			return errStopping
		}
	}
}

// writeStalled reports whether the state machine stalls writes now
// (systems.WriteStaller).
func (n *Node) writeStalled() bool {
	ws, ok := n.sm.(systems.WriteStaller)
	return ok && ws.WriteStall() != nil
}

// writeStallPoll is how often a write held by a write stall checks again.
const writeStallPoll = 10 * time.Millisecond

// awaitWriteStall holds a client write while the state machine stalls
// writes (systems.WriteStaller: nezha's GC debt), until the stall ends or
// ctx does; then it returns the stall's error. The write is not proposed
// meanwhile, so a refused write was surely not applied. The stall is an
// activity (Status) from the first write held until a held write sees it
// end.
func (n *Node) awaitWriteStall(ctx context.Context) error {
	ws, ok := n.sm.(systems.WriteStaller)
	if !ok {
		return nil
	}
	err := ws.WriteStall()
	if err == nil {
		return nil
	}
	n.metrics.writeStalls.Inc()
	start := time.Now()
	n.activities.Begin(systems.ActivityWriteStall, start, err.Error())
	defer func() { n.metrics.writeStallSeconds.Add(time.Since(start).Seconds()) }()
	t := time.NewTicker(writeStallPoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return err
		case <-n.stopc:
			return errStopping
		case <-n.failed:
			return errStopping
		}
		if err = ws.WriteStall(); err == nil {
			n.activities.EndIfGoing(systems.ActivityWriteStall, time.Now(), 0, "")
			return nil
		}
	}
}
