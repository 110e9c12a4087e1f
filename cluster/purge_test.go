package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// A directory of the user's is not taken for a cluster: `cluster up` in it
// would let a later `down -purge` delete the user's files.
func TestUpRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "thesis.tex")
	if err := os.WriteFile(mine, []byte("draft"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := Up(t.Context(), UpOptions{Dir: dir, System: "original", Binary: "/bin/true", KnownSystems: []string{"original"}})
	var ue *cmdline.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "is not empty") || !strings.Contains(err.Error(), "thesis.tex") {
		t.Fatalf("Up in a foreign directory: %v", err)
	}
	if b, err := os.ReadFile(mine); err != nil || string(b) != "draft" {
		t.Fatalf("the user's file after a refused up: %q, %v", b, err)
	}
	// Empty, absent, or holding only the lock (cluster.Lock runs first):
	// not foreign.
	for _, d := range []string{t.TempDir(), filepath.Join(t.TempDir(), "new")} {
		if err := checkForeign(d); err != nil {
			t.Errorf("checkForeign(%s): %v", d, err)
		}
	}
	locked := t.TempDir()
	unlock, err := Lock(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := checkForeign(locked); err != nil {
		t.Errorf("checkForeign of a directory with only the lock: %v", err)
	}
}

// A purge removes what the harness made and nothing else: a file the user
// put in the cluster directory, or in a node's directory, survives it, and
// so do the directories that hold one.
func TestPurgeKeepsForeignFiles(t *testing.T) {
	dir := t.TempDir()
	s := &Spec{System: "original", Dir: dir, Binary: "/bin/true", NextID: 4}
	for _, id := range []uint64{1, 2, 3} {
		nd := filepath.Join(dir, "node"+string(rune('0'+id)))
		s.Nodes = append(s.Nodes, Node{ID: id, Data: filepath.Join(nd, "data"), Log: filepath.Join(nd, "node.log")})
		mustWrite(t, filepath.Join(nd, "data", "raftlog", "000001.log"), "x")
		mustWrite(t, filepath.Join(nd, "node.log"), "log")
	}
	// Node 3 was removed from the cluster: its directory is still the harness's.
	s.Nodes = s.Nodes[:2]
	mustWrite(t, filepath.Join(dir, "node2", "dial-peers.json"), "{}")
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(dir, "notes.txt")
	mustWrite(t, notes, "mine")
	nodeNote := filepath.Join(dir, "node1", "keep.me")
	mustWrite(t, nodeNote, "mine too")
	// A node directory beyond the ids ever given is not the harness's.
	mustWrite(t, filepath.Join(dir, "node9", "data", "x"), "mine as well")

	err := s.Down(true)
	if err == nil || !strings.Contains(err.Error(), "left in place") || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("Down(purge) with foreign files: %v", err)
	}
	for _, p := range []string{notes, nodeNote, filepath.Join(dir, "node9", "data", "x")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("purge removed %s: %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(dir, FileName), filepath.Join(dir, "node1", "data"), filepath.Join(dir, "node1", "node.log"),
		filepath.Join(dir, "node2"), filepath.Join(dir, "node3")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("purge left %s (%v)", p, err)
		}
	}

	// Without foreign files the whole directory goes.
	clean := filepath.Join(t.TempDir(), "c")
	s2 := &Spec{System: "original", Dir: clean, Binary: "/bin/true", NextID: 2,
		Nodes: []Node{{ID: 1, Data: filepath.Join(clean, "node1", "data"), Log: filepath.Join(clean, "node1", "node.log")}}}
	mustWrite(t, filepath.Join(clean, "node1", "data", "f"), "x")
	if err := s2.Save(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Down(true); err != nil {
		t.Fatalf("Down(purge): %v", err)
	}
	if _, err := os.Stat(clean); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("purge left %s (%v)", clean, err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
