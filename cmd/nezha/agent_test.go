package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// TestAgentCommand: `nezha agent` serves with the token of its token
// file, writes its address, and exits 0 on an Exit call.
func TestAgentCommand(t *testing.T) {
	dir := t.TempDir()
	tokenFile, addrFile := filepath.Join(dir, "agent.token"), filepath.Join(dir, "agent.address")
	if err := agent.WriteToken(tokenFile, "cmd-test-token"); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	go func() {
		code, _, stderr := runNezha(t, "agent", "-dir", filepath.Join(dir, "node"), "-tokenFile", tokenFile, "-addressFile", addrFile)
		if stderr != "" {
			t.Errorf("agent: %s", stderr)
		}
		exited <- code
	}()
	var addr string
	for deadline := time.Now().Add(60 * time.Second); addr == ""; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		if time.Now().After(deadline) {
			t.Fatal("no address file within 60 s")
		}
	}
	c, err := agent.Dial(addr, "cmd-test-token")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := c.Status(ctx, &agentpb.StatusRequest{})
	if err != nil || st.DataDir != filepath.Join(dir, "node", "data") {
		t.Fatalf("Status: %v, %v", st, err)
	}
	if _, err := c.Exit(ctx, &agentpb.ExitRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("agent exited %d", code)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the agent still runs after Exit")
	}
}
