package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// localBackend runs each node's agent as a process of this machine, on a
// loopback port, with the node's directory DIR/node<id>; the agent starts
// the node as its child.
type localBackend struct{}

// localHost is the loopback address a local cluster binds (UpOptions.Host,
// or the address its first node has).
func (s *Spec) localHost() string {
	if s.host != "" {
		return s.host
	}
	for _, n := range s.Nodes {
		if h, _, err := net.SplitHostPort(n.Address); err == nil {
			return h
		}
	}
	return "127.0.0.1"
}

func (localBackend) place(ctx context.Context, s *Spec, n *Node) error {
	abs, err := filepath.Abs(s.Dir)
	if err != nil {
		return err
	}
	n.Dir = filepath.Join(abs, fmt.Sprintf("node%d", n.ID))
	n.Data, n.Log = filepath.Join(n.Dir, "data"), filepath.Join(n.Dir, "node.log")
	if des, err := os.ReadDir(n.Data); err == nil && len(des) > 0 {
		// A member removed from an earlier cluster here left its data.
		return cmdline.Usagef("%s holds the data of an earlier node; delete it, or the whole cluster with `nezha cluster down -cluster %s -purge`", n.Data, s.Dir)
	}
	host := s.localHost()
	// Client, internal, metrics, JSON-RPC, agent, etcd API and profiler
	// port.
	ports, err := freePorts(host, 7)
	if err != nil {
		return err
	}
	addr := func(i int) string { return net.JoinHostPort(host, strconv.Itoa(ports[i])) }
	n.Address, n.InternalAddress, n.Agent = addr(0), addr(1), addr(4)
	s.setAdminAddresses(n, addr)
	return startLocalAgent(ctx, s, n)
}

// startLocalAgent starts node n's agent (`nezha agent`) on n.Agent, in its
// own session, detached or tied to this process's life as s.Detach says,
// and waits until it answers.
func startLocalAgent(ctx context.Context, s *Spec, n *Node) error {
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(n.Dir, "agent.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	renewPorts(time.Now(), n.Agent)
	cmd := exec.Command(s.Binary, "agent", "-listen", n.Agent, "-dir", n.Dir, "-tokenFile", filepath.Join(s.Dir, TokenFile))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !s.Detach {
		// Delivered when the thread that forked exits; Go keeps its
		// threads for the life of the process unless a goroutine locked to
		// one exits, which nothing here does (golang/go#27505). The node
		// dies with its agent.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node %d's agent: %w", n.ID, err)
	}
	n.AgentPID = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	a, err := s.Agent(n)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := a.Info(cctx, &agentpb.InfoRequest{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case werr := <-exited:
			n.AgentPID = 0
			return fmt.Errorf("node %d's agent exited (%v); last lines of %s:\n%s", n.ID, werr, logPath, Tail(logPath, 10))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d's agent does not answer at %s after 10 s: %v (log %s)", n.ID, n.Agent, err, logPath)
		}
	}
}

func (localBackend) revive(ctx context.Context, s *Spec, n *Node) error {
	if agentAnswers(ctx, s, n) {
		return nil
	}
	if n.AgentPID != 0 && Alive(n.AgentPID) && ownedAgent(n) {
		// Alive but not answering (stopped?): replace it.
		_ = syscall.Kill(n.AgentPID, syscall.SIGKILL)
		_ = waitGone(n.AgentPID, 10*time.Second)
	}
	if err := movePortIfTaken(&n.Agent); err != nil {
		return err
	}
	s.dropAgent(n)
	return startLocalAgent(ctx, s, n)
}

func (localBackend) remove(ctx context.Context, s *Spec, n *Node, purge bool) error {
	if a, err := s.Agent(n); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, _ = a.Exit(cctx, &agentpb.ExitRequest{})
		cancel()
	}
	s.dropAgent(n)
	if n.AgentPID != 0 && Alive(n.AgentPID) && ownedAgent(n) {
		if waitGone(n.AgentPID, 15*time.Second) != nil {
			_ = syscall.Kill(n.AgentPID, syscall.SIGKILL)
			if err := waitGone(n.AgentPID, 5*time.Second); err != nil {
				return fmt.Errorf("node %d's agent: %w", n.ID, err)
			}
		}
	}
	n.AgentPID = 0
	releasePorts(n.Agent)
	return nil // the files are the cluster directory's (Spec.purge)
}

func (localBackend) close(context.Context, *Spec, bool) error { return nil }

// ownedAgent reports whether process n.AgentPID is node n's agent (the pid
// may have been reused since).
func ownedAgent(n *Node) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.AgentPID))
	if err != nil {
		return false
	}
	cmdline := strings.ReplaceAll(string(b), "\x00", " ")
	return strings.Contains(cmdline, " agent ") && strings.Contains(cmdline, n.Dir)
}

// agentAnswers reports whether node n's agent answers within a second.
func agentAnswers(ctx context.Context, s *Spec, n *Node) bool {
	a, err := s.Agent(n)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = a.Info(ctx, &agentpb.InfoRequest{})
	return err == nil
}
