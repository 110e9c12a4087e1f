package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestHealth: `nezha health` exits 0 for SERVING, and 1 with one line for
// NOT_SERVING and for a closed port, against grpc-go's standard health
// server (what raftkv/node serves).
func TestHealth(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	code, stdout, stderr := runNezha(t, "health", "-address", addr)
	if code != 0 || stdout != "SERVING\n" || stderr != "" {
		t.Errorf("SERVING: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	code, _, stderr = runNezha(t, "health", "-address", addr)
	if code != 1 || stderr != "nezha: health "+addr+": NOT_SERVING\n" {
		t.Errorf("NOT_SERVING: exit %d, stderr %q", code, stderr)
	}
	srv.Stop()
	code, _, stderr = runNezha(t, "health", "-address", addr, "-timeout", time.Second.String())
	if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "nezha: health "+addr+": ") {
		t.Errorf("closed port: exit %d, stderr %q", code, stderr)
	}
}
