package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Membership changes of a local cluster (`nezha cluster add|remove|
// transfer|replace`): they start or stop the serve process, drive the
// change through the leader's kvpb.Admin service (raftkv/node
// membership.go) and keep cluster.json the one list of members: a node is
// in it while it is a member, and every node's -peers is derived from it.

// newClusterID returns a random cluster id for -clusterID.
func newClusterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return hex.EncodeToString(b[:])
}

// peersFlag is the -peers of every node: the internal addresses in node
// order, with their ids (ID=host:port) once they are not 1..N.
func (s *Spec) peersFlag() string {
	peers := make([]string, len(s.Nodes))
	positional := true
	for i, m := range s.Nodes {
		peers[i] = m.InternalAddress
		positional = positional && m.ID == uint64(i+1)
	}
	if !positional {
		for i, m := range s.Nodes {
			peers[i] = strconv.FormatUint(m.ID, 10) + "=" + m.InternalAddress
		}
	}
	return strings.Join(peers, ",")
}

// fixIdentity gives a cluster.json written before membership changes
// existed the cluster id its nodes derive from -peers (node config.go
// clusterID) and its next member id, before -peers changes.
func (s *Spec) fixIdentity() {
	if s.ClusterID == "" {
		sum := sha256.Sum256([]byte(s.peersFlag()))
		s.ClusterID = hex.EncodeToString(sum[:8])
	}
	if s.NextID == 0 {
		for _, n := range s.Nodes {
			s.NextID = max(s.NextID, n.ID+1)
		}
	}
}

// adminCall runs f against the leader's Admin service, finding the leader
// again (up to attempts times) when the node answers that it is not the
// leader (FailedPrecondition naming another) or that it handed its
// leadership over (Unavailable).
func (s *Spec) adminCall(ctx context.Context, f func(context.Context, kvpb.AdminClient) error) error {
	const attempts = 10
	var last error
	for i := 0; i < attempts; i++ {
		leader, err := s.findLeader(ctx, 30*time.Second)
		if err != nil {
			return err
		}
		ln, err := s.Node(leader)
		if err != nil {
			return fmt.Errorf("the leader is node %d, which %s does not list: %w", leader, FileName, err)
		}
		conn, err := grpc.NewClient(ln.Address, client.DialOptions(4<<20)...)
		if err != nil {
			return err
		}
		err = f(ctx, kvpb.NewAdminClient(conn))
		conn.Close()
		st, _ := status.FromError(err)
		retry := (st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), "is not the leader")) ||
			st.Code() == codes.Unavailable
		if err == nil || !retry {
			return err
		}
		last = err
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		}
	}
	return fmt.Errorf("no leader took the request after %d attempts: %w", attempts, last)
}

// findLeader polls the nodes until one reports itself the leader (the
// highest term wins) or timeout passes. Unlike WaitLeader it needs no
// majority of cluster.json's nodes to agree: a node being added knows no
// leader yet.
func (s *Spec) findLeader(ctx context.Context, timeout time.Duration) (uint64, error) {
	return s.pollLeader(ctx, timeout, false, func(sts []NodeStatus) uint64 {
		var leader, term uint64
		for _, st := range sts {
			if h := st.resp.GetHeader(); st.err == nil && h.LeaderId == h.NodeId && h.NodeId != 0 && h.Term >= term {
				leader, term = h.NodeId, h.Term
			}
		}
		return leader
	})
}

