package node

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/cryptotest"

	"github.com/cockroachdb/datadriven"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/nezha-harness/nezha/internal/vfs"
)

// TestSimScenarios runs the scripts under testdata/sim on the deterministic
// tier (sim_test.go): membership, sessions, snapshots and recovery, step
// by step. Each file starts with crypto/rand seeded to 1, so that its
// elections and outputs are the same on every run; rewrite the expected
// outputs after a deliberate change with
//
//	go test ./raftkv/node -run TestSimScenarios -rewrite
//
// Commands (ids are Raft ids; c is a client, 0-based; via is the node a
// request goes to):
//
//	new nodes=N [clients=C] [keys=K]  a cluster of N nodes (down ones: none)
//	campaign id=I                     node I starts an election
//	tick [id=I] [n=T]                 T ticks to node I, or to every node up
//	stabilize                         deliver every message in flight, in order
//	run                               deliver and tick until the operations are done
//	put c=C k=K v=V [via=I] [seq=S]   start a write (seq: resend write S of
//	                                  the client's session, not in the history)
//	delete c=C k=K [via=I] [seq=S]
//	get c=C k=K [via=I]               start a linearizable read
//	crash id=I [torn=P]               power loss: only synced data survives
//	stop id=I / start id=I            clean stop, start
//	partition id=I / heal             cut node I off, or end every cut
//	snapshot id=I                     compact node I's log (TakeSnapshot)
//	add id=I via=L [bootstrap=1,2,3]  start node I empty and add it as a learner
//	promote id=I via=L / remove id=I via=L
//	transfer to=I via=L               leadership transfer
//	cut-log id=I                      stop node I and cut its log inside the
//	                                  record of its last entry
//	status                            every node's Raft state
//	check                             run until the members agree, then check
//	                                  linearizability, session dedup, state hashes
func TestSimScenarios(t *testing.T) {
	datadriven.Walk(t, filepath.Join("testdata", "sim"), func(t *testing.T, path string) {
		cryptotest.SetGlobalRandom(t, 1)
		var s *sim
		defer func() {
			if s != nil {
				s.close()
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				if s != nil {
					s.close()
				}
				opts := simOptions{nodes: 3, clients: 2, keys: 4}
				d.MaybeScanArgs(t, "nodes", &opts.nodes)
				d.MaybeScanArgs(t, "clients", &opts.clients)
				d.MaybeScanArgs(t, "keys", &opts.keys)
				var err error
				if s, err = newSim(1, opts); err != nil {
					t.Fatal(err)
				}
				return s.status()
			}
			if s == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var b strings.Builder
			s.out = &b
			defer func() { s.out = nil }()
			if err := scenarioStep(t, s, d, &b); err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
			}
			return b.String()
		})
	})
}

