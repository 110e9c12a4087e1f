package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/cluster"
	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Headers etcd's peer transport (rafthttp) sets on every stream and
// pipeline request: the sender's and the receiver's member id, in hex.
const (
	EtcdSenderHeader   = "X-Server-From"
	EtcdReceiverHeader = "X-Raft-To"
)

// httpPeers is the network of a system whose members talk to each other
// over HTTP and advertise one peer address to all (etcd): a member cannot
// dial a different proxy per peer, so each member gets one reverse proxy
// (net/http/httputil) in front of it, which every peer dials (-dialPeers
// names the same proxies on every node), and a request is put on its
// directed link by the header naming its sender. Member ids are learned
// from the receiver header of the requests each proxy forwards.
//
// A link From->To carries the requests From sends to To and their
// responses; in etcd's rafthttp the responses of the streams From opens
// carry To's messages to From, so cutting one direction does not drop
// exactly one node's messages (partition-oneway is approximate); cutting
// both, as every symmetric partition does, isolates the pair exactly. A cut
// link's requests are refused (connection closed) and its open streams
// are cancelled. Requests without a sender (health probes, version
// checks) pass, unless the proxy's node has a cut link and the sender is a
// member id not learned yet, which is refused (fail closed). There is no
// delay: refuse the delay nemesis for such a system.
type httpPeers struct {
	senderHeader, receiverHeader string
	nodes                        []uint64
	servers                      map[uint64]*http.Server
	listen                       map[uint64]string
	members                      map[string]uint64 // member id (header value) -> node id
	inflight                     map[Link]map[int]context.CancelFunc
	nextReq                      int
}

// NewHTTPNet returns an empty network for a system whose peers talk HTTP
// and name sender and receiver in the given request headers (etcd:
// EtcdSenderHeader, EtcdReceiverHeader), on a local cluster started without
// agent links; the proxies are created by NodeArgs.
func NewHTTPNet(senderHeader, receiverHeader string) *Net {
	return &Net{cut: map[Link]bool{}, http: &httpPeers{senderHeader: senderHeader, receiverHeader: receiverHeader,
		servers: map[uint64]*http.Server{}, listen: map[uint64]string{}, members: map[string]uint64{},
		inflight: map[Link]map[int]context.CancelFunc{}}}
}

// Reserve holds free loopback ports for the HTTP proxies of a cluster of
// the given size until NodeArgs creates them on exactly those ports. Call
// it before cluster.Up: Up picks its nodes' ports while these are held, so
// that a proxy can never take a port a node is about to bind.
func (n *Net) Reserve(nodes int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http == nil {
		return errors.New("Reserve is for the HTTP net (NewHTTPNet)")
	}
	for i := 0; i < nodes; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("reserve a port for a peer proxy: %w", err)
		}
		n.reserved = append(n.reserved, l)
	}
	return nil
}

// NodeArgs is the HTTP net's cluster.UpOptions.NodeArgs: on its first call
// it creates a proxy in front of every member (listening on a reserved
// loopback port, forwarding to the member's internal address), and it
// returns `-dialPeers` naming those proxies, the same for every node. An
// error (a port that cannot be bound, a member that is not on loopback)
// makes it return an unusable -dialPeers value, so that the node refuses
// to start with a clear message; call Err after cluster.Up to get the
// cause of a failure at the start.
func (n *Net) NodeArgs(self cluster.Node, all []cluster.Node) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.http == nil {
		return []string{"-dialPeers", "proxy-setup-failed:NodeArgs is for the HTTP net"}
	}
	if n.createErr == nil && len(n.http.nodes) == 0 && len(all) > 1 {
		if err := n.createHTTPLocked(all); err != nil {
			n.closeHTTPLocked()
			n.createErr = err
		}
	}
	if n.createErr != nil {
		return []string{"-dialPeers", "proxy-setup-failed"}
	}
	dial := make([]string, len(all))
	for i, m := range all {
		dial[i] = n.http.listen[m.ID]
	}
	return []string{"-dialPeers", strings.Join(dial, ",")}
}

// Err reports why the HTTP proxies could not be created, if they could
// not.
func (n *Net) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.createErr
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return cmdline.Usagef("address %s is not on loopback: the HTTP net serves local clusters only", addr)
	}
	return nil
}

func (n *Net) createHTTPLocked(all []cluster.Node) error {
	h := n.http
	for _, m := range all {
		if err := checkLoopback(m.InternalAddress); err != nil {
			return err
		}
	}
	for _, m := range all {
		var lis net.Listener
		var err error
		if len(n.reserved) > 0 {
			addr := n.reserved[0].Addr().String()
			n.reserved[0].Close()
			n.reserved = n.reserved[1:]
			lis, err = net.Listen("tcp", addr)
		}
		if lis == nil {
			lis, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			return fmt.Errorf("proxy for node %d: %w", m.ID, err)
		}
		target := &url.URL{Scheme: "http", Host: m.InternalAddress}
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.FlushInterval = -1 // streams: pass every write on at once
		rp.Transport = &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 64}
		rp.ErrorLog = log.New(io.Discard, "", 0)
		srv := &http.Server{Handler: n.httpHandler(m.ID, rp), ErrorLog: log.New(io.Discard, "", 0)}
		go srv.Serve(lis)
		h.nodes = append(h.nodes, m.ID)
		h.servers[m.ID] = srv
		h.listen[m.ID] = lis.Addr().String()
	}
	return nil
}

// httpHandler forwards the requests to node `to` unless their link is cut.
func (n *Net) httpHandler(to uint64, rp *httputil.ReverseProxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := n.http
		sender := strings.ToLower(r.Header.Get(h.senderHeader))
		n.mu.Lock()
		if recv := strings.ToLower(r.Header.Get(h.receiverHeader)); recv != "" {
			h.members[recv] = to
		}
		from, known := h.members[sender]
		link := Link{From: from, To: to}
		refuse := false
		switch {
		case sender == "":
		case !known:
			for l := range n.cut {
				refuse = refuse || l.To == to
			}
		default:
			refuse = n.cut[link]
		}
		var id int
		ctx, cancel := context.WithCancel(r.Context())
		if !refuse && known {
			id = h.nextReq
			h.nextReq++
			if h.inflight[link] == nil {
				h.inflight[link] = map[int]context.CancelFunc{}
			}
			h.inflight[link][id] = cancel
		}
		n.mu.Unlock()
		defer cancel()
		if refuse {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			http.Error(w, "link cut", http.StatusServiceUnavailable)
			return
		}
		if known {
			defer func() {
				n.mu.Lock()
				delete(h.inflight[link], id)
				n.mu.Unlock()
			}()
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// cutHTTPLocked cancels the requests in flight on l (the cut flag, set by
// the caller, refuses new ones).
func (n *Net) cutHTTPLocked(l Link) {
	for _, cancel := range n.http.inflight[l] {
		cancel()
	}
}

func (n *Net) closeHTTPLocked() {
	for _, srv := range n.http.servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
		_ = srv.Close()
	}
	n.http.servers = map[uint64]*http.Server{}
	n.http.nodes = nil
}

var errNoHTTPDelay = errors.New("delay is not supported on HTTP peer links (etcd): there is no per-message latency at the request level")
