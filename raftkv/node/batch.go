package node

import (
	"context"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// MaxBatchOpsInFlight bounds the operations of one Batch stream that a node
// serves at once; more are refused with ResourceExhausted (the Go client
// never has more in flight than it has callers).
const MaxBatchOpsInFlight = 1 << 16

// Batch serves a Batch stream (kvpb.KV, kvpb.ServeBatch): every operation
// is served as its unary method (Put, Get, Delete, Scan) serves it, with
// the same checks, consistency and session rules. The PUTs of one
// BatchRequest are proposed together (serveBatchPuts). The GETs of one
// BatchRequest that ask for the same consistency share one wait
// (awaitRead: for linearizable ones, one ReadIndex round, issued after
// they all arrived); each is then answered in a goroutine of its own, so
// that reads from the disk overlap. Each BatchResponse carries the node's
// header once, for all of its results.
func (s *kvServer) Batch(stream kvpb.KV_BatchServer) error {
	return kvpb.ServeBatch(stream, MaxBatchOpsInFlight, s.serveBatch, s.header)
}

// serveBatch starts serving the operations of req (kvpb.ServeBatch).
func (s *kvServer) serveBatch(req *kvpb.BatchRequest, answer func(*kvpb.BatchResult)) {
	var (
		gets [2][]*kvpb.BatchOp // by consistency: LINEARIZABLE, STALE
		puts []*kvpb.BatchOp
	)
	for _, op := range req.Ops {
		if op.GetPut() != nil {
			puts = append(puts, op)
			continue
		}
		// A consistency outside gets (7, or a negative one: proto3 enums
		// are open, so -1 arrives as it was sent) is served alone, by Get,
		// which refuses it.
		if g := op.GetGet(); g != nil && checkGet(g) == nil && g.Consistency >= 0 && int(g.Consistency) < len(gets) {
			gets[g.Consistency] = append(gets[g.Consistency], op)
			continue
		}
		go func() { answer(s.serveBatchOp(op)) }()
	}
	for c, ops := range gets {
		if len(ops) > 0 {
			go s.serveBatchGets(kvpb.ReadConsistency(c), ops, answer)
		}
	}
	switch {
	case len(puts) == 1:
		go func() { answer(s.serveBatchOp(puts[0])) }()
	case len(puts) > 1:
		go s.serveBatchPuts(puts, answer)
	}
}

// serveBatchPuts serves the PUTs ops of one BatchRequest in one goroutine:
// each is checked as Put checks it, and those that pass are proposed
// together (Node.proposeBatchAndWait: one proposal message, one wake-up),
// each bounded by its own timeout (opTimeout). While the state machine
// stalls writes (systems.WriteStaller), each waits out the stall on its
// own, as Put does, so that each is refused at its own timeout.
func (s *kvServer) serveBatchPuts(ops []*kvpb.BatchOp, answer func(*kvpb.BatchResult)) {
	if s.n.writeStalled() {
		for _, op := range ops {
			go func() { answer(s.serveBatchOp(op)) }()
		}
		return
	}
	started := s.n.metrics.batch.start(batchOpPut, len(ops))
	finish := func(i int, resp *kvpb.PutResponse, err error) {
		var r *kvpb.BatchResult
		if err != nil {
			r = kvpb.NewBatchResult(ops[i].Id, nil, err)
		} else {
			r = kvpb.NewBatchResult(ops[i].Id, resp, nil)
		}
		s.n.metrics.batch.finish(started, r)
		answer(r)
	}
	var (
		at        []int // ops[at[j]] is proposed as ids[j], data[j]
		ids       []uint64
		data      [][]byte
		deadlines []time.Time
	)
	now := time.Now()
	for i, op := range ops {
		p := op.GetPut()
		id, d, err := s.preparePut(p.Key, p.Value, clientSession{p.ClientId, p.Seq}, p.TtlMs, nil)
		if err != nil {
			finish(i, nil, err)
			continue
		}
		at, ids, data = append(at, i), append(ids, id), append(data, d)
		deadlines = append(deadlines, now.Add(s.opTimeout(op)))
	}
	if len(ids) == 0 {
		return
	}
	for j, r := range s.n.proposeBatchAndWait(ids, data, deadlines) {
		if r.err != nil {
			finish(at[j], nil, writeError(r.err))
			continue
		}
		finish(at[j], &kvpb.PutResponse{Index: r.index}, nil)
	}
}

// opTimeout is how long the node serves op: its own timeout, at most the
// node's request timeout.
func (s *kvServer) opTimeout(op *kvpb.BatchOp) time.Duration {
	if op.TimeoutNs > 0 && time.Duration(op.TimeoutNs) < s.n.cfg.RequestTimeout {
		return time.Duration(op.TimeoutNs)
	}
	return s.n.cfg.RequestTimeout
}

// serveBatchGets waits once for the checked GETs ops, all of consistency
// c, to be safe to serve locally, then answers each from the state
// machine on a goroutine of its own (readerPool). A linearizable wait is bounded by
// the longest of their timeouts.
func (s *kvServer) serveBatchGets(c kvpb.ReadConsistency, ops []*kvpb.BatchOp, answer func(*kvpb.BatchResult)) {
	started := s.n.metrics.batch.start(batchOpGet, len(ops))
	var timeout time.Duration
	for _, op := range ops {
		timeout = max(timeout, s.opTimeout(op))
	}
	var err error
	if c == kvpb.ReadConsistency_STALE {
		err = s.awaitReadStatus(context.Background(), c) // no wait: only a removed node's refusal
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = s.awaitReadStatus(ctx, c)
		cancel()
	}
	for _, op := range ops {
		if err != nil {
			r := kvpb.NewBatchResult(op.Id, nil, err)
			s.n.metrics.batch.finish(started, r)
			answer(r)
			continue
		}
		s.n.readers.run(func() {
			resp, err := s.getLocal(op.GetGet(), false)
			r := kvpb.NewBatchResult(op.Id, resp, err)
			s.n.metrics.batch.finish(started, r)
			answer(r)
		})
	}
}

// serveBatchOp serves one operation of a Batch stream as its unary method
// and returns its answer.
//
// Its context is not the stream's: it is bounded by the operation's
// timeout and the node's request timeout only (one timer), so that the
// operations of a stream do not all register with the stream's context (a
// lock they would share), and it outlives a stream the client broke by at
// most that bound.
func (s *kvServer) serveBatchOp(op *kvpb.BatchOp) *kvpb.BatchResult {
	started := s.n.metrics.batch.start(batchOpKind(op), 1)
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout(op))
	defer cancel()
	r := kvpb.ServeBatchOp(ctx, s, op)
	r.ClearHeader()
	s.n.metrics.batch.finish(started, r)
	return r
}
