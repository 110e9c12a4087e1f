package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/vfs"
	"github.com/nezha-harness/nezha/systems"
)

// Membership change of a running cluster (the kvpb.Admin service), through
// etcd raft's ConfChangeV2, one single-member change at a time (Raft
// thesis section 4.1; no joint consensus is needed for one voter):
//
//   - AddMember proposes ConfChangeAddLearnerNode. Its Context (confContext,
//     JSON) carries the new member's internal and client addresses: every
//     node that applies the entry adds the member to its transport. The
//     leader then replicates its log to the learner, or a snapshot if the
//     log was compacted below the learner's match (snapshot.go).
//   - PromoteMember waits until the learner has acknowledged entries and
//     its match index is within promoteMaxLagEntries of the leader's
//     commit index, and proposes ConfChangeAddNode; it stops waiting
//     (Unavailable) when this node stops leading.
//   - RemoveMember proposes ConfChangeRemoveNode; the leader removing
//     itself first transfers its leadership to the most caught-up voter
//     (raft.RawNode.TransferLeader) and sends the client to it. A node that
//     applies its own removal, or whose peer streams are refused as removed
//     (admitPeer), refuses client requests from then on (removedErr) and
//     says why in its log.
//
// etcd raft silently replaces a conf change proposed while an earlier one is
// unapplied (or before a new leader applied its predecessors' entries) by
// an empty entry; confPending refuses such a proposal with a clear error
// instead.

// promoteMaxLagEntries is how far, in log entries, a learner's match index
// may trail the leader's commit index for PromoteMember to make it a
// voter: a voter that far behind catches up within a few heartbeats.
const promoteMaxLagEntries = 1000

// removedMarker is in the status a node answers a removed member's peer
// stream with; the removed node recognises it (transport.runPeer).
const removedMarker = "was removed from the cluster"

// confContext is the Context of a conf change this node proposes (JSON).
type confContext struct {
	// RequestID identifies the proposal on its proposer (waitRegistry).
	RequestID uint64 `json:"request_id,omitempty"`
	// ID, InternalAddress and Address describe an added member.
	ID              uint64 `json:"id,omitempty"`
	InternalAddress string `json:"internal_address,omitempty"`
	Address         string `json:"address,omitempty"`
}

// decodeConfChange decodes a conf change entry; ok is false for other
// entries and for undecodable ones (logged).
func decodeConfChange(e raftpb.Entry, logger *slog.Logger) (raftpb.ConfChangeI, bool) {
	switch e.Type {
	case raftpb.EntryConfChange:
		var c raftpb.ConfChange
		if err := c.Unmarshal(e.Data); err != nil {
			logger.Error("undecodable conf change; ignored", "index", e.Index, "err", err)
			return nil, false
		}
		return c, true
	case raftpb.EntryConfChangeV2:
		var c raftpb.ConfChangeV2
		if err := c.Unmarshal(e.Data); err != nil {
			logger.Error("undecodable conf change; ignored", "index", e.Index, "err", err)
			return nil, false
		}
		return c, true
	}
	return nil, false
}

func confContextOf(cc raftpb.ConfChangeI) confContext {
	var c confContext
	if v2 := cc.AsV2(); len(v2.Context) > 0 {
		_ = json.Unmarshal(v2.Context, &c) // a foreign context: no addresses
	}
	return c
}

// setConfState sets the membership (Ready loop, or open).
func (n *Node) setConfState(cs raftpb.ConfState) {
	n.confState = cs
	pub := cs
	n.confPub.Store(&pub)
}

