package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/systems"
)

func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	var ue *systems.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "another nezha command") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	unlock2, err := Lock(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

func TestLoadAndSave(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "cluster up") {
		t.Fatalf("missing cluster.json: %v", err)
	}
	s := &Spec{System: "original", Dir: dir, Binary: "/bin/true", Nodes: []Node{{ID: 1, Address: "127.0.0.1:1", InternalAddress: "127.0.0.1:2", Data: dir + "/d"}}}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || got.System != "original" || len(got.Nodes) != 1 || got.Addresses()[0] != "127.0.0.1:1" {
		t.Fatalf("Load = %+v, %v", got, err)
	}
	if _, err := got.Node(2); err == nil {
		t.Fatal("node 2 of a 1-node cluster found")
	}
	os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o644)
	if _, err := Load(dir); err == nil {
		t.Fatal("corrupt cluster.json accepted")
	}
}

func TestUpRejectsBadOptions(t *testing.T) {
	_, _, err := Up(t.Context(), UpOptions{Dir: t.TempDir(), System: "nope", Nodes: 12, Host: "10.0.0.1", KnownSystems: []string{"original"}, Binary: "/bin/true"})
	for _, want := range []string{"unknown system", "outside 1..9", "not a loopback"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Up error %v lacks %q", err, want)
		}
	}
}

func TestAliveAndTail(t *testing.T) {
	if !Alive(os.Getpid()) || Alive(0) || Alive(-1) {
		t.Fatal("Alive is wrong about this process or bad pids")
	}
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte("a\nb\nc\n"), 0o644)
	if got := Tail(p, 2); got != "b\nc" {
		t.Fatalf("Tail = %q", got)
	}
}
