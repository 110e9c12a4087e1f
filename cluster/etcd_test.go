package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

func TestTranslateEtcd(t *testing.T) {
	o, err := translateEtcd([]string{"-sync=false", "-tick", "50ms", "-maxValueBytes=1048576", "-campaign", "-logFormat", "json",
		"-dialPeers", "127.0.0.1:1,127.0.0.1:2", "--snapshot-count=100"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(o.args, " ")
	for _, want := range []string{"--max-request-bytes 1048576", "--heartbeat-interval 50 --election-timeout 500",
		"--snapshot-count=100", "--unsafe-no-fsync", "--quota-backend-bytes"} {
		if !strings.Contains(got, want) {
			t.Errorf("etcd flags %q lack %q", got, want)
		}
	}
	if !o.noFsync || !slices.Equal(o.dialPeers, []string{"127.0.0.1:1", "127.0.0.1:2"}) {
		t.Errorf("noFsync %v, dialPeers %v", o.noFsync, o.dialPeers)
	}
	if o, err := translateEtcd(nil); err != nil || o.noFsync || strings.Contains(strings.Join(o.args, " "), "unsafe") {
		t.Errorf("defaults: %v %v", o.args, err)
	}
	// Every flag etcd cannot take is reported at once, as a usage error.
	_, err = translateEtcd([]string{"-leaseRead", "-segmentSizeBytes", "1", "-tick", "soon", "-logFormat", "text"})
	var ue *cmdline.UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("bad flags: %v, want a usage error", err)
	}
	for _, want := range []string{"-leaseRead", "-segmentSizeBytes", `-tick "soon"`, `-logFormat "text"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	s := &Spec{System: Etcd, ExtraArgs: []string{"-sync=false"}, Nodes: []Node{{ID: 1, Address: "127.0.0.1:5"}, {ID: 2, Address: "127.0.0.1:6"}}}
	if cfg := s.ClientConfig(); cfg.API != client.APIEtcd || !cfg.EtcdNoFsync || len(cfg.Servers) != 2 {
		t.Errorf("etcd client config %+v", cfg)
	}
	s.Nodes[1].ExtraArgs = []string{"-dialPeers", "127.0.0.1:9,127.0.0.1:8"}
	if err := s.checkEtcd(); err == nil {
		t.Error("-dialPeers on one node only was accepted")
	}
	if cfg := (&Spec{System: "nezha"}).ClientConfig("a:1"); cfg.API != "" {
		t.Errorf("nezha client config %+v", cfg)
	}
}
