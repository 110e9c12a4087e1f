package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent/agenttest"
)

// Environment of the test binary's helper roles in TestNodesDieWithStarter:
// an owner starts one node (its agent, which starts the node) through the
// local backend and waits to be killed; the agent is the test binary run
// as `agent`, serving agent.Serve, and the node the test binary run as
// `serve`, which only sleeps.
const (
	ownerDirEnv    = "NEZHA_TEST_OWNER_DIR"    // owner: write node.pid and agent.pid here
	ownerDetachEnv = "NEZHA_TEST_OWNER_DETACH" // owner: Spec.Detach
)

// helperRole runs the role the environment or the arguments name, if any;
// it never returns then.
func helperRole() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	agenttest.MaybeServe()
	dir := os.Getenv(ownerDirEnv)
	if dir == "" {
		return
	}
	os.Unsetenv(ownerDirEnv)
	s := &Spec{System: "x", Binary: os.Args[0], Detach: os.Getenv(ownerDetachEnv) == "1", Dir: dir}
	if err := writeToken(dir); err != nil {
		os.Exit(3)
	}
	n := &Node{ID: 1}
	s.Nodes = []Node{*n}
	n = &s.Nodes[0]
	ctx := context.Background()
	if err := (localBackend{}).place(ctx, s, n); err != nil {
		os.Exit(4)
	}
	if err := s.start(ctx, n); err != nil {
		os.Exit(5)
	}
	for name, pid := range map[string]int{"node.pid": n.PID, "agent.pid": n.AgentPID} {
		tmp := filepath.Join(dir, name+".tmp")
		if os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o644) != nil || os.Rename(tmp, filepath.Join(dir, name)) != nil {
			os.Exit(8)
		}
	}
	time.Sleep(time.Hour) // until the test kills this owner
	os.Exit(0)
}

// TestNodesDieWithStarter kills (SIGKILL: no handler runs) a process that
// started a node, as a cut pipe or an OOM kill ends an experiment: the
// node's agent and the node must die with it unless the Spec is detached
// (`nezha cluster up`), in which case both must live on.
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
			pids := map[string]int{}
			deadline := time.Now().Add(30 * time.Second)
			for _, name := range []string{"node.pid", "agent.pid"} {
				for pids[name] == 0 {
					if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
						pids[name], _ = strconv.Atoi(strings.TrimSpace(string(b)))
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
			}
			for _, pid := range pids {
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				if !Alive(pid) {
					t.Fatalf("pid %d (%v) is not running before its owner is killed", pid, pids)
				}
			}
			if err := owner.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-exited
			for name, pid := range pids {
				if !detach {
					if err := waitGone(pid, 30*time.Second); err != nil {
						t.Fatalf("the %s outlived its killed owner: %v", strings.TrimSuffix(name, ".pid"), err)
					}
					continue
				}
				// Detached: still running once the owner is gone (the
				// death signal, if it were set, is sent as the owner
				// exits, before Wait returns).
				if !Alive(pid) {
					t.Fatalf("a detached %s died with its owner", strings.TrimSuffix(name, ".pid"))
				}
			}
		})
	}
}
