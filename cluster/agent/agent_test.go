package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// The supervised program of these tests is the test binary itself: run as
// `BINARY serve ARGS` with fakeNodeEnv set, TestMain turns it into a fake
// node that carries out ARGS (fakeNode). The agent's own re-exec into a
// memory cgroup (CgroupExecCommand) goes to the test binary too.
const fakeNodeEnv = "NEZHA_AGENT_TEST_FAKE_NODE"

// childAgentEnv makes the test binary an agent of its own (Serve, until
// killed) whose node directory is the variable's value, for
// TestNodeDiesWithAgent.
const childAgentEnv = "NEZHA_AGENT_TEST_CHILD_AGENT"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == CgroupExecCommand {
		fmt.Fprintln(os.Stderr, ExecInCgroup(os.Args[2:]))
		os.Exit(1)
	}
	if os.Getenv(fakeNodeEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "serve" {
		fakeNode(os.Args[2:])
	}
	if dir := os.Getenv(childAgentEnv); dir != "" {
		os.Unsetenv(childAgentEnv)
		c := DefaultConfig()
		c.Dir, c.Token, c.Binary, c.AddressFile = dir, testToken, os.Args[0], filepath.Join(dir, "agent.address")
		fmt.Fprintln(os.Stderr, Serve(context.Background(), c))
		os.Exit(1)
	}
	os.Setenv(fakeNodeEnv, "1")
	os.Exit(m.Run())
}

// fakeNode carries out its arguments in order and exits 0:
//
//	-print LINE     print LINE on stdout
//	-exit N         exit with status N
//	-ignoreTerm     ignore SIGTERM
//	-burn D         spin the CPU for duration D
//	-write BYTES    write BYTES bytes to the file "written" and fsync it
//	-alloc BYTES    allocate BYTES of heap, touching every page, and keep it
//	-sleep          sleep until a signal ends the process
func fakeNode(args []string) {
	var keep [][]byte
	for i := 0; i < len(args); i++ {
		next := func() string {
			i++
			if i >= len(args) {
				fmt.Fprintln(os.Stderr, "fake node: missing value")
				os.Exit(2)
			}
			return args[i]
		}
		switch args[i] {
		case "-print":
			fmt.Println(next())
		case "-exit":
			code, _ := strconv.Atoi(next())
			os.Exit(code)
		case "-ignoreTerm":
			signal.Ignore(syscall.SIGTERM)
		case "-burn":
			d, _ := time.ParseDuration(next())
			x := 0
			for start := time.Now(); time.Since(start) < d; x++ {
			}
			_ = x
		case "-write":
			n, _ := strconv.Atoi(next())
			f, err := os.Create("written")
			if err == nil {
				_, err = f.Write(make([]byte, n))
			}
			if err == nil {
				err = f.Sync()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "fake node:", err)
				os.Exit(2)
			}
			f.Close()
		case "-alloc":
			n, _ := strconv.Atoi(next())
			b := make([]byte, n)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		case "-sleep":
			for {
				time.Sleep(time.Hour)
			}
		default:
			fmt.Fprintln(os.Stderr, "fake node: unknown argument", args[i])
			os.Exit(2)
		}
	}
	_ = keep
	os.Exit(0)
}

// testToken is the agents' token in these tests.
const testToken = "test-token"

// pollWait bounds every poll of these tests: generous, since the race
// detector slows the helper processes down on a busy machine.
const pollWait = 60 * time.Second

// testAgent is an agent served by this process for one test.
type testAgent struct {
	*Client
	cfg  Config
	addr string
	stop context.CancelFunc
	done chan error
	// served and serveErr: Serve has returned serveErr.
	served   bool
	serveErr error
	starts   int // by start
}

