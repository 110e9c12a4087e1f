package node

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Serve runs one node of cfg until SIGINT or SIGTERM (then it stops the
// node and returns nil) or until the node fails. cfg must have passed
// Validate. If pprofAddress is not empty, the Go profiler
// (net/http/pprof) is served on it; it must be a loopback or private host:port (port
// 0: a free port, logged as pprof_address). Bad addresses and start-up
// problems that are bad input are one-line *cmdline.UsageError.
func Serve(cfg Config, pprofAddress string) error {
	var err error
	if pprofAddress != "" {
		if pprofAddress, err = servePprof(pprofAddress); err != nil {
			return err
		}
	}
	n, err := Start(cfg)
	if err != nil {
		return cmdline.OneLine("serve", err)
	}
	if pprofAddress != "" {
		// With port 0 (every node of `cluster up` gets its own port), the
		// log says which.
		n.Logger().Info("serving the Go profiler", "pprof_address", pprofAddress)
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	select {
	case s := <-sigc:
		n.Logger().Info("signal received; stopping", "signal", s.String())
		n.Stop()
		return nil
	case <-n.Failed():
		n.Stop()
		return fmt.Errorf("node %d failed: %w", n.ID(), n.Err())
	}
}

// servePprof serves the Go profiler on a loopback or private address (port 0: any
// free port) and returns the address it listens on.
func servePprof(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", cmdline.Usagef("serve: -pprofAddress %q: %v", addr, err)
	}
	if !AdminHostOK(host) {
		return "", cmdline.Usagef("serve: -pprofAddress %q is not a loopback or private address", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", cmdline.Usagef("serve: -pprofAddress %s: %v", addr, unwrapListenErr(err))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go http.Serve(lis, mux)
	return lis.Addr().String(), nil
}
