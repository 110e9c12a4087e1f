package systems

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nezha-harness/nezha/internal/vfs"
)

// Location is where a committed entry's record sits in the Raft log: the
// segment file number, the byte offset of the record header in that file, the
// record length in bytes (header and payload), and the entry's Raft index.
// Nezha's index maps key -> Location (docs/architecture.md sections 3 and 4.2).
type Location struct {
	Segment uint64
	Offset  int64
	Length  uint32
	Index   uint64
	// ExpiresUnixNano is when the value expires (Command.ExpiresUnixNano;
	// 0: never). Nezha's index keeps it beside the location, so that reads
	// skip an expired key without reading its value.
	ExpiresUnixNano int64
}

func (l Location) String() string {
	s := fmt.Sprintf("segment %d offset %d length %d index %d", l.Segment, l.Offset, l.Length, l.Index)
	if l.ExpiresUnixNano != 0 {
		s += fmt.Sprintf(" expires %d", l.ExpiresUnixNano)
	}
	return s
}

// Expired reports whether the value at l has expired at nowUnixNano.
func (l Location) Expired(nowUnixNano int64) bool {
	return l.ExpiresUnixNano != 0 && l.ExpiresUnixNano <= nowUnixNano
}

// AppliedEntry is one committed Raft entry handed to StateMachine.Apply.
type AppliedEntry struct {
	Index uint64
	Term  uint64
	// Command is the decoded payload; Op is OpNone for entries without one.
	// Key and Value alias the entry's data and stay valid after Apply returns
	// (the state machine may keep them; nobody mutates them).
	Command Command
	// Location is where the entry's record sits in the local Raft log.
	Location Location
}

// KeyValue is one result of a scan.
type KeyValue struct {
	Key, Value []byte
}

// ValueLog reads commands back from the local Raft log. It is the value store
// of KV-separated systems. Implemented by *raftlog.Log.
type ValueLog interface {
	// ReadCommand reads the record at loc with one positioned read, verifies
	// its CRC and Raft index, and decodes it. The command's Key and Value
	// alias a buffer allocated for this call: the caller owns them. Errors
	// name the file and offset; a CRC or bounds failure wraps ErrCorrupt; a
	// segment that no longer exists (removed by GC) wraps ErrSegmentRemoved.
	ReadCommand(loc Location) (Command, error)
	// ReadCommands reads several records in one call, coalescing adjacent
	// records of one segment into one read. Results follow locs' order.
	ReadCommands(locs []Location) ([]Command, error)
}

var (
	// ErrCorrupt marks data on disk that failed a CRC or bounds check.
	ErrCorrupt = errors.New("corrupt data")
	// ErrSegmentRemoved marks a read of a log segment that GC removed; a
	// reader that raced GC retries through the index.
	ErrSegmentRemoved = errors.New("segment removed")
)

// StateMachine is what a system does with committed writes, in the spirit of
// raftpico's Machine trait. The shared Raft node calls Apply from a single
// goroutine, in index order, and Get/Scan from many goroutines concurrently
// with Apply.
type StateMachine interface {
	// AppliedIndex returns the Raft index up to which the state machine's
	// durable state reflects the log. On restart the node replays committed
	// entries above it.
	AppliedIndex() uint64
	// Apply applies committed entries, in index order. It must apply every
	// entry it is given, even one at or below AppliedIndex(): after a restart
	// in which the log lost its tail (a torn write), the node rewinds to the
	// log's commit index and replays from there, and the replayed entries
	// may sit at new Locations. Replaying puts and deletes in order is
	// idempotent. An error is fatal to the node (it stops applying and
	// exits): the log is the source of truth.
	Apply(entries []AppliedEntry) error
	// Get returns the value of key. The returned slice is owned by the caller.
	Get(key []byte) (value []byte, found bool, err error)
	// Scan returns up to limit (0: no limit) pairs with start <= key < end in
	// ascending key order (empty end: no upper bound), stopping early with
	// more=true once maxBytes of keys and values were collected.
	Scan(start, end []byte, limit int, maxBytes int) (kvs []KeyValue, more bool, err error)
	// Close releases the state machine; it does not need to flush.
	Close() error
}

// StateHasher is implemented by state machines that can hash their user data
// (every live key and its value, in key order) consistently with the applied
// index the hash was taken at. Replicas at the same applied index must return
// the same sum.
type StateHasher interface {
	StateHash() (sum []byte, applied uint64, err error)
}

