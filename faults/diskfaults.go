package faults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/vfs"
)

// Disk nemesis names. They inject faults inside the node processes, through
// the DiskFaults RPC of nodes started with -diskFaults (Env.DiskFaults).
const (
	DiskFull   = "disk-full"
	FsyncError = "fsync-error"
	SlowDisk   = "slow-disk"
)

// DiskNodeArgs returns the serve flags disk nemeses need on every node.
func DiskNodeArgs() []string { return []string{"-diskFaults"} }

// NeedsDiskFaults reports whether any of the nemeses injects disk faults
// (the nodes then need DiskNodeArgs).
func NeedsDiskFaults(names []string) bool {
	for _, name := range names {
		if n, ok := lookup(name); ok && n.disk {
			return true
		}
	}
	return false
}

// diskRPCTimeout bounds one DiskFaults call.
const diskRPCTimeout = 5 * time.Second

// SetDiskFaults replaces the disk faults node address injects (none:
// heal) through its DiskFaults RPC, and returns the node's disk state.
func SetDiskFaults(ctx context.Context, address string, faults ...vfs.Fault) (*kvpb.SetDiskFaultsResponse, error) {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, diskRPCTimeout)
	defer cancel()
	req := &kvpb.SetDiskFaultsRequest{}
	for _, f := range faults {
		req.Faults = append(req.Faults, &kvpb.DiskFault{Kind: f.Kind, LatencyNs: int64(f.Latency), PathContains: f.PathContains})
	}
	resp, err := kvpb.NewDiskFaultsClient(conn).SetDiskFaults(ctx, req, grpc.WaitForReady(true))
	if status.Code(err) == codes.Unimplemented {
		return nil, fmt.Errorf("node %s serves no DiskFaults RPC (start it with -diskFaults): %w", address, err)
	}
	return resp, err
}

// SlowDisks gives every node of addrs the slow-disk fault of delay (each
// fsync takes delay longer) through its DiskFaults RPC. heal clears it on
// every node it was set on and reports the nodes it could not clear; after
// an error none is left set.
func SlowDisks(ctx context.Context, addrs []string, delay time.Duration) (heal func() error, err error) {
	var set []string
	heal = func() error {
		var errs []error
		for _, a := range set {
			if _, err := SetDiskFaults(context.WithoutCancel(ctx), a); err != nil {
				errs = append(errs, fmt.Errorf("clearing the slow disk of %s: %w", a, err))
			}
		}
		return errors.Join(errs...)
	}
	for _, a := range addrs {
		if _, err := SetDiskFaults(ctx, a, vfs.Fault{Kind: vfs.FaultSlowDisk, Latency: delay}); err != nil {
			heal()
			return nil, fmt.Errorf("node %s: %w", a, err)
		}
		set = append(set, a)
	}
	return heal, nil
}

func (e *Env) needDisk() error {
	if !e.DiskFaults {
		return errors.New("the nodes were not started with -diskFaults")
	}
	return nil
}

// setNodeDiskFaults is SetDiskFaults on node id.
func (e *Env) setNodeDiskFaults(ctx context.Context, id uint64, faults ...vfs.Fault) (*kvpb.SetDiskFaultsResponse, error) {
	n, err := e.Cluster.Node(id)
	if err != nil {
		return nil, err
	}
	return SetDiskFaults(ctx, n.Address, faults...)
}

// diskFault injects faults on the nodes ids; healing clears them and
// restarts every node among them that stopped meanwhile (a failed fsync
// stops a node).
func (e *Env) diskFault(ctx context.Context, ids []uint64, detail string, faults ...vfs.Fault) (fault, error) {
	if err := e.needDisk(); err != nil {
		return fault{}, err
	}
	var set []uint64
	for _, id := range ids {
		if _, err := e.setNodeDiskFaults(ctx, id, faults...); err != nil {
			e.healDisk(set)
			return fault{}, fmt.Errorf("node %d: %w", id, err)
		}
		set = append(set, id)
	}
	return fault{nodes: ids, detail: detail, heal: func() error { return e.healDisk(ids) }}, nil
}

// healDisk clears the disk faults of ids and restarts those that stopped.
func (e *Env) healDisk(ids []uint64) error {
	var errs []error
	for _, id := range ids {
		n, err := e.Cluster.Node(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := SetDiskFaults(context.Background(), n.Address)
		if err == nil && resp.DiskFailed == "" {
			continue
		}
		// The node stopped, or is stopping, on a failed fsync: wait until
		// its agent says its process ended, then restart it.
		if werr := e.waitStopped(n, stopTimeout); werr != nil {
			errs = append(errs, fmt.Errorf("node %d did not stop after its disk failed (%v): %w", id, err, werr))
			continue
		}
		if rerr := e.Cluster.Restart(id); rerr != nil {
			errs = append(errs, fmt.Errorf("restart node %d: %w", id, rerr))
			continue
		}
		e.logf("node %d restarted after its disk failed", id)
	}
	return errors.Join(errs...)
}

// healAllDisks clears the disk faults of every running node.
func (e *Env) healAllDisks() error {
	if !e.DiskFaults {
		return nil
	}
	var errs []error
	for i := range e.Cluster.Nodes {
		n := &e.Cluster.Nodes[i]
		if !e.Cluster.State(context.Background(), n).Alive() {
			continue
		}
		if _, err := SetDiskFaults(context.Background(), n.Address); err != nil {
			errs = append(errs, fmt.Errorf("node %d: clear disk faults: %w", n.ID, err))
		}
	}
	return errors.Join(errs...)
}

// stopTimeout bounds the wait for a node that stops on its own after a
// failed fsync.
const stopTimeout = 10 * time.Second

// waitStopped polls node n's agent until it says the node's process has
// ended (an agent that does not answer is an error), for up to timeout.
func (e *Env) waitStopped(n *cluster.Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st := e.Cluster.State(context.Background(), n)
		switch {
		case st.Err != nil:
			return st.Err
		case !st.Alive():
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("its process (pid %d) still runs after %v", st.GetPid(), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func injectDiskFull(ctx context.Context, e *Env, s Step) (fault, error) {
	return e.oneNodeDiskFault(ctx, s, "node %d's disk is full: its writes return ENOSPC (beyond the room its ballast frees)", vfs.FaultDiskFull)
}

func injectFsyncError(ctx context.Context, e *Env, s Step) (fault, error) {
	return e.oneNodeDiskFault(ctx, s, "node %d's fsyncs return EIO (it stops at its next fsync; restarted when healing)", vfs.FaultFsyncError)
}

// oneNodeDiskFault injects a fault of kind into the node s.Pick picks;
// what is formatted with its id.
func (e *Env) oneNodeDiskFault(ctx context.Context, s Step, what, kind string) (fault, error) {
	ids := e.ids()
	id := ids[s.Pick%uint64(len(ids))]
	return e.diskFault(ctx, []uint64{id}, fmt.Sprintf(what, id), vfs.Fault{Kind: kind})
}

func injectSlowDisk(ctx context.Context, e *Env, s Step) (fault, error) {
	latency := time.Duration(20+s.Pick%181) * time.Millisecond
	ids := e.ids()
	if (s.Pick>>8)%2 == 0 {
		id := ids[(s.Pick>>9)%uint64(len(ids))]
		ids = []uint64{id}
	}
	return e.diskFault(ctx, ids, fmt.Sprintf("every fsync of node(s) %v takes %v longer", ids, latency),
		vfs.Fault{Kind: vfs.FaultSlowDisk, Latency: latency})
}
