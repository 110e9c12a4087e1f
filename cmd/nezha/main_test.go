package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nezha runs the binary's command line in-process and returns the exit
// code, stdout and stderr.
func runNezha(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// wantUsage checks exit code 2 with one line on stderr containing want.
func wantUsage(t *testing.T, want string, args ...string) {
	t.Helper()
	code, _, stderr := runNezha(t, args...)
	if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "nezha: ") || !strings.Contains(stderr, want) {
		t.Errorf("nezha %s: exit %d, stderr %q; want exit 2 and one line with %q", strings.Join(args, " "), code, stderr, want)
	}
}

// TestEveryCommandHelpAndBadFlag: every command and subcommand prints its
// usage and flags on -h (exit 0) and refuses an unknown flag with one line
// naming it (exit 2).
func TestEveryCommandHelpAndBadFlag(t *testing.T) {
	for _, c := range []struct {
		cmd   []string
		flags []string // some flags -h must list
	}{
		{[]string{"serve"}, []string{"-system", "-peers", "-bootstrapVoters", "-segmentSizeBytes", "-logFormat", "-pprofAddress", "-composeReplicas"}},
		{[]string{"serve", "-system", "nezha"}, []string{"-system", "-gcThresholdBytes"}},
		{[]string{"serve", "-system", "original"}, []string{"-system", "-data"}},
		{[]string{"cluster"}, []string{"up -system S"}},
		{[]string{"cluster", "up"}, []string{"-cluster", "-nodes"}},
		{[]string{"kv"}, []string{"put KEY VALUE"}},
		{[]string{"kv", "put"}, []string{"-servers", "-cluster", "-api", "-timeout", "-consistency", "-limit"}},
		{[]string{"kv", "get"}, []string{"-consistency"}},
		{[]string{"kv", "delete"}, []string{"-timeout"}},
		{[]string{"kv", "scan"}, []string{"-limit"}},
		{[]string{"check"}, []string{"-system", "-nemesis", "-duration", "-read-mode", "-keep-data", "partition-leader"}},
		{[]string{"bench"}, []string{"put    -vsize"}},
		{[]string{"bench", "put"}, []string{"-vsize", "-cnums", "-dnums", "-raw", "-json", "-out", "-benchfmt", "-cpuprofile", "-valueKind"}},
		{[]string{"bench", "get"}, []string{"-zipf", "-keys"}},
		{[]string{"bench", "scan"}, []string{"-scansize", "-keys"}},
		{[]string{"ycsb"}, []string{"load|run"}},
		{[]string{"ycsb", "load"}, []string{"-P", "-p", "-maxValueBytes", "-stallTimeout", "-json", "-out"}},
		{[]string{"ycsb", "run"}, []string{"-P", "-connectTimeout"}},
		{[]string{"experiment"}, []string{"compare DIR_A DIR_B"}},
		{[]string{"experiment", "list"}, nil},
		{[]string{"experiment", "report"}, nil},
		{[]string{"experiment", "record"}, []string{"-docs", "-name", "-readme"}},
		{[]string{"experiment", "run"}, []string{"-profile", "-systems", "-out", "-force", "-servers", "-nodes"}},
		{[]string{"experiment", "compare"}, []string{"-metric", "-threshold"}},
		{[]string{"plot"}, []string{"RESULTS_DIR"}},
		{[]string{"systems"}, []string{"-json"}},
		{[]string{"version"}, []string{"-json", "-imageTag"}},
		{[]string{"agent"}, []string{"-listen", "-addressFile", "-dir", "-tokenFile", "-etcdBinary", "-packetFilter"}},
		{[]string{"health"}, []string{"-address", "-timeout"}},
	} {
		name := strings.Join(c.cmd, " ")
		code, stdout, stderr := runNezha(t, append(c.cmd, "-h")...)
		if code != 0 || stderr != "" {
			t.Errorf("%s -h: exit %d, stderr %q", name, code, stderr)
		}
		for _, f := range c.flags {
			if !strings.Contains(stdout, f) {
				t.Errorf("%s -h does not list %s:\n%s", name, f, stdout)
			}
		}
		wantUsage(t, "-bogus", append(c.cmd, "-bogus")...)
	}
}

