package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nezha-harness/nezha/internal/cmdline"
)

// Backend names: where a cluster's nodes run (cluster.json "backend").
const (
	// BackendLocal runs each node and its agent as processes on this
	// machine, on loopback (the default).
	BackendLocal = "local"
	// BackendDocker runs each node in a container of the nezha image.
	BackendDocker = "docker"
	// BackendSSH runs each node on a host reached over SSH.
	BackendSSH = "ssh"
)

// Backends lists the backend names.
func Backends() []string { return []string{BackendLocal, BackendDocker, BackendSSH} }

// BackendSpec is cluster.json's "backend": where the nodes run and what
// the backend made for the cluster.
type BackendSpec struct {
	Name   string      `json:"name"`
	Docker *DockerSpec `json:"docker,omitempty"`
	SSH    *SSHSpec    `json:"ssh,omitempty"`
}

// BackendOptions chooses and configures the backend of a new cluster
// (UpOptions.Backend).
type BackendOptions struct {
	// Name is BackendLocal (default), BackendDocker or BackendSSH.
	Name string
	// Hosts are the machines to place nodes on, one node per host in
	// order (ssh: required; docker: optional, containers on named Docker
	// daemons with host networking instead of the local daemon's bridge
	// network). See ParseHosts.
	Hosts []Host
	// Docker configures the docker backend.
	Docker DockerOptions
	// Binary is the nezha binary the ssh backend copies to the hosts
	// (default UpOptions.Binary); a static build (scripts/image.sh leaves
	// one at bin/nezha-static) runs on hosts without librocksdb.
	Binary string
}

// Validate reports every problem of o for a cluster of nodes nodes.
func (o BackendOptions) Validate(nodes int) error {
	var errs []error
	switch o.Name {
	case "", BackendLocal:
		if len(o.Hosts) > 0 {
			errs = append(errs, cmdline.Usagef("-hosts is for -backend docker or ssh; the local backend runs every node on this machine"))
		}
	case BackendDocker:
		errs = append(errs, o.Docker.Validate())
		if len(o.Hosts) > 0 && len(o.Hosts) < nodes {
			errs = append(errs, cmdline.Usagef("-hosts names %d hosts for %d nodes (one node per host)", len(o.Hosts), nodes))
		}
	case BackendSSH:
		switch {
		case len(o.Hosts) == 0:
			errs = append(errs, cmdline.Usagef("-backend ssh needs -hosts FILE, one host per node (docs/multi-machine.md)"))
		case len(o.Hosts) < nodes:
			errs = append(errs, cmdline.Usagef("-backend ssh needs a host per node: -hosts names %d for %d nodes", len(o.Hosts), nodes))
		}
	default:
		errs = append(errs, cmdline.Usagef("unknown backend %q (want %s)", o.Name, strings.Join(Backends(), ", ")))
	}
	return errors.Join(errs...)
}

// backend places a cluster's nodes on machines and starts, revives and
// removes their agents; everything else goes through the agents, the
// same for every backend.
type backend interface {
	// place gives node n (its ID set) its directory, data and log paths,
	// addresses and agent on its host, and starts the agent.
	place(ctx context.Context, s *Spec, n *Node) error
	// revive starts node n's agent again if it does not answer (a
	// machine restart, a stopped container, `cluster down`).
	revive(ctx context.Context, s *Spec, n *Node) error
	// remove stops node n's agent (the node dies with it); with purge it
	// also deletes what the backend made for n on its host (its data
	// included).
	remove(ctx context.Context, s *Spec, n *Node, purge bool) error
	// close releases what the backend made for the whole cluster (a
	// network), once every node is removed; with purge, everything.
	close(ctx context.Context, s *Spec, purge bool) error
}

// backend returns the Spec's backend.
func (s *Spec) backend() (backend, error) {
	switch s.Backend.Name {
	case "", BackendLocal:
		return localBackend{}, nil
	case BackendDocker:
		return dockerBackend{}, nil
	case BackendSSH:
		return sshBackend{}, nil
	}
	return nil, fmt.Errorf("%s: unknown backend %q", FileName, s.Backend.Name)
}

// BackendName is the Spec's backend name ("local" when unset).
func (s *Spec) BackendName() string {
	if s.Backend.Name == "" {
		return BackendLocal
	}
	return s.Backend.Name
}
