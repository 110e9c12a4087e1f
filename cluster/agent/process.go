package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
)

// The node's process: started by Start from the agent's own binary
// (SERVE) or etcd (ETCD), never another program; in a session of its own,
// killed with SIGKILL if the agent dies (Pdeathsig), its output appended
// to the node's log, reaped by the agent, which records how it ended.

// CgroupExecCommand is the hidden subcommand of the agent's binary
// through which a node starts inside a memory cgroup:
//
//	BINARY __exec-in-cgroup PROCSFILE -- PROGRAM ARGS...
//
// writes its own pid into PROCSFILE (the group's cgroup.procs), then
// executes PROGRAM in its place (ExecInCgroup). A process cannot be
// created inside a cgroup v1 group, and a container image has no shell to
// do this with.
const CgroupExecCommand = "__exec-in-cgroup"

// ExecInCgroup is CgroupExecCommand; args follow the command's name. It
// returns only on an error.
func ExecInCgroup(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return fmt.Errorf("usage: %s PROCSFILE -- PROGRAM [ARGS...]", CgroupExecCommand)
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("join memory cgroup: %w", err)
	}
	if _, err := f.WriteString(strconv.Itoa(os.Getpid())); err != nil {
		f.Close()
		return fmt.Errorf("join memory cgroup %s: %w", args[0], err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("join memory cgroup %s: %w", args[0], err)
	}
	return syscall.Exec(args[2], args[2:], os.Environ())
}

// child is one run of the node's process.
type child struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
	done    chan struct{} // closed once reaped (the agent's state says how it ended)
}

// gone waits up to d (or until ctx ends) for the child to be reaped.
func (c *child) gone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// signal sends sig to the child; a child already exited (not yet reaped)
// is no error. os.Process signals through a pidfd: never another process
// that reused the pid.
func (c *child) signal(sig syscall.Signal) error {
	if err := c.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Waits of Signal and of the agent's exit.
const (
	// defaultStopWait is how long KILL and TERM wait for the process to
	// end when the caller does not say.
	defaultStopWait = 10 * time.Second
	// killWait is how long a TERM whose wait ran out waits after its KILL.
	killWait = 5 * time.Second
)

// spawnRequest asks spawnLoop to start cmd.
type spawnRequest struct {
	cmd *exec.Cmd
	err chan error
}

// spawnLoop starts every child from one OS thread, locked to this
// goroutine until end is closed: Pdeathsig is delivered when the thread
// that forked exits, which a Go thread may do while the agent lives (a
// goroutine that ends locked to its thread takes the thread with it).
// When the loop ends, the thread ends, and with it (SIGKILL) whatever it
// started that still runs.
func spawnLoop(reqs <-chan spawnRequest, end <-chan struct{}) {
	runtime.LockOSThread()
	for {
		select {
		case r := <-reqs:
			r.err <- r.cmd.Start()
		case <-end:
			return
		}
	}
}

// Start starts the node's process.
func (s *server) Start(ctx context.Context, req *agentpb.StartRequest) (*agentpb.StartResponse, error) {
	var argv []string
	switch req.GetProgram() {
	case agentpb.Program_SERVE:
		argv = append([]string{s.cfg.Binary, "serve"}, req.GetArgs()...)
	case agentpb.Program_ETCD:
		path, err := exec.LookPath(s.cfg.EtcdBinary)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "etcd: %v", err)
		}
		if path, err = filepath.Abs(path); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "etcd: %v", err)
		}
		argv = append([]string{path}, req.GetArgs()...)
	default:
		return nil, status.Errorf(codes.InvalidArgument, "program %v is neither SERVE nor ETCD", req.GetProgram())
	}
	if req.GetMemoryLimitBytes() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "memory limit %d bytes is negative", req.GetMemoryLimitBytes())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stopping:
		return nil, status.Error(codes.Unavailable, "the agent is stopping")
	default:
	}
	if s.proc != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "the node is running (pid %d)", s.proc.pid)
	}
	if err := os.MkdirAll(s.cfg.Dir, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "node directory: %v", err)
	}
	run := argv
	note := ""
	if limit := req.GetMemoryLimitBytes(); limit > 0 {
		dir, err := s.memoryGroupLocked(limit)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "memory cgroup: %v", err)
		}
		self, err := os.Executable()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "memory cgroup: %v", err)
		}
		run = append([]string{self, CgroupExecCommand, filepath.Join(dir, "cgroup.procs"), "--"}, argv...)
		note = fmt.Sprintf(" (in memory cgroup %s, limit %d bytes)", dir, limit)
	} else if err := s.removeGroupLocked(); err != nil {
		return nil, status.Errorf(codes.Internal, "memory cgroup: %v", err)
	}
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node log: %v", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s start: %s%s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "), note)
	cmd := exec.Command(run[0], run[1:]...)
	cmd.Dir = s.cfg.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a terminal's ^C reaches the agent, which stops the
	// node itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	// spawnLoop runs until shutdown has stopped the node, which it cannot
	// while this holds mu.
	spawned := make(chan error, 1)
	s.spawn <- spawnRequest{cmd, spawned}
	if err := <-spawned; err != nil {
		return nil, status.Errorf(codes.Internal, "start %s: %v", argv[0], err)
	}
	c := &child{cmd: cmd, pid: cmd.Process.Pid, started: time.Now(), done: make(chan struct{})}
	s.proc, s.started = c, c.started
	go s.reap(c, logf.Name())
	return &agentpb.StartResponse{Pid: int64(c.pid)}, nil
}