// memberAddresses returns the members of the applied membership with the
// addresses this node knows (any goroutine).
func (n *Node) memberAddresses() []*kvpb.Member {
	cs := n.confPub.Load()
	if cs == nil {
		return nil
	}
	var out []*kvpb.Member
	add := func(id uint64, learner bool) {
		m := &kvpb.Member{Id: id, Learner: learner}
		if a, ok := n.internalAddrs.Load(id); ok {
			m.InternalAddress = a.(string)
		}
		if id == n.id {
			m.Address = n.cfg.Address
		} else if a, ok := n.peerAddrs.Load(id); ok {
			m.Address = a.(string)
		}
		out = append(out, m)
	}
	for _, id := range cs.Voters {
		add(id, false)
	}
	for _, id := range cs.Learners {
		add(id, true)
	}
	slices.SortFunc(out, func(a, b *kvpb.Member) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// isMember reports whether id is a voter or learner of cs.
func isMember(cs raftpb.ConfState, id uint64) bool {
	return slices.Contains(cs.Voters, id) || slices.Contains(cs.Learners, id) ||
		slices.Contains(cs.VotersOutgoing, id) || slices.Contains(cs.LearnersNext, id)
}

// openMembership records the members' addresses from -peers and from the
// address book, and replays the conf changes between the log's compaction
// point and the applied index into raft: InitialState holds the
// compaction point's membership, and raft re-delivers only the entries
// above the applied index. The book holds the addresses of members added
// below the compaction point (or before a snapshot this node installed);
// the replay fills what an older data directory's missing book lacks.
func (n *Node) openMembership(applied uint64) error {
	ids, addrs, _ := n.cfg.members()
	for i, id := range ids {
		n.internalAddrs.Store(id, addrs[i])
	}
	book, err := readAddressBook(n.fsys, n.addressBookPath())
	if err != nil {
		n.logger.Error("the member address book is unreadable; members added before the log's compaction point may lack addresses "+
			"(-dialPeersFile can name them)", "err", err)
	}
	n.learnAddresses(book)
	replayed := false
	first, _ := n.log.FirstIndex()
	for _, idx := range n.log.ConfChangeIndexes(first, applied) {
		ents, err := n.log.Entries(idx, idx+1, math.MaxUint64)
		if err != nil || len(ents) != 1 {
			return fmt.Errorf("replay the conf change at index %d: %v", idx, err)
		}
		cc, ok := decodeConfChange(ents[0], n.logger)
		if !ok {
			continue
		}
		n.setConfState(*n.rn.ApplyConfChange(cc))
		cctx := confContextOf(cc)
		for _, c := range cc.AsV2().Changes {
			switch c.Type {
			case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
				if c.NodeID == cctx.ID && n.learnAddresses(addressBook{c.NodeID: {InternalAddress: cctx.InternalAddress, Address: cctx.Address}}) {
					replayed = true
				}
			case raftpb.ConfChangeRemoveNode:
				n.removedIDs.Store(c.NodeID, idx)
			}
		}
	}
	if replayed {
		// A book older than the log (or none: a data directory of an
		// earlier version), before a compaction drops these entries.
		n.saveAddressBook()
	}
	if v, ok := n.removedIDs.Load(n.id); ok {
		n.markRemoved(fmt.Sprintf("removed from the cluster by the conf change at index %d", v))
	}
	n.logger.Info("membership", "conf_state", n.confState.String())
	return nil
}

// addressBookName is the file in the data directory that keeps the
// addresses this node learned of the members (addressBook, JSON): a conf
// change's context carries an added member's addresses, and a compaction
// of the log drops the entry, so a restart would not know them.
const addressBookName = "members.json"

// memberAddrs are the addresses of one member.
type memberAddrs struct {
	InternalAddress string `json:"internal_address,omitempty"`
	Address         string `json:"address,omitempty"` // client address (-address)
}

// addressBook maps member ids to their addresses: the address book file,
// and the Data of a MsgSnap this node sends (the members' addresses go
// with the snapshot's membership, whose conf changes the receiver never
// sees).
type addressBook map[uint64]memberAddrs

func (n *Node) addressBookPath() string { return filepath.Join(n.cfg.DataDir, addressBookName) }

// readAddressBook reads the book at path (none: an empty book).
func readAddressBook(fsys vfs.FileSystem, path string) (addressBook, error) {
	b, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var book addressBook
	if err == nil {
		err = json.Unmarshal(b, &book)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return book, nil
}

// learnAddresses records the addresses of book that this node does not
// know yet (-peers and what a member announced itself take precedence)
// and reports whether it recorded any.
func (n *Node) learnAddresses(book addressBook) bool {
	learned := false
	for id, a := range book {
		if a.InternalAddress != "" {
			if _, known := n.internalAddrs.LoadOrStore(id, a.InternalAddress); !known {
				learned = true
			}
		}
		if a.Address != "" && id != n.id {
			if _, known := n.peerAddrs.LoadOrStore(id, a.Address); !known {
				learned = true
			}
		}
	}
	return learned
}

// addressBook returns the addresses this node knows (any goroutine).
func (n *Node) addressBook() addressBook {
	book := addressBook{}
	n.internalAddrs.Range(func(k, v any) bool {
		a := book[k.(uint64)]
		a.InternalAddress = v.(string)
		book[k.(uint64)] = a
		return true
	})
	n.peerAddrs.Range(func(k, v any) bool {
		a := book[k.(uint64)]
		a.Address = v.(string)
		book[k.(uint64)] = a
		return true
	})
	book[n.id] = memberAddrs{InternalAddress: n.cfg.InternalAddress, Address: n.cfg.Address}
	return book
}

// saveAddressBook writes what this node knows of the members' addresses
// to the address book file (any goroutine; a membership change or an
// address learned, both rare). A failure is logged: the node runs on, and
// a restart may then lack the addresses of members added before the log's
// compaction point.
func (n *Node) saveAddressBook() {
	n.bookMu.Lock()
	defer n.bookMu.Unlock()
	b, err := json.Marshal(n.addressBook())
	if err == nil {
		err = writeFileDurably(n.fsys, n.cfg.DataDir, addressBookName, b)
	}
	if err != nil {
		n.logger.Error("member address book not written: after a restart, members added before the log's compaction point "+
			"may lack addresses (-dialPeersFile can name them)", "err", err)
	}
}

// noteConfChange updates the transport and the node after raft applied the
// conf change at index (Ready loop).
func (n *Node) noteConfChange(index uint64, cc raftpb.ConfChangeI) {
	cctx := confContextOf(cc)
	for _, c := range cc.AsV2().Changes {
		switch c.Type {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			if c.NodeID == cctx.ID && cctx.InternalAddress != "" {
				n.internalAddrs.Store(c.NodeID, cctx.InternalAddress)
				if cctx.Address != "" && c.NodeID != n.id {
					n.peerAddrs.Store(c.NodeID, cctx.Address)
				}
				// Before the state machine applies (and may compact
				// past) the entry.
				n.saveAddressBook()
			}
			if c.NodeID == n.id {
				continue
			}
			if addr := n.dialAddress(c.NodeID); addr != "" {
				n.transport.addPeer(c.NodeID, addr)
			} else {
				n.logger.Error("a new member's address is unknown: this node cannot reach it", "member", c.NodeID, "index", index)
			}
		case raftpb.ConfChangeRemoveNode:
			n.removedIDs.Store(c.NodeID, index)
			if c.NodeID == n.id {
				n.markRemoved(fmt.Sprintf("removed from the cluster by the conf change at index %d", index))
			} else {
				n.transport.removePeer(c.NodeID)
			}
		}
	}
	if cctx.RequestID != 0 {
		n.proposals.trigger(cctx.RequestID, applyResult{index: index})
	}
}

// dialAddress is the address this node dials for member id: -dialPeers or
// -peers if they name it, else -dialPeersFile's entry for it, else the
// address its conf change carried.
func (n *Node) dialAddress(id uint64) string {
	if a := n.cfg.dialAddress(id); a != "" {
		return a
	}
	if a := n.dialFileAddress(id); a != "" {
		return a
	}
	if a, ok := n.internalAddrs.Load(id); ok {
		return a.(string)
	}
	return ""
}

// dialFileAddress returns -dialPeersFile's address for member id, "" if
// there is none (no file, no entry; a file that cannot be read or parsed
// is logged and ignored).
func (n *Node) dialFileAddress(id uint64) string {
	if n.cfg.DialPeersFile == "" {
		return ""
	}
	b, err := os.ReadFile(n.cfg.DialPeersFile)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	var addrs map[string]string
	if err == nil {
		err = json.Unmarshal(b, &addrs)
	}
	if err != nil {
		n.logger.Warn("-dialPeersFile ignored", "file", n.cfg.DialPeersFile, "err", err)
		return ""
	}
	return addrs[strconv.FormatUint(id, 10)]
}

// noteEntries tracks, on the Ready loop, what confPending needs: the newest
// conf change entry appended, raft's applied index, and the log's last
// index when this node became leader.
func (n *Node) noteEntries(rd raft.Ready, last uint64) {
	sawConf := false
	for _, e := range rd.Entries {
		if e.Type == raftpb.EntryConfChange || e.Type == raftpb.EntryConfChangeV2 {
			n.lastConfIndex, sawConf = e.Index, true
		}
	}
	if n.lastConfIndex == math.MaxUint64 && !sawConf && len(rd.Entries) > 0 {
		// Raft replaced the proposal by an empty entry.
		n.lastConfIndex = rd.Entries[len(rd.Entries)-1].Index
	}
	if k := len(rd.CommittedEntries); k > 0 {
		n.raftApplied = rd.CommittedEntries[k-1].Index
	}
	leading := raft.StateType(n.raftState.Load()) == raft.StateLeader
	if leading && n.leaderSince == 0 {
		n.leaderSince = last
	} else if !leading {
		n.leaderSince = 0
	}
}

// confPending returns why a conf change cannot be proposed now (Ready
// loop, leader), or nil.
func (n *Node) confPending() error {
	switch {
	case n.lastConfIndex == math.MaxUint64 || n.lastConfIndex > n.raftApplied:
		at := "just proposed"
		if n.lastConfIndex != math.MaxUint64 {
			at = fmt.Sprintf("at log index %d", n.lastConfIndex)
		}
		return notYet("another membership change (%s) is not applied yet (applied index %d): "+
			"etcd raft takes one change at a time; retry once it is", at, n.raftApplied)
	case n.leaderSince > n.raftApplied:
		return fmt.Errorf("%w: node %d became leader at log index %d and has applied up to %d", errNewLeader, n.id, n.leaderSince, n.raftApplied)
	}
	return nil
}

// errNewLeader: a new leader has not applied its predecessors' entries
// yet; etcd raft takes no conf change before. It passes within a round
// trip, so proposeConfChange waits it out.
var errNewLeader = errors.New("a new leader is applying its log; etcd raft takes no membership change before")

// notYetError is a refusal of a membership change that passes by itself
// on this leader: another change is not applied yet, a new leader has not
// applied its predecessors' entries, a learner has not caught up. Its
// status is FailedPrecondition, as is that of leaderOnly's refusals, which
// do not pass on this node; promote waits out these and ends on any other.
type notYetError struct{ st *status.Status }

func (e notYetError) Error() string              { return e.st.Err().Error() }
func (e notYetError) GRPCStatus() *status.Status { return e.st }

// notYet returns a notYetError with the formatted message.
func notYet(format string, args ...any) error {
	return notYetError{st: status.Newf(codes.FailedPrecondition, format, args...)}
}

// markRemoved makes this node refuse client requests from now on.
func (n *Node) markRemoved(why string) {
	if n.removed.CompareAndSwap(nil, &why) {
		n.logger.Error("this node is no longer a member of the cluster: it refuses client requests from now on; "+
			"stop it (a new member takes a fresh data directory: nezha cluster add/replace)", "reason", why)
		if n.health != nil {
			n.setHealth(false)
		}
	}
}

// removedErr is the answer of a removed node to a client request, or nil.
func (n *Node) removedErr() error {
	p := n.removed.Load()
	if p == nil {
		return nil
	}
	return status.Errorf(codes.Aborted, "node %d %s (%s): it serves no requests; use the other members", n.id, removedMarker, *p)
}

// leaderOnly returns an error naming the leader unless this node leads
// (Ready loop).
func (n *Node) leaderOnly() error {
	if err := n.removedErr(); err != nil {
		return status.Errorf(codes.FailedPrecondition, "%s", status.Convert(err).Message())
	}
	if n.rn.BasicStatus().RaftState == raft.StateLeader {
		return nil
	}
	lead := n.lead.Load()
	if lead == raft.None {
		return status.Errorf(codes.FailedPrecondition, "node %d is not the leader and knows none; retry", n.id)
	}
	addr, _ := n.peerAddrs.Load(lead)
	return status.Errorf(codes.FailedPrecondition, "node %d is not the leader; node %d is (address %v)", n.id, lead, addr)
}

// proposeConfChange proposes one change with its context and waits until
// this node applied it; check runs first on the Ready loop (leader).
func (n *Node) proposeConfChange(ctx context.Context, change raftpb.ConfChangeSingle, cctx confContext, check func() error) (uint64, error) {
	cctx.RequestID = n.nextRequestID()
	cc, err := newConfChange(change, cctx)
	if err != nil {
		return 0, err
	}
	ch := n.proposals.register(cctx.RequestID)
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	for waited := 0; ; waited++ {
		err = n.inLoop(ctx, func() error { return n.tryConfChange(cctx.RequestID, cc, check) })
		if !errors.Is(err, errNewLeader) || waited >= leaderWaitElectionTimeouts*n.cfg.ElectionTicks {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	if errors.Is(err, errNewLeader) {
		err = notYet("%v; retry in a moment", err)
	}
	if err != nil {
		n.proposals.cancel(cctx.RequestID)
		return 0, adminError(err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return 0, status.Errorf(codes.Unavailable, "membership change outcome unknown: %v; see MemberList", r.err)
		}
		n.logger.Info("membership changed", "change", change.String(), "index", r.index)
		return r.index, nil
	case <-ctx.Done():
		n.proposals.cancel(cctx.RequestID)
		return 0, status.Errorf(codes.DeadlineExceeded, "membership change proposed but not applied in time: outcome unknown; see MemberList")
	case <-n.failed:
		n.proposals.cancel(cctx.RequestID)
		return 0, status.Errorf(codes.Unavailable, "node failed: %v", n.Err())
	}
}

// newConfChange is the ConfChangeV2 of one change with its context.
func newConfChange(change raftpb.ConfChangeSingle, cctx confContext) (raftpb.ConfChangeV2, error) {
	data, err := json.Marshal(cctx)
	if err != nil {
		return raftpb.ConfChangeV2{}, err
	}
	return raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{change}, Context: data}, nil
}

// tryConfChange proposes cc for request requestID now, unless this node
// does not lead or check (if not nil) refuses (Ready loop).
func (n *Node) tryConfChange(requestID uint64, cc raftpb.ConfChangeV2, check func() error) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	return n.proposeConfChangeInLoop(requestID, cc)
}

// proposeConfChangeInLoop proposes cc unless another change is pending
// (Ready loop).
func (n *Node) proposeConfChangeInLoop(requestID uint64, cc raftpb.ConfChangeV2) error {
	if err := n.confPending(); err != nil {
		return err
	}
	if err := n.rn.ProposeConfChange(cc); err != nil {
		return status.Errorf(codes.Aborted, "membership change not accepted by raft: %v; retry", err)
	}
	n.lastConfIndex = math.MaxUint64 // until its Ready shows the index
	n.proposals.proposed(n.propEpoch, requestID)
	return nil
}

// adminError maps an internal error to a gRPC status (statuses pass).
func adminError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.Errorf(codes.DeadlineExceeded, "%v", err)
	case errors.Is(err, errStopping):
		return status.Errorf(codes.Unavailable, "%v", err)
	}
	return status.Errorf(codes.Internal, "%v", err)
}

// progress returns raft's progress of every member (Ready loop; leader
// only, else nil) and the commit index.
func (n *Node) progress() (map[uint64]tracker.Progress, uint64) {
	st := n.rn.Status()
	return st.Progress, st.Commit
}

// membersInLoop returns the membership this node applied, with the
// leader's match indexes (Ready loop).
func (n *Node) membersInLoop() []*kvpb.Member {
	prs, _ := n.progress()
	out := n.memberAddresses()
	for _, m := range out {
		m.MatchIndex = prs[m.Id].Match
	}
	return out
}

// adminServer serves kvpb.Admin.
type adminServer struct {
	kvpb.UnimplementedAdminServer
	n *Node
}

// adminTimeout bounds a membership request without a client deadline: a
// learner catching up through a large snapshot takes a while.
const adminTimeout = 5 * time.Minute

func (s *adminServer) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, adminTimeout)
}

