package agent

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Config is one agent: where it serves, the node directory it owns and the
// programs it may start.
type Config struct {
	// Listen is the host:port the agent serves on; port 0 picks a free one.
	Listen string
	// AddressFile, if set, receives the address actually listened on
	// (written through a rename once the agent serves, removed when it
	// stops), so that whoever started the agent with port 0 can find it.
	AddressFile string
	// Dir is the node's directory on this host: Dir/data is the node's
	// -data, Dir/node.log its log (stdout and stderr, appended), and
	// Dir/dial-peers.json its -dialPeersFile.
	Dir string
	// Token must be carried by every call ("authorization: Bearer TOKEN"
	// metadata); a call without it is refused with Unauthenticated.
	Token string
	// Binary is the program a SERVE start runs (`Binary serve ARGS`);
	// default this agent's own executable.
	Binary string
	// EtcdBinary is the program an ETCD start runs, looked up in PATH
	// when it is started if it has no slash; default "etcd".
	EtcdBinary string
	// PacketFilter also cuts links with nftables (a table of the agent's
	// own in its network namespace). Only for an agent on a host or in a
	// container of its node's own: on a shared network namespace (nodes
	// on one loopback) its rules would cut every node's links to the peer.
	PacketFilter bool
}

// DefaultConfig is a Config with the defaults: a free loopback port, this
// executable as Binary, etcd from PATH. Dir and Token have none.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:0", EtcdBinary: "etcd"}
}

// File names under Config.Dir.
const (
	dataDirName       = "data"
	logFileName       = "node.log"
	dialPeersFileName = "dial-peers.json"
	diskProbeFileName = "disk-probe.tmp"
)

// DataDir is the node's data directory under dir (its -data).
func DataDir(dir string) string { return filepath.Join(dir, dataDirName) }

// LogPath is the node's log under dir.
func LogPath(dir string) string { return filepath.Join(dir, logFileName) }

// DialPeersFile is the node's -dialPeersFile under dir, where SetPeers
// writes the proxies it dials.
func DialPeersFile(dir string) string { return filepath.Join(dir, dialPeersFileName) }

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, cmdline.Usagef("listen address %q is not host:port (-listen)", c.Listen))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		errs = append(errs, cmdline.Usagef("listen address %q: port %q is not a number in 0..65535 (-listen)", c.Listen, port))
	}
	if c.Dir == "" {
		errs = append(errs, cmdline.Usagef("the node directory is required (-dir)"))
	}
	if c.Token == "" {
		errs = append(errs, cmdline.Usagef("the token is empty (-tokenFile or NEZHA_AGENT_TOKEN)"))
	} else if strings.ContainsAny(c.Token, " \t\r\n") {
		errs = append(errs, cmdline.Usagef("the token contains white space"))
	}
	if c.Binary != "" {
		if st, err := os.Stat(c.Binary); err != nil {
			errs = append(errs, cmdline.Usagef("node binary: %v", err))
		} else if st.IsDir() || st.Mode()&0o111 == 0 {
			errs = append(errs, cmdline.Usagef("node binary %s is not an executable file", c.Binary))
		}
	}
	return errors.Join(errs...)
}

// withDefaults fills what c leaves empty and makes its paths absolute.
func (c Config) withDefaults() (Config, error) {
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, err
		}
		c.Binary = exe
	}
	if c.EtcdBinary == "" {
		c.EtcdBinary = "etcd"
	}
	var err error
	for _, p := range []*string{&c.Dir, &c.Binary, &c.AddressFile} {
		if *p != "" && err == nil {
			*p, err = filepath.Abs(*p)
		}
	}
	return c, err
}
