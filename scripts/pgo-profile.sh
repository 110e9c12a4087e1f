#!/usr/bin/env bash
# Regenerates cmd/nezha/default.pgo, the CPU profile that the Go toolchain
# uses for profile-guided optimization (PGO, https://go.dev/doc/pgo) of
# every `go build ./cmd/nezha` (its default -pgo=auto; -pgo=off builds
# without it). The profile is merged from the peer table's workloads on
# original and nezha, each on a fresh 3-node cluster of bin/nezha (fsync
# on): 100 B PUT with 1000 clients, stale and linearizable GET with 100
# clients over 60,000 keys of 100 B (after a load and an 8 s stale
# warm-up), and 256 KiB PUT with 50 clients. Each workload runs for at
# most 20 s or until its operation count; the three nodes are profiled for
# 10 s from its 4th second (their -pprofAddress) and the client for all of
# it (bench -cpuprofile). About 4 minutes.
#
#   scripts/pgo-profile.sh [OUT]    # default cmd/nezha/default.pgo
#
# A relative OUT is taken from the repository's root.
#
# Rebuild afterwards (scripts/setup.sh, or go build -o bin/nezha
# ./cmd/nezha). Profiles of an older build still apply: the toolchain
# matches them to the code by function names and line offsets, and a
# profile taken of a PGO-built binary is as good as one of a plain build.
# The single profiles stay in a temporary directory whose name is printed.
# Needs scripts/setup.sh to have run (bin/nezha) and curl.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -gt 1 ]; then
  echo "usage: scripts/pgo-profile.sh [OUT]" >&2
  exit 2
fi
OUT=${1:-cmd/nezha/default.pgo}
NEZHA=$PWD/bin/nezha
[ -x "$NEZHA" ] || { echo "pgo-profile: $NEZHA missing: run scripts/setup.sh first" >&2; exit 2; }
command -v curl >/dev/null || { echo "pgo-profile: curl missing" >&2; exit 2; }
TMP=$(mktemp -d /tmp/pgo-profile.XXXXXX)
CL=$TMP/cluster
trap '"$NEZHA" cluster down -cluster "$CL" -purge >/dev/null 2>&1' EXIT
log() { echo "[$(date +%H:%M:%S)] pgo-profile: $*" >&2; }
n=0
for sys in original nezha; do
  for wl in put100 stale lin put256; do
    n=$((n + 1))
    log "$n/8: $sys $wl"
    "$NEZHA" cluster down -cluster "$CL" -purge >/dev/null 2>&1
    "$NEZHA" cluster up -system "$sys" -cluster "$CL" -- -pprofAddress 127.0.0.1:0 >/dev/null || { log "cluster up failed"; exit 1; }
    addrs=$(grep -ho 'pprof_address=[^ ]*' "$CL"/node*/node.log | sed 's/pprof_address=//')
    [ "$(echo "$addrs" | wc -w)" = 3 ] || { log "expected 3 pprof addresses in the node logs, got: $addrs"; exit 1; }
    case $wl in
      put100) args="put -cnums 1000 -dnums 400000 -vsize 100" ;;
      stale | lin)
        "$NEZHA" bench put -cluster "$CL" -cnums 100 -dnums 60000 -vsize 100 >/dev/null || exit 1
        "$NEZHA" bench get -cluster "$CL" -cnums 100 -dnums 3000000 -keys 60000 -consistency stale -duration 8s >/dev/null || exit 1
        c=stale; [ $wl = lin ] && c=linearizable
        args="get -cnums 100 -dnums 3000000 -keys 60000 -consistency $c" ;;
      put256) args="put -cnums 50 -dnums 20000 -vsize 262144" ;;
    esac
    dir=$TMP/$sys-$wl
    mkdir -p "$dir"
    # shellcheck disable=SC2086 # args is a list of flags
    "$NEZHA" bench $args -cluster "$CL" -duration 20s -cpuprofile "$dir/client.pprof" >"$dir/bench.txt" 2>&1 &
    # The node profiles start once the load runs (the clients connect
    # within a second); wait below waits for them and for the load.
    sleep 4
    i=0
    for a in $addrs; do
      i=$((i + 1))
      curl -sf --max-time 30 -o "$dir/node$i.pprof" "http://$a/debug/pprof/profile?seconds=10" &
    done
    wait
    [ -s "$dir/client.pprof" ] || { log "no client profile: see $dir/bench.txt"; exit 1; }
  done
done
"$NEZHA" cluster down -cluster "$CL" -purge >/dev/null 2>&1
# A follower serving no reads may send an empty profile; merge the rest.
files=$(find "$TMP" -name '*.pprof' -size +0 | sort)
go tool pprof -proto $files >"$OUT.tmp" 2>"$TMP/merge.log" || { log "merge failed: $(cat "$TMP/merge.log")"; exit 1; }
mv "$OUT.tmp" "$OUT"
log "wrote $OUT ($(wc -c <"$OUT") bytes) from $(echo "$files" | wc -l) profiles in $TMP"
