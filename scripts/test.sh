#!/usr/bin/env bash
# The test command: set-up, go vet, and every test with the race detector.
# Long soak and fault campaigns are experiments (nezha experiment), not tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
echo "test: go vet ./..."
go vet ./...
echo "test: go test -race -pgo=off ./... through gotestsum (each package prints when it ends; skipped tests are listed at the end, each with its reason)"
# -pgo=off: the tests check behaviour, and PGO (cmd/nezha/default.pgo) changes only
# inlining and devirtualization; with it, cmd/nezha's race build would compile
# every package a second time.
# gotestsum (a tool of go.mod) runs go test and ends with a "Skipped" list:
# the container tests (no Docker daemon), the ssh backend's (no root or sshd)
# and the other root-only tests each say there why they did not run.
go tool gotestsum --format pkgname-and-test-fails -- -race -pgo=off -count=1 -timeout 30m ./...