// Env is what a state machine gets from the node that hosts it.
type Env struct {
	// Dir is the node's data directory (the -data flag). A state machine
	// keeps its files in subdirectories of its own naming.
	Dir string
	// Log reads records back from the local Raft log.
	Log ValueLog
	// Control compacts and reclaims the Raft log (for state machines whose
	// values live in it).
	Control LogControl
	// Logger is the node's logger.
	Logger *slog.Logger
	// NodeID is the node's Raft id (1-based) and Nodes the number of
	// voters it started with; 0 when unknown (tests). A state machine may
	// use them to stagger background work across the nodes of a cluster.
	NodeID uint64
	Nodes  int
	// FS is the node's file layer (internal/vfs): a state machine opens its
	// own files through it, so that injected disk faults reach them and a
	// failed fsync stops the node; files a library writes itself (RocksDB,
	// LevelDB) are covered at the calls into the library (FS.MaybeError,
	// FS.Observe). nil: plain files (tests).
	FS *vfs.FS
}

// SystemConfig is the configuration of one system: its flags, their
// validation, and how to open its state machine.
type SystemConfig interface {
	// RegisterFlags adds the system's own flags (e.g. nezha's -index) to fs.
	RegisterFlags(fs *flag.FlagSet)
	// Validate reports every problem with the configuration at once.
	Validate() error
	// Open opens (creating if needed) the state machine in env.Dir.
	Open(env Env) (StateMachine, error)
}

// Role is what a system is in the comparison (docs/architecture.md section 1).
// Experiments and the conformance suite take their system lists from the
// Registry by role instead of naming systems.
type Role string

const (
	// RoleStudied is a store under study (nezha, nezha-nogc): the headline
	// compares each with the reference baseline.
	RoleStudied Role = "studied"
	// RoleBaseline is a system the studied stores are compared with
	// (original, pasv, blobdb).
	RoleBaseline Role = "baseline"
	// RoleExternal is a reference system outside this repository, launched
	// from its own binary and driven through its own client (etcd:
	// cluster/etcd.go, client/etcd.go). It is not served
	// by `nezha serve` and therefore not registered.
	RoleExternal Role = "external"
)

// Conformance is one configuration the conformance suite
// (systems/systemstest TestConformance) runs a system in.
type Conformance struct {
	// Name names the subtest; unique across the registry.
	Name string `json:"name"`
	// Args are extra `nezha serve` flags.
	Args []string `json:"args,omitempty"`
	// ExpectGC makes the suite wait for GC rounds (systems.GCReporter).
	ExpectGC bool `json:"expect_gc,omitempty"`
}

// System describes one -system name.
type System struct {
	// Name is the -system flag value, e.g. "original".
	Name string
	// Summary is one line for `nezha serve -h` and reports.
	Summary string
	// Role is RoleStudied or RoleBaseline (required).
	Role Role
	// Reference marks the baseline that ratios are taken against
	// (original); at most one system of a registry has it.
	Reference bool
	// Optional systems are registered (serve, -systems, the conformance
	// suite) but left out of the role lists (ByRole), so that experiments
	// run them only when named: their time budgets count the others.
	Optional bool
	// MapsDataFiles marks a system whose engine reads its data files
	// through mmap (Badger): pages it has mapped survive drop_caches and
	// stay charged to the memory cgroup they were faulted in, so the
	// experiments that read from the disk restart its nodes after the load
	// (a fresh process maps nothing yet) before limiting their memory.
	MapsDataFiles bool
	// LogDir is the name of the Raft log directory under -data: "valuelog"
	// for systems whose log is their value store, "raftlog" otherwise.
	LogDir string
	// NewConfig returns a configuration holding the documented defaults.
	NewConfig func() SystemConfig
	// Conformance are the configurations the conformance suite runs;
	// empty: one, named Name, with no extra flags.
	Conformance []Conformance
	// Geometry returns the system's size parameters scaled to scale
	// (the experiments' scaled geometry) or, with scale's zero value, its
	// defaults (native geometry; no Flags). nil: the system has no size
	// parameters to scale.
	Geometry func(scale GeometryScale) Geometry
	// ConditionFlags returns the serve flags that put the system under one
	// of the paper's conditions (CondNoFsync ...) at dataPerNodeBytes per
	// node; none when the condition does not concern it. nil: none
	// concerns it.
	ConditionFlags func(cond string, dataPerNodeBytes int64) []string
	// Compactions marks a system whose engine compacts an LSM tree in the
	// background and whose nodes report the compactions, stalls and LSM
	// shape (Status): the experiments wait for its compaction debt and
	// split its latencies by compaction windows.
	Compactions bool
	// GCStrategies are the garbage collection strategies of a system with
	// GC (-gc), the default first; the gc experiment runs each.
	GCStrategies []string
	// GCStressFlags are serve flags that make the system's background GC
	// run all the time (rounds back to back, unpaced), for the fault
	// campaigns (the linearizability checks, the crash campaign), whose
	// loads alone would rarely reach a round. nil: none.
	GCStressFlags []string
	// GCFlags returns the serve flags that choose the system's GC strategy
	// (empty: its default) and the log size at which a round starts, for
	// the experiments that set them (gc, latency-gc, amplification, and
	// every run's profile-wide threshold). nil: the system has no GC.
	GCFlags func(strategy string, thresholdBytes int64) []string
	// IdleGCAfter is how long after the last write a node of a system
	// with GC starts its idle round, given the cluster's number of nodes
	// (staggered across them); nil: no idle rounds.
	IdleGCAfter func(nodes int) time.Duration
}

