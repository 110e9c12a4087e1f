// Package workloads runs what `nezha bench put|get|scan` measures (its
// flags are in cmd/nezha/bench.go): the paper's micro-workloads
// (randwrite_goroutine, zipf_read, scan_pro) run by
// closed-loop clients, or as an open loop at a fixed rate (OpenLoop),
// through the Go client against any system, with latency histograms
// (HDR) from the send and from the intended start, per-second series
// and HdrHistogram interval logs (Intervals), raw per-operation records
// and a run record (RunInfo, config.json). docs/latency.md defines the
// open-loop measures.
//
// The key contract between put and get/scan: bench put writes the keys
// PREFIX + the index in 9 digits (-keyprefix, default "k": 10-byte keys as
// the paper's) for the indices 0..dnums-1, each once, in a seeded random
// order (-order random) or in order; values are -vsize bytes cut from one
// pre-generated random buffer. bench get and bench scan read only those
// keys: -keys N says N were written; without it they find N with a binary
// search of GETs (a complete put run leaves no gaps). GET draws Zipf ranks
// (-zipf s > 1, default 1.01) mapped onto the written indices by a seeded
// permutation shared by all clients; SCAN draws start indices uniformly
// from 0..N-scansize so every scan lies within the written keys. A GET
// that finds nothing, or a SCAN that returns fewer keys, is a miss,
// counted and reported.
//
// Measurement: -dnums operations in total are shared by -cnums clients.
// Throughput counts completed operations (OK and misses) over the run's
// wall time; latencies are of completed operations; failed and ambiguous
// writes are counted separately and the command exits 1 if there are
// any. MB is 10^6 bytes. The API does not report the servers'
// -maxValueBytes: -maxValueBytes (default 64 MiB, the servers' default)
// tells bench what they accept.
package workloads
