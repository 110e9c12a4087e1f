package systemstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nezha-harness/nezha/systems/cluster"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nezha-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root, _ := filepath.Abs("../..")
	binary, err = BuildBinary(root, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The systems and configurations every release must pass.
var configurations = []struct {
	name   string
	system string
	args   []string
	gc     bool
}{
	{"original", "original", nil, false},
	{"pasv", "pasv", nil, false},
	{"blobdb", "blobdb", nil, false},
	{"nezha-nogc", "nezha-nogc", nil, false},
	{"nezha-nogc-memory-index", "nezha-nogc", []string{"-index", "memory"}, false},
	{"nezha", "nezha", nil, false},
	// GC forced to run continuously during the whole suite, per strategy,
	// over small segments so that every test spans many rounds.
	{"nezha-gc-tiered", "nezha", append(gcArgs("tiered"), "-gcFanout", "2"), true},
	{"nezha-gc-merge", "nezha", gcArgs("merge"), true},
	{"nezha-gc-sort-once", "nezha", gcArgs("sort-once"), true},
	{"nezha-gc-greedy", "nezha", gcArgs("greedy"), true},
	{"nezha-gc-tiered-memory-index", "nezha", append(gcArgs("tiered"), "-index", "memory"), true},
}

func gcArgs(strategy string) []string {
	return []string{"-gc", strategy, "-gcContinuous", "-gcInterval", "20ms", "-segmentSizeBytes", "65536", "-gcGarbageRatio", "0.3"}
}

func TestConformance(t *testing.T) {
	for i, c := range configurations {
		t.Run(c.name, func(t *testing.T) {
			Run(t, Options{System: c.system, Binary: binary, ExtraArgs: c.args, Seed: int64(i + 1), ExpectGC: c.gc})
		})
	}
}

// TestConformanceEtcd holds the reference system etcd (Debian's
// etcd-server, through etcd's Go client) to the same semantics, failover
// and catch-up checks, which tests the harness's etcd support as much as
// etcd.
func TestConformanceEtcd(t *testing.T) {
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd is not installed (apt-get install etcd-server; scripts/setup.sh installs it)")
	}
	Run(t, Options{System: cluster.Etcd, Binary: binary, Seed: 101})
}
