package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// numBatchOps is the number of kinds of Batch operations (kvpb.BatchOp).
const numBatchOps = 4

// batchMetrics count the operations of Batch streams as the grpc_server_*
// metrics count unary calls, by op (the unary method's name) and code:
// nezha_batch_ops_started_total, nezha_batch_ops_handled_total and
// nezha_batch_op_handling_seconds. The series are made up front, so that an
// operation costs no label lookup.
type batchMetrics struct {
	started [numBatchOps]prometheus.Counter
	handled [numBatchOps][17]prometheus.Counter // by codes.Code (0..16)
	seconds [numBatchOps]prometheus.Observer
}

func newBatchMetrics(reg *prometheus.Registry) *batchMetrics {
	started := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nezha_batch_ops_started_total",
		Help: "Client operations received on Batch streams, by op (the unary method that serves them)."}, []string{"op"})
	handled := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nezha_batch_ops_handled_total",
		Help: "Client operations of Batch streams answered, by op and gRPC status code."}, []string{"op", "code"})
	seconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nezha_batch_op_handling_seconds",
		Help:    "Time from receiving a Batch operation to its answer, by op.",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18)}, []string{"op"}) // as grpc_server_handling_seconds
	reg.MustRegister(started, handled, seconds)
	m := &batchMetrics{}
	// Named as the unary methods that serve them are in grpc_method.
	for i, op := range [numBatchOps]string{"Put", "Get", "Delete", "Scan"} {
		m.started[i] = started.WithLabelValues(op)
		m.seconds[i] = seconds.WithLabelValues(op)
		for c := range m.handled[i] {
			m.handled[i][c] = handled.WithLabelValues(op, codes.Code(c).String())
		}
	}
	return m
}

// Kinds of Batch operations, as indexes of batchMetrics's series.
const (
	batchOpPut = iota
	batchOpGet
	batchOpDelete
	batchOpScan
	batchOpUnknown = -1
)

// batchOpKind returns op's kind, or batchOpUnknown.
func batchOpKind(op *kvpb.BatchOp) int {
	switch op.Op.(type) {
	case *kvpb.BatchOp_Put:
		return batchOpPut
	case *kvpb.BatchOp_Get:
		return batchOpGet
	case *kvpb.BatchOp_Delete:
		return batchOpDelete
	case *kvpb.BatchOp_Scan:
		return batchOpScan
	}
	return batchOpUnknown
}

// batchOpsStart is when some operations of one kind began (batchMetrics's
// start): a value, so that timing an operation allocates nothing.
type batchOpsStart struct {
	kind  int
	began time.Time
}

// start counts n operations of kind (batchOpPut...; batchOpUnknown counts
// nothing) as started now, with one clock read and one counter update for
// all of them (the operations of one BatchRequest arrive together), and
// returns what finish needs.
func (m *batchMetrics) start(kind, n int) batchOpsStart {
	if kind < 0 || kind >= numBatchOps {
		return batchOpsStart{kind: batchOpUnknown}
	}
	m.started[kind].Add(float64(n))
	return batchOpsStart{kind: kind, began: time.Now()}
}

// finish counts the answer r of one operation started at s by its code,
// and its handling time from s.
func (m *batchMetrics) finish(s batchOpsStart, r *kvpb.BatchResult) {
	if s.kind < 0 {
		return
	}
	if int(r.Code) < len(m.handled[s.kind]) {
		m.handled[s.kind][r.Code].Inc()
	}
	m.seconds[s.kind].Observe(time.Since(s.began).Seconds())
}
