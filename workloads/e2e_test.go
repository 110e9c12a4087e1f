package workloads_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/systems/systemstest"
)

// readJSON reads the JSON object in path.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// TestEndToEnd builds the binary and runs small bench put/get/scan and
// ycsb load/run of workload A against a 3-node nezha-nogc cluster, checking
// exit codes and the JSON summaries.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a cluster")
	}
	bindir := t.TempDir()
	root, _ := filepath.Abs("..")
	bin, err := systemstest.BuildBinary(root, bindir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec, _, err := cluster.Up(ctx, cluster.UpOptions{Dir: dir, System: "nezha-nogc", Nodes: 3, Binary: bin,
		ExtraArgs: []string{"-tick", "50ms", "-minFreeDiskBytes", "0"}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	defer spec.Down(false)
	out := t.TempDir()

	run := func(wantCode int, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		b, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if code != wantCode {
			t.Fatalf("%s: exit %d, want %d\n%s", strings.Join(args, " "), code, wantCode, b)
		}
		return string(b)
	}
	summary := func(path string) map[string]any {
		t.Helper()
		m := readJSON(t, path)
		for _, f := range []string{"ops_per_sec", "mb_per_sec", "p50_us", "p99_us", "errors", "ambiguous"} {
			if _, ok := m[f]; !ok {
				t.Fatalf("%s: no field %s", path, f)
			}
		}
		if m["errors"].(float64) != 0 || m["ambiguous"].(float64) != 0 || m["ops_per_sec"].(float64) <= 0 {
			t.Fatalf("%s: %v", path, m)
		}
		if run, ok := m["run"].(map[string]any); !ok || run["command"] == nil || run["cpus"] == nil {
			t.Fatalf("%s: no run record", path)
		}
		return m
	}

	c := []string{"-cluster", dir}
	putDir := filepath.Join(out, "put")
	run(0, append([]string{"bench", "put", "-cnums", "8", "-dnums", "300", "-vsize", "4096", "-out", putDir}, c...)...)
	m := summary(filepath.Join(putDir, "summary.json"))
	if m["ops"].(float64) != 300 || m["bytes"].(float64) != 300*4096 {
		t.Fatalf("put: %v", m)
	}
	for _, f := range []string{"config.json", "raw.csv", "timeseries.csv"} {
		if st, err := os.Stat(filepath.Join(putDir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(putDir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil || cfg["seed"].(float64) != 1 || cfg["system"] != "nezha-nogc" {
		t.Fatalf("config.json: %v %s", err, b)
	}

	o := run(0, append([]string{"bench", "get", "-cnums", "4", "-dnums", "500", "-json", filepath.Join(out, "get.json")}, c...)...)
	if !strings.Contains(o, "found 300 keys") {
		t.Fatalf("get did not find the 300 written keys:\n%s", o)
	}
	if m := summary(filepath.Join(out, "get.json")); m["misses"].(float64) != 0 || m["ops"].(float64) != 500 {
		t.Fatalf("get: %v", m)
	}
	run(0, append([]string{"bench", "scan", "-cnums", "2", "-dnums", "20", "-scansize", "50", "-keys", "300", "-json", filepath.Join(out, "scan.json")}, c...)...)
	if m := summary(filepath.Join(out, "scan.json")); m["items"].(float64) != 20*50 || m["misses"].(float64) != 0 {
		t.Fatalf("scan: %v", m)
	}

	props := []string{"-P", "workloads/workloada", "-p", "recordcount=200", "-p", "operationcount=400", "-p", "threadcount=4",
		"-p", "fieldcount=1", "-p", "fieldlength=1024"}
	o = run(0, append(append([]string{"ycsb", "load", "-json", filepath.Join(out, "load.json")}, props...), c...)...)
	if !strings.Contains(o, "INSERT - Takes(s)") {
		t.Fatalf("ycsb load printed no go-ycsb table:\n%s", o)
	}
	if m := summary(filepath.Join(out, "load.json")); m["ops"].(float64) != 200 {
		t.Fatalf("load: %v", m)
	}
	o = run(0, append(append([]string{"ycsb", "run", "-json", filepath.Join(out, "run.json")}, props...), c...)...)
	if !strings.Contains(o, "READ   - Takes(s)") || !strings.Contains(o, "UPDATE - Takes(s)") {
		t.Fatalf("ycsb run printed no go-ycsb table:\n%s", o)
	}
	m = summary(filepath.Join(out, "run.json"))
	ops := m["operations"].(map[string]any)
	r, u := ops["READ"].(map[string]any)["ops"].(float64), ops["UPDATE"].(map[string]any)["ops"].(float64)
	if m["ops"].(float64) != 400 || r+u != 400 {
		t.Fatalf("run: total %v read %v update %v", m["ops"], r, u)
	}

	// Bad input: exit 2 before any load.
	run(2, append([]string{"bench", "put", "-vsize", "0"}, c...)...)
	run(2, append([]string{"ycsb", "run", "-P", "workloads/workloada", "-p", "requestdistribution=nope"}, c...)...)
	run(2, "bench", "get", "-servers", "127.0.0.1:1", "-keys", "10", "-connectTimeout", "500ms")

	// cluster status shows each node's gRPC health (the cluster has a
	// leader: it served the load above).
	var st struct {
		Nodes []struct {
			ID     uint64 `json:"id"`
			Health string `json:"health"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(run(0, append([]string{"cluster", "status", "-json"}, c...)...)), &st); err != nil || len(st.Nodes) != 3 {
		t.Fatalf("cluster status -json: %v %+v", err, st)
	}
	for _, n := range st.Nodes {
		if n.Health != "SERVING" {
			t.Fatalf("cluster status: node %d health %q, want SERVING", n.ID, n.Health)
		}
	}
	if o := run(0, append([]string{"cluster", "status"}, c...)...); !strings.Contains(o, "HEALTH") || !strings.Contains(o, "SERVING") {
		t.Fatalf("cluster status printed no health:\n%s", o)
	}
	// config.json records the build (module, Go version) beside the commit.
	if b, ok := cfg["build"].(map[string]any); !ok || b["module"] != "github.com/nezha-harness/nezha" || cfg["git_commit_source"] == "" {
		t.Fatalf("config.json: no build record: %v", cfg)
	}
	if o := run(0, "version"); !strings.HasPrefix(o, "nezha github.com/nezha-harness/nezha ") {
		t.Fatalf("version: %q", o)
	}
}

// TestInterruptSavesTheRun sends SIGINT to the built binary's bench put
// and ycsb run, against a cluster that `nezha cluster up` started, once
// each has done thousands of operations (seen in its progress lines): each
// dies of the signal (a shell's 130) after printing its table, with every
// -out file complete and flushed (summary.json marked interrupted, raw.csv
// one row per operation done) and no temporary file left behind.
func TestInterruptSavesTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a cluster")
	}
	root, _ := filepath.Abs("..")
	bin, err := systemstest.BuildBinary(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	clusterDir := t.TempDir()
	if b, err := exec.CommandContext(ctx, bin, "cluster", "up", "-cluster", clusterDir, "-system", "nezha-nogc").CombinedOutput(); err != nil {
		t.Fatalf("cluster up: %v\n%s", err, b)
	}
	t.Cleanup(func() {
		if b, err := exec.Command(bin, "cluster", "down", "-cluster", clusterDir).CombinedOutput(); err != nil {
			t.Errorf("cluster down: %v\n%s", err, b)
		}
	})

	// interrupt runs the binary with args, sends it SIGINT once a progress
	// line counts at least 2000 operations, and returns its exit status as a
	// shell reports it, its output and the temporary directory it ran with.
	interrupt := func(args ...string) (code int, stdout, stderr, tmp string) {
		t.Helper()
		tmp = t.TempDir()
		cmd := exec.CommandContext(ctx, bin, append(args, "-cluster", clusterDir, "-interval", "200ms")...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		stdout, stderr, signaled, err := systemstest.RunLoad(cmd, 2000, func() {
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Error(err)
			}
		})
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%v: %v", args, err)
		}
		if !signaled {
			t.Fatalf("%v ended (%v) before 2000 operations were done:\n%s\n%s", args, err, stdout, stderr)
		}
		// After saving, the process dies of the signal, which a shell
		// reports as 130 (Go's ExitCode: -1).
		code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			t.Errorf("%v: exit %d, want death by SIGINT", args, code)
		}
		return code, stdout, stderr, tmp
	}
	saved := func(path string) map[string]any {
		t.Helper()
		m := readJSON(t, path)
		if m["stopped"] != "interrupted" || m["ops"].(float64) < 2000 {
			t.Fatalf("%s: stopped %v, %v ops; want interrupted after at least 2000", path, m["stopped"], m["ops"])
		}
		return m
	}
	noTemp := func(tmp string) {
		t.Helper()
		if left, _ := os.ReadDir(tmp); len(left) > 0 {
			t.Fatalf("temporary files left behind in %s: %v", tmp, left)
		}
	}

	putDir := filepath.Join(t.TempDir(), "put")
	code, stdout, stderr, tmp := interrupt("bench", "put", "-cnums", "8", "-dnums", "100000000", "-vsize", "512", "-out", putDir)
	if code != 130 || !strings.Contains(stderr, "bench put: interrupted by SIGINT") || !regexp.MustCompile(`(?m)^ +put +\d+ `).MatchString(stdout) {
		t.Fatalf("bench put: exit %d, want 130 with the table and the interrupt named\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	m := saved(filepath.Join(putDir, "summary.json"))
	done := int(m["ops"].(float64) + m["errors"].(float64) + m["ambiguous"].(float64))
	f, err := os.Open(filepath.Join(putDir, "raw.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) != 1+done {
		t.Fatalf("raw.csv: %d rows (%v), want a header and the %d operations done", len(rows), err, done)
	}
	for _, name := range []string{"config.json", "timeseries.csv"} {
		if st, err := os.Stat(filepath.Join(putDir, name)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	noTemp(tmp)

	runDir := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr, tmp = interrupt("ycsb", "run", "-P", "workloads/workloada", "-p", "recordcount=1000",
		"-p", "operationcount=100000000", "-p", "threadcount=8", "-p", "fieldcount=1", "-p", "fieldlength=100", "-out", runDir)
	if code != 130 || !strings.Contains(stderr, "ycsb run: interrupted by SIGINT") || !strings.Contains(stdout, "TOTAL") {
		t.Fatalf("ycsb run: exit %d, want 130 with the tables and the interrupt named\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	saved(filepath.Join(runDir, "summary.json"))
	for _, name := range []string{"config.json", "timeseries.csv"} {
		if st, err := os.Stat(filepath.Join(runDir, name)); err != nil || st.Size() == 0 {
			t.Fatalf("ycsb run: %s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(runDir, "raw.csv")); err == nil {
		t.Fatal("ycsb run: -out holds a raw.csv, which ycsb never writes")
	}
	noTemp(tmp)
}
