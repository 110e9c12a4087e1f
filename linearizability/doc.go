// Package linearizability records what clients saw while nemeses broke a
// cluster, and proves or refutes linearizability with Porcupine, in the
// spirit of etcd's tests/robustness (traffic, failpoints and validation
// kept apart: the nemeses live in package faults).
//
//   - History (Recorder, Client): a recording wrapper around the Go
//     client. Call and return times come from one monotonic clock; every
//     put writes a unique value; a write of unknown outcome
//     (client.ErrAmbiguous) gets an open return (math.MaxInt64) and its
//     client continues under a new Porcupine client id; a write that
//     definitely failed and a failed read are kept in history.json but not
//     checked. Values longer than MaxModelValueBytes are replaced by a hash.
//   - Model (NewModel): put/get/delete/scan over a map, partitioned by key;
//     a scan ties together the keys of the key space it covers, so its
//     snapshot is checked as one atomic read. The workload keeps scans
//     inside groups of keys (Options.ScanGroup), so parts stay small.
//   - Check: Patch (drop ambiguous puts nobody observed, close observed
//     ones at their first observation: both exact), then Porcupine with a
//     timeout; "unknown" is a failure. On failure, the parts at fault are
//     found, simple witnesses (stale reads, values never written) are
//     listed by Explain, and Visualize writes Porcupine's HTML with the
//     fault windows and the witnesses as annotations.
//   - Run: the whole check on a fresh local cluster (what `nezha check` and
//     the linearizability experiment call): proxied peer links, workload
//     and fault schedule for Options.Duration, heal, one final write that
//     must succeed, every node at the same state hash and applied index,
//     teardown, check. Result is JSON (result.json in Options.Out).
package linearizability
