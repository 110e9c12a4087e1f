package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A cluster.json written before the keys were snake_case still loads, and
// one written now round-trips.
func TestLoadLegacyCamelCaseSpec(t *testing.T) {
	dir := t.TempDir()
	legacy := `{"system":"s","binary":"/bin/x","extraArgs":["-a","1"],"nodes":[
	{"id":1,"address":"127.0.0.1:1","internalAddress":"127.0.0.1:2","pid":0,"data":"d1","log":"l1","metricsAddress":"127.0.0.1:3","extraArgs":["-b"]}]}`
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(legacy), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := s.Nodes[0]
	if !slices.Equal(s.ExtraArgs, []string{"-a", "1"}) || n.InternalAddress != "127.0.0.1:2" || n.MetricsAddress != "127.0.0.1:3" ||
		!slices.Equal(n.ExtraArgs, []string{"-b"}) || n.Address != "127.0.0.1:1" || n.Data != "d1" {
		t.Fatalf("legacy spec loaded as %+v", s)
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, old := range []string{"internalAddress", "metricsAddress", "extraArgs"} {
		if strings.Contains(string(b), `"`+old+`"`) {
			t.Fatalf("saved spec still has key %q:\n%s", old, b)
		}
	}
	again, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Nodes[0].InternalAddress != n.InternalAddress || !slices.Equal(again.ExtraArgs, s.ExtraArgs) || !slices.Equal(again.Nodes[0].ExtraArgs, n.ExtraArgs) {
		t.Fatalf("round trip: %+v", again)
	}
}
