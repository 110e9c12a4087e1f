// Package probe measures the nodes of a run from outside the systems
// under test, without the experiments' run state:
//
//   - scrape.go: the nodes' Prometheus /metrics, scraped in the background
//     (StartScrape), parsed (ParseMetrics), kept as CSV (WriteScrapeCSV,
//     ReadScrapeCSV), and what the series say: rates, the disk bytes
//     written by cause (WriteCauses), the Raft log's fsync quantiles.
//   - pprof.go: the nodes' CPU profiles, fetched (FetchCPUProfile) and
//     summarized by function and part of the path (SummarizeCPUProfiles).
//   - disk.go: the disk-limit and CPU calibration of the node hosts as
//     their agents measured it (Calibration).
//
// What the node hosts' agents read for a run (cgroup limits, /proc/PID/io
// and stat, diskstats) is in cluster/agent; the experiments package turns
// it into a measured window of a run (window.go), as it needs the run's
// testbed.
package probe
