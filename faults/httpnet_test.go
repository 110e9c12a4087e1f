package faults

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nezha-harness/nezha/cluster"
)

// TestHTTPNet: each member's proxy forwards requests, puts each on its
// directed link by the sender header (member ids learned from the
// receiver header), refuses a cut link's requests, ends its open streams,
// and lets requests without a sender pass.
func TestHTTPNet(t *testing.T) {
	streaming := make(chan struct{}, 4)
	var nodes []cluster.Node
	for id := uint64(1); id <= 3; id++ {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/stream" { // a long-lived response, as etcd's peer streams
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				streaming <- struct{}{}
				<-r.Context().Done()
				return
			}
			io.WriteString(w, "ok")
		}))
		defer srv.Close()
		nodes = append(nodes, cluster.Node{ID: id, InternalAddress: strings.TrimPrefix(srv.URL, "http://")})
	}
	n := NewHTTPNet(EtcdSenderHeader, EtcdReceiverHeader)
	defer n.Close()
	if err := n.Reserve(3); err != nil {
		t.Fatal(err)
	}
	args := n.NodeArgs(nodes[0], nodes)
	if len(args) != 2 || args[0] != "-dialPeers" {
		t.Fatalf("NodeArgs = %v (%v)", args, n.Err())
	}
	if again := n.NodeArgs(nodes[1], nodes); strings.Join(again, " ") != strings.Join(args, " ") {
		t.Fatalf("nodes dial different proxies: %v, %v", args, again)
	}
	proxy := strings.Split(args[1], ",")
	if got := len(n.Links()); got != 6 {
		t.Fatalf("%d links, want 6", got)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: 5 * time.Second}
	// send sends a request from member `from` (hex ids "a1".."a3") to node `to`.
	send := func(ctx context.Context, from, to int, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+proxy[to-1]+path, nil)
		if from > 0 {
			req.Header.Set(EtcdSenderHeader, "a"+string(rune('0'+from)))
		}
		req.Header.Set(EtcdReceiverHeader, "a"+string(rune('0'+to)))
		return hc.Do(req)
	}
	ok := func(from, to int) bool {
		resp, err := send(context.Background(), from, to, "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && string(b) == "ok"
	}
	for to := 1; to <= 3; to++ { // every member id is learned
		for from := 1; from <= 3; from++ {
			if from != to && !ok(from, to) {
				t.Fatalf("%d->%d refused before any cut", from, to)
			}
		}
	}
	// A stream 1->2 is open when the link is cut: it ends.
	resp, err := send(context.Background(), 1, 2, "/stream")
	if err != nil {
		t.Fatal(err)
	}
	<-streaming
	if err := n.Cut(Link{From: 1, To: 2}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the open stream of a cut link did not end")
	}
	resp.Body.Close()
	if ok(1, 2) {
		t.Fatal("1->2 served while cut")
	}
	if !ok(2, 1) || !ok(3, 2) || !ok(0, 2) {
		t.Fatal("a link that is not cut (2->1, 3->2, or no sender) was refused")
	}
	if err := n.Cut(Link{From: 1, To: 1}); err == nil {
		t.Fatal("cut of a link that does not exist")
	}
	if err := n.Delay(time.Millisecond, 0); err == nil {
		t.Fatal("delay on HTTP links accepted")
	}
	if err := n.HealAll(); err != nil || !ok(1, 2) {
		t.Fatalf("1->2 after HealAll: %v", err)
	}
}
