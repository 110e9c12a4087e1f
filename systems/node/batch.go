package node

import (
	"context"
	"time"

	"github.com/nezha-harness/nezha/systems/kvpb"
)

// MaxBatchOpsInFlight bounds the operations of one Batch stream that a node
// serves at once; more are refused with ResourceExhausted (the Go client
// never has more in flight than it has callers).
const MaxBatchOpsInFlight = 1 << 16

// Batch serves a Batch stream (kvpb.KV, kvpb.ServeBatch): every operation
// runs through its unary method (Put, Get, Delete, Scan), so
// that checks, consistency and session rules are the same. Reads that
// arrive together share a ReadIndex round, as unary ones do (runLoop), and
// the writes of one request reach the Ready loop together.
func (s *kvServer) Batch(stream kvpb.KV_BatchServer) error {
	return kvpb.ServeBatch(stream, MaxBatchOpsInFlight, s.serveBatchOp)
}

// serveBatchOp serves one operation of a Batch stream and returns its
// answer.
//
// Its context is not the stream's: it is bounded by the operation's
// timeout and the node's request timeout only (one timer), so that the
// operations of a stream do not all register with the stream's context (a
// lock they would share), and it outlives a stream the client broke by at
// most that bound.
func (s *kvServer) serveBatchOp(op *kvpb.BatchOp) *kvpb.BatchResult {
	done := s.n.metrics.batch.begin(op)
	timeout := s.n.cfg.RequestTimeout
	if op.TimeoutNs > 0 && time.Duration(op.TimeoutNs) < timeout {
		timeout = time.Duration(op.TimeoutNs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r := kvpb.ServeBatchOp(ctx, s, op)
	done(r)
	return r
}
