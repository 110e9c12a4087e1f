// Package baseline holds the state machines the paper compares Nezha with:
// each one applies committed values into RocksDB (through grocksdb, linked
// against the system librocksdb, 7.8.3 on Debian 12), so that every value is
// stored twice on a node: once in the Raft log and once in RocksDB
// (docs/architecture.md section 1).
//
// Four systems share one implementation, Store, and differ in one mode:
//
//   - original: the paper's "Raft + RocksDB". Every committed Put/Delete is
//     written into RocksDB with its write-ahead log on.
//   - pasv: as original with the RocksDB WAL off (WriteOptions.disableWAL).
//     The memtable is lost on a crash; AppliedIndex after a restart is the
//     last applied index made durable by a flush, and the node replays the
//     Raft log above it.
//   - blobdb: as original with RocksDB's integrated BlobDB on
//     (enable_blob_files): values of at least MinBlobBytes go to blob files,
//     which RocksDB garbage-collects during compaction. KV separation that is
//     not Raft-aware; not one of the paper's baselines.
//   - lsm-raft: LSM-Raft (Zhang et al., Proc. ACM Manag. Data 3(6), 2025).
//     The leader applies as original and cuts spans of its applied state
//     (the last write of each key over a run of log indexes), written as
//     SST files with SstFileWriter; a follower holds committed entries in
//     memory (read over RocksDB) until the span covering them arrives over
//     the peer transport, then ingests it (IngestExternalFile: no WAL,
//     memtable or flush for its entries) and drops them. AppliedIndex is
//     the index RocksDB reflects, carried under the empty key of the data
//     column family in every WriteBatch and every span file; after a crash
//     the node replays the log above it, as for pasv. lsmraft.go has the
//     rules, docs/design/2026-12-04-lsm-raft.md the reasons. Optional.
//
// On-disk layout, under the node's data directory:
//
//	rocksdb/          one RocksDB database with two column families:
//	  default         user key -> value (lsm-raft: also the empty key ->
//	                  the applied index, 16 bytes: first and last index)
//	  meta            "applied" -> applied Raft index (8 bytes, big-endian;
//	                  lsm-raft: only after a snapshot restore)
//
//	lsmraft/spans/    lsm-raft: the spans a leader cut and keeps (transient)
//	lsmraft/in/       lsm-raft: spans being received (transient)
//	rocksdb.restore/  a database staged by a Raft snapshot restore (transient)
//	rocksdb.restore.pending  marker: the staged restore is complete (its index)
//	rocksdb.old/      the replaced database during the swap (transient)
//
// The applied index on disk is never ahead of the user data on disk, so a
// restart never skips a lost write. In original and blobdb mode each Apply
// call writes its entries and the new applied index in one WriteBatch,
// which the WAL recovers together. In pasv mode (no WAL) Apply writes the
// entries only; the applied index is written into the meta column family
// only after a flush of the user data it covers (Store.flushApplied: each
// truncation round, Flush, Close), so RocksDB may flush either column
// family on its own at any time. The user data on disk may then be ahead
// of the applied index; replaying the log from there converges. pasv does
// not use RocksDB's atomic_flush for this: RocksDB 7.8.3 aborts when a
// manual flush overlaps a background atomic flush (facebook/rocksdb
// issues #5126, #7340; fixed after 7.8 by pull request #11111).
//
// Raft log truncation (truncate.go): as etcd and TiKV do, a background
// goroutine truncates the Raft log once it holds more than
// -rocksdb.logRetainBytes (default 64 MiB; 0 never truncates), checked every
// -rocksdb.logTruncateInterval (default 1s): it makes the applied state
// durable (a synced RocksDB WAL write; in pasv mode a flush of the user
// data, then of the applied index),
// compacts the log to the highest sealed segment at or below both that
// durable applied index and the Raft-aware compact bound, and deletes those
// segments. Each round is reported through systems.GCReporter. A follower
// behind the compaction point receives a Raft snapshot (snapshot.go), so
// the measured space amplification of a baseline counts a bounded Raft log.
//
// The package has no package-level mutable state; the systems are values
// (Original, PASV, BlobDB, LSMRaft) that the binary registers.
package baseline
