package systemstest

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/magiconair/properties"
	_ "github.com/pingcap/go-ycsb/db/etcd" // go-ycsb's etcd binding
	gycsb "github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/cluster"
)

// etcdAddresses waits until every node of spec logged the address of its
// etcd API (-etcdAddress with port 0).
func etcdAddresses(t *testing.T, spec *cluster.Spec) []string {
	t.Helper()
	re := regexp.MustCompile(`etcd_address=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var out []string
		for _, n := range spec.Nodes {
			b, _ := os.ReadFile(n.Log)
			if m := re.FindSubmatch(b); m != nil {
				out = append(out, string(m[1]))
			}
		}
		if len(out) == len(spec.Nodes) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d nodes logged etcd_address", len(out), len(spec.Nodes))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEtcdctl drives a nezha cluster through its etcd API with etcdctl
// (Debian's etcd-client, installed by scripts/setup.sh), a client nobody
// here wrote, with etcd's Go client through the harness's etcd backend,
// and with go-ycsb's etcd binding.
func TestEtcdctl(t *testing.T) {
	etcdctl, err := exec.LookPath("etcdctl")
	if err != nil {
		t.Skip("etcdctl is not installed (apt-get install etcd-client; scripts/setup.sh installs it)")
	}
	h := start(t, Options{System: "nezha", Binary: binary, ExtraArgs: []string{"-etcdAddress", "127.0.0.1:0"}, Seed: 7})
	eps := etcdAddresses(t, h.spec)
	try := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, etcdctl, append([]string{"--endpoints", strings.Join(eps, ","), "--command-timeout", "20s"}, args...)...)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := try(args...)
		if err != nil {
			t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	for _, kv := range [][2]string{{"fruit/apple", "red"}, {"fruit/banana", "yellow"}, {"veg/leek", "green"}} {
		if out := run("put", kv[0], kv[1]); out != "OK" {
			t.Fatalf("put %s: %q", kv[0], out)
		}
	}
	if out := run("get", "fruit/apple"); out != "fruit/apple\nred" {
		t.Fatalf("get: %q", out)
	}
	h.expect("fruit/banana", "yellow") // written through etcd's API, read through ours
	if out := run("get", "--prefix", "fruit/"); out != "fruit/apple\nred\nfruit/banana\nyellow" {
		t.Fatalf("get --prefix: %q", out)
	}
	if out := run("get", "--prefix", "fruit/", "--consistency=s", "--keys-only"); out != "fruit/apple\n\nfruit/banana" {
		t.Fatalf("serializable get --prefix --keys-only: %q", out)
	}
	if out := run("del", "fruit/apple"); out != "1" {
		t.Fatalf("del: %q", out)
	}
	if out := run("del", "fruit/apple"); out != "0" {
		t.Fatalf("del of a deleted key: %q", out)
	}
	if out := run("get", "--prefix", ""); out != "fruit/banana\nyellow\nveg/leek\ngreen" {
		t.Fatalf("get everything: %q", out)
	}
	if out := run("endpoint", "status"); strings.Count(out, "nezha-nezha") != len(eps) {
		t.Fatalf("endpoint status: %q", out)
	}
	// etcd's answers where we answered otherwise before: a sort target
	// without an order sorts ascending, count is every key of the range.
	run("put", "fruit/cherry", "black")
	if out := run("get", "--prefix", "fruit/", "--sort-by", "VALUE"); out != "fruit/cherry\nblack\nfruit/banana\nyellow" {
		t.Fatalf("get --prefix --sort-by VALUE: %q", out)
	}
	if out := run("get", "--prefix", "fruit/", "--limit", "1", "-w", "json"); !strings.Contains(out, `"more":true,"count":2`) {
		t.Fatalf("get --prefix --limit 1 -w json: %q", out)
	}
	// Watch is refused saying why, not with "unknown service".
	if out, err := try("watch", "fruit/"); err == nil || !strings.Contains(out, "Watch (no history of revisions to watch from) is not supported") {
		t.Fatalf("watch: %v\n%s", err, out)
	}

	// etcd's Go client (the harness's -api etcd) through the same API.
	cfg := client.DefaultConfig(eps...)
	cfg.API = client.APIEtcd
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, []byte("go/key"), []byte("go-value")); err != nil {
		t.Fatal(err)
	}
	kvs, err := c.Scan(ctx, []byte("go/"), []byte("go0"), 0)
	if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "go-value" {
		t.Fatalf("scan through etcd's Go client: %v %v", kvs, err)
	}
	st, err := c.Status(ctx, eps[0], false)
	if err != nil || st.Header.NodeId != 1 || st.Header.LeaderId == 0 {
		t.Fatalf("status through etcd's Go client: %v %v", st, err)
	}

	// go-ycsb's etcd binding, as its own workloads call it. Its Scan wants
	// etcd's count (every key from the start on) to equal the limit, so the
	// table sorts last and the scan reaches the end.
	db, err := gycsb.GetDBCreator("etcd").Create(properties.MustLoadString("etcd.endpoints=" + strings.Join(eps, ",")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range []string{"user1", "user2", "user3"} {
		if err := db.Insert(ctx, "zz", k, map[string][]byte{"field0": []byte("v-" + k)}); err != nil {
			t.Fatalf("go-ycsb etcd insert %s: %v", k, err)
		}
	}
	row, err := db.Read(ctx, "zz", "user2", nil)
	if err != nil || string(row["field0"]) != "v-user2" {
		t.Fatalf("go-ycsb etcd read: %v %v", row, err)
	}
	// go-ycsb v1.0.3 appends the rows after `count` empty ones.
	rows, err := db.Scan(ctx, "zz", "user2", 2, nil)
	if n := len(rows); err != nil || n < 2 || string(rows[n-2]["field0"]) != "v-user2" || string(rows[n-1]["field0"]) != "v-user3" {
		t.Fatalf("go-ycsb etcd scan: %v %v", rows, err)
	}
	if err := db.Delete(ctx, "zz", "user1"); err != nil {
		t.Fatalf("go-ycsb etcd delete: %v", err)
	}
	if _, err := db.Read(ctx, "zz", "user1", nil); err == nil {
		t.Fatal("go-ycsb etcd read of a deleted row succeeded")
	}
}
