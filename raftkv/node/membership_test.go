package node

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/jsonrpc"
	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/systems"
)

// addNode starts a new node with id that joins tc's cluster (not yet a
// member: the leader's AddMember makes it one) and returns its index.
func (tc *testCluster) addNode(t *testing.T, id uint64, bootstrap []uint64) int {
	t.Helper()
	return tc.startJoining(tc.joinConfig(t, id, bootstrap))
}

// joinConfig is the configuration of a new node with id that joins tc's
// cluster: -peers names every node of tc and itself.
func (tc *testCluster) joinConfig(t *testing.T, id uint64, bootstrap []uint64) Config {
	t.Helper()
	addrs := freeAddrs(t, 2)
	c := tc.cfgs[0]
	c.Address, c.InternalAddress = addrs[0], addrs[1]
	c.DataDir = t.TempDir()
	c.CampaignOnBoot = false
	c.ClusterID = tc.cfgs[0].clusterID()
	c.BootstrapVoters = bootstrap
	c.Peers = nil
	for _, o := range tc.cfgs {
		c.Peers = append(c.Peers, fmt.Sprintf("%d=%s", o.ID(), o.InternalAddress))
	}
	c.Peers = append(c.Peers, fmt.Sprintf("%d=%s", id, c.InternalAddress))
	return c
}

// startJoining starts a node with c (joinConfig) and returns its index.
func (tc *testCluster) startJoining(c Config) int {
	tc.cfgs = append(tc.cfgs, c)
	tc.nodes = append(tc.nodes, nil)
	tc.start(len(tc.nodes) - 1)
	return len(tc.nodes) - 1
}

func (tc *testCluster) admin(i int) *adminServer { return &adminServer{n: tc.nodes[i]} }

func ctxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// wantCode fails unless err is a status with code and a message holding
// each of parts.
func wantCode(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(st.Message(), p) {
			t.Fatalf("%s: %q does not say %q", what, st.Message(), p)
		}
	}
}

func voters(r *kvpb.MembershipResponse) (vs, ls []uint64) {
	for _, m := range r.Members {
		if m.Learner {
			ls = append(ls, m.Id)
		} else {
			vs = append(vs, m.Id)
		}
	}
	return vs, ls
}

// checkServes reads every acknowledged write from node i alone
// (linearizable reads).
func (tc *testCluster) checkServes(t *testing.T, i int, acked map[string]string) {
	t.Helper()
	c, err := client.New(client.DefaultConfig(tc.cfgs[i].Address))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := ctxFor(20 * time.Second)
	defer cancel()
	for k, want := range acked {
		v, ok, err := c.Get(ctx, []byte(k))
		if err != nil || !ok || string(v) != want {
			t.Fatalf("node %d: %s = %q (found %v, err %v), want %q", tc.nodes[i].id, k, v, ok, err, want)
		}
	}
}

// waitRemoved waits until node i refuses writes as a removed member.
func (tc *testCluster) waitRemoved(t *testing.T, i int) {
	t.Helper()
	ks := &kvServer{n: tc.nodes[i]}
	var last error
	waitFor(t, 10*time.Second, "the removed node refuses writes", func() bool {
		ctx, cancel := ctxFor(time.Second)
		defer cancel()
		_, last = ks.Put(ctx, &kvpb.PutRequest{Key: []byte("removed"), Value: []byte("x")})
		return status.Code(last) == codes.Aborted && strings.Contains(last.Error(), removedMarker)
	})
	// Linearizable reads get the same answer, which a client takes as a
	// cue to try another member (they were Internal, which it takes as
	// final: TestConformanceChangingMembers/blobdb).
	ctx, cancel := ctxFor(time.Second)
	defer cancel()
	_, gerr := ks.Get(ctx, &kvpb.GetRequest{Key: []byte("removed")})
	_, serr := ks.Scan(ctx, &kvpb.ScanRequest{Start: []byte("a")})
	for _, err := range []error{gerr, serr} {
		if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), removedMarker) {
			t.Fatalf("a read from the removed node: %v, want Aborted naming the removal", err)
		}
	}
}

