package experiments

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// growHeapEnv makes the test binary a process that prints "ready", waits
// until the file the variable names exists, then grows its heap by
// growStepBytes every growStepEvery up to growTotalBytes (touching every
// page, as a node's heap grows during reads), prints "grown" and waits to
// be killed.
const growHeapEnv = "NEZHA_TEST_GROW_HEAP"

const (
	growStepBytes  = 4 << 20
	growStepEvery  = 25 * time.Millisecond
	growTotalBytes = 96 << 20 // twice the group's starting allowance
	// testAboveHeapBytes is the group's allowance above the heap: the
	// quick profile's page cache plus a slack wider than the profile's
	// (anonHeadroomBytes), since a -race helper's heap grows by several
	// times each step (shadow memory) and the follower may be starved.
	testAboveHeapBytes = 12<<20 + 32<<20
)

// growHeap is the helper role of growHeapEnv; it does not return.
func growHeap(goFile string) {
	fmt.Println("ready")
	for {
		if _, err := os.Stat(goFile); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
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
	for {
		time.Sleep(time.Hour)
		fmt.Fprintln(io.Discard, len(keep))
	}
}

// TestFollowLimitsKeepsGrowingNodeAlive starts a node (this test binary)
// through a real agent inside a memory cgroup, limits it as arrangeReads
// does (what it holds besides page cache + an allowance), then lets its
// heap grow to twice the allowance: with followLimits, which resets the
// limit through the agent, it lives and oomKilled stays quiet; without,
// the group's OOM killer kills it and oomKilled says so. Needs a host
// whose agent may make memory cgroups (root).
func TestFollowLimitsKeepsGrowingNodeAlive(t *testing.T) {
	for _, follow := range []bool{true, false} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			dir := t.TempDir()
			goFile := filepath.Join(dir, "go")
			t.Setenv(growHeapEnv, goFile) // the node inherits it from the agent
			cfg := agent.DefaultConfig()
			cfg.Dir, cfg.Token, cfg.Binary, cfg.AddressFile = filepath.Join(dir, "node"), "test-token", os.Args[0], filepath.Join(dir, "agent.address")
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- agent.Serve(ctx, cfg) }()
			t.Cleanup(func() {
				cancel()
				if err := <-served; err != nil {
					t.Errorf("agent: %v", err)
				}
			})
			addr := waitFor(t, "the agent's address", func() (string, bool) {
				b, err := os.ReadFile(cfg.AddressFile)
				return strings.TrimSpace(string(b)), err == nil && len(b) > 0
			})
			a, err := agent.Dial(addr, cfg.Token)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			info, err := a.Info(ctx, &agentpb.InfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !info.MemoryCgroup.GetOk() {
				t.Skipf("memory cgroup: %s", info.MemoryCgroup.GetWhy())
			}
			// Started in its group without a limit to speak of, as
			// restartQuiet starts a node; then limited as arrangeReads does.
			if _, err := a.Start(ctx, &agentpb.StartRequest{Program: agentpb.Program_SERVE, MemoryLimitBytes: 1 << 40}); err != nil {
				t.Fatal(err)
			}
			log := agent.LogPath(cfg.Dir)
			said := func(line string) bool {
				b, _ := os.ReadFile(log)
				return strings.Contains(string(b), "\n"+line+"\n")
			}
			waitFor(t, "ready", func() (string, bool) { return "", said("ready") })
			st, err := a.MemoryStats(ctx, &agentpb.MemoryStatsRequest{})
			if err != nil || !st.InGroup {
				t.Fatalf("memory stats: %v %v", st, err)
			}
			rc := &readCache{Mode: ReadCacheCgroup, grouped: map[string][]groupedNode{}}
			if _, err := a.SetMemoryLimit(ctx, &agentpb.SetMemoryLimitRequest{LimitBytes: st.UsageBytes - st.PageCacheBytes + testAboveHeapBytes}); err != nil {
				t.Fatal(err)
			}
			rc.grouped["toy"] = []groupedNode{{id: 1, agent: a}}
			t.Cleanup(rc.release)
			if follow {
				rc.stopFollow, rc.followDone = make(chan struct{}), make(chan struct{})
				go rc.followLimits(rc.allGrouped(), testAboveHeapBytes)
			}
			if err := os.WriteFile(goFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			var grown bool
			waitFor(t, "grown or gone", func() (string, bool) {
				grown = said("grown")
				s, err := a.Status(ctx, &agentpb.StatusRequest{})
				return "", grown || err == nil && !s.Running
			})
			oom := rc.oomKilled(ctx, "toy")
			switch {
			case follow && (!grown || oom != nil):
				t.Fatalf("with the follower: grown=%v, oomKilled: %v", grown, oom)
			case !follow && (grown || oom == nil || !strings.Contains(oom.Error(), "node 1")):
				t.Fatalf("without the follower the heap outgrew a fixed limit, yet grown=%v, oomKilled: %v", grown, oom)
			}
		})
	}
}

// waitFor polls f every 10 ms for up to a minute until it says done, and
// returns its value.
func waitFor[T any](t *testing.T, what string, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if v, ok := f(); ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
