package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// echo serves a line echo on a free loopback port (a fake peer) and
// returns its address.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip dials addr (within dialTimeout), sends a line and reads it
// back; it returns how long that took.
func roundTrip(addr string, dialTimeout time.Duration) (time.Duration, error) {
	begin := time.Now()
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		err = fmt.Errorf("echoed %q", line)
	}
	return time.Since(begin), err
}

func (a *testAgent) setLinks(t *testing.T, req *agentpb.SetLinksRequest) string {
	t.Helper()
	r, err := a.SetLinks(ctxT(t), req)
	if err != nil {
		t.Fatalf("SetLinks %v: %v", req, err)
	}
	return r.Mechanism
}

// TestPeerLinkProxies: a peer reached through its proxy; cut, the proxy
// refuses (and closes what it carried); restored, on the same port;
// delayed, a round trip takes the delay; a member left out loses its
// proxy.
func TestPeerLinkProxies(t *testing.T) {
	a := startAgent(t, nil)
	ctx := ctxT(t)
	peer2, peer3 := echo(t), echo(t)
	r, err := a.SetPeers(ctx, &agentpb.SetPeersRequest{Peers: map[uint64]string{2: peer2, 3: peer3}})
	if err != nil {
		t.Fatal(err)
	}
	proxy := r.Dial[2]
	if len(r.Dial) != 2 || proxy == "" || proxy == peer2 || r.DialPeersFile != DialPeersFile(a.cfg.Dir) {
		t.Fatalf("SetPeers: %v", r)
	}
	var file map[string]string
	if b, err := os.ReadFile(r.DialPeersFile); err != nil || json.Unmarshal(b, &file) != nil || file["2"] != proxy || file["3"] != r.Dial[3] {
		t.Fatalf("dial peers file %q (%v), want the proxies %v", file, err, r.Dial)
	}
	if _, err := roundTrip(proxy, time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	held, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	if m := a.setLinks(t, &agentpb.SetLinksRequest{Cut: []uint64{2}}); m != "proxy" {
		t.Fatalf("mechanism %q, want proxy", m)
	}
	if _, err := roundTrip(proxy, time.Second); err == nil {
		t.Fatal("a cut link carried a round trip")
	}
	if _, err := roundTrip(r.Dial[3], time.Second); err != nil {
		t.Fatalf("the link to member 3 (not cut): %v", err)
	}
	held.SetReadDeadline(time.Now().Add(pollWait))
	if _, err := held.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection through the cut link: read %v, want it closed", err)
	}
	a.setLinks(t, &agentpb.SetLinksRequest{})
	if _, err := roundTrip(proxy, time.Second); err != nil {
		t.Fatalf("restored link: %v", err)
	}

	const delay = 100 * time.Millisecond
	a.setLinks(t, &agentpb.SetLinksRequest{DelayNs: int64(delay)})
	if d, err := roundTrip(proxy, time.Second); err != nil || d < delay-5*time.Millisecond {
		t.Fatalf("delayed link: round trip %v, %v; want at least %v", d, err, delay)
	}
	a.setLinks(t, &agentpb.SetLinksRequest{})
	if d, err := roundTrip(proxy, time.Second); err != nil || d >= delay {
		// A machine so busy that a loopback round trip takes 100 ms
		// would fail this too; on this one it takes well under 1 ms.
		t.Fatalf("delay removed: round trip %v, %v", d, err)
	}

	_, err = a.SetLinks(ctx, &agentpb.SetLinksRequest{Cut: []uint64{9}})
	wantCode(t, "cut an unknown member", err, codes.InvalidArgument)
	_, err = a.SetPeers(ctx, &agentpb.SetPeersRequest{Peers: map[uint64]string{2: "no-port"}})
	wantCode(t, "a peer address without a port", err, codes.InvalidArgument)

	r, err = a.SetPeers(ctx, &agentpb.SetPeersRequest{Peers: map[uint64]string{3: peer3}})
	if err != nil || len(r.Dial) != 1 || r.Dial[3] == "" {
		t.Fatalf("SetPeers without member 2: %v, %v", r, err)
	}
	if _, err := roundTrip(proxy, time.Second); err == nil {
		t.Fatal("the proxy of a member left out still carries")
	}

	// A node that dials its peers itself: no proxies, and no way to cut
	// or delay without a packet filter.
	r, err = a.SetPeers(ctx, &agentpb.SetPeersRequest{Peers: map[uint64]string{2: peer2, 3: peer3}, NoProxies: true})
	if err != nil || len(r.Dial) != 0 || r.DialPeersFile != "" {
		t.Fatalf("SetPeers with no proxies: %v, %v", r, err)
	}
	_, err = a.SetLinks(ctx, &agentpb.SetLinksRequest{Cut: []uint64{2}})
	wantCode(t, "cut without proxies or packet filter", err, codes.FailedPrecondition)
	_, err = a.SetLinks(ctx, &agentpb.SetLinksRequest{DelayNs: int64(delay)})
	wantCode(t, "delay without proxies", err, codes.FailedPrecondition)
}

