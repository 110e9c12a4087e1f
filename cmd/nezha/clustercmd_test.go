package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/systems"
	"github.com/nezha-harness/nezha/systems/cluster"
)

// The membership subcommands refuse bad flags with a usage error naming the
// problem, before touching the cluster.
func TestMembershipCommandErrors(t *testing.T) {
	dir := t.TempDir()
	s := &cluster.Spec{System: "nezha", Dir: dir, Binary: "/bin/true", Nodes: []cluster.Node{{ID: 1, Address: "127.0.0.1:1", InternalAddress: "127.0.0.1:2"}}}
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
		err := runCluster(c.args, []string{"nezha"}, io.Discard, io.Discard)
		var ue *systems.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
}
