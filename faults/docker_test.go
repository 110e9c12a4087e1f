package faults_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/faults"
	"github.com/nezha-harness/nezha/linearizability"
	"github.com/nezha-harness/nezha/systems/systemstest"
)

// TestNetDocker partitions the leader of a nezha cluster in containers
// (the docker backend, links through the agents) and proves from inside
// the containers' network namespaces that the traffic is cut: a TCP
// connection from the isolated node to a peer's internal address, and
// from a peer to it, fails while cut and works after healing; meanwhile
// the others elect a new leader, and after healing the cluster takes a
// write and converges.
func TestNetDocker(t *testing.T) {
	if why := systemstest.DockerMissing(); why != "" {
		t.Skip("docker: " + why)
	}
	for _, tool := range []string{"nsenter", "bash", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("docker: no %s on PATH (the test connects from inside a container's network namespace)", tool)
		}
	}
	root, _ := filepath.Abs("..")
	begin := time.Now()
	image, remove, err := systemstest.BuildImage(root)
	if err != nil {
		t.Skip("docker: the image build failed: " + err.Error())
	}
	t.Cleanup(func() {
		if err := remove(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("image %s built in %v", image, time.Since(begin).Round(time.Second))
	ctx := context.Background()
	spec, leader, err := cluster.Up(ctx, cluster.UpOptions{Dir: filepath.Join(t.TempDir(), "cluster"), System: "nezha", Nodes: 3,
		Links: true, ExtraArgs: []string{"-tick", "50ms"},
		Backend: cluster.BackendOptions{Name: cluster.BackendDocker, Docker: cluster.DockerOptions{Image: image}}})
	if err != nil {
		t.Fatal(err)
	}
	prefix := spec.Backend.Docker.Prefix
	t.Cleanup(func() {
		if err := spec.Down(true); err != nil {
			t.Errorf("cluster down: %v", err)
		}
		for _, what := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}, {"network", "ls", "-q"}} {
			out, err := exec.Command("docker", append(what, "--filter", "label=nezha.cluster="+prefix)...).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Errorf("docker %s after cluster down: %s %v", strings.Join(what, " "), out, err)
			}
		}
	})
	t.Logf("cluster up in %v, leader %d", time.Since(begin).Round(time.Second), leader)
	network, err := faults.NewNet(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if m := network.Mechanism(); m != "proxy+nftables" {
		t.Fatalf("mechanism %q (%s), want proxy+nftables: the containers' agents cut with the packet filter too", m, network.Describe())
	}

	// connects reports whether a TCP connection from node from's network
	// namespace to node to's internal address opens within 2 s.
	connects := func(from, to uint64) bool {
		t.Helper()
		f, _ := spec.Node(from)
		d, _ := spec.Node(to)
		pid, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", f.Host).Output()
		if err != nil {
			t.Fatalf("docker inspect %s: %v", f.Host, err)
		}
		host, port, _ := strings.Cut(d.InternalAddress, ":")
		cmd := exec.Command("nsenter", "-t", strings.TrimSpace(string(pid)), "-n",
			"timeout", "2", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port))
		return cmd.Run() == nil
	}
	others := []uint64{}
	var links []faults.Link
	for _, n := range spec.Nodes {
		if n.ID != leader {
			others = append(others, n.ID)
			links = append(links, faults.Link{From: leader, To: n.ID}, faults.Link{From: n.ID, To: leader})
		}
	}
	if !connects(leader, others[0]) || !connects(others[0], leader) {
		t.Fatalf("before the partition, nodes %d and %d cannot connect", leader, others[0])
	}
	if err := network.Cut(links...); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	for _, o := range others {
		if connects(leader, o) {
			t.Fatalf("the isolated leader %d still connects to node %d's internal address", leader, o)
		}
		if connects(o, leader) {
			t.Fatalf("node %d still connects to the isolated leader %d", o, leader)
		}
	}
	if !connects(others[0], others[1]) {
		t.Fatalf("nodes %d and %d, not cut, cannot connect", others[0], others[1])
	}
	// The others elect a new leader.
	var next uint64
	for next == 0 || next == leader {
		if time.Since(cut) > 30*time.Second {
			t.Fatalf("no new leader 30 s after isolating leader %d (still %d)", leader, next)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		next, _ = spec.WaitLeader(wctx, 5*time.Second)
		cancel()
		if next == 0 || next == leader {
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("node %d elected %v after the cut", next, time.Since(cut).Round(time.Millisecond))

	if err := network.HealAll(); err != nil {
		t.Fatal(err)
	}
	for _, o := range others {
		if !connects(leader, o) || !connects(o, leader) {
			t.Fatalf("after healing, nodes %d and %d cannot connect", leader, o)
		}
	}
	c, err := client.New(spec.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := c.Put(wctx, []byte("after-heal"), []byte("v")); err == nil {
			break
		} else if wctx.Err() != nil {
			t.Fatalf("no write succeeded within 30 s of healing: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cv := linearizability.Converge(ctx, spec, 30*time.Second); !cv.OK {
		t.Fatalf("the nodes did not converge after healing: %s", cv.Error)
	}
}
