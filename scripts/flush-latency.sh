#!/usr/bin/env bash
# How the Raft log's write path holds up when flushes slow down: 256 KiB
# PUT goodput of nezha-nogc (3 local nodes, fsync on, one cluster up at a
# time) against a fixed latency added to every fsync of every node (the
# slow-disk fault, `bench -fsyncDelay`), with 50 and with 4 clients, for
# bin/nezha and, if OLD names another nezha binary (say, a build from
# before the pipelined write path), for it too. Both run under the same
# client, bin/nezha's `bench`; rounds interleave the binaries (their order
# flips each round) so that the machine's drift hits both alike.
#
#   scripts/flush-latency.sh OUT [ROUNDS]    # default 3 rounds, about 8 min each with OLD
#
# OUT/bench.txt holds Go benchmark lines (benchstat reads them), named
# BenchmarkPut/delay=D/cnums=N/bin=head|old, each round after a "# round N"
# line; OUT/config.txt the builds, commit and settings. At the end
# scripts/flush-latency-report.py writes OUT/report.md (medians, each
# binary's goodput against its own without added latency, head over old
# round by round) and OUT/figures.json, which `bin/nezha plot OUT` draws
# as OUT/flush-latency.{png,svg,pdf}. DELAYS, CLIENTS and RUN_SECONDS override
# the added latencies ("0 2ms 5ms 20ms"), the client counts ("50 4") and
# each run's length in seconds (13, of which the first 3 are warm-up).
# Needs scripts/setup.sh to have run (bin/nezha, python3).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: scripts/flush-latency.sh OUT [ROUNDS]" >&2
  exit 2
fi
OUT=$1
ROUNDS=${2:-3}
case $ROUNDS in '' | *[!0-9]* | 0) echo "flush-latency: ROUNDS must be a positive integer, not '$ROUNDS'" >&2; exit 2 ;; esac
NEZHA=$PWD/bin/nezha
OLD=${OLD:-}
DELAYS=${DELAYS:-0 2ms 5ms 20ms}
CLIENTS=${CLIENTS:-50 4}
SECONDS_PER_RUN=${RUN_SECONDS:-13}
case $SECONDS_PER_RUN in '' | *[!0-9]* | [0-3]) echo "flush-latency: RUN_SECONDS must be an integer above 3, not '$SECONDS_PER_RUN'" >&2; exit 2 ;; esac
[ -x "$NEZHA" ] || { echo "flush-latency: $NEZHA missing: run scripts/setup.sh first" >&2; exit 2; }
[ -z "$OLD" ] || [ -x "$OLD" ] || { echo "flush-latency: OLD=$OLD is not an executable" >&2; exit 2; }
mkdir -p "$OUT"
for f in bench.txt progress.log report.md; do : > "$OUT/$f"; done
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/progress.log"; }
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  echo "bin/nezha: $("$NEZHA" version 2>&1 | head -1)"
  echo "OLD: ${OLD:-none}${OLD:+ ($("$OLD" version 2>/dev/null | head -1 | grep . || echo "no version command"))}"
  echo "rounds: $ROUNDS; added fsync latencies: $DELAYS; clients: $CLIENTS; ${SECONDS_PER_RUN} s per run, 3 s of it warm-up"
  echo "workload: nezha-nogc, 3 local nodes, fsync on, 256 KiB PUTs (bench put -vsize 262144)"
  echo "machine: $(nproc) CPUs, $(uname -sr)"
} > "$OUT/config.txt"
TMP=$(mktemp -d /tmp/flush-latency.XXXXXX)
trap 'for d in "$TMP"/*; do [ -f "$d/cluster.json" ] && "$NEZHA" cluster down -cluster "$d" -purge >/dev/null 2>&1; done; rm -rf "$TMP"' EXIT
bins="head"
[ -n "$OLD" ] && bins="head old"
for r in $(seq 1 "$ROUNDS"); do
  echo "# round $r" >> "$OUT/bench.txt"
  order=$bins
  [ $((r % 2)) -eq 0 ] && [ -n "$OLD" ] && order="old head"
  for d in $DELAYS; do
    for n in $CLIENTS; do
      for v in $order; do
        bin=$NEZHA
        [ "$v" = old ] && bin=$OLD
        D=$TMP/$v
        "$bin" cluster up -system nezha-nogc -cluster "$D" -- -diskFaults >/dev/null || { log "cluster up ($v) failed"; continue; }
        fd=()
        [ "$d" != 0 ] && fd=(-fsyncDelay "$d")
        res=$("$NEZHA" bench put -cluster "$D" -vsize 262144 -cnums "$n" -dnums 100000000 \
          -duration "${SECONDS_PER_RUN}s" -warmup 3s -benchfmt "${fd[@]}" 2>&1 | grep '^Benchmark')
        if [ -z "$res" ]; then
          log "round $r: delay $d, $n clients, $v: bench gave no result"
        else
          echo "$res" | sed -E "s#^Benchmark[^ ]*#BenchmarkPut/delay=$d/cnums=$n/bin=$v#" | tee -a "$OUT/bench.txt"
        fi
        "$bin" cluster down -cluster "$D" -purge >/dev/null
      done
    done
  done
  log "round $r of $ROUNDS done"
done
python3 scripts/flush-latency-report.py "$OUT" && "$NEZHA" plot "$OUT" >/dev/null