// response builds a MembershipResponse after a change at index.
func (s *adminServer) response(ctx context.Context, index uint64) (*kvpb.MembershipResponse, error) {
	n := s.n
	r := &kvpb.MembershipResponse{NodeId: n.id, Index: index}
	err := n.inLoop(ctx, func() error {
		r.Members = n.membersInLoop()
		r.LeaderId = n.lead.Load()
		_, cs, _ := n.log.InitialState()
		r.BootstrapVoters = append(cs.Voters, cs.VotersOutgoing...)
		return nil
	})
	if err != nil {
		return nil, adminError(err)
	}
	return r, nil
}

func (s *adminServer) MemberList(ctx context.Context, _ *kvpb.MemberListRequest) (*kvpb.MembershipResponse, error) {
	return s.response(ctx, 0)
}

// checkHostPort says why a is not host:port with a port in 1..65535.
func checkHostPort(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil || port == "" {
		return errors.New("is not host:port")
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("is not host:port (port %q is not a number in 1..65535)", port)
	}
	return nil
}

func (s *adminServer) AddMember(ctx context.Context, req *kvpb.AddMemberRequest) (*kvpb.MembershipResponse, error) {
	n := s.n
	if req.Id == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "add member: id 0 is not a member id")
	}
	if req.Id > MaxNodeID {
		return nil, status.Errorf(codes.InvalidArgument, "add member: ids above %d are reserved by etcd raft", uint64(MaxNodeID))
	}
	if req.InternalAddress == "" {
		return nil, status.Errorf(codes.InvalidArgument, "add member %d: internal (Raft) address is required", req.Id)
	}
	// The addresses are dialled by every member (and written to
	// cluster.json): refuse what no node could listen on, as serve's
	// -internalAddress and -address are.
	if err := checkHostPort(req.InternalAddress); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "add member %d: internal address %q %v", req.Id, req.InternalAddress, err)
	}
	if req.Address != "" {
		if err := checkHostPort(req.Address); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "add member %d: client address %q %v", req.Id, req.Address, err)
		}
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	check := func() error { return n.checkAddMember(req.Id, req.InternalAddress) }
	idx, err := n.proposeConfChange(ctx, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: req.Id},
		confContext{ID: req.Id, InternalAddress: req.InternalAddress, Address: req.Address}, check)
	if err != nil {
		return nil, err
	}
	if req.Promote {
		if idx, err = s.promote(ctx, req.Id); err != nil {
			return nil, status.Errorf(status.Code(err), "member %d added as a learner at index %d, not promoted: %s", req.Id, idx, status.Convert(err).Message())
		}
	}
	return s.response(ctx, idx)
}

