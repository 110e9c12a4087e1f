package systems_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLayering enforces docs/architecture.md section 2: systems depends on no concrete
// system and no tool; nezha, baseline and dwisckey never import each other; the
// traffic, fault and validation packages never import a concrete system;
// plots draw from saved results only.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/nezha-harness/nezha/"
	rules := []struct {
		pkg       string   // package path prefix (below the module)
		forbidden []string // import path prefixes (below the module)
	}{
		{"systems", []string{"nezha", "baseline", "dwisckey", "workloads", "ycsb", "linearizability", "faults", "plots", "experiments"}},
		{"nezha", []string{"baseline", "dwisckey", "workloads", "ycsb", "linearizability", "faults", "plots", "experiments"}},
		{"baseline", []string{"nezha", "dwisckey", "workloads", "ycsb", "linearizability", "faults", "plots", "experiments"}},
		{"dwisckey", []string{"nezha", "baseline", "workloads", "ycsb", "linearizability", "faults", "plots", "experiments"}},
		{"workloads", []string{"nezha", "baseline", "dwisckey", "experiments"}},
		{"ycsb", []string{"nezha", "baseline", "dwisckey", "experiments"}},
		{"faults", []string{"nezha", "baseline", "dwisckey", "experiments"}},
		{"linearizability", []string{"nezha", "baseline", "dwisckey", "experiments"}},
		{"plots", []string{"nezha", "baseline", "dwisckey", "systems/node", "systems/cluster", "systems/client", "experiments"}},
	}
	// The command line lives in cmd/nezha (docs/architecture.md section 6.1):
	// these packages parse no flags. (systems keeps
	// SystemConfig.RegisterFlags, through which `serve -system S` gets a
	// system's own flags; a test-support package, named ...test, may parse
	// the flags a test binary is started with, as agenttest does for the
	// agents of the nodes a test starts.)
	for _, pkg := range []string{"workloads", "ycsb", "linearizability", "plots", "experiments", "systems/node", "systems/buildinfo", "systems/cluster", "systems/client", "systems/agent", "systems/machine", "faults"} {
		rules = append(rules, struct {
			pkg       string
			forbidden []string
		}{pkg, []string{"flag", "github.com/peterbourgon/ff"}})
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		testSupport := strings.HasSuffix(pkg[strings.LastIndexByte(pkg, '/')+1:], "test")
		for _, r := range rules {
			if pkg != r.pkg && !strings.HasPrefix(pkg, r.pkg+"/") {
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
				for _, f := range r.forbidden {
					if imp == f || strings.HasPrefix(imp, f+"/") {
						t.Errorf("%s imports %s (docs/architecture.md section 2 forbids it)", pkg, imp)
					}
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("only %d packages checked; is go list output parsed right?\n%s", checked, out)
	}
}
