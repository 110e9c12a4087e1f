#!/usr/bin/env bash
# The main job. For now: set-up, build, a local 3-node `original` cluster,
# a few kv operations, a leader kill and a restart, tear-down.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
B=bin/nezha
D=$(mktemp -d /tmp/nezha-quickstart-XXXXXX)
trap '$B cluster down -cluster "$D" -purge >/dev/null 2>&1 || true' EXIT

$B cluster up -system original -cluster "$D"
$B kv put -cluster "$D" greeting hello
echo "get greeting -> $($B kv get -cluster "$D" greeting)"
leader=$($B cluster status -cluster "$D" -json | sed -n 's/.*"leader": \([1-9]\).*/\1/p' | head -1)
$B cluster kill -cluster "$D" -node "$leader"
echo "after killing the leader (node $leader): get greeting -> $($B kv get -cluster "$D" greeting -timeout 5s)"
$B kv put -cluster "$D" after-kill yes
$B cluster restart -cluster "$D" -node "$leader"
$B cluster status -cluster "$D"
