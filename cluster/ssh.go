package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// SSHSpec is what the ssh backend made for a cluster (cluster.json
// "backend.ssh"): a directory Dir/Prefix on each host holding one
// directory per node, and the binary under Dir/bin.
type SSHSpec struct {
	Hosts  []Host `json:"hosts"`
	Prefix string `json:"prefix"`
	// Binary is the local nezha binary copied to the hosts, and
	// BinarySHA256 its digest (the copy is Dir/bin/nezha-<digest[:12]>).
	Binary       string `json:"binary"`
	BinarySHA256 string `json:"binary_sha256"`
}

type sshBackend struct{}

// prepareSSH records the hosts and the binary to copy.
func (s *Spec) prepareSSH(ctx context.Context, o BackendOptions) error {
	if _, err := exec.LookPath("ssh"); err != nil {
		return cmdline.Usagef("-backend ssh needs the ssh command (Debian: openssh-client): %v", err)
	}
	bin := s.Binary
	if o.Binary != "" {
		bin = o.Binary
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		return cmdline.Usagef("the binary for the hosts: %v", err)
	}
	s.Backend.SSH = &SSHSpec{Hosts: o.Hosts, Prefix: "nezha-" + newClusterID()[:8], Binary: bin, BinarySHA256: sum}
	return nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sshRun runs the shell command cmd on host h (ssh -o BatchMode=yes),
// with stdin if given, and returns its trimmed output; a failure carries
// its stderr.
func sshRun(ctx context.Context, h Host, stdin io.Reader, cmd string) (string, error) {
	args := []string{"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"}
	if h.SSHConfig != "" {
		args = append(args, "-F", h.SSHConfig)
	}
	args = append(args, h.Target, cmd)
	c := exec.CommandContext(ctx, "ssh", args...)
	c.Stdin = stdin
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("ssh %s %q: %v: %s", h.Target, cmd, err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// root returns the harness's absolute directory on host h (made if
// missing).
func (d *SSHSpec) root(ctx context.Context, h Host) (string, error) {
	dir := h.Dir
	if dir == "" {
		dir = "nezha-harness"
	}
	return sshRun(ctx, h, nil, "mkdir -p "+shellQuote(dir)+" && cd "+shellQuote(dir)+" && pwd")
}

// binary copies the binary to host h under root/bin if it is not there
// yet, and returns its path there.
func (d *SSHSpec) binary(ctx context.Context, h Host, root string) (string, error) {
	p := path.Join(root, "bin", "nezha-"+d.BinarySHA256[:12])
	if _, err := sshRun(ctx, h, nil, "test -x "+shellQuote(p)); err == nil {
		return p, nil
	}
	f, err := os.Open(d.Binary)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tmp := p + ".tmp"
	_, err = sshRun(ctx, h, f, fmt.Sprintf("mkdir -p %s && cat > %s && chmod 755 %s && mv %s %s",
		shellQuote(path.Dir(p)), shellQuote(tmp), shellQuote(tmp), shellQuote(tmp), shellQuote(p)))
	if err != nil {
		return "", fmt.Errorf("copy %s to %s: %w", d.Binary, h.Target, err)
	}
	return p, nil
}

func (sshBackend) place(ctx context.Context, s *Spec, n *Node) error {
	d := s.Backend.SSH
	h, err := s.freeHost(d.Hosts, n.ID)
	if err != nil {
		return err
	}
	n.Host = hostKey(h)
	root, err := d.root(ctx, h)
	if err != nil {
		return err
	}
	n.Dir = path.Join(root, d.Prefix, fmt.Sprintf("node%d", n.ID))
	n.Data, n.Log = path.Join(n.Dir, "data"), path.Join(n.Dir, "node.log")
	n.Address, n.InternalAddress, n.Agent = h.port(0), h.port(1), h.port(4)
	s.setAdminAddresses(n, h.port)
	return d.startAgent(ctx, s, h, root, n)
}

// startAgent copies the binary if needed, writes the token and starts
// node n's agent on host h in its own session, then waits until it
// answers.
func (d *SSHSpec) startAgent(ctx context.Context, s *Spec, h Host, root string, n *Node) error {
	bin, err := d.binary(ctx, h, root)
	if err != nil {
		return err
	}
	token, err := s.Token()
	if err != nil {
		return err
	}
	dir, tokenFile := shellQuote(n.Dir), shellQuote(path.Join(n.Dir, TokenFile))
	if _, err := sshRun(ctx, h, strings.NewReader(token+"\n"), "mkdir -p "+dir+" && umask 077 && cat > "+tokenFile); err != nil {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	// The agent's PID goes to agentPIDFile, so that remove can stop an
	// agent that never answered (a start that timed out under load).
	start := fmt.Sprintf("cd %s && (setsid %s agent -listen %s -dir %s -tokenFile %s -packetFilter </dev/null >>agent.log 2>&1 & echo $! >%s)",
		dir, shellQuote(bin), shellQuote(n.Agent), dir, tokenFile, agentPIDFile)
	if _, err := sshRun(ctx, h, nil, start); err != nil {
		return fmt.Errorf("node %d: start its agent: %w", n.ID, err)
	}
	return s.awaitAgent(ctx, n, func() string {
		out, err := sshRun(context.Background(), h, nil, "tail -n 10 "+shellQuote(path.Join(n.Dir, "agent.log")))
		if err != nil {
			return err.Error()
		}
		return out
	})
}

func (sshBackend) revive(ctx context.Context, s *Spec, n *Node) error {
	if agentAnswers(ctx, s, n) {
		return nil
	}
	d := s.Backend.SSH
	h, err := hostOf(d.Hosts, n)
	if err != nil {
		return err
	}
	s.dropAgent(n)
	return d.startAgent(ctx, s, h, path.Dir(path.Dir(n.Dir)), n)
}

func (sshBackend) remove(ctx context.Context, s *Spec, n *Node, purge bool) error {
	d := s.Backend.SSH
	exited := false
	if a, err := s.Agent(n); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = a.Exit(cctx, &agentpb.ExitRequest{})
		cancel()
		exited = err == nil
	}
	s.dropAgent(n)
	h, err := hostOf(d.Hosts, n)
	if err != nil {
		if !purge {
			return nil // never placed: nothing to stop
		}
		return err
	}
	if !exited {
		// The agent did not answer (it may still be starting): stop the
		// process its start recorded, if it is still that agent.
		pidFile := shellQuote(path.Join(n.Dir, agentPIDFile))
		_, _ = sshRun(ctx, h, nil, fmt.Sprintf(`p=$(cat %s 2>/dev/null) && tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q -- ' agent -listen ' && kill -9 $p; true`, pidFile))
	}
	if !purge {
		return nil
	}
	_, err = sshRun(ctx, h, nil, "rm -rf "+shellQuote(n.Dir))
	return err
}

// agentPIDFile, in a node's directory on its host, holds its agent's PID.
const agentPIDFile = "agent.pid"

// close with purge removes the cluster's directory on every host (the
// copied binary stays, for the next cluster).
func (sshBackend) close(ctx context.Context, s *Spec, purge bool) error {
	d := s.Backend.SSH
	if !purge || d == nil {
		return nil
	}
	var errs []error
	for _, h := range d.Hosts {
		root, err := d.root(ctx, h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := sshRun(ctx, h, nil, "rm -rf "+shellQuote(path.Join(root, d.Prefix))); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
