package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// -peers stays positional while ids are 1..N and names ids after that; a
// cluster.json without a cluster id gets the one its nodes derived from
// the positional -peers (raftkv/node Config.clusterID), and a next id.
func TestPeersFlagAndIdentity(t *testing.T) {
	s := &Spec{System: "nezha", Nodes: []Node{
		{ID: 1, InternalAddress: "127.0.0.1:1"}, {ID: 2, InternalAddress: "127.0.0.1:2"}, {ID: 3, InternalAddress: "127.0.0.1:3"}}}
	if got := s.peersFlag(); got != "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3" {
		t.Fatalf("positional -peers = %q", got)
	}
	s.fixIdentity()
	sum := sha256.Sum256([]byte("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"))
	if s.ClusterID != hex.EncodeToString(sum[:8]) || s.NextID != 4 {
		t.Fatalf("fixIdentity: cluster id %q next id %d", s.ClusterID, s.NextID)
	}
	s.Nodes = slices.Delete(s.Nodes, 1, 2)
	s.Nodes = append(s.Nodes, Node{ID: 4, InternalAddress: "127.0.0.1:4"})
	if got := s.peersFlag(); got != "1=127.0.0.1:1,3=127.0.0.1:3,4=127.0.0.1:4" {
		t.Fatalf("-peers after a change = %q", got)
	}
	id := s.ClusterID
	s.fixIdentity()
	if s.ClusterID != id {
		t.Fatal("fixIdentity changed a set cluster id")
	}
	s.Nodes[2].BootstrapVoters = []uint64{1, 2, 3}
	args := strings.Join(s.Args(&s.Nodes[2]), " ")
	for _, want := range []string{"-peers 1=127.0.0.1:1,3=127.0.0.1:3,4=127.0.0.1:4", "-clusterID " + id, "-bootstrapVoters 1,2,3"} {
		if !strings.Contains(args, want) {
			t.Errorf("serve args %q lack %q", args, want)
		}
	}
}

// A membership change on an external (etcd) cluster is refused with a
// pointer to etcd's own command, before touching any process.
func TestMembershipEtcdRefused(t *testing.T) {
	dir := t.TempDir()
	e := &Spec{System: Etcd, Dir: dir}
	if _, err := e.AddMember(t.Context(), true); err == nil || !strings.Contains(err.Error(), "etcdctl member add") {
		t.Errorf("add to an etcd cluster: %v", err)
	}
	// Listing the members too: etcd has no Admin service to ask, and a
	// raw gRPC error said so before.
	var ue *cmdline.UsageError
	if _, err := e.Members(t.Context()); !errors.As(err, &ue) || !strings.Contains(err.Error(), "etcdctl member list") {
		t.Errorf("members of an etcd cluster: %v", err)
	}
}