// Conformances returns s.Conformance, or the one default configuration.
func (s System) Conformances() []Conformance {
	if len(s.Conformance) == 0 {
		return []Conformance{{Name: s.Name}}
	}
	return s.Conformance
}

// Registry maps -system names to systems, in registration order. It is
// built by the binary's main (not a package-level variable), which is the
// one place that imports every system.
type Registry struct {
	systems map[string]System
	order   []string
}

// NewRegistry returns a registry of the given systems, in the given order
// (the order of DefaultSystems-style lists and of reports). Duplicate
// names, a missing field, an unknown or external role, two references or
// two conformance configurations of one name are programming errors and
// reported all at once.
func NewRegistry(ss ...System) (*Registry, error) {
	r := &Registry{systems: make(map[string]System, len(ss))}
	var errs []error
	refs := 0
	confs := map[string]bool{}
	for _, s := range ss {
		if s.Name == "" || s.NewConfig == nil || s.LogDir == "" {
			errs = append(errs, fmt.Errorf("system %q: Name, LogDir and NewConfig are required", s.Name))
			continue
		}
		if s.Role != RoleStudied && s.Role != RoleBaseline {
			errs = append(errs, fmt.Errorf("system %q: role %q is not %s or %s", s.Name, s.Role, RoleStudied, RoleBaseline))
		}
		if s.Reference {
			refs++
		}
		if _, dup := r.systems[s.Name]; dup {
			errs = append(errs, fmt.Errorf("system %q registered twice", s.Name))
			continue
		}
		for _, c := range s.Conformances() {
			if confs[c.Name] {
				errs = append(errs, fmt.Errorf("system %q: conformance configuration %q named twice", s.Name, c.Name))
			}
			confs[c.Name] = true
		}
		r.systems[s.Name] = s
		r.order = append(r.order, s.Name)
	}
	if refs > 1 {
		errs = append(errs, fmt.Errorf("%d systems are marked Reference; at most one may be", refs))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// Lookup returns the named system, or an error listing the known names.
func (r *Registry) Lookup(name string) (System, error) {
	s, ok := r.systems[name]
	if !ok {
		return System{}, fmt.Errorf("unknown system %q (known: %s)", name, strings.Join(r.Names(), ", "))
	}
	return s, nil
}

// Names returns the registered names in sorted order.
func (r *Registry) Names() []string {
	names := slices.Clone(r.order)
	sort.Strings(names)
	return names
}

// Systems returns the registered systems in registration order.
func (r *Registry) Systems() []System {
	out := make([]System, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.systems[n])
	}
	return out
}

// ByRole returns the names of the systems with one of roles, in
// registration order (e.g. the experiments' default list is
// ByRole(RoleStudied, RoleBaseline)); Optional systems are left out.
func (r *Registry) ByRole(roles ...Role) []string {
	var out []string
	for _, n := range r.order {
		if s := r.systems[n]; slices.Contains(roles, s.Role) && !s.Optional {
			out = append(out, n)
		}
	}
	return out
}

// Optional returns the names of the Optional systems, in registration
// order.
func (r *Registry) Optional() []string {
	var out []string
	for _, n := range r.order {
		if r.systems[n].Optional {
			out = append(out, n)
		}
	}
	return out
}

// Reference returns the name of the reference baseline, "" if none is
// registered.
func (r *Registry) Reference() string {
	for _, n := range r.order {
		if r.systems[n].Reference {
			return n
		}
	}
	return ""
}
