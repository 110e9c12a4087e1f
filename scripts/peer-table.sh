#!/usr/bin/env bash
# The shared-path measurements of docs/benchmarks.md ("The shared path
# against etcd"), in one run on this machine (3 local nodes per system,
# fsync on, one cluster up at a time), ROUNDS rounds interleaved so that
# the machine's drift hits every system alike:
#
#   - the disk limit (experiment disk-limit: fsynced 1 MiB writes);
#   - node CPU seconds per GiB of 256 KiB PUT goodput on nezha-nogc, from
#     /proc/PID/stat of the three nodes, for bin/nezha and, if OLD names
#     another nezha binary, for it too (side by side);
#   - the peer table through the harness (`nezha bench`): 100 B PUT with
#     1000 clients, linearizable and stale GET with 100 clients over 60,000
#     keys, 256 KiB PUT with 50 clients, for etcd, original and nezha;
#   - the same through etcd's own benchmark tool against each system's etcd
#     API (etcd itself, and the etcd facade of original and nezha), if
#     BENCHMARK names that tool (build it from etcd-io/etcd v3.6.9,
#     ./tools/benchmark; it is not on the module proxy).
#
# After each write phase it waits, as the experiments do, for nezha's idle
# GC round and for the nodes' disk writes to go quiet (at most 60 s), for
# every system alike.
#
#   scripts/peer-table.sh OUT [ROUNDS]    # default 3 rounds, about 6 min each
#
# OUT/cpu.txt, OUT/harness.txt and OUT/etcdtool.txt are Go benchmark lines
# (benchstat reads them), each round after a "# round N" line;
# OUT/progress.log has the disk limits and times; OUT/config.txt the builds,
# the commit and the settings of the run. At the end
# scripts/peer-table-report.py writes OUT/report.md: medians, each system's
# ratio to etcd round by round, and the CPU and disk-limit figures.
# Needs scripts/setup.sh to have run (bin/nezha, etcd, etcdctl, python3).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: scripts/peer-table.sh OUT [ROUNDS]" >&2
  exit 2