func (s *adminServer) PromoteMember(ctx context.Context, req *kvpb.PromoteMemberRequest) (*kvpb.MembershipResponse, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	idx, err := s.promote(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return s.response(ctx, idx)
}

// checkAddMember says why member id with internal address addr cannot be
// added now (Ready loop, leader), or nil.
func (n *Node) checkAddMember(id uint64, addr string) error {
	if isMember(n.confState, id) {
		return status.Errorf(codes.InvalidArgument, "add member: id %d is already a member", id)
	}
	if at, ok := n.removedIDs.Load(id); ok {
		return status.Errorf(codes.InvalidArgument, "add member: id %d was removed at index %d; ids are never reused", id, at)
	}
	for _, ids := range [][]uint64{n.confState.Voters, n.confState.Learners} {
		for _, m := range ids {
			if a, ok := n.internalAddrs.Load(m); ok && a.(string) == addr {
				return status.Errorf(codes.InvalidArgument, "add member: address %s is already member %d's", addr, m)
			}
		}
	}
	return nil
}

// checkPromote says why learner id cannot be made a voter now (Ready
// loop, leader), or nil; a notYetError: it has not caught up.
func (n *Node) checkPromote(id uint64) error {
	if !slices.Contains(n.confState.Learners, id) {
		if slices.Contains(n.confState.Voters, id) {
			return status.Errorf(codes.InvalidArgument, "promote: member %d is already a voter", id)
		}
		return status.Errorf(codes.InvalidArgument, "promote: %d is not a learner of this cluster", id)
	}
	prs, commit := n.progress()
	if match := prs[id].Match; match == 0 || match+promoteMaxLagEntries < commit {
		return notYet("promote: learner %d has not caught up: match index %d, leader commit %d (it may trail by %d)",
			id, match, commit, promoteMaxLagEntries)
	}
	return nil
}

// checkRemoveMember says why member id cannot be removed now (Ready loop,
// leader), or nil.
func (n *Node) checkRemoveMember(id uint64) error {
	if !isMember(n.confState, id) {
		return status.Errorf(codes.InvalidArgument, "remove: %d is not a member (members: voters %v, learners %v)", id, n.confState.Voters, n.confState.Learners)
	}
	if len(n.confState.Voters) == 1 && n.confState.Voters[0] == id {
		return status.Errorf(codes.InvalidArgument, "remove: %d is the last voter; a cluster needs one", id)
	}
	return nil
}

// promoteWaitMsg is what promote logs when it starts waiting for a
// refusal to pass (a notYetError).
const promoteWaitMsg = "promote: waiting for the learner"

// promote waits until learner id has caught up, then makes it a voter. It
// waits only while this node leads: once it does no longer, it ends at
// once (within a tick) with Unavailable, which clients retry on the
// leader, rather than at its deadline (a leader that lost its leadership
// while a learner caught up made the promotion fail).
func (s *adminServer) promote(ctx context.Context, id uint64) (uint64, error) {
	n := s.n
	check := func() error { return n.checkPromote(id) }
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	for waited := false; ; waited = true {
		idx, err := n.proposeConfChange(ctx, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddNode, NodeID: id}, confContext{}, check)
		if err == nil || ctx.Err() != nil {
			return idx, err
		}
		if !errors.As(err, new(notYetError)) {
			if waited && raft.StateType(n.raftState.Load()) != raft.StateLeader {
				// This node led when the wait began.
				return 0, status.Errorf(codes.Unavailable, "promote: node %d is not the leader any more (%s); learner %d not promoted: retry on the leader",
					n.id, status.Convert(err).Message(), id)
			}
			return idx, err
		}
		if !waited {
			n.logger.Info(promoteWaitMsg, "learner", id, "reason", status.Convert(err).Message())
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, err
		}
	}
}

