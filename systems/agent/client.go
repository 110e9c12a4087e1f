// Package agent is the per-node agent: one per node, wherever the node
// runs, serving agentpb.Agent (see docs/design/2026-12-04-beyond-one-machine.md).
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nezha-harness/nezha/systems/agent/agentpb"
)

// Client is a connection to one agent.
type Client struct {
	agentpb.AgentClient
	conn *grpc.ClientConn
}

// Dial connects to the agent at address (lazily: the first call dials),
// every call carrying token.
func Dial(address, token string) (*Client, error) {
	conn, err := grpc.NewClient(address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(token)))
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", address, err)
	}
	return &Client{AgentClient: agentpb.NewAgentClient(conn), conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// bearer is a token sent as "authorization: Bearer TOKEN" on every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: agents are reached over a private
// network (loopback, a container network, the cluster's hosts).
func (bearer) RequireTransportSecurity() bool { return false }

// NewToken returns a random token.
func NewToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// ReadToken reads a token file (one line).
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return t, nil
}
