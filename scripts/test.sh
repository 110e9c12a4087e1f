#!/usr/bin/env bash
# The test command: set-up, go vet, and every test with the race detector.
# Long soak and fault campaigns are experiments (nezha experiment), not tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
echo "test: go vet ./..."
go vet ./...
echo "test: go test -race -pgo=off ./... (6-12 min on 2 cores; each package prints when it ends, systems/systemstest last and longest)"
# -pgo=off: the tests check behaviour, and PGO (cmd/nezha/default.pgo) changes only
# inlining and devirtualization; with it, cmd/nezha's race build would compile
# every package a second time.
go test -race -pgo=off -count=1 -timeout 20m ./...