// reap waits for c to end and records how.
func (s *server) reap(c *child, logPath string) {
	err := c.cmd.Wait()
	how := ""
	if c.cmd.ProcessState != nil {
		how = c.cmd.ProcessState.String() // "exit status 1", "signal: killed"
	} else if err != nil {
		how = err.Error()
	}
	now := time.Now()
	if f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0); err == nil {
		fmt.Fprintf(f, "=== %s exit: %s\n", now.Format(time.RFC3339Nano), how)
		f.Close()
	}
	s.mu.Lock()
	s.lastExit, s.exited = how, now
	if s.proc == c {
		s.proc = nil
	}
	s.mu.Unlock()
	close(c.done)
}

// running returns the node's process, nil if none runs.
func (s *server) running() *child {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Signal sends a signal to the node's process.
func (s *server) Signal(ctx context.Context, req *agentpb.SignalRequest) (*agentpb.SignalResponse, error) {
	c := s.running()
	if c == nil {
		return nil, status.Error(codes.FailedPrecondition, "the node is not running")
	}
	wait := defaultStopWait
	if ms := req.GetWaitMs(); ms > 0 {
		wait = time.Duration(ms) * time.Millisecond
	} else if ms < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "wait of %d ms is negative", ms)
	}
	resp := &agentpb.SignalResponse{Pid: int64(c.pid)}
	var err error
	switch req.GetSignal() {
	case agentpb.Sig_STOP:
		err = c.signal(syscall.SIGSTOP)
	case agentpb.Sig_CONT:
		err = c.signal(syscall.SIGCONT)
	case agentpb.Sig_KILL:
		if err = c.signal(syscall.SIGKILL); err == nil {
			resp.Gone = c.gone(ctx, wait)
		}
	case agentpb.Sig_TERM:
		resp.Gone, err = stop(ctx, c, wait)
	default:
		return nil, status.Errorf(codes.InvalidArgument, "signal %v is not KILL, TERM, STOP or CONT", req.GetSignal())
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "signal pid %d: %v", c.pid, err)
	}
	return resp, nil
}

// stop ends c: SIGCONT (a paused process cannot exit), SIGTERM, and
// SIGKILL if it has not ended after wait. It reports whether c is gone.
func stop(ctx context.Context, c *child, wait time.Duration) (bool, error) {
	if err := c.signal(syscall.SIGCONT); err != nil {
		return false, err
	}
	if err := c.signal(syscall.SIGTERM); err != nil {
		return false, err
	}
	if c.gone(ctx, wait) {
		return true, nil
	}
	if err := c.signal(syscall.SIGKILL); err != nil {
		return false, err
	}
	return c.gone(ctx, killWait), nil
}

