// Package nezha is the KVS-Raft state machine of the Nezha paper (ICDE 2026,
// "Nezha: A Key-Value Separated Distributed Store with Optimized Raft
// Integration"; DESIGN.md sections 1-3): a value is persisted once, in its
// Raft entry's record of the shared Raft log, and the state machine keeps
// only key -> systems.Location in an index.
//
// Layout of one node (DESIGN.md section 3), under the -data directory:
//
//	<data>/valuelog/  the Raft log (systems/raftlog); it IS the value log
//	<data>/index/     key -> Location, LevelDB (-index leveldb, the default;
//	                  the paper's dbfile/keyIndex); unused with -index memory
//	<data>/sorted/    reserved for the key-sorted runs written by GC (empty)
//
// Apply (DESIGN.md section 2) writes, per batch of committed entries, one
// index batch holding every key -> Location change and the new applied index.
// Get looks the key up and reads its value back with one positioned read of
// the record (Log.ReadCommand), checking the record's CRC, Raft index and key.
// Scan iterates the index in key order and reads each value the same way.
//
// Two systems are built from this package: "nezha-nogc" (the paper's
// Nezha-NoGC) and "nezha". GC (Raft-aware compaction into sorted/, the
// paper's three-phase request processing) is not implemented yet, so the two
// are identical for now and both record gc=false in Describe. The code is
// structured for it: Store owns an Index and a value reader (Store.readValue)
// that a GC can extend to read from sorted runs.
package nezha
