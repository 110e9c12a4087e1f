// Package experiments holds the named experiments of the harness, one per
// figure or check of the Nezha paper, and runs them: each starts fresh
// local clusters of every system (or uses -servers), runs its workloads,
// tears the clusters down, and writes one results directory with its
// configuration, raw results, figure specifications (drawn by package
// plots) and a Markdown report (docs/architecture.md section 6.6).
//
// Where things are:
//
// The runner:
//   - command.go: RunRequest, RunAndReport and Report, what cmd/nezha calls.
//   - registry.go: Experiment, All, Lookup: the named experiments.
//   - profile.go: Profile (quick, standard, paper) and its Validate.
//   - run.go: Run (one experiment's execution: params, metrics, tables,
//     figures, failures) and Execute.
//   - testbed.go: a cluster under test, started and stopped for a run.
//   - hosts.go: the node hosts and their agents, and what was measured where.
//   - rounds.go: interleaved rounds of the systems.
//
// Measuring a run (the nodes' metrics, profiles and calibration are read by
// package probe):
//   - window.go: a measured window (node and host counters between two
//     samples); timewindows.go: GC, compaction and fault windows for figures.
//   - calibrate.go: the disk and CPU probe of the node hosts.
//   - metrics.go: the /metrics scrapes put-scale keeps and draws.
//   - cpuprofile.go: the nodes' CPU profiles and their tables.
//   - cache.go: the read experiments' page cache (memory cgroups, drops).
//   - idle.go: waiting for writes, GC and replication to go quiet.
//   - bound.go: what bounds the headline PUT (disk, fsync, compaction, CPU).
//   - writeamp.go: write amplification by node role and cause.
//
// The results:
//   - results.go: Result (result.json) and LoadResults.
//   - report.go: report.md and the headline table.
//   - compare.go: comparing two results directories.
//
// The experiments:
//   - scale.go: put-scale (the headline PUT and the paper's conditions).
//   - bench.go: disk-limit, put-vsize, get-zipf and scan.
//   - ycsb.go, amplification.go, gc.go, latencygc.go (latency-gc),
//     linearizability.go, crash.go, embedded.go: one experiment each.
//
// Shared helpers: stats.go (median), format.go (numbers, byte sizes, lists).
package experiments