func TestTopLevel(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, _ := runNezha(t, args...)
		if code != 0 || !strings.HasPrefix(stdout, "usage: nezha <command>") || strings.HasSuffix(stdout, "\n\n") {
			t.Errorf("%v: exit %d, stdout %q", args, code, stdout)
		}
	}
	if code, _, stderr := runNezha(t); code != 2 || !strings.HasPrefix(stderr, "usage: nezha <command>") {
		t.Errorf("no arguments: exit %d, stderr %q", code, stderr)
	}
	wantUsage(t, `unknown command "frobnicate"`, "frobnicate")
	wantUsage(t, `unknown command "-x"`, "-x", "serve")
	wantUsage(t, `unknown command "SERVE"`, "SERVE")
	wantUsage(t, `unknown command "Put"`, "kv", "Put", "k", "v")
	for _, c := range []struct{ args []string }{{[]string{"kv", "help"}}, {[]string{"bench", "help"}}, {[]string{"experiment", "help"}}} {
		if code, stdout, _ := runNezha(t, c.args...); code != 0 || !strings.HasPrefix(stdout, "usage: nezha") {
			t.Errorf("%v: exit %d, stdout %q", c.args, code, stdout)
		}
	}
	code, stdout, _ := runNezha(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "nezha github.com/nezha-harness/nezha ") {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
	code, stdout, _ = runNezha(t, "systems", "-json")
	if code != 0 || !strings.Contains(stdout, `"name": "nezha"`) || !strings.Contains(stdout, `"conformance"`) {
		t.Errorf("systems -json: exit %d, %q", code, stdout)
	}
	code, stdout, _ = runNezha(t, "experiment", "list")
	if code != 0 || !strings.Contains(stdout, "put-vsize") {
		t.Errorf("experiment list: exit %d, %q", code, stdout)
	}
}

