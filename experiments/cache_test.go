package experiments

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/systems/agent"
	"github.com/nezha-harness/nezha/systems/cluster"
)

// growHeapEnv makes the test binary a process that, once told "go" on
// stdin, grows its heap by growStepBytes every growStepEvery up to
// growTotalBytes (touching every page, as a node's heap grows during
// reads), prints "grown" and waits for stdin to close.
const growHeapEnv = "NEZHA_TEST_GROW_HEAP"

const (
	growStepBytes  = 4 << 20
	growStepEvery  = 25 * time.Millisecond
	growTotalBytes = 96 << 20 // twice the group's starting limit
	// testAboveHeapBytes is the group's allowance above the heap: the
	// quick profile's page cache plus a slack wider than the profile's
	// (anonHeadroomBytes), since a -race helper's heap grows by several
	// times each step (shadow memory) and the follower may be starved.
	testAboveHeapBytes = 12<<20 + 32<<20
)

// growHeap is the helper role of growHeapEnv; it does not return.
func growHeap() {
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(2)
	}
	var keep [][]byte
	for total := 0; total < growTotalBytes; total += growStepBytes {
		b := make([]byte, growStepBytes)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
		time.Sleep(growStepEvery)
	}
	fmt.Println("grown")
	_, _ = io.Copy(io.Discard, in)
	fmt.Fprintln(io.Discard, len(keep))
	os.Exit(0)
}

// TestFollowLimitsKeepsGrowingNodeAlive moves a process into a memory
// cgroup as arrangeReads does (page cache + slack above the heap), then lets
// its heap grow to twice that: with followLimits it lives and oomKilled
// stays quiet; without, the group's OOM killer kills it and oomKilled says
// so. Needs root and a memory cgroup controller.
func TestFollowLimitsKeepsGrowingNodeAlive(t *testing.T) {
	if !isRoot() {
		t.Skip("needs root (memory cgroups)")
	}
	if agent.CgroupVersion() == "" {
		t.Skip("no memory cgroup controller is mounted")
	}
	for _, follow := range []bool{true, false} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^$")
			cmd.Env = append(os.Environ(), growHeapEnv+"=1")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			lines := make(chan string, 4)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
				exited <- cmd.Wait()
			}()
			t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); <-exited })
			wait := func(want string) bool {
				select {
				case l, ok := <-lines:
					return ok && l == want
				case <-time.After(60 * time.Second):
					t.Fatalf("no %q from the helper within 60 s", want)
				}
				return false
			}
			if !wait("ready") {
				t.Fatal("the helper did not start")
			}
			rc := &readCache{Mode: ReadCacheCgroup, byPID: map[int]string{}}
			dir, err := agent.LimitMemory(fmt.Sprintf("%stest-%d", groupPrefix, os.Getpid()), cmd.Process.Pid, testAboveHeapBytes)
			if dir != "" {
				rc.groups = append(rc.groups, dir)
				rc.byPID[cmd.Process.Pid] = dir
			}
			t.Cleanup(rc.release)
			if err != nil {
				t.Skipf("memory cgroup: %v", err)
			}
			if follow {
				rc.stopFollow, rc.followDone = make(chan struct{}), make(chan struct{})
				go rc.followLimits([]string{dir}, testAboveHeapBytes)
			}
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
			grown := wait("grown")
			spec := &cluster.Spec{Nodes: []cluster.Node{{ID: 1, PID: cmd.Process.Pid}}}
			oom := rc.oomKilled(spec)
			switch {
			case follow && (!grown || oom != nil):
				t.Fatalf("with the follower: grown=%v, oomKilled: %v", grown, oom)
			case !follow && (grown || oom == nil || !strings.Contains(oom.Error(), "node 1")):
				t.Fatalf("without the follower the heap outgrew a fixed limit, yet grown=%v, oomKilled: %v", grown, oom)
			}
		})
	}
}

// TestReadAheadSetAndRestored: the beds' readahead is written before the
// load and the device's own value put back at the end; a device that
// already says the wanted value is left alone (nothing to restore).
func TestReadAheadSetAndRestored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "read_ahead_kb")
	if err := os.WriteFile(path, []byte("8192\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &bedPool{}
	if err := p.setReadAheadFile(path, 128); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "128" || !strings.Contains(p.readAheadText, "128 KiB (it was 8192 KiB)") {
		t.Fatalf("after set: file %q, text %q", b, p.readAheadText)
	}
	p.restoreReadAhead()
	if b, _ := os.ReadFile(path); string(b) != "8192" {
		t.Fatalf("after restore: file %q, want 8192", b)
	}
	p = &bedPool{}
	if err := p.setReadAheadFile(path, 8192); err != nil || p.readAheadPath != "" || p.readAheadText != "" {
		t.Fatalf("same value: err %v, path %q, text %q; want nothing changed", err, p.readAheadPath, p.readAheadText)
	}
	if err := (&bedPool{}).setReadAheadFile(filepath.Join(t.TempDir(), "missing"), 128); err == nil {
		t.Fatal("a missing read_ahead_kb file gave no error")
	}
}
