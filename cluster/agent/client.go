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

	"github.com/nezha-harness/nezha/cluster/agent/agentpb"
)

// Client is a connection to one agent; every call carries the token.
type Client struct {
	agentpb.AgentClient
	conn *grpc.ClientConn
}

// Dial connects to the agent at address (no round trip: the first call
// connects) with the cluster's token. The transport is not encrypted:
// agents serve on loopback, a container network or a host network the
// harness owns.
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

// RequireTransportSecurity is false: see Dial.
func (bearer) RequireTransportSecurity() bool { return false }

// tokenBytes is the randomness of a token (hex: twice as many characters).
const tokenBytes = 32

// NewToken returns a fresh random token (crypto/rand, hex).
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// WriteToken writes token to path as a token file (one line, mode 0600),
// through a rename.
func WriteToken(path, token string) error {
	return writeFileAtomic(path, []byte(token+"\n"), 0o600)
}

// ReadToken reads a token file: one line, readable by its owner only (as
// ssh wants of a private key), so that another user of the host cannot
// drive the agents.
func ReadToken(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %04o: others may read it (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	token := strings.TrimSuffix(string(b), "\n")
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("token file %s does not hold one token on one line", path)
	}
	return token, nil
}