// A learner joins a 3-node cluster under writes, is promoted and serves
// every acknowledged write; a follower is removed, and refuses requests.
// The Admin service's answers are checked here; the protocol, with the
// leadership moved to the new node and that node removed, runs in the
// deterministic tier (testdata/sim/membership.txt), where it does not race
// with elections under load as it did here.
func TestMembershipChange(t *testing.T) {
	tc := startCluster(t, 3)
	c := tc.client(t)
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	var mu sync.Mutex
	acked := map[string]string{}
	put := func(prefix string, from, to int) {
		for i := from; i < to; i++ {
			k, v := fmt.Sprintf("%s%03d", prefix, i), fmt.Sprintf("v%d", i)
			if _, err := c.Put(ctx, []byte(k), []byte(v)); err != nil {
				t.Errorf("put %s: %v", k, err)
				return
			}
			mu.Lock()
			acked[k] = v
			mu.Unlock()
		}
	}
	put("a", 0, 20)
	l := tc.waitLeader(10 * time.Second)
	follower := (l + 1) % 3
	_, err := tc.admin(follower).AddMember(ctx, &kvpb.AddMemberRequest{Id: 4, InternalAddress: "127.0.0.1:1"})
	wantCode(t, "add on a follower", err, codes.FailedPrecondition, "is not the leader")

	ml, err := tc.admin(l).MemberList(ctx, &kvpb.MemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	i4 := tc.addNode(t, 4, ml.BootstrapVoters)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); put("b", 0, 20) }()
	r, err := tc.admin(l).AddMember(ctx, &kvpb.AddMemberRequest{Id: 4, InternalAddress: tc.cfgs[i4].InternalAddress, Address: tc.cfgs[i4].Address})
	if err != nil {
		t.Fatal(err)
	}
	if vs, ls := voters(r); len(vs) != 3 || len(ls) != 1 || ls[0] != 4 {
		t.Fatalf("after AddMember: voters %v learners %v", vs, ls)
	}
	wg.Wait()
	r, err = tc.admin(l).PromoteMember(ctx, &kvpb.PromoteMemberRequest{Id: 4})
	if err != nil {
		t.Fatal(err)
	}
	if vs, ls := voters(r); len(vs) != 4 || len(ls) != 0 {
		t.Fatalf("after PromoteMember: voters %v learners %v", vs, ls)
	}
	put("c", 0, 10)
	tc.checkServes(t, i4, acked)

	// Remove a follower: it learns and refuses writes, saying why.
	r, err = tc.admin(l).RemoveMember(ctx, &kvpb.RemoveMemberRequest{Id: tc.nodes[follower].id})
	if err != nil {
		t.Fatal(err)
	}
	if vs, _ := voters(r); len(vs) != 3 {
		t.Fatalf("after removing a follower: voters %v", vs)
	}
	tc.waitRemoved(t, follower)
	put("d", 0, 10)
	// Status, which clients learn members from, lists the current ones.
	st, err := (&kvServer{n: tc.nodes[l]}).Status(ctx, &kvpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, m := range st.Members {
		ids = append(ids, m.Id)
		if m.Address == "" || m.InternalAddress == "" {
			t.Errorf("status member %d without addresses: %v", m.Id, m)
		}
	}
	if len(ids) != 3 || !slices.Contains(ids, 4) || slices.Contains(ids, tc.nodes[follower].id) {
		t.Fatalf("status members %v, want the three remaining", ids)
	}
	for i := range tc.nodes {
		if i != follower {
			tc.checkServes(t, i, acked)
		}
	}
}