func (s *adminServer) RemoveMember(ctx context.Context, req *kvpb.RemoveMemberRequest) (*kvpb.MembershipResponse, error) {
	n := s.n
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	check := func() error { return n.checkRemoveMember(req.Id) }
	if req.Id == n.id {
		// The leader removing itself hands over its leadership first.
		if err := n.inLoop(ctx, func() error {
			if err := n.leaderOnly(); err != nil {
				return err
			}
			return check()
		}); err != nil {
			return nil, adminError(err)
		}
		to, err := s.transfer(ctx, 0)
		if err != nil {
			return nil, err
		}
		addr, _ := n.peerAddrs.Load(to)
		return nil, status.Errorf(codes.Unavailable, "node %d was the leader: leadership transferred to node %d (address %v); send the removal there", n.id, to, addr)
	}
	idx, err := n.proposeConfChange(ctx, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: req.Id}, confContext{}, check)
	if err != nil {
		return nil, err
	}
	return s.response(ctx, idx)
}

func (s *adminServer) TransferLeader(ctx context.Context, req *kvpb.TransferLeaderRequest) (*kvpb.MembershipResponse, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if _, err := s.transfer(ctx, req.Id); err != nil {
		return nil, err
	}
	return s.response(ctx, 0)
}

// transferAttempts bounds how often transfer asks raft again: raft gives
// up a transfer the target did not complete within an election timeout
// (a slow or busy target).
const transferAttempts = 5

