package systems_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLayering enforces docs/architecture.md section 2: the contract
// (systems) depends on no layer above it; the wire (api) and the client know
// no node; the replication layer (raftkv) runs systems through the contract
// only; nezha, baseline and dwisckey never import each other; the traffic,
// fault and validation packages never import a concrete system; plots draw
// from saved results only.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/nezha-harness/nezha/"
	tools := []string{"workloads", "ycsb", "linearizability", "faults", "plots", "experiments"}
	concrete := []string{"nezha", "baseline", "dwisckey"}
	list := func(groups ...[]string) []string { return slices.Concat(groups...) }
	type rule struct {
		pkg       string   // package path (below the module); with a trailing "/...", it and those below it
		forbidden []string // import path prefixes (below the module)
	}
	rules := []rule{
		// The contract: no system, no layer that builds on it, no tool.
		{"systems", list(concrete, tools, []string{"raftkv", "api", "client", "cluster"})},
		// The wire (kvpb, the etcd and JSON-RPC adapters) and the client speak to a
		// node; neither knows how one is built.
		{"api/...", list(concrete, tools, []string{"raftkv", "client", "cluster"})},
		{"client/...", list(concrete, tools, []string{"raftkv", "cluster"})},
		// The replication layer runs any system through the contract.
		{"raftkv/...", list(concrete, tools, []string{"cluster"})},
		{"cluster/...", list(concrete, tools, []string{"raftkv/node"})},
		{"internal/...", list(concrete, tools, []string{"raftkv", "api", "client", "cluster"})},
		{"nezha/...", list(tools, []string{"baseline", "dwisckey"})},
		{"baseline/...", list(tools, []string{"nezha", "dwisckey"})},
		{"dwisckey/...", list(tools, []string{"nezha", "baseline"})},
		{"workloads/...", list(concrete, []string{"experiments"})},
		{"ycsb/...", list(concrete, []string{"experiments"})},
		{"faults/...", list(concrete, []string{"experiments"})},
		{"linearizability/...", list(concrete, []string{"experiments"})},
		{"plots/...", list(concrete, []string{"raftkv", "cluster", "client", "experiments"})},
		// The experiments take every system's flags and facts from its
		// registration (systems.System), so that adding a system touches
		// no file of theirs.
		// (The embedded experiment benchmarks nezha's engines in-process,
		// with no cluster and no registration: it may import their bench.)
		{"experiments/...", concrete},
	}
	// Imports exempt from a rule's forbidden prefixes, by rule.
	allowed := map[string][]string{"experiments/...": {"nezha/embedded/enginebench"}}
	// The command line lives in cmd/nezha (docs/architecture.md section 6.1):
	// these packages parse no flags. (systems keeps
	// SystemConfig.RegisterFlags, through which `serve -system S` gets a
	// system's own flags; internal/cmdline holds the conventions cmd/nezha
	// parses with; a test-support package, named ...test, may parse the
	// flags a test binary is started with, as agenttest does for the agents
	// of the nodes a test starts.)
	for _, pkg := range []string{"workloads/...", "ycsb/...", "linearizability/...", "plots/...", "experiments/...", "raftkv/...", "api/...", "client/...", "cluster/...", "internal/buildinfo", "internal/machine", "internal/vfs", "internal/activity", "faults/..."} {
		rules = append(rules, rule{pkg, []string{"flag", "github.com/peterbourgon/ff"}})
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		testSupport := strings.HasSuffix(pkg[strings.LastIndexByte(pkg, '/')+1:], "test")
		for _, r := range rules {
			if base, tree := strings.CutSuffix(r.pkg, "/..."); pkg != base && !(tree && strings.HasPrefix(pkg, base+"/")) {
				continue
			}
			if testSupport && slices.Contains(r.forbidden, "flag") {
				continue
			}
			checked++
			for _, imp := range fields[1:] {
				if !strings.HasPrefix(imp, mod) && !strings.HasPrefix(imp, "github.com/peterbourgon/") && imp != "flag" {
					continue
				}
				imp = strings.TrimPrefix(imp, mod)
				if slices.Contains(allowed[r.pkg], imp) {
					continue
				}
				for _, f := range r.forbidden {
					if imp == f || strings.HasPrefix(imp, f+"/") {
						t.Errorf("%s imports %s (docs/architecture.md section 2 forbids it)", pkg, imp)
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d packages checked; is go list output parsed right?\n%s", checked, out)
	}
}
