// Package systems holds the contracts every system under test shares: the
// replicated command format, the StateMachine interface a system implements,
// the Location of a value in the Raft log, the registry of -system names, and
// the input limits the client API enforces.
//
// All systems run on one replication layer (package raftkv/node over the
// segmented Raft log of package raftkv/raftlog), so that comparing two
// systems changes one variable only: what the state machine does with a value
// (docs/architecture.md section 1).
package systems