// adminError makes a status error one readable line.
func adminError(what string, err error) error {
	if st, ok := status.FromError(err); ok && err != nil {
		if st.Code() == codes.InvalidArgument {
			return cmdline.Usagef("%s: %s", what, st.Message())
		}
		return fmt.Errorf("%s: %s (%s)", what, st.Message(), st.Code())
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Members returns the membership as the leader applied it.
func (s *Spec) Members(ctx context.Context) (*kvpb.MembershipResponse, error) {
	if External(s.System) {
		return nil, cmdline.Usagef("cluster members: %s clusters are not supported (use etcdctl member list)", Label(s.System))
	}
	var r *kvpb.MembershipResponse
	err := s.adminCall(ctx, func(ctx context.Context, c kvpb.AdminClient) error {
		var err error
		r, err = c.MemberList(ctx, &kvpb.MemberListRequest{})
		return err
	})
	if err != nil {
		return nil, adminError("member list", err)
	}
	return r, nil
}

// AddMember starts a new node (a fresh id, free ports, an empty data
// directory under DIR/nodeID), adds it as a learner and, if promote, makes
// it a voter once it has caught up. It returns the new node. On failure the
// new process is stopped and cluster.json left as it was.
func (s *Spec) AddMember(ctx context.Context, promote bool) (*Node, error) {
	if External(s.System) {
		return nil, cmdline.Usagef("cluster add: %s clusters are not supported (use etcdctl member add)", Label(s.System))
	}
	s.fixIdentity()
	ml, err := s.Members(ctx)
	if err != nil {
		return nil, err
	}
	if len(ml.BootstrapVoters) == 0 {
		return nil, fmt.Errorf("cluster add: the leader reported no bootstrap voters")
	}
	b, err := s.backend()
	if err != nil {
		return nil, err
	}
	id := s.NextID
	s.Nodes = append(s.Nodes, Node{ID: id, BootstrapVoters: ml.BootstrapVoters})
	added := &s.Nodes[len(s.Nodes)-1]
	undo := func() {
		if added.Agent != "" {
			_ = b.remove(ctx, s, added, true)
		}
		s.Nodes = s.Nodes[:len(s.Nodes)-1]
	}
	if err := b.place(ctx, s, added); err != nil {
		undo()
		return nil, fmt.Errorf("cluster add: %w", err)
	}
	s.NextID = id + 1
	if s.Links {
		// The running members learn the new one's proxy through their
		// -dialPeersFile, which their agents rewrite.
		for i := range s.Nodes[:len(s.Nodes)-1] {
			if err := s.linkPeers(ctx, &s.Nodes[i]); err != nil {
				undo()
				return nil, fmt.Errorf("cluster add: %w", err)
			}
		}
	}
	n := *added
	if err := s.start(ctx, added); err != nil {
		undo()
		return nil, err
	}
	// Two steps, each retried on another leader and idempotent: an
	// attempt whose answer was lost may have been applied.
	err = s.adminCall(ctx, func(ctx context.Context, c kvpb.AdminClient) error {
		_, err := c.AddMember(ctx, &kvpb.AddMemberRequest{Id: id, InternalAddress: n.InternalAddress, Address: n.Address})
		if st, _ := status.FromError(err); st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "already a member") {
			return nil
		}
		return err
	})
	if err != nil {
		tail := s.NodeTail(added, 10)
		undo()
		return nil, fmt.Errorf("%w (if its outcome is unknown, see `nezha cluster members`); last lines of the new node's log:\n%s",
			adminError(fmt.Sprintf("cluster add: node %d", id), err), tail)
	}
	// A member now: cluster.json lists it whatever follows.
	if err := s.Save(); err != nil {
		return nil, err
	}
	if promote {
		if err := s.Promote(ctx, id); err != nil {
			return nil, fmt.Errorf("cluster add: %w; node %d stays a learner (`nezha cluster promote` or `remove -node %d`)", err, id, id)
		}
	}
	return added, nil
}

// Promote makes learner id a voter once it has caught up (the leader
// waits for it).
func (s *Spec) Promote(ctx context.Context, id uint64) error {
	if _, err := s.Node(id); err != nil {
		return err
	}
	err := s.adminCall(ctx, func(ctx context.Context, c kvpb.AdminClient) error {
		_, err := c.PromoteMember(ctx, &kvpb.PromoteMemberRequest{Id: id})
		if st, _ := status.FromError(err); st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "already a voter") {
			return nil // an earlier attempt was applied
		}
		return err
	})
	if err != nil {
		return adminError(fmt.Sprintf("promote node %d", id), err)
	}
	return nil
}

// RemoveMember removes node id from the cluster (the leader hands its
// leadership over first), stops its process, and drops it from
// cluster.json. Its data directory is left in place.
func (s *Spec) RemoveMember(ctx context.Context, id uint64) error {
	if External(s.System) {
		return cmdline.Usagef("cluster remove: %s clusters are not supported (use etcdctl member remove)", Label(s.System))
	}
	if _, err := s.Node(id); err != nil {
		return err
	}
	s.fixIdentity()
	err := s.adminCall(ctx, func(ctx context.Context, c kvpb.AdminClient) error {
		_, err := c.RemoveMember(ctx, &kvpb.RemoveMemberRequest{Id: id})
		if st, _ := status.FromError(err); st.Code() == codes.InvalidArgument && strings.Contains(st.Message(), "is not a member") {
			return nil // an earlier attempt was applied
		}
		return err
	})
	if err != nil {
		return adminError(fmt.Sprintf("cluster remove: node %d", id), err)
	}
	n, _ := s.Node(id)
	if b, err := s.backend(); err == nil && n.Agent != "" {
		// The member is out; its process and agent stop, its data stays.
		_ = s.signalNode(ctx, n, agentpb.Sig_TERM, 10*time.Second)
		_ = b.remove(ctx, s, n, false)
	} else if n.Agent == "" {
		_ = s.downLegacy(n)
	}
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			s.Nodes = append(s.Nodes[:i], s.Nodes[i+1:]...)
			break
		}
	}
	return s.Save()
}

// TransferLeader moves the leadership to node id (0: the most caught-up
// voter) and returns the new leader.
func (s *Spec) TransferLeader(ctx context.Context, id uint64) (uint64, error) {
	if External(s.System) {
		return 0, cmdline.Usagef("cluster transfer: %s clusters are not supported (use etcdctl move-leader)", Label(s.System))
	}
	if id != 0 {
		if _, err := s.Node(id); err != nil {
			return 0, err
		}
	}
	var r *kvpb.MembershipResponse
	err := s.adminCall(ctx, func(ctx context.Context, c kvpb.AdminClient) error {
		var err error
		r, err = c.TransferLeader(ctx, &kvpb.TransferLeaderRequest{Id: id})
		return err
	})
	if err != nil {
		return 0, adminError("cluster transfer", err)
	}
	return r.LeaderId, nil
}

// Replace removes member id and adds a fresh member in its place (a new
// id, an empty data directory, caught up from the leader's log or a
// snapshot, then promoted): the way back for a member that lost data it
// had acknowledged (its node refuses to continue). It returns the new
// node.
func (s *Spec) Replace(ctx context.Context, id uint64) (*Node, error) {
	if err := s.RemoveMember(ctx, id); err != nil {
		return nil, err
	}
	n, err := s.AddMember(ctx, true)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("node %d was removed, but its replacement was not added", id), err)
	}
	return n, nil
}
