package systemstest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/systems"
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
	image.remove()
	os.RemoveAll(dir)
	os.Exit(code)
}

// configurations are the conformance configurations every registered
// system declares (systems.System.Conformance), read from the binary's
// registry with `nezha systems -json`, in registration order.
func configurations(t *testing.T) []systems.SystemInfo {
	out, err := exec.Command(binary, "systems", "-json").Output()
	if err != nil {
		t.Fatalf("%s systems -json: %v", binary, err)
	}
	var infos []systems.SystemInfo
	if err := json.Unmarshal(out, &infos); err != nil {
		t.Fatalf("%s systems -json: %v\n%s", binary, err, out)
	}
	if len(infos) == 0 {
		t.Fatalf("%s systems -json lists no systems", binary)
	}
	return infos
}

func TestConformance(t *testing.T) {
	seed := int64(0)
	for _, s := range configurations(t) {
		for _, c := range s.Conformance {
			seed++
			seed := seed
			t.Run(c.Name, func(t *testing.T) {
				Run(t, Options{System: s.Name, Binary: binary, ExtraArgs: c.Args, Seed: seed, ExpectGC: c.ExpectGC})
			})
		}
	}
}

// allConformanceEnv, set to 1, makes TestConformanceFiveNodes and
// TestConformanceChangingMembers run every configuration of every
// registered system instead of their default few.
const allConformanceEnv = "NEZHA_CONFORMANCE_ALL"

// runVariant runs the suite, changed by variant, for the first
// configuration of each system in defaults, or, with NEZHA_CONFORMANCE_ALL=1,
// for every configuration of every registered system. Seeds start at base.
func runVariant(t *testing.T, base int64, defaults []string, variant func(*Options)) {
	all := os.Getenv(allConformanceEnv) == "1"
	seed := base
	for _, s := range configurations(t) {
		for i, c := range s.Conformance {
			seed++
			if !all && (i > 0 || !slices.Contains(defaults, s.Name)) {
				continue
			}
			o := Options{System: s.Name, Binary: binary, ExtraArgs: c.Args, Seed: seed, ExpectGC: c.ExpectGC}
			variant(&o)
			t.Run(c.Name, func(t *testing.T) { Run(t, o) })
		}
	}
}

// TestConformanceFiveNodes runs the suite on 5-node clusters. By default
// only nezha, original and lsm-raft (their default configurations);
// the rest by hand:
//
//	NEZHA_CONFORMANCE_ALL=1 go test -race ./systems/systemstest -run TestConformanceFiveNodes -timeout 60m -v
func TestConformanceFiveNodes(t *testing.T) {
	runVariant(t, 500, []string{"nezha", "original", "lsm-raft"}, func(o *Options) { o.Nodes = 5 })
}

// TestConformanceChangingMembers runs the suite while, in each test, a node
// is added (learner, caught up, promoted) and another member removed
// (Options.ChangeMembers). By default only nezha, original and lsm-raft (their
// default configurations); the rest by hand:
//
//	NEZHA_CONFORMANCE_ALL=1 go test -race ./systems/systemstest -run TestConformanceChangingMembers -timeout 60m -v
func TestConformanceChangingMembers(t *testing.T) {
	runVariant(t, 600, []string{"nezha", "original", "lsm-raft"}, func(o *Options) { o.ChangeMembers = true })
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

// gcArgs run GC strategy back to back over 64 KiB segments (as nezha's
// conformance configurations do).
func gcArgs(strategy string) []string {
	return []string{"-gc", strategy, "-gcContinuous", "-gcInterval", "20ms", "-segmentSizeBytes", "65536", "-gcGarbageRatio", "0.3"}
}