fi
OUT=$1
ROUNDS=${2:-3}
case $ROUNDS in '' | *[!0-9]* | 0) echo "peer-table: ROUNDS must be a positive integer, not '$ROUNDS'" >&2; exit 2 ;; esac
NEZHA=$PWD/bin/nezha
OLD=${OLD:-}
BENCHMARK=${BENCHMARK:-}
[ -x "$NEZHA" ] || { echo "peer-table: $NEZHA missing: run scripts/setup.sh first" >&2; exit 2; }
mkdir -p "$OUT"
# A run's files start empty: a second run into the same OUT replaces the first.
for f in cpu.txt harness.txt etcdtool.txt progress.log report.md; do : > "$OUT/$f"; done
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/progress.log"; }
pids_of() { python3 -c "import json;print(' '.join(str(n['pid']) for n in json.load(open('$1/cluster.json'))['nodes']))"; }
cpu_ticks() { local t=0 f; for p in "$@"; do f=($(cut -d' ' -f14,15 /proc/$p/stat 2>/dev/null)); t=$((t + ${f[0]:-0} + ${f[1]:-0})); done; echo $t; }
write_bytes() { local t=0 w; for p in "$@"; do w=$(awk '/^write_bytes/{print $2}' /proc/$p/io 2>/dev/null); t=$((t + ${w:-0})); done; echo $t; }
# settle: nezha's idle GC round starts after -gcIdleAfter (2 s) plus its
# node's GC slot; then wait until the nodes write under 1 MB/s for 2 s.
settle() {
  local P prev cur quiet=0 i=0
  P=$(pids_of "$1"); sleep 5; prev=$(write_bytes $P)
  while [ $quiet -lt 2 ] && [ $i -lt 60 ]; do
    sleep 1; i=$((i + 1)); cur=$(write_bytes $P)
    if [ $((cur - prev)) -lt 1000000 ]; then quiet=$((quiet + 1)); else quiet=0; fi
    prev=$cur
  done
  log "settled $1 after $((i + 5)) s"
}
TCK=$(getconf CLK_TCK)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  echo "bin/nezha: $("$NEZHA" version 2>&1 | head -1)"
  echo "OLD: ${OLD:-none}${OLD:+ ($("$OLD" version 2>/dev/null | head -1 | grep . || echo "no version command"))}"
  echo "BENCHMARK: ${BENCHMARK:-none}"
  echo "rounds: $ROUNDS"
  echo "machine: $(nproc) CPUs, $(uname -sr)"
} > "$OUT/config.txt"
V100=$(head -c 100 /dev/zero | tr '\0' 'v')
TMP=$(mktemp -d /tmp/peer-table.XXXXXX)
trap 'for d in "$TMP"/*; do [ -f "$d/cluster.json" ] && "$NEZHA" cluster down -cluster "$d" -purge >/dev/null 2>&1; done; rm -rf "$TMP"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for f in cpu harness etcdtool; do echo "# round $r" >> "$OUT/$f.txt"; done
  log "round $r of $ROUNDS: disk limit"
  "$NEZHA" experiment run disk-limit -profile quick -out "$OUT/disk-$r" > "$OUT/disk-$r.txt" 2>&1
  grep -o '[0-9.]* MB/s in 1024 KiB' "$OUT/disk-$r.txt" | tee -a "$OUT/progress.log"
  for v in head old; do
    bin=$NEZHA
    if [ $v = old ]; then [ -n "$OLD" ] || continue; bin=$OLD; fi
    D=$TMP/cpu-$v
    "$bin" cluster up -system nezha-nogc -cluster "$D" >/dev/null || { log "cluster up ($v) failed"; continue; }
    P=$(pids_of "$D"); c0=$(cpu_ticks $P)
    res=$("$NEZHA" bench put -cluster "$D" -cnums 50 -dnums 4000 -vsize 262144 -benchfmt 2>&1 | grep '^Benchmark')
    c1=$(cpu_ticks $P)
    mbs=$(echo "$res" | awk '{for (i = 1; i <= NF; i++) if ($(i + 1) == "MB/s") print $i}')
    sgib=$(python3 -c "print(round(($c1 - $c0) / $TCK / (4000 * 262144 / 2**30), 3))")
    echo "BenchmarkCPUPerGiB/bin=$v 1 $sgib node-cpu-s/GiB $mbs MB/s" | tee -a "$OUT/cpu.txt"
    "$NEZHA" cluster down -cluster "$D" -purge >/dev/null
  done
  for sys in etcd original nezha; do
    log "round $r: $sys through the harness"
    D=$TMP/$sys-harness
    "$NEZHA" cluster up -system $sys -cluster "$D" >/dev/null || { log "cluster up $sys failed"; continue; }
    {
      "$NEZHA" bench put -cluster "$D" -cnums 1000 -dnums 150000 -duration 10s -vsize 100 -benchfmt | grep '^Benchmark'
      settle "$D"
      "$NEZHA" bench get -cluster "$D" -cnums 100 -dnums 2000000 -duration 10s -keys 60000 -consistency linearizable -benchfmt | grep '^Benchmark'
      "$NEZHA" bench get -cluster "$D" -cnums 100 -dnums 4000000 -duration 10s -keys 60000 -consistency stale -benchfmt | grep '^Benchmark'
      "$NEZHA" bench put -cluster "$D" -cnums 50 -dnums 3000 -vsize 262144 -keyprefix L -benchfmt | grep '^Benchmark'
    } 2>&1 | tee -a "$OUT/harness.txt"
    "$NEZHA" cluster down -cluster "$D" -purge >/dev/null
    [ -n "$BENCHMARK" ] || continue
    log "round $r: $sys through etcd's benchmark tool"
    D=$TMP/$sys-etcdtool
    if [ $sys = etcd ]; then
      "$NEZHA" cluster up -system etcd -cluster "$D" >/dev/null || { log "cluster up $sys failed"; continue; }
      EP=$(python3 -c "import json;print(','.join(n['address'] for n in json.load(open('$D/cluster.json'))['nodes']))")
    else
      # Every node serves etcd's API on a free port; cluster up prints it ("etcd ADDR").
      EP=$("$NEZHA" cluster up -system $sys -cluster "$D" -- -etcdAddress 127.0.0.1:0 | grep -o 'etcd [0-9.:]*' | sed 's/etcd //' | paste -sd,)
      [ -n "$EP" ] || { log "cluster up $sys with etcd's API failed"; continue; }
    fi
    ETCDCTL_API=3 etcdctl --endpoints "$EP" put k000000001 "$V100" >/dev/null
    tool() {
      local name=$1 rs; shift
      rs=$("$BENCHMARK" --endpoints "$EP" "$@" 2>&1 | awk '/Requests\/sec/{print $2}')
      if [ -z "$rs" ]; then log "etcd tool $name on $sys gave no result"; return; fi
      echo "BenchmarkEtcdTool/op=$name/system=$sys 1 $(python3 -c "print(round(1e9 / $rs, 1))") ns/op $rs req/s" | tee -a "$OUT/etcdtool.txt"
    }
    tool put100 --conns 100 --clients 1000 put --total 60000 --val-size 100 --key-space-size 60000 --sequential-keys
    settle "$D"
    tool rangeL --conns 100 --clients 100 range k000000001 --consistency l --total 100000
    tool rangeS --conns 100 --clients 100 range k000000001 --consistency s --total 200000
    tool put256k --conns 50 --clients 50 put --total 3000 --val-size 262144 --key-space-size 3000 --sequential-keys
    "$NEZHA" cluster down -cluster "$D" -purge >/dev/null
  done
done
log "done: $OUT"
python3 scripts/peer-table-report.py "$OUT"
