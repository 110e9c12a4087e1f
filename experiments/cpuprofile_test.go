package experiments

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
)

// TestProfileNodes: profiles come from the address cluster.json records;
// a node without one is an error and the measurement says it fell back.
func TestProfileNodes(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "served.pprof")
	if err := os.WriteFile(body, []byte("a profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/profile" || r.URL.Query().Get("seconds") != "1" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		http.ServeFile(w, r, body)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	x := &Run{res: &Result{}}
	spec := &cluster.Spec{Nodes: []cluster.Node{{ID: 1, PprofAddress: addr}}}
	files, err := x.profileNodes(context.Background(), spec, time.Second, filepath.Join(dir, "out"), "p")
	if err != nil || len(files) != 1 || filepath.Base(files[0]) != "p-node1.pprof" {
		t.Fatalf("profileNodes = %v, %v", files, err)
	}
	if ms := x.res.Measurements; len(ms) != 1 || ms[0].What != measureProfiles || ms[0].FellBackFrom != "" || ms[0].Backend != cluster.BackendLocal {
		t.Fatalf("measurements %+v, want one of %s without fallback", ms, measureProfiles)
	}
	spec.Nodes = append(spec.Nodes, cluster.Node{ID: 2})
	files, err = x.profileNodes(context.Background(), spec, time.Second, filepath.Join(dir, "out"), "q")
	if err == nil || !strings.Contains(err.Error(), "node 2 serves no profiler") || len(files) != 1 {
		t.Fatalf("with a node without an address: %v, %v", files, err)
	}
	if ms := x.res.Measurements; len(ms) != 2 || ms[1].FellBackFrom == "" || !strings.Contains(ms[1].Why, "node 2") {
		t.Fatalf("measurements %+v, want a fallback naming node 2", ms)
	}
}
