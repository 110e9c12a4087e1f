package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

// -peers stays positional while ids are 1..N and names ids after that; a
// cluster.json without a cluster id gets the one its nodes derived from
// the positional -peers (systems/node Config.clusterID), and a next id.
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

// The membership commands refuse bad flags and external clusters with a
// usage error (exit code 2), before touching any process.
func TestMembershipCommandErrors(t *testing.T) {
	dir := t.TempDir()
	s := &Spec{System: "nezha", Dir: dir, Binary: "/bin/true", Nodes: []Node{{ID: 1, Address: "127.0.0.1:1", InternalAddress: "127.0.0.1:2"}}}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"remove", "-cluster", dir}, "-node is required"},
		{[]string{"replace", "-cluster", dir}, "-node is required"},
		{[]string{"promote", "-cluster", dir, "-node", "0"}, "no node 0"},
		{[]string{"remove", "-cluster", dir, "-node", "7"}, "no node 7"},
		{[]string{"add", "-cluster", dir, "-timeout", "0s"}, "must be positive"},
		{[]string{"add"}, "-cluster DIR is required"},
	} {
		err := Command(c.args, []string{"nezha"}, io.Discard, io.Discard)
		var ue *systems.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
	e := &Spec{System: Etcd, Dir: dir}
	if _, err := e.AddMember(t.Context(), true); err == nil || !strings.Contains(err.Error(), "etcdctl member add") {
		t.Errorf("add to an etcd cluster: %v", err)
	}
}
