package cluster

import (
	"fmt"
	"strings"

	"github.com/nezha-harness/nezha/api/kvpb"
	"github.com/nezha-harness/nezha/client"
	"github.com/nezha-harness/nezha/internal/cmdline"
	"github.com/nezha-harness/nezha/systems"
)

// Address is the two ways tools name a cluster: client addresses
// (Servers, "A,B,C") or a directory written by `cluster up` (Cluster). The
// command line's -servers, -cluster and -api fill it (cmd/nezha).
type Address struct {
	Servers string
	Cluster string
	// API is the servers' client API for -servers (client.APINezha or
	// client.APIEtcd); -cluster knows its system's.
	API string
	// Unary sends every request as a unary call (client.Config.Unary)
	// instead of batching small ones over a Batch stream.
	Unary bool
}

// ClientConfig resolves a into a client configuration (the
// cluster's API and fsync setting for -cluster) and, for -cluster, the
// cluster's system name.
func (a *Address) ClientConfig() (client.Config, string, error) {
	addrs, err := a.Resolve()
	if err != nil {
		return client.Config{}, "", err
	}
	if a.Cluster != "" {
		if a.API != "" {
			return client.Config{}, "", cmdline.Usagef("-api is for -servers; -cluster knows its system's API")
		}
		s, err := Load(a.Cluster)
		if err != nil {
			return client.Config{}, "", err
		}
		cfg := s.ClientConfig()
		cfg.Unary = a.Unary
		return cfg, s.System, nil
	}
	cfg := client.DefaultConfig(addrs...)
	cfg.API = a.API
	cfg.Unary = a.Unary
	if err := cfg.Validate(); err != nil {
		return client.Config{}, "", err
	}
	return cfg, "", nil
}

// Resolve returns the client addresses a names.
func (a *Address) Resolve() ([]string, error) {
	switch {
	case a.Servers != "" && a.Cluster != "":
		return nil, cmdline.Usagef("give -servers or -cluster, not both")
	case a.Servers != "":
		return cmdline.SplitList(a.Servers), nil
	case a.Cluster != "":
		s, err := Load(a.Cluster)
		if err != nil {
			return nil, err
		}
		running := 0
		for _, n := range s.Nodes {
			if Alive(n.PID) {
				running++
			}
		}
		if running == 0 {
			// Fail now rather than retry until the deadline.
			return nil, fmt.Errorf("no node of the cluster in %s is running (restart its nodes: nezha cluster restart -cluster %s -node N)", a.Cluster, a.Cluster)
		}
		return s.Addresses(), nil
	}
	return nil, cmdline.Usagef("no cluster given: use -servers HOST:PORT,... or -cluster DIR")
}

// StatusRow is one line of `cluster status -json`.
type StatusRow struct {
	ID           uint64 `json:"id"`
	Address      string `json:"address"`
	PID          int    `json:"pid"`
	Alive        bool   `json:"alive"`
	Health       string `json:"health"`
	State        string `json:"state,omitempty"`
	Leader       uint64 `json:"leader"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	FirstIndex   uint64 `json:"first_index"`
	LastIndex    uint64 `json:"last_index"`
	Sync         bool   `json:"sync"`
	// CompactedIndex and LogBytes describe the Raft log; GCRounds are the
	// recent GC (nezha) or log truncation (baselines) rounds.
	CompactedIndex uint64          `json:"compacted_index"`
	LogBytes       int64           `json:"log_bytes"`
	GCRounds       []*kvpb.GCRound `json:"gc_rounds,omitempty"`
	// Storage is the state machine's on-disk shape (LSM levels, value log
	// and sorted runs), for systems that report one.
	Storage *systems.StorageShape `json:"storage,omitempty"`
	// DiskRefusal says why the node refuses client writes for its disk
	// (below its free-space minimum, full); empty while it takes them.
	DiskRefusal string `json:"disk_refusal,omitempty"`
	Error       string `json:"error,omitempty"`
}

// StatusRows turns the answers of Spec.Status into the rows of `cluster
// status`.
func StatusRows(sts []NodeStatus) []StatusRow {
	rows := make([]StatusRow, len(sts))
	for i, st := range sts {
		r := StatusRow{ID: st.Node.ID, Address: st.Node.Address, PID: st.Node.PID, Alive: st.Alive, Health: st.Health}
		if resp, err := st.Response(); err != nil {
			r.Error = err.Error()
		} else {
			r.State = strings.TrimPrefix(resp.RaftState, "State")
			r.Leader, r.Term = resp.Header.LeaderId, resp.Header.Term
			r.CommitIndex, r.AppliedIndex = resp.CommitIndex, resp.Header.AppliedIndex
			r.FirstIndex, r.LastIndex, r.Sync = resp.FirstIndex, resp.LastIndex, resp.Sync
			r.CompactedIndex, r.LogBytes, r.GCRounds = resp.CompactedIndex, resp.LogBytes, resp.GcRounds
			r.Storage = StorageShapeOf(resp)
			r.DiskRefusal = resp.DiskRefusal
		}
		rows[i] = r
	}
	return rows
}
