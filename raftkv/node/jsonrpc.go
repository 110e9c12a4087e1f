package node

import (
	"context"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nezha-harness/nezha/api/jsonrpc"
	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
)

// serveJSONRPC serves the JSON-RPC cluster API (package jsonrpc) of n on
// lis until the server's Stop.
func (n *Node) serveJSONRPC(lis net.Listener) (*jsonrpc.Server, error) {
	cfg := jsonrpc.DefaultConfig()
	cfg.MaxLineBytes = n.cfg.JSONRPCMaxLineBytes
	cfg.Logger = n.logger
	cfg.PeerStatus = peerStatus
	return jsonrpc.Serve(lis, &kvServer{n: n}, &adminServer{n: n}, cfg)
}

// peerStatus asks the node at the client address addr for its Status; a
// client that cannot be made for addr is InvalidArgument (jsonrpc.Config).
func peerStatus(ctx context.Context, addr string) (*kvpb.StatusResponse, error) {
	c, err := client.New(client.DefaultConfig(addr))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	defer c.Close()
	return c.Status(ctx, addr, false)
}