// transfer moves the leadership to voter to (0: the voter with the highest
// match index among those recently active, else among all, chosen again
// at each attempt) and waits until it has it, asking raft again each election
// timeout (up to transferAttempts times) while this node still leads.
func (s *adminServer) transfer(ctx context.Context, to uint64) (uint64, error) {
	n := s.n
	electionTimeout := time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
	tick := time.NewTicker(n.cfg.TickInterval / 4)
	defer tick.Stop()
	auto := to == 0
	for attempt := 1; ; attempt++ {
		err := n.inLoop(ctx, func() error {
			if n.lead.Load() == to && to != 0 {
				return nil // done (an earlier attempt)
			}
			if auto {
				// Choose again: a voter that went down has stopped
				// being recently active by now.
				to = 0
			}
			if err := n.leaderOnly(); err != nil {
				return err
			}
			prs, _ := n.progress()
			if to == 0 {
				// The most caught-up voter among those heard from in
				// the last election timeout (a voter that is down may
				// be the most caught up), else among all.
				better := func(id uint64) bool {
					if a, b := prs[id].RecentActive, prs[to].RecentActive; a != b {
						return a
					}
					return prs[id].Match > prs[to].Match
				}
				for _, id := range n.confState.Voters {
					if id != n.id && (to == 0 || better(id)) {
						to = id
					}
				}
				if to == 0 {
					return status.Errorf(codes.FailedPrecondition, "transfer: node %d is the only voter", n.id)
				}
			}
			if !slices.Contains(n.confState.Voters, to) {
				return status.Errorf(codes.InvalidArgument, "transfer: %d is not a voter (voters %v)", to, n.confState.Voters)
			}
			if to != n.id {
				n.rn.TransferLeader(to)
			}
			return nil
		})
		if err != nil {
			return 0, adminError(err)
		}
		deadline := time.NewTimer(electionTimeout)
		for n.lead.Load() != to {
			select {
			case <-tick.C:
				continue
			case <-deadline.C:
			case <-ctx.Done():
				deadline.Stop()
				return 0, status.Errorf(codes.DeadlineExceeded, "transfer: %v", ctx.Err())
			}
			break
		}
		deadline.Stop()
		if n.lead.Load() == to {
			n.logger.Info("leadership transferred", "to", to)
			return to, nil
		}
		if attempt == transferAttempts {
			return 0, status.Errorf(codes.Unavailable, "transfer: node %d did not take the leadership after %d attempts (leader now %d)",
				to, attempt, n.lead.Load())
		}
	}
}

