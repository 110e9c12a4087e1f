package node

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/nezha-harness/nezha/api/kvpb"
)

// TestBatchMetrics: start counts a group of operations once, finish counts
// each answer by its op and code and times it, and an operation of no
// known kind is counted nowhere.
func TestBatchMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newBatchMetrics(reg)
	gets := m.start(batchOpGet, 3)
	m.finish(gets, &kvpb.BatchResult{Id: 1})
	m.finish(gets, &kvpb.BatchResult{Id: 2, Code: uint32(codes.NotFound)})
	m.finish(gets, &kvpb.BatchResult{Id: 3, Code: uint32(codes.NotFound)})
	put := m.start(batchOpKind(&kvpb.BatchOp{Op: &kvpb.BatchOp_Put{Put: &kvpb.PutRequest{}}}), 1)
	m.finish(put, &kvpb.BatchResult{Id: 4, Code: uint32(codes.Unavailable)})
	unknown := m.start(batchOpKind(&kvpb.BatchOp{}), 1)
	m.finish(unknown, &kvpb.BatchResult{Id: 5})
	m.finish(gets, &kvpb.BatchResult{Id: 6, Code: 99}) // a code past gRPC's is timed, not counted by code

	for _, c := range []struct {
		name string
		got  prometheus.Collector
		want float64
	}{
		{"started Get", m.started[batchOpGet], 3},
		{"started Put", m.started[batchOpPut], 1},
		{"started Delete", m.started[batchOpDelete], 0},
		{"handled Get OK", m.handled[batchOpGet][codes.OK], 1},
		{"handled Get NotFound", m.handled[batchOpGet][codes.NotFound], 2},
		{"handled Put Unavailable", m.handled[batchOpPut][codes.Unavailable], 1},
		{"handled Put OK", m.handled[batchOpPut][codes.OK], 0},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	timed := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "nezha_batch_op_handling_seconds" {
			continue
		}
		for _, metric := range mf.GetMetric() {
			timed[metric.GetLabel()[0].GetValue()] = metric.GetHistogram().GetSampleCount()
		}
	}
	if timed["Get"] != 4 || timed["Put"] != 1 || timed["Delete"] != 0 || timed["Scan"] != 0 {
		t.Errorf("handling times observed by op = %v, want Get 4, Put 1, none else", timed)
	}
}