// Bad membership requests get clear errors, and a second change proposed
// before the first is applied is refused rather than silently dropped.
func TestMembershipBadInput(t *testing.T) {
	tc := startCluster(t, 1)
	l := tc.waitLeader(10 * time.Second)
	adm := tc.admin(l)
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	_, err := adm.RemoveMember(ctx, &kvpb.RemoveMemberRequest{Id: 1})
	wantCode(t, "remove the last voter", err, codes.InvalidArgument, "last voter")
	_, err = adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: 2, InternalAddress: tc.cfgs[0].InternalAddress})
	wantCode(t, "add a member's address", err, codes.InvalidArgument, "already member 1's")
	_, err = adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: 1, InternalAddress: "127.0.0.1:1"})
	wantCode(t, "add a member's id", err, codes.InvalidArgument, "already a member")
	_, err = adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: 0, InternalAddress: "127.0.0.1:1"})
	wantCode(t, "add id 0", err, codes.InvalidArgument)
	for _, id := range []uint64{math.MaxUint64, math.MaxUint64 - 1} {
		_, err = adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: id, InternalAddress: "127.0.0.1:1"})
		wantCode(t, fmt.Sprintf("add reserved id %d", id), err, codes.InvalidArgument, "reserved by etcd raft")
	}
	for _, a := range []string{"not an address", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http"} {
		_, err = adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: 5, InternalAddress: a})
		wantCode(t, "add internal address "+a, err, codes.InvalidArgument, "not host:port")
		_, err = adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: 5, InternalAddress: "127.0.0.1:1", Address: a})
		wantCode(t, "add client address "+a, err, codes.InvalidArgument, "not host:port")
	}
	if r, err := adm.MemberList(ctx, &kvpb.MemberListRequest{}); err != nil {
		t.Fatal(err)
	} else if _, ls := voters(r); len(ls) != 0 {
		t.Fatalf("refused adds left learners %v", ls)
	}
	_, err = adm.RemoveMember(ctx, &kvpb.RemoveMemberRequest{Id: 9})
	wantCode(t, "remove a stranger", err, codes.InvalidArgument, "not a member")
	_, err = adm.TransferLeader(ctx, &kvpb.TransferLeaderRequest{Id: 9})
	wantCode(t, "transfer to a stranger", err, codes.InvalidArgument, "not a voter")
	_, err = adm.PromoteMember(ctx, &kvpb.PromoteMemberRequest{Id: 9})
	wantCode(t, "promote a stranger", err, codes.InvalidArgument, "not a learner")

	// Two changes at once: the second is refused while the first is
	// unapplied (both proposed in one turn of the Ready loop, so the first
	// cannot have applied).
	n := tc.nodes[l]
	first := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: 7}},
		Context: []byte(`{"id":7,"internal_address":"127.0.0.1:1"}`)}
	second := raftpb.ConfChangeV2{Changes: []raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddLearnerNode, NodeID: 8}}}
	var errFirst, errSecond error
	if err := n.inLoop(ctx, func() error {
		errFirst = n.proposeConfChangeInLoop(n.nextRequestID(), first)
		errSecond = n.proposeConfChangeInLoop(n.nextRequestID(), second)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if errFirst != nil {
		t.Fatalf("first change: %v", errFirst)
	}
	wantCode(t, "a second change at once", errSecond, codes.FailedPrecondition, "not applied yet", "one change at a time")
	// Once the first applies, the next change is taken.
	var r *kvpb.MembershipResponse
	waitFor(t, 10*time.Second, "learner 7 listed", func() bool {
		r, err = adm.MemberList(ctx, &kvpb.MemberListRequest{})
		_, ls := voters(r)
		return err == nil && len(ls) == 1 && ls[0] == 7
	})
	if _, err := adm.RemoveMember(ctx, &kvpb.RemoveMemberRequest{Id: 7}); err != nil {
		t.Fatal(err)
	}
	_, err = adm.AddMember(ctx, &kvpb.AddMemberRequest{Id: 7, InternalAddress: "127.0.0.1:2"})
	wantCode(t, "re-add a removed id", err, codes.InvalidArgument, "never reused")
}

// A leader removing itself hands its leadership to a voter that is up,
// even when the one that went down a moment ago is as caught up and comes
// first (found by TestConformanceChangingMembers/nezha-gc-sort-once: the
// transfer went to a killed follower, five times, and the removal failed).
func TestRemoveLeaderSkipsDownVoter(t *testing.T) {
	tc := startCluster(t, 3)
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	l := tc.waitLeader(10 * time.Second)
	var followers []int
	for i := range tc.nodes {
		if i != l {
			followers = append(followers, i)
		}
	}
	down, up := followers[0], followers[1] // voters are tried in id order
	leaderID, upID := tc.nodes[l].id, tc.nodes[up].id
	tc.stop(down)
	_, err := tc.admin(l).RemoveMember(ctx, &kvpb.RemoveMemberRequest{Id: leaderID})
	wantCode(t, "remove the leader with a follower down", err, codes.Unavailable, fmt.Sprintf("leadership transferred to node %d", upID))
}

// A promotion waiting for a learner to catch up ends as soon as its node
// stops leading, with an error clients retry on the leader, rather than
// waiting on until its deadline (found by check -nemesis membership: a
// leader lost its leadership while a learner caught up, and the promotion
// failed).
func TestPromoteEndsWithLeadership(t *testing.T) {
	waiting := make(chan struct{})
	logger := slog.New(&logSignal{msg: promoteWaitMsg, c: waiting})
	tc := startClusterWith(t, 3, func(c *Config) { c.Logger = logger })
	l := tc.waitLeader(10 * time.Second)
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	// Learner 4 at an address nobody listens on never catches up.
	if _, err := tc.admin(l).AddMember(ctx, &kvpb.AddMemberRequest{Id: 4, InternalAddress: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tc.admin(l).promote(ctx, 4)
		done <- err
	}()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("promote ended before it waited for the learner: %v", err)
	}
	if _, err := tc.admin(l).TransferLeader(ctx, &kvpb.TransferLeaderRequest{}); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if ctx.Err() != nil {
		t.Fatalf("promote on a node that stopped leading ended only at its deadline: %v", err)
	}
	wantCode(t, "promote on a node that stopped leading", err, codes.Unavailable, "not the leader any more", "retry on the leader")
}

// logSignal is a slog.Handler that drops every record and closes c at the
// first whose message is msg.
type logSignal struct {
	msg  string
	c    chan struct{}
	once sync.Once
}

func (h *logSignal) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *logSignal) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *logSignal) WithGroup(string) slog.Handler                { return h }
func (h *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.c) })
	}
	return nil
}

