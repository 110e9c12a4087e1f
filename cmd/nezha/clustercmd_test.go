package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// The membership subcommands refuse bad flags with a usage error naming the
// problem, before touching the cluster.
func TestMembershipCommandErrors(t *testing.T) {
	dir := t.TempDir()
	s := &cluster.Spec{System: "nezha", Dir: dir, Binary: "/bin/true", Nodes: []cluster.Node{{ID: 1, Address: "127.0.0.1:1", InternalAddress: "127.0.0.1:2"}}}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	dir5 := t.TempDir()
	s5 := &cluster.Spec{System: "nezha", Dir: dir5, Binary: "/bin/true", Nodes: []cluster.Node{{ID: 1}, {ID: 5}, {ID: 6}}}
	if err := s5.Save(); err != nil {
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
		// After membership changes the ids are not 1..N: say which.
		{[]string{"kill", "-cluster", dir5, "-node", "0"}, "no node 0 in " + dir5 + " (ids 1, 5, 6)"},
	} {
		err := runCluster(c.args, []string{"nezha"}, io.Discard, io.Discard, nil)
		var ue *cmdline.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
}

// A serve flag that no node would take (after --) is a usage error before
// `cluster up` starts anything or writes any file; before, every node
// exited on it and up waited out its timeout, exited 1 and left the
// cluster's files.
func TestClusterUpRefusesBadServeFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	wantUsage(t, "flag provided but not defined: -bogusflag", "cluster", "up", "-system", "nezha", "-cluster", dir, "--", "-bogusflag", "1")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused up left %s (%v)", dir, err)
	}
	// A system's own flags are known.
	reg, err := newRegistry()
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{reg: reg}
	if err := c.checkServeArgs("nezha", []string{"-gcGarbageRatio", "0.5", "-tick", "50ms"}); err != nil {
		t.Fatalf("nezha's own flags refused: %v", err)
	}
}

// A failed `cluster up` leaves nothing it made: no lock file in a
// directory of the user's that it refused, and nothing in a new directory
// when the backend could not start (here: no Docker daemon answers, or the
// image is missing), so that the same command runs again as the first
// time; before, the token and the lock stayed and the retry was refused
// as a foreign directory.
func TestClusterUpFailureLeavesNothing(t *testing.T) {
	mine := t.TempDir()
	if err := os.WriteFile(filepath.Join(mine, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, "is not empty and holds no cluster.json", "cluster", "up", "-system", "nezha", "-cluster", mine)
	if des, err := os.ReadDir(mine); err != nil || len(des) != 1 || des[0].Name() != "notes.txt" {
		t.Fatalf("the user's directory after a refused up: %v, %v", des, err)
	}

	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"))
	dir := filepath.Join(t.TempDir(), "c")
	for try := 1; try <= 2; try++ {
		code, _, stderr := runNezha(t, "cluster", "up", "-system", "nezha", "-cluster", dir, "-backend", "docker", "-image", "nezha:does-not-exist")
		if code != 2 || strings.Contains(stderr, "not empty") {
			t.Fatalf("try %d: cluster up -backend docker without a daemon: exit %d, %q", try, code, stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			des, _ := os.ReadDir(dir)
			t.Fatalf("try %d: a failed up left %s (%v): %v", try, dir, err, des)
		}
	}
}
