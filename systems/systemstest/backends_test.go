package systemstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// dockerImage is the image the docker tests run: built once per test
// binary from this checkout (BuildImage, removed by TestMain), or the
// reason there is none.
type dockerImage struct {
	once    sync.Once
	tag     string
	rm      func() error
	skipWhy string
	err     error
}

var image dockerImage

// dockerBackend returns the docker backend's options with the test's
// image, or skips the test with one line when there is no Docker daemon.
func dockerBackend(t *testing.T) cluster.BackendOptions {
	t.Helper()
	image.once.Do(image.build)
	if image.skipWhy != "" {
		t.Skip(image.skipWhy)
	}
	if image.err != nil {
		t.Fatal(image.err)
	}
	return cluster.BackendOptions{Name: cluster.BackendDocker, Docker: cluster.DockerOptions{Image: image.tag}}
}

func (im *dockerImage) build() {
	if why := DockerMissing(); why != "" {
		im.skipWhy = "docker backend: " + why + "; skipped"
		return
	}
	root, _ := filepath.Abs("../..")
	start := time.Now()
	im.tag, im.rm, im.err = BuildImage(root)
	if im.err == nil {
		fmt.Fprintf(os.Stderr, "systemstest: image %s built in %v\n", im.tag, time.Since(start).Round(time.Second))
	}
}

// remove deletes the test's image, if it built one.
func (im *dockerImage) remove() {
	if im.rm != nil {
		_ = im.rm()
	}
}

// TestConformanceDocker runs the suite on 3-node clusters of containers
// (the docker backend, the image built from this checkout) for nezha and
// original: each node its own container and address, every fault through
// its agent.
func TestConformanceDocker(t *testing.T) {
	backend := dockerBackend(t)
	for i, sys := range []string{"nezha", "original"} {
		t.Run(sys, func(t *testing.T) {
			Run(t, Options{System: sys, Binary: binary, Seed: int64(700 + i), Backend: backend})
		})
	}
}

// TestSSHBackend runs the suite for nezha on three hosts of their own
// (network namespaces, each with its own address and sshd) through the
// ssh backend, which copies the binary to each host and starts the agents
// over ssh; then cuts the links of one node and checks that packets
// between the hosts' addresses are dropped (the agents' packet filter), and
// pass again once restored.
func TestSSHBackend(t *testing.T) {
	hosts := newSSHHosts(t, 3)
	hs, err := cluster.ParseHosts(hosts.hostsFile())
	if err != nil {
		t.Fatal(err)
	}
	backend := cluster.BackendOptions{Name: cluster.BackendSSH, Hosts: hs}
	t.Run("Suite", func(t *testing.T) {
		Run(t, Options{System: "nezha", Binary: binary, Seed: 800, Backend: backend})
	})
	t.Run("PartitionDropsPackets", func(t *testing.T) {
		ctx, cancel := ctxFor(2 * time.Minute)
		defer cancel()
		spec, _, err := cluster.Up(ctx, cluster.UpOptions{Dir: t.TempDir(), System: "nezha", Binary: binary,
			ExtraArgs: suiteArgs, Links: true, Backend: backend})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := spec.Down(true); err != nil {
				t.Errorf("down: %v", err)
			}
		})
		n1, n2 := &spec.Nodes[0], &spec.Nodes[1]
		if !hosts.dialFrom(1, n2.InternalAddress, 2*time.Second) {
			t.Fatalf("host 1 cannot reach node 2's peer address %s before any cut", n2.InternalAddress)
		}
		setLinks := func(n *cluster.Node, cut ...uint64) string {
			t.Helper()
			a, err := spec.Agent(n)
			if err != nil {
				t.Fatal(err)
			}
			r, err := a.SetLinks(ctx, &agentpb.SetLinksRequest{Cut: cut})
			if err != nil {
				t.Fatalf("node %d: SetLinks(cut %v): %v", n.ID, cut, err)
			}
			return r.Mechanism
		}
		if m := setLinks(n1, n2.ID); !strings.Contains(m, "nftables") {
			t.Fatalf("node 1's cut of node 2 is made by %q: want the packet filter on an ssh host with root", m)
		}
		if hosts.dialFrom(1, n2.InternalAddress, 2*time.Second) {
			t.Fatalf("host 1 still reaches node 2's peer address %s after node 1 cut its link", n2.InternalAddress)
		}
		// One way only: node 2 still reaches node 1.
		if !hosts.dialFrom(2, n1.InternalAddress, 2*time.Second) {
			t.Fatalf("host 2 lost node 1's peer address %s, though only 1->2 is cut", n1.InternalAddress)
		}
		setLinks(n1)
		if !hosts.dialFrom(1, n2.InternalAddress, 2*time.Second) {
			t.Fatalf("host 1 cannot reach node 2's peer address %s after the cut was lifted", n2.InternalAddress)
		}
		if _, err := spec.WaitLeader(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}