// netnsEnv makes the test binary run TestPacketFilterInNamespace: it is
// set in a child started in a network namespace of its own.
const netnsEnv = "NEZHA_AGENT_TEST_NETNS"

// TestPacketFilter runs TestPacketFilterInNamespace in a child process in
// a fresh network namespace (gone with the child), so that the host's
// packet filter is never touched.
func TestPacketFilter(t *testing.T) {
	if os.Getenv(netnsEnv) != "" {
		t.Skip("in the namespace already")
	}
	if os.Geteuid() != 0 {
		t.Skip("packet filter: needs root (a network namespace and nftables)")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPacketFilterInNamespace$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("packet filter: cannot make a network namespace here: %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestPacketFilterInNamespace") {
		t.Fatalf("in a network namespace: %v\n%s", err, out)
	}
}

// TestPacketFilterInNamespace: cut links drop the packets to the member's
// address (with proxies, and for a node that dials its peers itself);
// restored, they pass; the table is gone with the agent.
func TestPacketFilterInNamespace(t *testing.T) {
	if os.Getenv(netnsEnv) == "" {
		t.Skip("run by TestPacketFilter in a network namespace of its own")
	}
	if err := loopbackUp(); err != nil {
		t.Fatalf("bring lo up: %v", err)
	}
	a := startAgent(t, func(c *Config) { c.PacketFilter = true })
	ctx := ctxT(t)
	info, err := a.Info(ctx, &agentpb.InfoRequest{})
	if err != nil || !info.PacketFilter.Ok {
		t.Fatalf("Info: packet filter %v, %v", info.GetPacketFilter(), err)
	}
	peer := echo(t)
	r, err := a.SetPeers(ctx, &agentpb.SetPeersRequest{Peers: map[uint64]string{2: peer}})
	if err != nil {
		t.Fatal(err)
	}
	rules := func() int {
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		tab, err := c.ListTableOfFamily(filterTable, nftables.TableFamilyINet)
		if err != nil {
			return -1 // no table
		}
		rs, err := c.GetRules(tab, &nftables.Chain{Name: "output", Table: tab})
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}
	dropped := func(what string) {
		t.Helper()
		_, err := roundTrip(peer, 300*time.Millisecond)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s: a direct dial to the cut member gives %v, want a timeout (SYN dropped)", what, err)
		}
	}
	if n := rules(); n != 0 {
		t.Fatalf("%d rules before any cut", n)
	}
	if m := a.setLinks(t, &agentpb.SetLinksRequest{Cut: []uint64{2}}); m != "proxy+nftables" {
		t.Fatalf("mechanism %q", m)
	}
	if n := rules(); n != 1 {
		t.Fatalf("%d rules with one member cut, want 1", n)
	}
	dropped("proxies")
	a.setLinks(t, &agentpb.SetLinksRequest{})
	if _, err := roundTrip(r.Dial[2], time.Second); err != nil {
		t.Fatalf("restored, through the proxy: %v", err)
	}
	if n := rules(); n != 0 {
		t.Fatalf("%d rules after the restore", n)
	}

	if _, err := a.SetPeers(ctx, &agentpb.SetPeersRequest{Peers: map[uint64]string{2: peer}, NoProxies: true}); err != nil {
		t.Fatal(err)
	}
	if m := a.setLinks(t, &agentpb.SetLinksRequest{Cut: []uint64{2}}); m != "nftables" {
		t.Fatalf("mechanism without proxies %q", m)
	}
	dropped("no proxies")
	a.setLinks(t, &agentpb.SetLinksRequest{})
	if _, err := roundTrip(peer, time.Second); err != nil {
		t.Fatalf("restored, directly: %v", err)
	}
	a.setLinks(t, &agentpb.SetLinksRequest{Cut: []uint64{2}})
	if err := a.shutdown(); err != nil {
		t.Fatal(err)
	}
	if n := rules(); n != -1 {
		t.Fatalf("the agent's table outlived it (%d rules)", n)
	}
	if _, err := roundTrip(peer, time.Second); err != nil {
		t.Fatalf("after the agent: %v", err)
	}
}

// loopbackUp brings lo up (a new network namespace has it down).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