// scenarioStep runs one command of a scenario, writing what it shows to b.
func scenarioStep(t *testing.T, s *sim, d *datadriven.TestData, b *strings.Builder) error {
	arg := func(key string) uint64 {
		var v uint64
		d.ScanArgs(t, key, &v)
		return v
	}
	node := func(key string) *simNode {
		sn := s.node(arg(key))
		if sn == nil {
			d.Fatalf(t, "no node %s", key)
		}
		return sn
	}
	upNode := func(key string) *simNode {
		sn := node(key)
		if !sn.up() {
			d.Fatalf(t, "node %d is down", sn.id)
		}
		return sn
	}
	s.now++
	switch d.Cmd {
	case "campaign":
		sn := upNode("id")
		sn.run(sn.n.campaign)
	case "tick":
		n := 1
		d.MaybeScanArgs(t, "n", &n)
		nodes := s.upNodes()
		if d.HasArg("id") {
			nodes = []*simNode{upNode("id")}
		}
		for range n {
			for _, sn := range nodes {
				sn.tick()
			}
			if err := s.pollAll(); err != nil {
				return err
			}
		}
	case "stabilize":
		for s.net.len() > 0 {
			s.deliverAt(0)
			if err := s.pollAll(); err != nil {
				return err
			}
		}
	case "run":
		if err := s.runUntil("run", func() bool { return !s.pending() }); err != nil {
			return err
		}
	case "put", "delete", "get":
		var c int
		d.ScanArgs(t, "c", &c)
		if c >= len(s.clients) || s.clients[c].op != nil {
			d.Fatalf(t, "client %d is busy or unknown", c)
		}
		cl := s.clients[c]
		in := kvInput{op: d.Cmd}
		d.ScanArgs(t, "k", &in.key)
		d.MaybeScanArgs(t, "v", &in.value)
		if d.HasArg("seq") && d.Cmd != "get" {
			s.resend(cl, in, arg("seq"))
		} else {
			s.begin(cl, in)
		}
		if d.HasArg("via") {
			s.attemptOn(cl, node("via"))
		} else {
			s.attempt(cl)
		}
	case "crash":
		torn := 0
		d.MaybeScanArgs(t, "torn", &torn)
		s.crash(upNode("id"), torn)
	case "stop":
		sn := node("id")
		if sn.n == nil {
			d.Fatalf(t, "node %d is down", sn.id)
		}
		sn.stop()
	case "start":
		if err := s.restart(node("id")); err != nil {
			return err
		}
	case "partition":
		s.cut[node("id").id] = true
	case "heal":
		clear(s.cut)
	case "snapshot":
		fmt.Fprintln(b, s.snapshot(upNode("id")))
	case "add":
		id := arg("id")
		via := upNode("via")
		bootstrap := via.n.confPub.Load().Voters
		if d.HasArg("bootstrap") {
			var list string
			d.ScanArgs(t, "bootstrap", &list)
			bootstrap = nil
			for _, f := range strings.Split(list, ",") {
				v, err := strconv.ParseUint(f, 10, 64)
				if err != nil {
					d.Fatalf(t, "bootstrap: %v", err)
				}
				bootstrap = append(bootstrap, v)
			}
		}
		if id != uint64(len(s.nodes))+1 {
			d.Fatalf(t, "add id=%d: the next node is %d", id, len(s.nodes)+1)
		}
		sn := s.joinNode(id, slices.Clone(bootstrap))
		if err := sn.start(s.net); err != nil {
			return err
		}
		fmt.Fprintln(b, s.confChange(via, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id},
			confContext{ID: id, InternalAddress: sn.cfg.InternalAddress, Address: sn.cfg.Address},
			func() error { return via.n.checkAddMember(id, sn.cfg.InternalAddress) }))
	case "promote":
		id, via := arg("id"), upNode("via")
		fmt.Fprintln(b, s.confChange(via, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddNode, NodeID: id}, confContext{},
			func() error { return via.n.checkPromote(id) }))
	case "remove":
		id, via := arg("id"), upNode("via")
		fmt.Fprintln(b, s.confChange(via, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id}, confContext{},
			func() error { return via.n.checkRemoveMember(id) }))
	case "transfer":
		to, via := arg("to"), upNode("via")
		via.run(func() { via.n.rn.TransferLeader(to) })
		err := s.runUntil("transfer", func() bool { l := s.leader(); return l != nil && l.id == to })
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "node %d leads\n", to)
	case "cut-log":
		sn := upNode("id")
		last, _ := sn.n.log.LastIndex()
		loc, ok := sn.n.log.Location(last)
		if !ok {
			d.Fatalf(t, "node %d: no location for entry %d", sn.id, last)
		}
		path := ""
		for _, seg := range sn.n.log.Segments() {
			if seg.ID == loc.Segment {
				path = seg.Path
			}
		}
		sn.stop()
		if err := cutFile(sn.disk, path, loc.Offset+5); err != nil {
			return err
		}
		fmt.Fprintf(b, "node %d stopped; entry %d cut: %s ends at %d\n", sn.id, last, path, loc.Offset+5)
	case "status":
		b.WriteString(s.status())
		return nil
	case "check":
		if err := s.settleCluster("check"); err != nil {
			return err
		}
		if err := s.check(); err != nil {
			return err
		}
		b.WriteString("ok\n")
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return s.failed()
}

// joinNode makes member id of a running cluster (down): its -peers name
// every node, by id, and its empty log starts from bootstrap.
func (s *sim) joinNode(id uint64, bootstrap []uint64) *simNode {
	var peers []string
	for i := uint64(1); i <= id; i++ {
		peers = append(peers, fmt.Sprintf("%d=%s", i, simInternal(i)))
	}
	sn := s.newNode(id, peers, bootstrap)
	s.nodes = append(s.nodes, sn)
	return sn
}

// confChange proposes change on node via, as the Admin service does
// (tryConfChange, with check), and runs the cluster until via applied it;
// it returns what happened.
func (s *sim) confChange(via *simNode, change raftpb.ConfChangeSingle, cctx confContext, check func() error) string {
	ch, err := via.proposeConfChange(change, cctx, check)
	if err != nil {
		return fmt.Sprintf("%s refused: %v", change.Type, err)
	}
	var r applyResult
	got := false
	err = s.runUntil(change.Type.String(), func() bool {
		select {
		case r = <-ch:
			got = true
		default:
		}
		return got
	})
	switch {
	case err != nil:
		return err.Error()
	case r.err != nil:
		return fmt.Sprintf("%s %d: %v", change.Type, change.NodeID, r.err)
	}
	return fmt.Sprintf("%s %d applied at index %d", change.Type, change.NodeID, r.index)
}

// cutFile cuts the file at path of disk to size bytes, durably, as a lost
// tail of synced data would leave it.
func cutFile(disk *vfs.MemFS, path string, size int64) error {
	f, err := disk.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}
