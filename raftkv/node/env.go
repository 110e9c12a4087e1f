package node

import (
	"context"

	"google.golang.org/grpc"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
)

// env is what a node takes from the outside world that the deterministic
// tests (sim_test.go) replace: its file system, its Raft ticks and its
// Raft transport. A nil *env, or a nil field, is the real one: the
// operating system's files, a time.Ticker of Config.TickInterval, and gRPC
// peer streams beside the client API served on Config.Address.
type env struct {
	// fs holds the node's files (a vfs.MemFS in the tests).
	fs vfs.FileSystem
	// ticks delivers the Raft ticks.
	ticks <-chan time.Time
	// transport builds the node's Raft transport. When set, the node
	// listens on nothing: no client API, no peer server, no metrics.
	transport func(*Node) raftTransport
	// logWritesByTest: the node starts no log writer nor flusher; the
	// tests run their stages on the Ready loop (logWriter.writeStep,
	// flushStep) when their schedule says.
	logWritesByTest bool
}

// fileSystem returns the node's file system.
func (e *env) fileSystem() vfs.FileSystem {
	if e == nil || e.fs == nil {
		return vfs.OS()
	}
	return e.fs
}

// tickSource returns the tests' ticks, or nil.
func (e *env) tickSource() <-chan time.Time {
	if e == nil {
		return nil
	}
	return e.ticks
}

// raftTransport carries a node's Raft messages to its peers: gRPC streams
// (transport.go), or the tests' in-memory network. Ready loop: send,
// addPeer, removePeer; Stop: stop.
type raftTransport interface {
	// send queues msgs for their peers without blocking; a message that
	// cannot be queued is dropped (raft resends).
	send(msgs []raftpb.Message)
	// addPeer starts carrying messages to member id at addr (no-op if it
	// is a peer); removePeer stops.
	addPeer(id uint64, addr string)
	removePeer(id uint64)
	stop()
	// peerIDs are the members it carries messages to; conn is the gRPC
	// connection to member id (nil if none: the tests' transport), over
	// which the node's other peer services (span shipping, disk health)
	// travel; context ends when the transport stops.
	peerIDs() []uint64
	conn(id uint64) *grpc.ClientConn
	context() context.Context
}

// manualLogWrites reports whether the tests run the log writer's stages
// (env.logWritesByTest).
func (e *env) manualLogWrites() bool { return e != nil && e.logWritesByTest }

// inMemoryNetwork reports whether the node's Raft transport is the tests'
// (the node then listens on nothing).
func (e *env) inMemoryNetwork() bool { return e != nil && e.transport != nil }
