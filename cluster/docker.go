package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
	"github.com/nezha-harness/nezha/internal/buildinfo"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// DockerOptions configures the docker backend of a new cluster.
type DockerOptions struct {
	// Image runs the nodes. Default: the image scripts/image.sh builds
	// from this binary's revision (buildinfo.ImageTag).
	Image string
	// Privileged runs the containers privileged, so that their agents may
	// limit a node's page cache (memory cgroups), drop the page cache and
	// set the readahead as on the local backend, where the daemon allows
	// privileged containers. Without it (the default) the containers get
	// CAP_NET_ADMIN only (the packet filter), and the experiments record
	// which measurements fell back.
	Privileged bool
}

// Validate reports every problem of o.
func (o DockerOptions) Validate() error { return nil }

// DockerSpec is what the docker backend made for a cluster
// (cluster.json "backend.docker").
type DockerSpec struct {
	Image      string `json:"image"`
	Privileged bool   `json:"privileged"`
	// Prefix names the cluster's containers (Prefix-n<id>) and volumes.
	Prefix string `json:"prefix"`
	// Network and Subnet: the bridge network the containers share on the
	// local daemon (empty with Hosts).
	Network string `json:"network,omitempty"`
	Subnet  string `json:"subnet,omitempty"`
	// Hosts are the Docker daemons of a cluster with one node per named
	// host (host networking).
	Hosts []Host `json:"hosts,omitempty"`
}

// Paths and ports inside a node's container.
const (
	containerDir     = "/var/lib/nezha"
	containerNodeDir = containerDir + "/node"
)

// containerPort is a bridge-networked node's k-th port, in Host.port's
// order: client, internal, metrics, JSON-RPC, agent, etcd API, profiler
// (the client, peer and etcd ports those of deploy/compose.yaml).
func containerPort(k int) int { return [...]int{7000, 7001, 9100, 7002, 7070, 2379, 6060}[k] }

type dockerBackend struct{}

// prepareBackend checks and makes what the backend needs before any node
// is placed: the docker backend's image and network, the ssh backend's
// hosts.
func (s *Spec) prepareBackend(ctx context.Context, o BackendOptions) (backend, error) {
	switch o.Name {
	case BackendDocker:
		d := &DockerSpec{Image: o.Docker.Image, Privileged: o.Docker.Privileged, Hosts: o.Hosts,
			Prefix: "nezha-" + newClusterID()[:8]}
		if d.Image == "" {
			d.Image = buildinfo.Read().ImageTag()
		}
		s.Backend.Docker = d
		if err := d.prepare(ctx); err != nil {
			return nil, err
		}
	case BackendSSH:
		if err := s.prepareSSH(ctx, o); err != nil {
			return nil, err
		}
	}
	return s.backend()
}

// prepare checks that every daemon answers and has the image (copying it
// from the local daemon to a named one that lacks it), and makes the bridge
// network.
func (d *DockerSpec) prepare(ctx context.Context) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return cmdline.Usagef("-backend docker needs the docker command (Docker Engine): %v", err)
	}
	if _, err := docker(ctx, Host{}, "image", "inspect", "--format", "{{.Id}}", d.Image); err != nil {
		return cmdline.Usagef("image %s is not on the local Docker daemon: build it with scripts/image.sh (or name one with -image): %v", d.Image, err)
	}
	for _, h := range d.Hosts {
		if _, err := docker(ctx, h, "image", "inspect", "--format", "{{.Id}}", d.Image); err == nil {
			continue
		}
		if err := copyImage(ctx, d.Image, h); err != nil {
			return err
		}
	}
	if len(d.Hosts) > 0 {
		return nil
	}
	d.Network = d.Prefix
	// A /24 of 10.213.0.0/16 that no other network of the daemon holds.
	var last error
	for k := 0; k < 256; k++ {
		subnet := fmt.Sprintf("10.213.%d.0/24", (k+int(d.Prefix[len(d.Prefix)-1]))%256)
		_, err := docker(ctx, Host{}, "network", "create", "--driver", "bridge", "--subnet", subnet,
			"--label", "nezha.cluster="+d.Prefix, d.Network)
		if err == nil {
			d.Subnet = subnet
			return nil
		}
		last = err
		if !strings.Contains(err.Error(), "overlap") {
			break
		}
	}
	return fmt.Errorf("docker network for the cluster: %w", last)
}