// Status is the node process's state.
func (s *server) Status(context.Context, *agentpb.StatusRequest) (*agentpb.StatusResponse, error) {
	s.mu.Lock()
	resp := &agentpb.StatusResponse{LastExit: s.lastExit, DataDir: s.dataDir(), LogPath: s.logPath()}
	if !s.started.IsZero() {
		resp.StartedUnixNano = s.started.UnixNano()
	}
	if !s.exited.IsZero() {
		resp.ExitedUnixNano = s.exited.UnixNano()
	}
	if c := s.proc; c != nil {
		resp.Running, resp.Pid = true, int64(c.pid)
	}
	s.mu.Unlock()
	if resp.Running {
		resp.Stopped = paused(int(resp.Pid))
	}
	return resp, nil
}

// paused reports whether pid is stopped by a signal (state T in
// /proc/PID/stat).
func paused(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	return err == nil && st.State == "T"
}

// notRunningLocked refuses what needs the node stopped.
func (s *server) notRunningLocked(what string) error {
	if s.proc != nil {
		return status.Errorf(codes.FailedPrecondition, "%s: the node is running (pid %d); stop it first", what, s.proc.pid)
	}
	return nil
}

// Wipe deletes the node's data directory.
func (s *server) Wipe(context.Context, *agentpb.WipeRequest) (*agentpb.WipeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notRunningLocked("wipe"); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(s.dataDir()); err != nil {
		return nil, status.Errorf(codes.Internal, "wipe: %v", err)
	}
	return &agentpb.WipeResponse{}, nil
}

// Damage changes the node's Raft log files (raftlog's damage).
func (s *server) Damage(_ context.Context, req *agentpb.DamageRequest) (*agentpb.DamageResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notRunningLocked("damage"); err != nil {
		return nil, err
	}
	var what string
	var err error
	switch req.GetKind() {
	case agentpb.DamageKind_TEAR_TAIL:
		what, err = raftlog.TearTail(s.dataDir(), req.GetMode(), req.GetPick())
	case agentpb.DamageKind_LOSE_SYNCED_TAIL:
		if b := req.GetBytes(); b < 1 || b > raftlog.MaxLoseBytes {
			return nil, status.Errorf(codes.InvalidArgument, "damage of %d bytes is outside 1..%d", b, raftlog.MaxLoseBytes)
		}
		what, err = raftlog.LoseSyncedTail(s.dataDir(), req.GetMode(), int(req.GetBytes()))
	default:
		return nil, status.Errorf(codes.InvalidArgument, "damage kind %v is neither TEAR_TAIL nor LOSE_SYNCED_TAIL", req.GetKind())
	}
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "damage: %v", err)
	}
	return &agentpb.DamageResponse{Detail: what}, nil
}

// Logs returns the end of the node's log.
func (s *server) Logs(_ context.Context, req *agentpb.LogsRequest) (*agentpb.LogsResponse, error) {
	n := int(req.GetLines())
	switch {
	case n < 0:
		return nil, status.Errorf(codes.InvalidArgument, "%d lines is negative", n)
	case n == 0:
		n = defaultLogLines
	}
	text, err := tailLines(s.logPath(), n, maxLogBytes)
	if errors.Is(err, os.ErrNotExist) {
		return &agentpb.LogsResponse{Path: s.logPath()}, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node log: %v", err)
	}
	return &agentpb.LogsResponse{Text: text, Path: s.logPath()}, nil
}

// Bounds of Logs: the lines when the caller does not say, and the most
// bytes returned (the end of a longer tail).
const (
	defaultLogLines = 20
	maxLogBytes     = 1 << 20
)

// tailLines returns the last n lines of the file at path (without the
// final newline), at most maxBytes of them, reading backwards from its end.
func tailLines(path string, n int, maxBytes int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	end := st.Size()
	const chunk = 64 << 10
	var buf []byte
	for off := end; off > 0 && int64(len(buf)) < maxBytes; {
		size := min(off, chunk)
		off -= size
		b := make([]byte, size)
		if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		buf = append(b, buf...)
		// n lines after a trailing newline take n+1 newlines to bound.
		if strings.Count(strings.TrimSuffix(string(buf), "\n"), "\n") >= n {
			break
		}
	}
	lines := strings.Split(strings.TrimSuffix(string(buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	text := strings.Join(lines, "\n")
	if int64(len(text)) > maxBytes {
		text = text[int64(len(text))-maxBytes:]
	}
	return text, nil
}
