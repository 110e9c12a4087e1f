package node

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/vfs"
)

// diskFaultServer implements kvpb.DiskFaults (Config.DiskFaults).
type diskFaultServer struct {
	kvpb.UnimplementedDiskFaultsServer
	n *Node
}

// SetDiskFaults replaces the injected disk faults. Bad faults are
// InvalidArgument and change nothing.
func (s *diskFaultServer) SetDiskFaults(_ context.Context, req *kvpb.SetDiskFaultsRequest) (*kvpb.SetDiskFaultsResponse, error) {
	faults := make([]vfs.Fault, len(req.Faults))
	for i, f := range req.Faults {
		faults[i] = vfs.Fault{Kind: f.Kind, Latency: time.Duration(f.LatencyNs), PathContains: f.PathContains}
	}
	if err := s.n.fs.SetFaults(faults...); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "disk faults: %v", err)
	}
	if len(faults) == 0 {
		s.n.logger.Warn("disk faults healed")
	} else {
		s.n.logger.Warn("disk faults injected", "faults", faults)
	}
	return s.n.DiskState(), nil
}

// DiskFS returns the node's file layer, where tests inject disk faults.
func (n *Node) DiskFS() *vfs.FS { return n.fs }

// DiskState returns the injected faults and the state of the node's disk.
func (n *Node) DiskState() *kvpb.SetDiskFaultsResponse {
	resp := &kvpb.SetDiskFaultsResponse{NodeId: n.id}
	for _, f := range n.fs.Faults() {
		resp.Faults = append(resp.Faults, &kvpb.DiskFault{Kind: f.Kind, LatencyNs: int64(f.Latency), PathContains: f.PathContains})
	}
	if err := n.fs.Full(); err != nil {
		resp.DiskFull = err.Error()
	}
	if err := n.fs.Err(); err != nil {
		resp.DiskFailed = err.Error()
	}
	return resp
}
