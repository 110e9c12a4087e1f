#!/usr/bin/env bash
# A/B of two builds on the GET path, side by side in one run: one 3-node
# cluster per build (fsync on), both loaded (60,000 keys of 100 B) and
# warmed (an 8 s stale-GET run: it fills nezha's location cache and gives
# GC's round after the load time to run), then PAIRS pairs of SECS-second
# GET runs of 100 clients, one on each cluster while the other stays up and
# idle, A first in odd pairs and B first in even ones. On a
# shared machine whose speed drifts by tens of percent from one minute to
# the next, a pair's two runs see about the same machine; count the pairs
# a build wins and let benchstat judge the rest.
#
#   scripts/ab-get.sh A_BIN B_BIN [SYSTEM] [CONSISTENCY] [PAIRS] [SECS]
#   defaults: nezha linearizable 10 5
#
# Each build drives its own cluster with its own client. Output: one Go
# benchmark line per run (BenchmarkGet/system=S/consistency=C/build=a or
# build=b; ops/s, node-cpu-us/op and the rest of `nezha bench -benchfmt`),
# then the number of pairs B won. For benchstat:
#
#   scripts/ab-get.sh old/nezha bin/nezha > ab.txt
#   benchstat -col /build ab.txt
set -uo pipefail
usage() { echo "usage: scripts/ab-get.sh A_BIN B_BIN [SYSTEM] [CONSISTENCY] [PAIRS] [SECS]" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 6 ] || usage
A=$1 B=$2 SYS=${3:-nezha} C=${4:-linearizable} PAIRS=${5:-10} SECS=${6:-5}
for b in "$A" "$B"; do [ -x "$b" ] || { echo "ab-get: $b is not an executable" >&2; exit 2; }; done
for n in "$PAIRS" "$SECS"; do
  case $n in '' | *[!0-9]* | 0) echo "ab-get: PAIRS and SECS must be positive integers, not '$n'" >&2; exit 2 ;; esac
done
case $C in linearizable | stale) ;; *) echo "ab-get: CONSISTENCY must be linearizable or stale, not '$C'" >&2; exit 2 ;; esac
TMP=$(mktemp -d /tmp/ab-get.XXXXXX)
down() { "$A" cluster down -cluster "$TMP/a" -purge >/dev/null 2>&1; "$B" cluster down -cluster "$TMP/b" -purge >/dev/null 2>&1; rm -rf "$TMP"; }
trap down EXIT
declare -A BIN=([a]=$A [b]=$B)
for x in a b; do
  echo "ab-get: build $x (${BIN[$x]}): $SYS cluster up, load, warm-up" >&2
  "${BIN[$x]}" cluster up -system "$SYS" -cluster "$TMP/$x" >/dev/null || { echo "ab-get: cluster up of build $x failed" >&2; exit 1; }
  "${BIN[$x]}" bench put -cluster "$TMP/$x" -cnums 100 -dnums 60000 -vsize 100 >/dev/null || exit 1
  "${BIN[$x]}" bench get -cluster "$TMP/$x" -cnums 100 -dnums 3000000 -keys 60000 -consistency stale -duration 8s >/dev/null || exit 1
done
wins=0
declare -A ops
for r in $(seq "$PAIRS"); do
  order="a b"
  [ $((r % 2)) -eq 0 ] && order="b a"
  for x in $order; do
    line=$("${BIN[$x]}" bench get -cluster "$TMP/$x" -cnums 100 -dnums 100000000 -keys 60000 -consistency "$C" \
      -duration "${SECS}s" -benchfmt 2>/dev/null | grep '^BenchmarkGet')
    [ -n "$line" ] || { echo "ab-get: pair $r: build $x gave no result" >&2; exit 1; }
    echo "$line" | sed "s|^BenchmarkGet[^ ]*|BenchmarkGet/system=$SYS/consistency=$C/build=$x|"
    ops[$x]=$(echo "$line" | awk '{for (i = 1; i < NF; i++) if ($(i + 1) == "ops/s") print $i}')
  done
  if awk -v a="${ops[a]}" -v b="${ops[b]}" 'BEGIN { exit !(b > a) }'; then wins=$((wins + 1)); fi
  echo "ab-get: pair $r of $PAIRS: a ${ops[a]} b ${ops[b]} ops/s" >&2
done
echo "# build b faster in $wins of $PAIRS pairs"
