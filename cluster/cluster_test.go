package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	var ue *cmdline.UsageError
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
	// Clients of a cluster none of whose nodes runs fail at once.
	af := Address{Cluster: dir}
	if _, err := af.Resolve(); err == nil || !strings.Contains(err.Error(), "no node of the cluster") {
		t.Fatalf("Resolve of a stopped cluster: %v", err)
	}
	s.Nodes[0].PID = os.Getpid()
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	if addrs, err := af.Resolve(); err != nil || len(addrs) != 1 {
		t.Fatalf("Resolve with a running node: %v, %v", addrs, err)
	}
	os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o644)
	if _, err := Load(dir); err == nil {
		t.Fatal("corrupt cluster.json accepted")
	}
}

func TestUpRejectsBadOptions(t *testing.T) {
	_, _, err := Up(t.Context(), UpOptions{Dir: t.TempDir(), System: "nope", Nodes: MaxNodes + 1, Host: "10.0.0.1", KnownSystems: []string{"original"}, Binary: "/bin/true"})
	for _, want := range []string{"unknown system", "outside 1..99", "not a loopback"} {
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

// leaderExitEnv makes the test binary a process whose main thread exits on
// its own while another thread lives on: its leader is a zombie, but the
// process still holds its files (as a node does while a thread finishes an
// fsync after SIGKILL).
const leaderExitEnv = "NEZHA_TEST_LEADER_EXIT"

// notLeaderExit is the helper's exit code when its main goroutine is not
// on the process's main thread (the leader).
const notLeaderExit = 3

func init() {
	if os.Getenv(leaderExitEnv) != "" {
		// Init functions run on the main thread, and a lock taken in one
		// keeps main (so TestMain) there (runtime.LockOSThread). Locked
		// only in TestMain, the main goroutine may already have moved to
		// another thread (runtime.main unlocks it after init; a preemption
		// under load moves it), and the helper exited that thread instead.
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	helperRole()
	if os.Getenv(leaderExitEnv) != "" {
		if syscall.Gettid() != os.Getpid() {
			os.Exit(notLeaderExit)
		}
		go func() {
			runtime.LockOSThread()
			select {} // another thread, alive until the process is killed
		}()
		syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0) // this thread only
	}
	os.Exit(m.Run())
}

func TestAliveWhileThreadsExit(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), leaderExitEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	zombieLeader := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		i := strings.LastIndexByte(string(b), ')')
		return err == nil && i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
	}
	// Tens of milliseconds on an idle machine; the deadline allows for a
	// starved nice'd run.
	deadline := time.Now().Add(30 * time.Second)
	for !zombieLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the helper's main thread did not exit")
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the helper exited before its main thread alone did (exit code %d is its main goroutine "+
				"off the main thread): %v", notLeaderExit, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if !Alive(pid) {
		t.Fatal("Alive: false for a process whose leader is a zombie but another thread runs (it still holds its files)")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(pid, 30*time.Second); err != nil { // unreaped: a zombie with no thread left
		t.Fatal(err)
	}
}

// TestMovePortIfTaken: a free address stays, a taken one moves to a free
// port of the same host.
func TestMovePortIfTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	taken := l.Addr().String()
	a := taken
	if err := movePortIfTaken(&a); err != nil {
		t.Fatal(err)
	}
	if a == taken || !strings.HasPrefix(a, "127.0.0.1:") {
		t.Fatalf("a taken %s became %s", taken, a)
	}
	l.Close()
	b := a
	if err := movePortIfTaken(&b); err != nil || b != a {
		t.Fatalf("a free %s became %s (%v)", a, b, err)
	}
	empty := ""
	if err := movePortIfTaken(&empty); err != nil || empty != "" {
		t.Fatalf("empty address: %q, %v", empty, err)
	}
}

// A node that refuses writes for its disk says so in `cluster status`.
func TestStatusRowsDiskRefusal(t *testing.T) {
	sts := []NodeStatus{
		{Node: Node{ID: 1}, Alive: true, resp: &kvpb.StatusResponse{Header: &kvpb.ResponseHeader{}, DiskRefusal: "free space 10 MB below the minimum 64 MB"}},
		{Node: Node{ID: 2}, Alive: true, resp: &kvpb.StatusResponse{Header: &kvpb.ResponseHeader{}}},
	}
	rows := StatusRows(sts)
	if rows[0].DiskRefusal == "" || rows[1].DiskRefusal != "" {
		t.Fatalf("disk refusals %q, %q", rows[0].DiskRefusal, rows[1].DiskRefusal)
	}
}