// TakeSnapshot has the state machine make its applied state durable and
// compact this node's Raft log up to it (systems.SnapshotTaker), for
// raftpico's TakeSnapshot and `nezha cluster compact`. A state machine that
// cannot send a follower a snapshot (no systems.Snapshotter) never compacts
// its log: Unimplemented, as for one that refuses
// (systems.ErrSnapshotUnsupported).
func (s *adminServer) TakeSnapshot(ctx context.Context, _ *kvpb.TakeSnapshotRequest) (*kvpb.TakeSnapshotResponse, error) {
	n := s.n
	taker, ok := n.sm.(systems.SnapshotTaker)
	if _, ships := n.sm.(systems.Snapshotter); !ok || !ships {
		return nil, status.Errorf(codes.Unimplemented,
			"take snapshot: %s never compacts its Raft log (it cannot send a follower a snapshot in place of compacted entries)", n.cfg.System.Name)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	r := &kvpb.TakeSnapshotResponse{NodeId: n.id, AppliedIndex: n.applied.Load()}
	// The leader's compact bound follows its followers' match indexes at
	// every tick; bring it up to date first, so that the snapshot covers
	// what they acknowledged up to now.
	if err := n.inLoop(ctx, func() error { n.updateCompactBound(); return nil }); err != nil {
		return nil, adminError(err)
	}
	index, err := taker.TakeSnapshot(ctx)
	if errors.Is(err, systems.ErrSnapshotUnsupported) {
		return nil, status.Errorf(codes.Unimplemented, "take snapshot: %v", err)
	}
	if err != nil {
		return nil, adminError(fmt.Errorf("take snapshot: %w", err))
	}
	r.SnapshotIndex = index
	// Publish the new first index now rather than at the next Ready.
	err = n.inLoop(ctx, func() error {
		first, _ := n.log.FirstIndex()
		n.firstIndex.Store(first)
		r.FirstIndex = first
		return nil
	})
	if err != nil {
		return nil, adminError(err)
	}
	n.logger.Info("snapshot taken on request: Raft log compacted", "snapshot_index", index, "first_index", r.FirstIndex)
	return r, nil
}