// startAgent serves an agent with a node directory in a temporary
// directory and the test binary as its node program; edit changes its
// Config. It is stopped at the end of the test (its error fails it).
func startAgent(t *testing.T, edit func(*Config)) *testAgent {
	t.Helper()
	cfg := DefaultConfig()
	dir := t.TempDir()
	cfg.Dir, cfg.Token, cfg.Binary, cfg.AddressFile = filepath.Join(dir, "node"), testToken, os.Args[0], filepath.Join(dir, "agent.address")
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &testAgent{cfg: cfg, stop: cancel, done: make(chan error, 1)}
	go func() { a.done <- Serve(ctx, cfg) }()
	eventually(t, "the agent writes its address file", func() (bool, string) {
		select {
		case err := <-a.done:
			t.Fatalf("Serve: %v", err)
		default:
		}
		b, err := os.ReadFile(cfg.AddressFile)
		a.addr = strings.TrimSpace(string(b))
		return err == nil && a.addr != "", fmt.Sprint(err)
	})
	c, err := Dial(a.addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	a.Client = c
	t.Cleanup(func() {
		c.Close()
		if err := a.shutdown(); err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return a
}

// wait waits up to d for Serve to return, and returns its error.
func (a *testAgent) wait(d time.Duration) error {
	if !a.served {
		select {
		case a.serveErr = <-a.done:
			a.served = true
		case <-time.After(d):
			return fmt.Errorf("Serve did not return within %v", d)
		}
	}
	return a.serveErr
}

// shutdown stops the agent (if still serving) and returns Serve's error.
func (a *testAgent) shutdown() error {
	a.stop()
	return a.wait(pollWait)
}

// eventually polls cond until it holds, failing the test after pollWait
// with the last thing cond said.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(pollWait)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last: %s)", what, pollWait, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), pollWait)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails unless err is a gRPC status with code c.
func wantCode(t *testing.T, what string, err error, c codes.Code) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("%s: %v; want %v", what, err, c)
	}
}

// start starts the fake node with args and -sleep, and waits until it
// has carried out args (it prints a line of its own in the log then).
func (a *testAgent) start(t *testing.T, limitBytes int64, args ...string) int {
	t.Helper()
	a.starts++
	ready := fmt.Sprintf("ready-%d", a.starts)
	args = append(args, "-print", ready, "-sleep")
	resp, err := a.Start(ctxT(t), &agentpb.StartRequest{Program: agentpb.Program_SERVE, Args: args, MemoryLimitBytes: limitBytes})
	if err != nil {
		t.Fatalf("Start %v: %v", args, err)
	}
	a.waitLine(t, ready)
	return int(resp.Pid)
}

// waitLog polls the node's log until it holds want.
func (a *testAgent) waitLog(t *testing.T, want string) string {
	t.Helper()
	var text string
	eventually(t, fmt.Sprintf("the node's log says %q", want), func() (bool, string) {
		r, err := a.Logs(ctxT(t), &agentpb.LogsRequest{Lines: 1000})
		text = r.GetText()
		return err == nil && strings.Contains(text, want), fmt.Sprintf("%v: %q", err, text)
	})
	return text
}

// waitLine polls the node's log until one of its lines is want.
func (a *testAgent) waitLine(t *testing.T, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("the node's log has the line %q", want), func() (bool, string) {
		r, err := a.Logs(ctxT(t), &agentpb.LogsRequest{Lines: 1000})
		for _, l := range strings.Split(r.GetText(), "\n") {
			if l == want {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v: %q", err, r.GetText())
	})
}

// status is the agent's Status.
func (a *testAgent) status(t *testing.T) *agentpb.StatusResponse {
	t.Helper()
	st, err := a.Status(ctxT(t), &agentpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (a *testAgent) signal(t *testing.T, sig agentpb.Sig, waitMs int64) *agentpb.SignalResponse {
	t.Helper()
	r, err := a.Signal(ctxT(t), &agentpb.SignalRequest{Signal: sig, WaitMs: waitMs})
	if err != nil {
		t.Fatalf("Signal %v: %v", sig, err)
	}
	return r
}

// gone reports whether pid no longer names a running process: no process,
// or a zombie (an orphan's parent, in a container, may never reap it).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}

func TestTokenRequired(t *testing.T) {
	a := startAgent(t, nil)
	for _, token := range []string{"", "wrong-token"} {
		c, err := Dial(a.addr, token)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Status(ctxT(t), &agentpb.StatusRequest{})
		c.Close()
		wantCode(t, fmt.Sprintf("Status with token %q", token), err, codes.Unauthenticated)
	}
	if _, err := a.Status(ctxT(t), &agentpb.StatusRequest{}); err != nil {
		t.Fatalf("Status with the token: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{Listen: "nowhere", Token: "two words", Binary: "/nonexistent/nezha"}.Validate()
	for _, want := range []string{`"nowhere" is not host:port`, "directory is required", "white space", "/nonexistent/nezha"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to say %q", err, want)
		}
	}
	err = Config{Listen: "127.0.0.1:70000", Dir: t.TempDir()}.Validate()
	for _, want := range []string{"0..65535", "token is empty"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to say %q", err, want)
		}
	}
	c := DefaultConfig()
	c.Dir, c.Token = t.TempDir(), testToken
	if err := c.Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	if err := Serve(context.Background(), Config{}); err == nil {
		t.Fatal("Serve with an empty config: no error")
	}
}

func TestTokenFiles(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if tok2, _ := NewToken(); len(tok) != 2*tokenBytes || tok2 == tok {
		t.Fatalf("tokens %q and %q: want two different ones of %d hex digits", tok, tok2, 2*tokenBytes)
	}
	path := filepath.Join(t.TempDir(), "agent.token")
	if err := WriteToken(path, tok); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %04o, want 0600", st.Mode().Perm())
	}
	if got, err := ReadToken(path); err != nil || got != tok {
		t.Fatalf("ReadToken = %q, %v; want %q", got, err, tok)
	}
	os.Chmod(path, 0o644)
	if _, err := ReadToken(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a token file others may read: %v", err)
	}
	os.Chmod(path, 0o600)
	for _, bad := range []string{"", "\n", "a\nb\n", "a b\n"} {
		os.WriteFile(path, []byte(bad), 0o600)
		if _, err := ReadToken(path); err == nil {
			t.Errorf("token file %q accepted", bad)
		}
	}
}

// TestProcessLifecycle: start, refusal while running, status, pause and
// resume, TERM, an exit status, TERM on a process that ignores it (KILL
// after the wait), KILL; logs with the start lines.
func TestProcessLifecycle(t *testing.T) {
	a := startAgent(t, nil)
	ctx := ctxT(t)
	if st := a.status(t); st.Running || st.LastExit != "" || st.DataDir != DataDir(a.cfg.Dir) || st.LogPath != LogPath(a.cfg.Dir) {
		t.Fatalf("before any start: %v", st)
	}
	_, err := a.Signal(ctx, &agentpb.SignalRequest{Signal: agentpb.Sig_KILL})
	wantCode(t, "KILL with no node", err, codes.FailedPrecondition)

	before := time.Now()
	pid := a.start(t, 0)
	_, err = a.Start(ctx, &agentpb.StartRequest{Program: agentpb.Program_SERVE, Args: []string{"-sleep"}})
	wantCode(t, "a second Start", err, codes.FailedPrecondition)
	_, err = a.Start(ctx, &agentpb.StartRequest{Program: agentpb.Program(7)})
	wantCode(t, "Start of an unknown program", err, codes.InvalidArgument)
	st := a.status(t)
	if !st.Running || st.Pid != int64(pid) || st.Stopped || st.StartedUnixNano < before.UnixNano() {
		t.Fatalf("running: %v", st)
	}
	text := a.waitLog(t, "ready-1")
	if !strings.Contains(text, "=== ") || !strings.Contains(text, " start: "+a.cfg.Binary+" serve -print ready-1 -sleep") {
		t.Fatalf("log without the start line:\n%s", text)
	}

	a.signal(t, agentpb.Sig_STOP, 0)
	eventually(t, "Status says paused", func() (bool, string) { st := a.status(t); return st.Stopped, st.String() })
	a.signal(t, agentpb.Sig_CONT, 0)
	eventually(t, "Status says resumed", func() (bool, string) { st := a.status(t); return !st.Stopped, st.String() })
	// TERM on a paused node: CONT first, so that it can exit.
	a.signal(t, agentpb.Sig_STOP, 0)
	if r := a.signal(t, agentpb.Sig_TERM, 0); !r.Gone || r.Pid != int64(pid) {
		t.Fatalf("TERM: %v", r)
	}
	if st := a.status(t); st.Running || st.LastExit != "signal: terminated" || st.ExitedUnixNano < st.StartedUnixNano || !gone(pid) {
		t.Fatalf("after TERM: %v (pid %d gone: %v)", st, pid, gone(pid))
	}
	_, err = a.Signal(ctx, &agentpb.SignalRequest{Signal: agentpb.Sig_STOP})
	wantCode(t, "STOP with no node", err, codes.FailedPrecondition)

	if _, err := a.Start(ctx, &agentpb.StartRequest{Program: agentpb.Program_SERVE, Args: []string{"-exit", "3"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node exits with status 3", func() (bool, string) {
		st := a.status(t)
		return !st.Running && st.LastExit == "exit status 3", st.String()
	})

	pid = a.start(t, 0, "-ignoreTerm")
	if r := a.signal(t, agentpb.Sig_TERM, 100); !r.Gone {
		t.Fatalf("TERM ignored, then KILL: %v", r)
	}
	if st := a.status(t); st.LastExit != "signal: killed" || !gone(pid) {
		t.Fatalf("after TERM ignored: %v", st)
	}

	pid = a.start(t, 0)
	if r := a.signal(t, agentpb.Sig_KILL, 0); !r.Gone {
		t.Fatalf("KILL: %v", r)
	}
	if st := a.status(t); st.LastExit != "signal: killed" || !gone(pid) {
		t.Fatalf("after KILL: %v", st)
	}
	text = a.waitLog(t, "exit: signal: killed")
	if n := strings.Count(text, " start: "); n != 4 {
		t.Fatalf("%d start lines in the log, want 4:\n%s", n, text)
	}
	r, err := a.Logs(ctx, &agentpb.LogsRequest{Lines: 1})
	if err != nil || strings.Contains(r.Text, "\n") || !strings.Contains(r.Text, "exit: signal: killed") || r.Path != LogPath(a.cfg.Dir) {
		t.Fatalf("Logs(1) = %v, %v", r, err)
	}
}

// TestStopsNodeOnTheWayOut: Exit stops the node and the agent (which
// removes its address file); so does the end of Serve's context.
func TestStopsNodeOnTheWayOut(t *testing.T) {
	for _, how := range []string{"Exit", "cancel"} {
		t.Run(how, func(t *testing.T) {
			a := startAgent(t, nil)
			var pid int
			if how == "Exit" {
				pid = a.start(t, 0)
			} else {
				pid = a.start(t, 0, "-ignoreTerm") // KILLed after 10 s
			}
			if how == "Exit" {
				if _, err := a.Exit(ctxT(t), &agentpb.ExitRequest{}); err != nil {
					t.Fatalf("Exit: %v", err)
				}
				if err := a.wait(pollWait); err != nil {
					t.Fatalf("Serve after Exit: %v", err)
				}
			} else if err := a.shutdown(); err != nil {
				t.Fatal(err)
			}
			if !gone(pid) {
				t.Fatalf("node pid %d outlived its agent", pid)
			}
			if _, err := os.Stat(a.cfg.AddressFile); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("address file left behind: %v", err)
			}
		})
	}
}

// TestStartEtcd: an ETCD start runs EtcdBinary, looked up in PATH, with
// the arguments as given (no "serve" added); a missing one is refused.
func TestStartEtcd(t *testing.T) {
	t.Setenv("PATH", filepath.Dir(os.Args[0])+string(os.PathListSeparator)+os.Getenv("PATH"))
	a := startAgent(t, func(c *Config) { c.EtcdBinary = filepath.Base(os.Args[0]) })
	r, err := a.Start(ctxT(t), &agentpb.StartRequest{Program: agentpb.Program_ETCD, Args: []string{"serve", "-print", "etcd-ready", "-sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	a.waitLine(t, "etcd-ready")
	if text := a.waitLog(t, "start: "); !strings.Contains(text, " start: "+os.Args[0]+" serve -print etcd-ready -sleep") {
		t.Fatalf("start line of an ETCD start:\n%s", text)
	}
	a.signal(t, agentpb.Sig_KILL, 0)
	if !gone(int(r.Pid)) {
		t.Fatalf("pid %d after KILL", r.Pid)
	}
	b := startAgent(t, func(c *Config) { c.EtcdBinary = "no-such-etcd-here" })
	_, err = b.Start(ctxT(t), &agentpb.StartRequest{Program: agentpb.Program_ETCD})
	wantCode(t, "Start of a missing etcd", err, codes.FailedPrecondition)
}

// TestNodeDiesWithAgent: a node outlives no agent, however it ends
// (SIGKILL here: nothing of the agent's runs on the way out).
func TestNodeDiesWithAgent(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), childAgentEnv+"="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { cmd.Wait(); close(reaped) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-reaped })
	var addr string
	eventually(t, "the child agent writes its address", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(dir, "agent.address"))
		addr = strings.TrimSpace(string(b))
		return addr != "", fmt.Sprint(err)
	})
	c, err := Dial(addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Start(ctxT(t), &agentpb.StartRequest{Program: agentpb.Program_SERVE, Args: []string{"-ignoreTerm", "-sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	<-reaped
	eventually(t, fmt.Sprintf("node pid %d ends with its agent", r.Pid), func() (bool, string) {
		return gone(int(r.Pid)), "still there"
	})
}