// TestUsageErrors: bad arguments that are not flags are one-line usage
// errors (exit 2), found before anything starts.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	openRun := filepath.Join(dir, "open.json")
	if err := os.WriteFile(openRun, []byte(`{"ops_per_sec": 100, "load": {"loop": "open"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		want string
		args []string
	}{
		{"want one argument", []string{"plot"}},
		{"want one argument", []string{"plot", dir, dir}},
		{"results directory", []string{"plot", filepath.Join(dir, "nope")}},
		{"not a directory", []string{"plot", file}},
		{"no figures.json", []string{"plot", dir}},
		{"unexpected argument", []string{"version", "x"}},
		{"unexpected argument", []string{"systems", "x"}},
		{"exclude each other", []string{"version", "-json", "-imageTag"}},
		{"-address is required", []string{"health"}},
		{"unexpected argument", []string{"health", "-address", "127.0.0.1:1", "x"}},
		{"-timeout 0s must be positive", []string{"health", "-address", "127.0.0.1:1", "-timeout", "0"}},
		{"want a subcommand", []string{"kv"}},
		{`unknown subcommand "frob"`, []string{"kv", "frob"}},
		{"want 2 arguments, got 1", []string{"kv", "put", "a"}},
		{"-limit -1 is negative", []string{"kv", "scan", "a", "-limit", "-1", "-servers", "127.0.0.1:1"}},
		{"-timeout", []string{"kv", "get", "a", "-timeout", "0s", "-servers", "127.0.0.1:1"}},
		{"-consistency", []string{"kv", "get", "a", "-consistency", "eventual", "-servers", "127.0.0.1:1"}},
		{"over the maximum", []string{"kv", "put", "a", "b", "-ttl", "1000000h", "-servers", "127.0.0.1:1"}},
		{"want a subcommand", []string{"bench"}},
		{`unknown subcommand "frob"`, []string{"bench", "frob"}},
		{"unexpected argument", []string{"bench", "put", "x"}},
		{"a fraction needs the closed-loop run", []string{"bench", "put", "-rate", "0.7x", "-servers", "127.0.0.1:1"}},
		{"is of an open-loop run", []string{"bench", "put", "-rate", "0.7x:" + openRun, "-servers", "127.0.0.1:1"}},
		{`-arrivals "bursty"`, []string{"bench", "get", "-rate", "100", "-arrivals", "bursty", "-servers", "127.0.0.1:1"}},
		{"leaves nothing of -duration", []string{"bench", "scan", "-warmup", "10s", "-duration", "5s", "-servers", "127.0.0.1:1"}},
		{"-rate and target=5", []string{"ycsb", "run", "-P", "workloada", "-p", "recordcount=10", "-p", "operationcount=10", "-p", "target=5",
			"-rate", "100", "-servers", "127.0.0.1:1"}},
		{"want a subcommand", []string{"ycsb"}},
		{`unknown subcommand "frob"`, []string{"ycsb", "frob"}},
		{"want list", []string{"experiment"}},
		{`unknown subcommand "frobnicate"`, []string{"experiment", "frobnicate"}},
		{"name experiments or all", []string{"experiment", "run"}},
		{"want one results directory", []string{"experiment", "report"}},
		{"not a directory", []string{"experiment", "report", file}},
		{"want two results directories", []string{"experiment", "compare", dir}},
		{`unknown nemesis "flood"`, []string{"check", "-system", "original", "-nemesis", "kill,flood"}},
		{`unexpected argument "extra"`, []string{"check", "-system", "original", "extra", "--", "-foo"}},
		{"-duration 0 is not allowed", []string{"check", "-system", "original", "-duration", "0"}},
		{"-system is required", []string{"serve"}},
		{"give neither -peers nor -dialPeers", []string{"serve", "-system", "original", "-composeReplicas", "3", "-peers", "a:1",
			"-address", ":7000", "-internalAddress", ":7001", "-data", dir}},
		{"-composeReplicas 100 is outside 0..99", []string{"serve", "-system", "original", "-composeReplicas", "100",
			"-address", ":7000", "-internalAddress", ":7001", "-data", dir}},
		{`unknown system "nope"`, []string{"serve", "-system", "nope"}},
		{"unexpected argument", []string{"serve", "-system", "original", "x"}},
		{"want a subcommand", []string{"cluster"}},
		{"the node directory is required (-dir)", []string{"agent"}},
		{"unexpected argument", []string{"agent", "x"}},
		{"-tokenFile", []string{"agent", "-dir", dir, "-tokenFile", filepath.Join(dir, "nope")}},
	} {
		wantUsage(t, c.want, c.args...)
	}
}

// TestBadInputLeavesNothing: a refused `cluster up` removes the cluster
// directory it made (it held only the lock), and a refused serve touches
// no data directory.
func TestBadInputLeavesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	if code, _, stderr := runNezha(t, "cluster", "up", "-system", "nope", "-cluster", dir); code != 2 || !strings.Contains(stderr, `unknown system "nope"`) {
		t.Fatalf("cluster up -system nope: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("cluster up -system nope left %s behind (%v)", dir, err)
	}
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runNezha(t, "serve", "-system", "original", "-address", "127.0.0.1:308108",
		"-internalAddress", "127.0.0.1:30001", "-peers", "127.0.0.1:30001", "-data", data)
	if code != 2 || !strings.Contains(stderr, "not a number in 0..65535") {
		t.Fatalf("serve with port 308108: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused serve made %s (%v)", data, err)
	}
}

// TestServeRefusesBadLogFlags: a bad -logFormat is a usage error (exit
// code 2) on one line, reported together with the other bad flags.
func TestServeRefusesBadLogFlags(t *testing.T) {
	code, _, stderr := runNezha(t, "serve", "-system", "original", "-logFormat", "xml", "-logLevel", "loud", "-data", t.TempDir())
	if code != 2 || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("exit %d, stderr %q; want a one-line usage error", code, stderr)
	}
	for _, want := range []string{`-logFormat "xml" is not text or json`, `-logLevel "loud"`, "-peers is required"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("error %q does not say %q", stderr, want)
		}
	}
}

// TestParseInterleaved: flags between and after positional arguments are
// parsed; "--" makes the rest positional, whether ffcli's parse or a later
// one met it.
func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		line    []string // the command line after "kv put"
		pos     []string
		timeout string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, "0s"},
		{[]string{"-timeout", "1s", "a", "b"}, []string{"a", "b"}, "1s"},
		{[]string{"a", "-timeout", "1s", "b"}, []string{"a", "b"}, "1s"},
		{[]string{"a", "b", "-timeout", "1s"}, []string{"a", "b"}, "1s"},
		{[]string{"--", "-timeout", "b"}, []string{"-timeout", "b"}, "0s"},
		{[]string{"a", "--", "-timeout"}, []string{"a", "-timeout"}, "0s"},
		{[]string{"a", "-timeout", "1s", "--", "-b", "-c"}, []string{"a", "-b", "-c"}, "1s"},
	} {
		c0 := &cli{args: append([]string{"kv", "put"}, c.line...)}
		fs := c0.flagSet("kv put")
		timeout := fs.Duration("timeout", 0, "")
		if err := fs.Parse(c.line); err != nil { // as ffcli does first
			t.Fatal(err)
		}
		pos, err := c0.parseInterleaved(fs, fs.Args())
		if err != nil || strings.Join(pos, " ") != strings.Join(c.pos, " ") || timeout.String() != c.timeout {
			t.Errorf("%q: positional %q, -timeout %v, %v; want %q, %s", c.line, pos, timeout, err, c.pos, c.timeout)
		}
	}
}