// copyImage streams image from the local daemon to host's (docker save |
// docker load).
func copyImage(ctx context.Context, image string, h Host) error {
	save := exec.CommandContext(ctx, "docker", "save", image)
	load := exec.CommandContext(ctx, "docker", dockerHostArgs(h, "load")...)
	load.Env = dockerEnv(h)
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	load.Stdin = pipe
	var serr, lerr bytes.Buffer
	save.Stderr, load.Stderr = &serr, &lerr
	if err := save.Start(); err != nil {
		return err
	}
	if err := load.Run(); err != nil {
		_ = save.Wait()
		return fmt.Errorf("copy image %s to %s: %v: %s", image, h.Target, err, strings.TrimSpace(lerr.String()))
	}
	if err := save.Wait(); err != nil {
		return fmt.Errorf("copy image %s to %s: docker save: %v: %s", image, h.Target, err, strings.TrimSpace(serr.String()))
	}
	return nil
}

// dockerHostArgs prefixes args with --context for a host named by a
// docker context.
func dockerHostArgs(h Host, args ...string) []string {
	if name, ok := strings.CutPrefix(h.Target, "context="); ok {
		return append([]string{"--context", name}, args...)
	}
	return args
}

// dockerEnv is the environment of a docker command for host h
// (DOCKER_HOST=h.Target; the local daemon when h has no target).
func dockerEnv(h Host) []string {
	env := os.Environ()
	if h.Target != "" && !strings.HasPrefix(h.Target, "context=") {
		env = append(env, "DOCKER_HOST="+h.Target)
	}
	return env
}

// agentTokenEnv is the variable `nezha agent` reads its token from when
// it has no -tokenFile.
const agentTokenEnv = "NEZHA_AGENT_TOKEN"

// docker runs the docker command against host h's daemon and returns its
// trimmed output; a failure carries the command's stderr.
func docker(ctx context.Context, h Host, args ...string) (string, error) {
	return dockerEnvRun(ctx, h, nil, args...)
}

