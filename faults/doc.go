// Package faults breaks clusters the way Jepsen's nemeses and etcd's
// robustness failpoints do, black-box, from outside the node processes, on
// every backend (local, docker, ssh): every action on a node goes through
// its agent (cluster.Spec), wherever the node runs.
//
//   - network (Net): the nodes of a cluster started with
//     cluster.UpOptions.Links dial their peers through proxies their own
//     agents run (toxiproxy); a partition is SetLinks calls that cut the
//     senders' links (a stopped proxy, and where the agent has a packet
//     filter, the node's own network namespace in a container or on a
//     host, also dropped packets with nftables), a delay adds toxiproxy's
//     latency. Client connections are not proxied, so an isolated old
//     leader still answers its clients and stale reads become observable.
//     A system whose members advertise one peer address to all (etcd)
//     dials its peers itself: in containers and on hosts its agents cut
//     links with the packet filter alone; on the local backend (one
//     loopback, no packet filter) it gets one HTTP proxy per member in
//     this process instead, which puts each request on its directed link
//     by the header naming its sender (NewHTTPNet);
//   - process: SIGKILL and restart (kill, kill-leader, restart-all),
//     SIGSTOP and SIGCONT (pause, pause-leader);
//   - disk: torn-tail SIGKILLs a node chosen by the seed (any node, the
//     leader included), has its agent (Damage) make its last Raft log
//     segment end in a torn record (raftlog.TearTail: a copy of a record
//     cut short, or whole with one byte flipped, as an unsynced write
//     interrupted by the crash leaves it), and restarts it when healing;
//     the opt-in lose-tail SIGKILLs a follower and has its agent cut or
//     flip its last fsynced log bytes in place (raftlog.LoseSyncedTail: a
//     disk that lied about fsync, outside Raft's fault model, so not part
//     of "all");
//   - disk, inside the nodes (the one exception to black-box: Go's file I/O
//     bypasses libc, so no outside tool reaches it): disk-full, fsync-error
//     and slow-disk set faults in a node's file layer (internal/vfs) through
//     its DiskFaults RPC, served by nodes started with DiskNodeArgs; healing
//     clears them and restarts a node that stopped on a failed fsync.
//
// A Schedule is a seeded plan: one fault at a time, injected and healed at
// intervals after a warm-up, everything healed before a cool-down. Run
// carries it out and records every injection and heal with its time on the
// caller's monotonic clock (Env.Start), and heals everything on the way
// out, also when its context is cancelled (Ctrl-C). Every loop is bounded
// in time and count.
//
// The package knows no system: it needs a cluster.Spec and, for network
// faults, the Net its peer links go through.
package faults
