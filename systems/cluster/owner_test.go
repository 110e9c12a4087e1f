package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment of the test binary's helper roles in TestNodesDieWithStarter:
// an owner starts one "node" through Spec.start and waits to be killed; the
// node is the test binary again, which only sleeps.
const (
	ownerDirEnv    = "NEZHA_TEST_OWNER_DIR"    // owner: write node.pid here
	ownerDetachEnv = "NEZHA_TEST_OWNER_DETACH" // owner: Spec.Detach
	nodeSleepEnv   = "NEZHA_TEST_NODE_SLEEP"   // node: sleep until killed
)

// helperRole runs the role the environment names, if any; it never
// returns then.
func helperRole() {
	if os.Getenv(nodeSleepEnv) != "" {
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	dir := os.Getenv(ownerDirEnv)
	if dir == "" {
		return
	}
	os.Unsetenv(ownerDirEnv)
	os.Setenv(nodeSleepEnv, "1")
	s := &Spec{Binary: os.Args[0], Detach: os.Getenv(ownerDetachEnv) == "1", Dir: dir}
	n := &Node{ID: 1, Log: filepath.Join(dir, "node1", "node.log")}
	if err := s.start(n); err != nil {
		os.Exit(4)
	}
	tmp := filepath.Join(dir, "node.pid.tmp")
	if os.WriteFile(tmp, []byte(strconv.Itoa(n.PID)), 0o644) != nil || os.Rename(tmp, filepath.Join(dir, "node.pid")) != nil {
		os.Exit(5)
	}
	time.Sleep(time.Hour) // until the test kills this owner
	os.Exit(0)
}

// TestNodesDieWithStarter kills (SIGKILL: no handler runs) a process that
// started a node, as a cut pipe or an OOM kill ends an experiment: the node
// must die with it unless the Spec is detached (`nezha cluster up`), in
// which case it must live on.
func TestNodesDieWithStarter(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run("detach="+strconv.FormatBool(detach), func(t *testing.T) {
			dir := t.TempDir()
			owner := exec.Command(os.Args[0], "-test.run", "^$")
			owner.Env = append(os.Environ(), ownerDirEnv+"="+dir, ownerDetachEnv+"="+map[bool]string{true: "1", false: "0"}[detach])
			if err := owner.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- owner.Wait() }()
			var pid int
			deadline := time.Now().Add(30 * time.Second)
			for pid == 0 {
				if b, err := os.ReadFile(filepath.Join(dir, "node.pid")); err == nil {
					pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("the owner exited before it started its node: %v", err)
				case <-time.After(5 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatal("the owner did not start its node within 30 s")
				}
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if !Alive(pid) {
				t.Fatalf("node pid %d is not running before its owner is killed", pid)
			}
			if err := owner.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-exited
			if !detach {
				if err := waitGone(pid, 30*time.Second); err != nil {
					t.Fatalf("the node outlived its killed owner: %v", err)
				}
				return
			}
			// Detached: still running once the owner is gone (the death
			// signal, if it were set, is sent as the owner exits, before
			// Wait returns).
			if !Alive(pid) {
				t.Fatal("a detached node died with its owner")
			}
		})
	}
}
