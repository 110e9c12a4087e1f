package systemstest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// A cluster whose nodes refuse their serve flags (exit 2 from serve's
// Validate) is a usage error naming serve's complaint, found as soon as a
// node exits, and leaves no file behind; before, up waited out its
// timeout, exited 1 and kept the cluster's files.
func TestUpRefusedServeFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	start := time.Now()
	_, _, err := cluster.Up(t.Context(), cluster.UpOptions{Dir: dir, System: "nezha", Binary: binary,
		ExtraArgs: []string{"-minFreeDiskBytes", "-5"}})
	var ue *cmdline.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "must not be negative") {
		t.Fatalf("up with a flag serve refuses: %v", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the refusal took %v: up waited for a leader", took)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused up left %s (%v)", dir, err)
	}
}

// A member of a stopped etcd cluster restarted alone runs but serves no
// client until a quorum runs: restart says it started, as soon as it has
// run for a few seconds; before, it waited 30 s and failed although the
// member ran. Restarting the others then brings the cluster back.
func TestEtcdRestartOneByOne(t *testing.T) {
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd: not on PATH (Debian: etcd-server); skipped")
	}
	ctx := t.Context()
	spec, _, err := cluster.Up(ctx, cluster.UpOptions{Dir: t.TempDir(), System: cluster.Etcd, Binary: binary, ExtraArgs: externalSuiteArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spec.Down(true) })
	if err := spec.Down(false); err != nil {
		t.Fatal(err)
	}
	for _, n := range spec.Nodes {
		start := time.Now()
		if err := spec.Restart(n.ID); err != nil {
			t.Fatalf("restart node %d: %v", n.ID, err)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("restart of node %d took %v", n.ID, took)
		}
	}
	if _, err := spec.WaitLeader(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
