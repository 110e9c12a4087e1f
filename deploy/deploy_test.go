package deploy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/client"
)

// nodes is the cluster size the test brings up.
const nodes = 3

// compose runs docker-compose on compose.yaml as project with env added to
// the environment and returns its combined output.
func compose(ctx context.Context, project string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-p", project, "-f", "compose.yaml"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// docker runs the docker CLI and returns its standard output, trimmed.
func docker(ctx context.Context, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New(strings.TrimSpace(stderr.String()) + ": " + err.Error())
	}
	return strings.TrimSpace(string(out)), nil
}

// leftovers lists the containers, networks and volumes of project, one
// "kind id" per line ("" when none).
func leftovers(ctx context.Context, project string) (string, error) {
	label := "label=com.docker.compose.project=" + project
	var out []string
	for _, kind := range [][]string{{"container", "ps", "-a"}, {"network", "network", "ls"}, {"volume", "volume", "ls"}} {
		ids, err := docker(ctx, append(kind[1:], "-q", "--filter", label)...)
		if err != nil {
			return "", err
		}
		for _, id := range strings.Fields(ids) {
			out = append(out, kind[0]+" "+id)
		}
	}
	return strings.Join(out, "\n"), nil
}

// buildImage runs scripts/image.sh and returns the versioned tag it built.
func buildImage(t *testing.T) string {
	start := time.Now()
	out, err := exec.Command("../scripts/image.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^image: id \S+, tags ([^\s,]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("scripts/image.sh printed no image line:\n%s", out)
	}
	t.Logf("scripts/image.sh built %s in %v", m[1], time.Since(start).Round(time.Second))
	return string(m[1])
}

// TestComposeCluster builds the image, brings up deploy/compose.yaml with
// three nezha nodes, writes and reads a key through the Go client at the
// containers' addresses and through etcdctl (if installed) at one node's
// etcd API, and checks that `down -v` leaves no container, network or
// volume of the project.
func TestComposeCluster(t *testing.T) {
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker: no docker-compose on PATH")
	}
	ctx := context.Background()
	if _, err := docker(ctx, "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("docker: no daemon answers (%v)", err)
	}
	image := buildImage(t)
	project := "nezhatest" + strconv.FormatInt(time.Now().UnixNano(), 36)
	env := []string{"NEZHA_IMAGE=" + image, "NEZHA_SYSTEM=nezha", "NEZHA_NODES=" + strconv.Itoa(nodes)}
	// Registered before up: a failed or partial up is taken down too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			logs, _ := compose(ctx, project, env, "logs", "--no-color", "--tail", "20")
			t.Logf("docker-compose logs:\n%s", logs)
		}
		if out, err := compose(ctx, project, env, "down", "-v"); err != nil {
			t.Errorf("cleanup: docker-compose down -v: %v\n%s", err, out)
		}
	})
	start := time.Now()
	if out, err := compose(ctx, project, env, "up", "-d"); err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, out)
	}
	addrs := waitHealthy(t, ctx, project)
	t.Logf("%d nodes healthy %v after up", nodes, time.Since(start).Round(100*time.Millisecond))

	var servers []string
	for _, a := range addrs {
		servers = append(servers, a+":7000")
	}
	cl, err := client.New(client.DefaultConfig(servers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := cl.Put(rctx, []byte("compose-key"), []byte("compose-value")); err != nil {
		t.Fatalf("put through %v: %v", servers, err)
	}
	if v, ok, err := cl.Get(rctx, []byte("compose-key")); err != nil || !ok || string(v) != "compose-value" {
		t.Fatalf("get through %v: %q, %v, %v", servers, v, ok, err)
	}

	if _, err := exec.LookPath("etcdctl"); err != nil {
		t.Log("etcdctl is not installed: the etcd API is not tried")
	} else {
		endpoint := "--endpoints=" + addrs[nodes-1] + ":2379"
		if out, err := exec.CommandContext(rctx, "etcdctl", endpoint, "put", "etcd-key", "etcd-value").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "OK" {
			t.Fatalf("etcdctl put: %v, %q", err, out)
		}
		out, err := exec.CommandContext(rctx, "etcdctl", endpoint, "get", "etcd-key").CombinedOutput()
		if err != nil || string(out) != "etcd-key\netcd-value\n" {
			t.Fatalf("etcdctl get: %v, %q", err, out)
		}
	}

	if out, err := compose(ctx, project, env, "down", "-v"); err != nil {
		t.Fatalf("docker-compose down -v: %v\n%s", err, out)
	}
	left, err := leftovers(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	if left != "" {
		t.Fatalf("docker-compose down -v left:\n%s", left)
	}
}

// waitHealthy waits until every node container of project reports healthy
// (its HEALTHCHECK, `nezha health`, answers SERVING) and returns their
// addresses in node order.
func waitHealthy(t *testing.T, ctx context.Context, project string) []string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var addrs, states []string
		for k := 1; k <= nodes; k++ {
			out, err := docker(ctx, "inspect", "--format",
				"{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}} {{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
				project+"_node_"+strconv.Itoa(k))
			if err != nil {
				out = err.Error()
			}
			states = append(states, out)
			if state, addr, _ := strings.Cut(out, " "); state == "healthy" && addr != "" {
				addrs = append(addrs, addr)
			}
		}
		if len(addrs) == nodes {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes not healthy within 90s: %q", states)
		}
		<-tick.C
	}
}
