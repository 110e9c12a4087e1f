package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// TokenFile is the file in a cluster directory that holds the token every
// call to the cluster's agents carries (mode 0600).
const TokenFile = "agent.token"

// agentPool holds a Spec's connections to its nodes' agents, one per
// agent address, and the cluster's token.
type agentPool struct {
	mu    sync.Mutex
	token string
	conns map[string]*agent.Client
}

// pool returns the Spec's agent connections, making the pool on first use
// (Up and Load make it; a Spec literal gets one here, from one goroutine).
func (s *Spec) pool() *agentPool {
	if s.agents == nil {
		s.agents = &agentPool{conns: map[string]*agent.Client{}}
	}
	return s.agents
}

// Token returns the cluster's agent token (read from DIR/agent.token once).
func (s *Spec) Token() (string, error) {
	p := s.pool()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.token != "" {
		return p.token, nil
	}
	t, err := agent.ReadToken(filepath.Join(s.Dir, TokenFile))
	if err != nil {
		return "", fmt.Errorf("the cluster's agent token: %w", err)
	}
	p.token = t
	return t, nil
}

// Agent returns a connection to node n's agent.
func (s *Spec) Agent(n *Node) (*agent.Client, error) {
	if n.Agent == "" {
		return nil, fmt.Errorf("node %d has no agent in %s (a cluster started by an older nezha: stop it with `nezha cluster down` of that version)", n.ID, FileName)
	}
	token, err := s.Token()
	if err != nil {
		return nil, err
	}
	p := s.pool()
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[n.Agent]; c != nil {
		return c, nil
	}
	c, err := agent.Dial(n.Agent, token)
	if err != nil {
		return nil, err
	}
	p.conns[n.Agent] = c
	return c, nil
}

// closeAgents closes every agent connection.
func (s *Spec) closeAgents() {
	if s.agents == nil {
		return
	}
	s.agents.mu.Lock()
	defer s.agents.mu.Unlock()
	for a, c := range s.agents.conns {
		c.Close()
		delete(s.agents.conns, a)
	}
}

// agentCallTimeout bounds one call to an agent that answers at once
// (everything but waits for a process and probes).
const agentCallTimeout = 5 * time.Second

// NodeState is what node n's agent says of its process; Err is why it
// could not be asked.
type NodeState struct {
	*agentpb.StatusResponse
	Err error
}

// Alive reports whether node n's process runs (false when its agent
// does not answer).
func (st NodeState) Alive() bool { return st.Err == nil && st.StatusResponse.GetRunning() }

// State asks node n's agent about the node's process.
func (s *Spec) State(ctx context.Context, n *Node) NodeState {
	a, err := s.Agent(n)
	if err != nil {
		return NodeState{Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, agentCallTimeout)
	defer cancel()
	st, err := a.Status(ctx, &agentpb.StatusRequest{})
	if err != nil {
		return NodeState{Err: fmt.Errorf("node %d's agent at %s: %w", n.ID, n.Agent, err)}
	}
	if st.Running {
		n.PID = int(st.Pid)
	} else {
		n.PID = 0
	}
	return NodeState{StatusResponse: st}
}

// Running reports whether node id's process runs.
func (s *Spec) Running(ctx context.Context, id uint64) bool {
	n, err := s.Node(id)
	return err == nil && s.State(ctx, n).Alive()
}

// NodeTail returns the last lines of node n's log, from its agent (or why
// it cannot).
func (s *Spec) NodeTail(n *Node, lines int) string {
	a, err := s.Agent(n)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentCallTimeout)
	defer cancel()
	r, err := a.Logs(ctx, &agentpb.LogsRequest{Lines: int32(lines)})
	if err != nil {
		return fmt.Sprintf("(no log from node %d's agent: %v)", n.ID, err)
	}
	return r.Text
}

// signalNode sends sig to node n's process through its agent; for KILL and
// TERM it waits until the process is gone (up to wait).
func (s *Spec) signalNode(ctx context.Context, n *Node, sig agentpb.Sig, wait time.Duration) error {
	a, err := s.Agent(n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, wait+agentCallTimeout)
	defer cancel()
	r, err := a.Signal(ctx, &agentpb.SignalRequest{Signal: sig, WaitMs: wait.Milliseconds()})
	if status.Code(err) == codes.FailedPrecondition {
		return notRunning(n.ID)
	}
	if err != nil {
		return fmt.Errorf("signal %s to node %d: %w", sig, n.ID, err)
	}
	if (sig == agentpb.Sig_KILL || sig == agentpb.Sig_TERM) && !r.Gone {
		return fmt.Errorf("node %d (pid %d) still runs %v after %s", n.ID, r.Pid, wait, sig)
	}
	if r.Gone {
		n.PID = 0
	}
	return nil
}

// notRunning says a node is not running: the command asked to act on a
// stopped node.
func notRunning(id uint64) error { return cmdline.Usagef("node %d is not running", id) }

// dropAgent closes and forgets the connection to node n's agent (its
// address is about to change, or it is gone).
func (s *Spec) dropAgent(n *Node) {
	p := s.pool()
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[n.Agent]; c != nil {
		c.Close()
		delete(p.conns, n.Agent)
	}
}
