// Package agent is the per-node agent of the harness (`nezha agent`):
// whatever the harness does to a node and reads from the machine it runs
// on goes through it, so that a node may run as a local process, in a
// container or on another host alike (docs/design/2026-12-04-beyond-one-
// machine.md). It serves the gRPC API of agentpb to callers carrying the
// cluster's token: it starts the node's process (its own binary's
// `serve`, or etcd) and signals and reaps it, owns the proxies (and,
// where allowed, the packet filter rules) of the node's outgoing peer
// links, reads /proc, and turns the host's knobs (memory cgroups, page
// cache, readahead). What the host does not allow is refused with
// FailedPrecondition and a reason; Info lists it beforehand.
package agent

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// server is one agent.
type server struct {
	agentpb.UnimplementedAgentServer
	cfg Config

	mu sync.Mutex
	// proc is the node's running process, nil when none runs.
	proc *child
	// started is when the last process started; lastExit and exited how
	// and when the last one that ended did.
	started, exited time.Time
	lastExit        string
	// group is the node's memory cgroup, "" if none; groupName the name it
	// has when it exists.
	group, groupName string
	// readAhead is what SetReadAhead changed, to put back.
	readAhead readAheadState

	links *links
	// filterWhy says why the agent has no packet filter although
	// Config.PacketFilter asked for one.
	filterWhy string
	// probeMu serializes Info's probes.
	probeMu sync.Mutex

	// spawn takes Start's processes to spawnLoop, which runs until
	// spawnEnd is closed (after the node is stopped).
	spawn    chan spawnRequest
	spawnEnd chan struct{}
	exit     chan struct{} // closed by Exit
	exitOnce sync.Once
	// stopping is closed (under mu) when Serve starts its way out: Start
	// refuses from then on.
	stopping chan struct{}
}

func (s *server) dataDir() string { return DataDir(s.cfg.Dir) }
func (s *server) logPath() string { return LogPath(s.cfg.Dir) }

// Serve runs an agent until ctx ends or a caller asks it to Exit. On the
// way out it stops the node (SIGCONT, SIGTERM, SIGKILL after 10 s), stops
// its proxies, deletes its packet filter table and memory cgroup, puts
// back the readahead it changed and removes the address file.
func Serve(ctx context.Context, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	c, err := c.withDefaults()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("agent directory: %w", err)
	}
	if c.AddressFile != "" {
		// A stale address must not be taken for this agent's.
		if err := os.Remove(c.AddressFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("address file: %w", err)
		}
	}
	lis, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	s := &server{cfg: c, spawn: make(chan spawnRequest), spawnEnd: make(chan struct{}), exit: make(chan struct{}), stopping: make(chan struct{})}
	var filter *packetFilter
	if c.PacketFilter {
		if filter, err = newPacketFilter(filterTable); err != nil {
			s.filterWhy = err.Error()
		}
	}
	s.links = newLinks(DialPeersFile(c.Dir), filter)
	s.groupName = fmt.Sprintf("%s%d-%08x", groupPrefix, os.Getpid(), rand.Uint32())
	RemoveStaleMemoryGroups(groupPrefix)
	go spawnLoop(s.spawn, s.spawnEnd)

	g := grpc.NewServer(grpc.ChainUnaryInterceptor(auth.UnaryServerInterceptor(s.authenticate)))
	agentpb.RegisterAgentServer(g, s)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	if c.AddressFile != "" {
		if err := writeFileAtomic(c.AddressFile, []byte(lis.Addr().String()+"\n"), 0o644); err != nil {
			g.Stop()
			<-served
			return errors.Join(fmt.Errorf("address file: %w", err), s.shutdown())
		}
	}
	var serveErr error
	servedEarly := false
	select {
	case <-ctx.Done():
	case <-s.exit:
	case serveErr = <-served:
		servedEarly = true
	}
	err = s.shutdown()
	// Exit's answer is on its way: let it go before the listener closes.
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		g.Stop()
	}
	if !servedEarly {
		serveErr = <-served
	}
	if errors.Is(serveErr, grpc.ErrServerStopped) {
		serveErr = nil
	}
	if c.AddressFile != "" {
		_ = os.Remove(c.AddressFile)
	}
	return errors.Join(serveErr, err)
}

// shutdown stops the node and undoes what the agent changed on the host.
func (s *server) shutdown() error {
	s.mu.Lock()
	close(s.stopping)
	s.mu.Unlock()
	var errs []error
	if err := s.stopNode(); err != nil {
		errs = append(errs, err)
	}
	if err := s.links.close(); err != nil {
		errs = append(errs, err)
	}
	s.mu.Lock()
	if err := s.removeGroupLocked(); err != nil {
		errs = append(errs, fmt.Errorf("memory cgroup: %w", err))
	}
	if _, err := s.restoreReadAheadLocked(); err != nil {
		errs = append(errs, fmt.Errorf("readahead: %w", err))
	}
	s.mu.Unlock()
	close(s.spawnEnd)
	return errors.Join(errs...)
}

// stopNode stops the node's process if it runs: SIGCONT, SIGTERM, and
// SIGKILL after defaultStopWait.
func (s *server) stopNode() error {
	c := s.running()
	if c == nil {
		return nil
	}
	gone, err := stop(context.Background(), c, defaultStopWait)
	if err != nil {
		return fmt.Errorf("stop the node (pid %d): %w", c.pid, err)
	}
	if !gone {
		return fmt.Errorf("the node (pid %d) did not end after SIGKILL", c.pid)
	}
	return nil
}

// authenticate admits a call carrying the agent's token.
func (s *server) authenticate(ctx context.Context) (context.Context, error) {
	token, err := auth.AuthFromMD(ctx, "bearer")
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.Token)) != 1 {
		return nil, status.Error(codes.Unauthenticated, "wrong agent token")
	}
	return ctx, nil
}

// Exit stops the node, answers, and stops the agent.
func (s *server) Exit(context.Context, *agentpb.ExitRequest) (*agentpb.ExitResponse, error) {
	err := s.stopNode()
	s.exitOnce.Do(func() { close(s.exit) })
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	return &agentpb.ExitResponse{}, nil
}

// inContainer reports whether this process runs in a container (Docker's
// or Podman's marker file).
func inContainer() bool {
	for _, p := range []string{"/.dockerenv", "/run/.containerenv"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
