package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/raftkv/raftlog"
)

// TestWipeAndDamage: both are refused while the node runs; stopped, Damage
// tears the last Raft log segment and Wipe removes the data.
func TestWipeAndDamage(t *testing.T) {
	a := startAgent(t, nil)
	ctx := ctxT(t)
	o := raftlog.DefaultOptions(filepath.Join(DataDir(a.cfg.Dir), "raftlog"))
	o.Bootstrap = raftpb.ConfState{Voters: []uint64{1}}
	l, err := raftlog.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		if err := l.Append(raftpb.HardState{}, []raftpb.Entry{{Term: 1, Index: i, Data: []byte("value")}}, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seg, err := raftlog.LastSegment(DataDir(a.cfg.Dir))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(seg)

	a.start(t, 0)
	_, err = a.Wipe(ctx, &agentpb.WipeRequest{})
	wantCode(t, "Wipe while running", err, codes.FailedPrecondition)
	_, err = a.Damage(ctx, &agentpb.DamageRequest{Kind: agentpb.DamageKind_TEAR_TAIL, Mode: raftlog.TearCut, Pick: 5})
	wantCode(t, "Damage while running", err, codes.FailedPrecondition)
	a.signal(t, agentpb.Sig_KILL, 0)

	_, err = a.Damage(ctx, &agentpb.DamageRequest{Kind: agentpb.DamageKind_LOSE_SYNCED_TAIL, Mode: raftlog.TearCut, Bytes: raftlog.MaxLoseBytes + 1})
	wantCode(t, "Damage past a header", err, codes.InvalidArgument)
	_, err = a.Damage(ctx, &agentpb.DamageRequest{Kind: agentpb.DamageKind_TEAR_TAIL, Mode: "shred"})
	wantCode(t, "Damage of an unknown mode", err, codes.FailedPrecondition)
	r, err := a.Damage(ctx, &agentpb.DamageRequest{Kind: agentpb.DamageKind_TEAR_TAIL, Mode: raftlog.TearCut, Pick: 5})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(seg)
	if !strings.Contains(r.Detail, seg) || after.Size() <= before.Size() {
		t.Fatalf("TEAR_TAIL said %q; segment %d -> %d bytes", r.Detail, before.Size(), after.Size())
	}
	if _, err := a.Wipe(ctx, &agentpb.WipeRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DataDir(a.cfg.Dir)); !os.IsNotExist(err) {
		t.Fatalf("data directory after Wipe: %v", err)
	}
}

// TestTailLines: the last lines across the chunks read backwards, and the
// byte bound.
func TestTailLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	for _, n := range []int{1, 3, 10000, 30000} {
		got, err := tailLines(path, n, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(got, "\n")
		want := min(n, 20000)
		if len(lines) != want || lines[len(lines)-1] != "line 20000" || lines[0] != "line "+strconv.Itoa(20001-want) {
			t.Fatalf("tail %d: %d lines, first %q, last %q", n, len(lines), lines[0], lines[len(lines)-1])
		}
	}
	if got, _ := tailLines(path, 20000, 100); len(got) != 100 || !strings.HasSuffix(got, "line 20000") {
		t.Fatalf("tail bounded to 100 bytes: %d bytes, %q", len(got), got)
	}
	os.WriteFile(path, []byte("no newline at the end"), 0o644)
	if got, _ := tailLines(path, 5, 1<<20); got != "no newline at the end" {
		t.Fatalf("one line without a newline: %q", got)
	}
}

// TestExecInCgroup: the re-exec writes its own pid into the procs file
// and becomes the program (here the fake node).
func TestExecInCgroup(t *testing.T) {
	procs := filepath.Join(t.TempDir(), "cgroup.procs")
	if err := os.WriteFile(procs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], CgroupExecCommand, procs, "--", os.Args[0], "serve", "-print", "exec'd")
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "exec'd" {
		t.Fatalf("re-exec: %q, %v", out, err)
	}
	if b, _ := os.ReadFile(procs); string(b) != strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("procs file holds %q, want the pid %d", b, cmd.Process.Pid)
	}
	if err := ExecInCgroup([]string{procs, "/bin/true"}); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Fatalf("without --: %v", err)
	}
	if err := ExecInCgroup([]string{filepath.Join(t.TempDir(), "missing", "cgroup.procs"), "--", "/bin/true"}); err == nil {
		t.Fatal("a missing procs file: no error")
	}
}
