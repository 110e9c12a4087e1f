// Package embedded is Nezha's storage engine as an embedded key-value store
// in the caller's process: no Raft, no gRPC, no node processes.
//
// It is the replicated store's engine, not a copy of it. A DB owns one
// value log (raftkv/raftlog: CRC-checked records, torn-tail recovery) and
// one nezha.Store (the index of key -> location and GC into key-sorted
// runs; docs/architecture.md sections 3 and 4). Where a node appends entries
// that Raft committed, the DB's committer assigns the next log indexes
// itself, appends the waiting writes with one vectored write and one
// fdatasync (group commit: concurrent writers share it), and hands the
// entries to the same Store.Apply a node calls. The record of a group
// commit's HardState follows its entries: recovery applies entries up to
// the last complete one, so a Batch is atomic across a crash. GC drives the
// log through the same systems.LogControl a node implements, with the
// applied index as its compaction bound.
//
// Layout of dir: LOCK (an open DB holds a flock(2) on it: a second Open
// of the directory fails with ErrLocked), then as a nezha node's
// data directory (package nezha):
// valuelog/ (the value log), index/ (LevelDB index) or index.ckpt (memory
// index checkpoint), sorted/ (runs and their MANIFEST).
//
// Backup writes a consistent copy through the store's snapshot path
// (Store.WriteSnapshot into PrepareRestore/CommitRestore of a new store);
// the copy is a directory Open opens.
package embedded