// dockerEnvRun is docker with env added to the command's environment.
func dockerEnvRun(ctx context.Context, h Host, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", dockerHostArgs(h, args...)...)
	cmd.Env = append(dockerEnv(h), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// container is node n's container name, volume is its data volume.
func (d *DockerSpec) container(n *Node) string { return fmt.Sprintf("%s-n%d", d.Prefix, n.ID) }

func (d *DockerSpec) volume(n *Node) string { return d.container(n) }

// daemon returns the host whose daemon runs node n (Host{}: the local one).
func (d *DockerSpec) daemon(n *Node) (Host, error) {
	if len(d.Hosts) == 0 {
		return Host{}, nil
	}
	return hostOf(d.Hosts, n)
}

func (dockerBackend) place(ctx context.Context, s *Spec, n *Node) error {
	d := s.Backend.Docker
	n.Dir = containerNodeDir
	n.Data, n.Log = containerNodeDir+"/data", containerNodeDir+"/node.log"
	if len(d.Hosts) > 0 {
		h, err := s.freeHost(d.Hosts, n.ID)
		if err != nil {
			return err
		}
		n.Host = hostKey(h)
		n.Address, n.InternalAddress, n.Agent = h.port(0), h.port(1), h.port(4)
		s.setAdminAddresses(n, h.port)
	} else {
		ip, err := d.ip(n.ID)
		if err != nil {
			return err
		}
		n.Host = d.container(n)
		at := func(p int) string { return net.JoinHostPort(ip, strconv.Itoa(p)) }
		n.Address, n.InternalAddress, n.Agent = at(containerPort(0)), at(containerPort(1)), at(containerPort(4))
		s.setAdminAddresses(n, func(k int) string { return at(containerPort(k)) })
	}
	return d.run(ctx, s, n)
}

// ip is the bridge network address of node id: host id+10 of the subnet.
func (d *DockerSpec) ip(id uint64) (string, error) {
	ip, _, err := net.ParseCIDR(d.Subnet)
	if err != nil || ip.To4() == nil {
		return "", fmt.Errorf("docker network subnet %q: %v", d.Subnet, err)
	}
	if id+10 > 254 {
		return "", fmt.Errorf("node id %d does not fit the cluster's /24 (ids up to 244)", id)
	}
	v4 := ip.To4()
	return net.IPv4(v4[0], v4[1], v4[2], byte(id+10)).String(), nil
}

// run starts node n's container with its agent and waits until the agent
// answers.
func (d *DockerSpec) run(ctx context.Context, s *Spec, n *Node) error {
	h, err := d.daemon(n)
	if err != nil {
		return err
	}
	token, err := s.Token()
	if err != nil {
		return err
	}
	if _, err := docker(ctx, h, "volume", "create", "--label", "nezha.cluster="+d.Prefix, d.volume(n)); err != nil {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	args := []string{"run", "-d", "--name", d.container(n), "--hostname", fmt.Sprintf("node%d", n.ID),
		"--label", "nezha.cluster=" + d.Prefix, "--label", fmt.Sprintf("nezha.node=%d", n.ID),
		// The token's value comes from the docker command's environment
		// (dockerWithToken), so that no command line or error shows it.
		"-v", d.volume(n) + ":" + containerDir, "-e", agentTokenEnv, "--cap-add", "NET_ADMIN",
		// The image's health check asks a node on 127.0.0.1 (compose's);
		// here the agent watches its node, which the harness kills on
		// purpose.
		"--no-healthcheck"}
	if d.Privileged {
		args = append(args, "--privileged")
	}
	listen := net.JoinHostPort("0.0.0.0", strconv.Itoa(containerPort(4)))
	if len(d.Hosts) > 0 {
		args = append(args, "--network", "host")
		listen = n.Agent
	} else {
		ip, _, _ := net.SplitHostPort(n.Agent)
		args = append(args, "--network", d.Network, "--ip", ip)
	}
	args = append(args, d.Image, "agent", "-listen", listen, "-dir", n.Dir, "-packetFilter")
	if _, err := dockerEnvRun(ctx, h, []string{agentTokenEnv + "=" + token}, args...); err != nil {
		if d.Privileged && strings.Contains(err.Error(), "apply caps") {
			return cmdline.Usagef("node %d: the Docker daemon refused a privileged container (leave out -privileged: the measurements that need it then fall back, and results say so): %v", n.ID, err)
		}
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	return s.awaitAgent(ctx, n, func() string {
		out, _ := docker(context.Background(), h, "logs", "--tail", "10", d.container(n))
		return out
	})
}

// awaitAgent waits up to 30 s until node n's agent answers; logTail says
// what the agent printed when it does not.
func (s *Spec) awaitAgent(ctx context.Context, n *Node, logTail func() string) error {
	deadline := time.Now().Add(30 * time.Second)
	for !agentAnswers(ctx, s, n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d's agent does not answer at %s after 30 s; its output:\n%s", n.ID, n.Agent, logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (dockerBackend) revive(ctx context.Context, s *Spec, n *Node) error {
	if agentAnswers(ctx, s, n) {
		return nil
	}
	d := s.Backend.Docker
	h, err := d.daemon(n)
	if err != nil {
		return err
	}
	s.dropAgent(n)
	state, err := docker(ctx, h, "inspect", "--format", "{{.State.Status}}", d.container(n))
	if err != nil {
		return d.run(ctx, s, n) // the container is gone; its volume is not
	}
	if state != "running" {
		if _, err := docker(ctx, h, "start", d.container(n)); err != nil {
			return fmt.Errorf("node %d: %w", n.ID, err)
		}
	}
	return s.awaitAgent(ctx, n, func() string {
		out, _ := docker(context.Background(), h, "logs", "--tail", "10", d.container(n))
		return out
	})
}

func (dockerBackend) remove(ctx context.Context, s *Spec, n *Node, purge bool) error {
	d := s.Backend.Docker
	h, err := d.daemon(n)
	if err != nil {
		return err
	}
	if a, err := s.Agent(n); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, _ = a.Exit(cctx, &agentpb.ExitRequest{})
		cancel()
	}
	s.dropAgent(n)
	if !purge {
		// The agent's exit ends the container; stop it if it did not.
		_, err := docker(ctx, h, "stop", "--time", "10", d.container(n))
		if err != nil && !strings.Contains(err.Error(), "No such container") {
			return err
		}
		return nil
	}
	var errs []error
	if _, err := docker(ctx, h, "rm", "-f", d.container(n)); err != nil && !strings.Contains(err.Error(), "No such container") {
		errs = append(errs, err)
	}
	if _, err := docker(ctx, h, "volume", "rm", d.volume(n)); err != nil && !strings.Contains(err.Error(), "No such volume") {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// close with purge removes every container and volume of the cluster on
// each of its daemons (those of members removed earlier too: they carry
// the cluster's label), then its network.
func (dockerBackend) close(ctx context.Context, s *Spec, purge bool) error {
	d := s.Backend.Docker
	if !purge || d == nil {
		return nil
	}
	daemons := d.Hosts
	if len(daemons) == 0 {
		daemons = []Host{{}}
	}
	label := "label=nezha.cluster=" + d.Prefix
	var errs []error
	for _, h := range daemons {
		if ids, err := docker(ctx, h, "ps", "-aq", "--filter", label); err != nil {
			errs = append(errs, err)
		} else if ids != "" {
			if _, err := docker(ctx, h, append([]string{"rm", "-f"}, strings.Fields(ids)...)...); err != nil {
				errs = append(errs, err)
			}
		}
		if names, err := docker(ctx, h, "volume", "ls", "-q", "--filter", label); err != nil {
			errs = append(errs, err)
		} else if names != "" {
			if _, err := docker(ctx, h, append([]string{"volume", "rm"}, strings.Fields(names)...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if d.Network != "" {
		if _, err := docker(ctx, Host{}, "network", "rm", d.Network); err != nil && !strings.Contains(err.Error(), "No such network") && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
