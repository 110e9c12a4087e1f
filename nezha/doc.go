// Package nezha is the KVS-Raft state machine of the Nezha paper (ICDE 2026,
// "Nezha: A Key-Value Separated Distributed Store with Optimized Raft
// Integration"; docs/architecture.md sections 1, 3 and 4): a value is persisted
// once, in its Raft entry's record of the shared Raft log, and the state
// machine keeps only key -> systems.Location in an index. GC later moves
// live values into key-sorted runs.
//
// Layout of one node (docs/architecture.md section 4), under the -data directory:
//
//	<data>/valuelog/   the Raft log (raftkv/raftlog); it IS the value log
//	<data>/index/      key -> Location, LevelDB (-index leveldb, the default;
//	                   the paper's dbfile/keyIndex); unused with -index memory
//	<data>/index.ckpt  the memory index's checkpoint (-index memory with GC;
//	                   checkpoint.go)
//	<data>/sorted/     the key-sorted runs written by GC (run.go) and their
//	                   MANIFEST (manifest.go)
//
// Apply (store.go; docs/architecture.md section 3) writes, per batch of committed
// entries, one index batch holding every key -> Location change and the new
// applied index. Get looks the key up and reads its value back with one
// positioned read, of a log record (Log.ReadCommand, checking the record's
// CRC, Raft index and key) or of a run record (Location.Segment with runFlag
// set). Scan iterates the index in key order and reads the values the same
// way, coalescing adjacent records.
//
// Two systems are built from this package: "nezha-nogc" (the paper's
// Nezha-NoGC: no GC, the log only grows; Describe records gc=false) and
// "nezha", with Raft-aware GC (gc.go: rounds that freeze the log, copy live
// values into a run, switch the index, compact the Raft log and delete the
// input files; the paper's three-phase request processing) under one of the
// strategies of strategy.go (-gc: tiered, the default, or the paper's merge
// and sort-once, or greedy). A follower behind the compaction point is
// brought up to date with a snapshot (snapshot.go).
package nezha