// A member -peers does not name is dialed at -dialPeersFile's address for
// it when the file has one (fault injection's proxies), else at the
// address its conf change carried; -peers' members at -dialPeers.
func TestDialAddressFromFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dial-peers.json")
	n := &Node{logger: slog.New(slog.DiscardHandler), cfg: Config{
		Peers: []string{"127.0.0.1:1001", "127.0.0.1:1002"}, DialPeers: []string{"127.0.0.1:2001", "127.0.0.1:2002"},
		InternalAddress: "127.0.0.1:1001", DialPeersFile: file,
	}}
	n.internalAddrs.Store(uint64(3), "127.0.0.1:1003")
	n.internalAddrs.Store(uint64(4), "127.0.0.1:1004")
	check := func(when string, want map[uint64]string) {
		t.Helper()
		for id, w := range want {
			if got := n.dialAddress(id); got != w {
				t.Fatalf("%s: member %d dialed at %q, want %q", when, id, got, w)
			}
		}
	}
	check("no file", map[uint64]string{2: "127.0.0.1:2002", 3: "127.0.0.1:1003", 4: "127.0.0.1:1004", 5: ""})
	if err := os.WriteFile(file, []byte(`{"2": "127.0.0.1:9002", "3": "127.0.0.1:3003"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	check("file", map[uint64]string{2: "127.0.0.1:2002", 3: "127.0.0.1:3003", 4: "127.0.0.1:1004"})
	if err := os.WriteFile(file, []byte(`{"3": `), 0o644); err != nil {
		t.Fatal(err)
	}
	check("unparsable file", map[uint64]string{3: "127.0.0.1:1003"})
}

// snapConfig opens a durableSM that also sends and installs Raft
// snapshots (systems.Snapshotter), for a member that joins behind the
// leader's compaction point.
type snapConfig struct{ durableConfig }

type snapSM struct {
	*durableSM
	staged map[string][]byte
}

func (c snapConfig) Open(env systems.Env) (systems.StateMachine, error) {
	sm, err := c.durableConfig.Open(env)
	if err != nil {
		return nil, err
	}
	return &snapSM{durableSM: sm.(*durableSM)}, nil
}

func (s *snapSM) WriteSnapshot(w *systems.SnapshotWriter) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := slices.Sorted(maps.Keys(s.m))
	for _, k := range keys {
		if err := w.Add([]byte(k), s.m[k]); err != nil {
			return err
		}
	}
	return nil
}

func (s *snapSM) PrepareRestore(_ uint64, r *systems.SnapshotReader) error {
	s.staged = map[string][]byte{}
	for r.Next() {
		s.staged[string(r.Key())] = slices.Clone(r.Value())
	}
	return r.Err()
}

func (s *snapSM) CommitRestore(index uint64) error {
	s.mu.Lock()
	s.m, s.applied, s.staged = s.staged, index, nil
	s.mu.Unlock()
	return s.Apply(nil) // writes the state
}

// The addresses of a member added after a node joined survive what drops
// the conf change that carried them: GetServerState on a restarted
// follower lists the member with its client and internal addresses
// whether the restart replays the conf change (a data directory without
// an address book) or finds it compacted away (the address book); a
// member that joined from a snapshot taken after it, and whose -peers does
// not name it, lists its internal address too (the addresses travel with
// the snapshot).
func TestMemberAddressesSurviveRestartAndSnapshot(t *testing.T) {
	snapSystem := systems.System{Name: "snap", Summary: "test", LogDir: "raftlog",
		NewConfig: func() systems.SystemConfig { return snapConfig{} }}
	tc := startClusterWith(t, 3, func(c *Config) {
		c.System, c.SystemConfig = snapSystem, snapConfig{}
		c.JSONRPCAddress = "127.0.0.1:0"
	})
	l := tc.waitLeader(10 * time.Second)
	ctx, cancel := ctxFor(60 * time.Second)
	defer cancel()
	addServer := func(c Config) (int, uint64) {
		i := tc.startJoining(c)
		var r jsonrpc.MembershipResult
		dialRPC(t, tc.nodes[l]).call("AddServer", fmt.Sprintf(`{"addr":%q}`, tc.cfgs[i].Address), &r)
		return i, r.Index
	}
	i4, added := addServer(tc.joinConfig(t, 4, []uint64{1, 2, 3}))
	// wantAddrs checks at once, without waiting for a peer stream to
	// announce them, that node i lists node 4 with its addresses.
	wantAddrs := func(i int, when string) {
		t.Helper()
		var st jsonrpc.ServerState
		dialRPC(t, tc.nodes[i]).call("GetServerState", `{}`, &st)
		for _, m := range st.Members {
			if m.ID == 4 {
				if m.Addr != tc.cfgs[i4].Address || m.InternalAddress != tc.cfgs[i4].InternalAddress {
					t.Fatalf("%s: node %d lists member 4 as addr %q internal %q, want %q and %q", when, tc.nodes[i].id,
						m.Addr, m.InternalAddress, tc.cfgs[i4].Address, tc.cfgs[i4].InternalAddress)
				}
				return
			}
		}
		t.Fatalf("%s: node %d does not list member 4: %+v", when, tc.nodes[i].id, st.Members)
	}
	f := (l + 1) % 3
	waitFor(t, 10*time.Second, "the follower applies the addition", func() bool { return tc.nodes[f].applied.Load() >= added })
	wantAddrs(f, "before a restart")

	tc.stop(f)
	if err := os.Remove(filepath.Join(tc.cfgs[f].DataDir, addressBookName)); err != nil {
		t.Fatal(err)
	}
	tc.start(f)
	wantAddrs(f, "after a restart that replays the conf change, without an address book")

	if err := tc.nodes[f].compactLog(ctx, tc.nodes[f].applied.Load()); err != nil {
		t.Fatal(err)
	}
	if first, _ := tc.nodes[f].log.FirstIndex(); first <= added {
		t.Fatalf("the follower's log starts at %d after the compaction, want past the addition at %d", first, added)
	}
	tc.stop(f)
	tc.start(f)
	wantAddrs(f, "after a restart with the conf change compacted away")

	if err := tc.nodes[l].compactLog(ctx, tc.nodes[l].applied.Load()); err != nil {
		t.Fatal(err)
	}
	compacted := tc.nodes[l].log.CompactedIndex()
	// Node 5's -peers does not name node 4 (it joined while node 5 was
	// set up): only the snapshot tells node 5 its internal address.
	c5 := tc.joinConfig(t, 5, []uint64{1, 2, 3})
	c5.Peers = slices.DeleteFunc(c5.Peers, func(p string) bool { return strings.HasPrefix(p, "4=") })
	i5, _ := addServer(c5)
	if got := tc.nodes[i5].log.CompactedIndex(); got < compacted {
		t.Fatalf("node 5 joined without a snapshot (its log's compaction point %d, the leader's %d)", got, compacted)
	}
	wantAddrs(i5, "on a member that joined from a snapshot")
}
