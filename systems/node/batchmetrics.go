package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/nezha-harness/nezha/systems/kvpb"
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

// begin counts op as started and returns the function that counts its
// result.
func (m *batchMetrics) begin(op *kvpb.BatchOp) func(*kvpb.BatchResult) {
	i := -1
	switch op.Op.(type) {
	case *kvpb.BatchOp_Put:
		i = 0
	case *kvpb.BatchOp_Get:
		i = 1
	case *kvpb.BatchOp_Delete:
		i = 2
	case *kvpb.BatchOp_Scan:
		i = 3
	}
	if i < 0 {
		return func(*kvpb.BatchResult) {}
	}
	m.started[i].Inc()
	began := time.Now()
	return func(r *kvpb.BatchResult) {
		if int(r.Code) < len(m.handled[i]) {
			m.handled[i][r.Code].Inc()
		}
		m.seconds[i].Observe(time.Since(began).Seconds())
	}
}
