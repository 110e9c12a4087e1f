package systemstest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sshHosts are machines of their own for the ssh backend's tests: one
// network namespace per host, each with an address on a veth pair into a
// bridge that the test's namespace (the controller's) joins too, and an
// sshd of its own
// on that address that lets the test's key in as root. The namespaces share
// the file system, so each host gets its own harness directory.
type sshHosts struct {
	t       *testing.T
	tag     string // names the namespaces and links
	subnet  string // 10.199.K
	dir     string
	config  string // the client's ssh_config
	addrs   []string
	sshds   []*exec.Cmd
	netnses []string // the hosts'
	sw      string   // the switch's
}

// newSSHHosts makes n hosts, or skips the test with one line naming what
// is missing (root, ip, sshd, ssh, ssh-keygen). Everything is removed when
// the test ends.
func newSSHHosts(t *testing.T, n int) *sshHosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("ssh backend: needs root for network namespaces (ip netns); skipped")
	}
	for _, tool := range []string{"ip", "ssh", "ssh-keygen", "/usr/sbin/sshd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("ssh backend: %s not found (Debian: iproute2, openssh-client, openssh-server); skipped", tool)
		}
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	h := &sshHosts{t: t, tag: fmt.Sprintf("nzt%04x", rng.Intn(1<<16)), subnet: fmt.Sprintf("10.199.%d", 1+rng.Intn(250)), dir: t.TempDir()}
	t.Cleanup(h.close)
	// The bridge lives in a switch namespace of its own: bridged traffic
	// in the test's namespace would meet its iptables FORWARD chain (Docker
	// sets its policy to DROP), and the test must change nothing there. The
	// controller (this namespace) joins the switch through a veth pair.
	sw := h.tag + "-sw"
	h.ip("netns", "add", sw)
	h.sw = sw
	h.ip("-n", sw, "link", "add", "name", "nzbr", "type", "bridge")
	h.ip("-n", sw, "link", "set", "nzbr", "up")
	h.ip("link", "add", h.tag+"c", "type", "veth", "peer", "name", h.tag+"cs")
	h.ip("link", "set", h.tag+"cs", "netns", sw)
	h.ip("-n", sw, "link", "set", h.tag+"cs", "master", "nzbr")
	h.ip("-n", sw, "link", "set", h.tag+"cs", "up")
	h.ip("addr", "add", h.subnet+".254/24", "dev", h.tag+"c")
	h.ip("link", "set", h.tag+"c", "up")
	key := filepath.Join(h.dir, "id_ed25519")
	h.run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
	hostKey := filepath.Join(h.dir, "host_ed25519")
	h.run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(h.dir, "authorized_keys")
	if err := os.WriteFile(auth, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	h.config = filepath.Join(h.dir, "ssh_config")
	cfg := fmt.Sprintf("Host %s.*\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n", h.subnet, key)
	if err := os.WriteFile(h.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		ns := fmt.Sprintf("%s-h%d", h.tag, i)
		addr := fmt.Sprintf("%s.%d", h.subnet, i)
		outer, inner := fmt.Sprintf("%sv%d", h.tag, i), fmt.Sprintf("%si%d", h.tag, i)
		h.ip("netns", "add", ns)
		h.netnses = append(h.netnses, ns)
		h.ip("link", "add", outer, "type", "veth", "peer", "name", inner)
		h.ip("link", "set", outer, "netns", sw)
		h.ip("-n", sw, "link", "set", outer, "master", "nzbr")
		h.ip("-n", sw, "link", "set", outer, "up")
		h.ip("link", "set", inner, "netns", ns)
		h.ip("-n", ns, "link", "set", "lo", "up")
		h.ip("-n", ns, "addr", "add", addr+"/24", "dev", inner)
		h.ip("-n", ns, "link", "set", inner, "up")
		h.ip("-n", ns, "route", "add", "default", "via", h.subnet+".254")
		sshdConfig := filepath.Join(h.dir, fmt.Sprintf("sshd_config%d", i))
		conf := fmt.Sprintf("ListenAddress %s\nPort 22\nHostKey %s\nAuthorizedKeysFile %s\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile %s\nPrintMotd no\n",
			addr, hostKey, auth, filepath.Join(h.dir, fmt.Sprintf("sshd%d.pid", i)))
		if err := os.WriteFile(sshdConfig, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		// sshd needs its privilege separation directory.
		_ = os.MkdirAll("/run/sshd", 0o755)
		cmd := exec.Command("ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", sshdConfig)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("sshd in %s: %v", ns, err)
		}
		h.sshds = append(h.sshds, cmd)
		h.addrs = append(h.addrs, addr)
		h.waitSSH(addr, &out)
	}
	return h
}

// waitSSH waits until `ssh addr true` works (sshd is up).
func (h *sshHosts) waitSSH(addr string, out *bytes.Buffer) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := exec.CommandContext(ctx, "ssh", "-F", h.config, "-o", "BatchMode=yes", addr, "true").Run()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sshd on %s does not let the test in: %v; its output:\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hostsFile writes a hosts file for the ssh backend: one line per host,
// each with its own directory.
func (h *sshHosts) hostsFile() string {
	var b strings.Builder
	for i, a := range h.addrs {
		fmt.Fprintf(&b, "%s %s dir=%s ssh_config=%s\n", a, a, filepath.Join(h.dir, fmt.Sprintf("host%d", i+1)), h.config)
	}
	p := filepath.Join(h.dir, "hosts")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// dialFrom reports whether a TCP connection from host i (1-based) to addr
// (host:port) opens within timeout: bash's /dev/tcp inside the host's
// namespace.
func (h *sshHosts) dialFrom(i int, addr string, timeout time.Duration) bool {
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), timeout+2*time.Second)
	defer cancel()
	script := fmt.Sprintf("timeout %.1f bash -c '</dev/tcp/%s/%s'", timeout.Seconds(), host, port)
	return exec.CommandContext(ctx, "ip", "netns", "exec", h.netnses[i-1], "bash", "-c", script).Run() == nil
}

func (h *sshHosts) ip(args ...string) { h.run("ip", args...) }

func (h *sshHosts) run(name string, args ...string) {
	h.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		h.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// close stops the sshds and removes the namespaces (and with them the
// veth pairs and the bridge).
func (h *sshHosts) close() {
	for _, c := range h.sshds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	for _, ns := range append(h.netnses, h.sw) {
		// Processes left in the namespace (an agent the test did not stop)
		// would keep it: kill them first.
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, pid := range strings.Fields(string(out)) {
				_ = exec.Command("kill", "-9", pid).Run()
			}
		}
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	_ = exec.Command("ip", "link", "del", h.tag+"c").Run() // gone with the switch, unless it failed first
}
