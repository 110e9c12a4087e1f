#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and run the harness,
# then builds bin/nezha. Sourced by quickstart.sh and test.sh; safe to rerun.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="$PATH:/usr/local/go/bin"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "setup: Go 1.26 is required (https://go.dev/dl); put it on PATH" >&2
  exit 2
fi

# C libraries for grocksdb (RocksDB 7.8.3 from Debian 12) and its codecs;
# etcd 3.4 (the reference system `-system etcd`) and etcdctl (which the
# tests drive every system's etcd API with); ssh and sshd, and ip, for the
# ssh backend (its test runs an sshd per network namespace).
pkgs=(librocksdb-dev libsnappy-dev zlib1g-dev libbz2-dev liblz4-dev libzstd-dev gcc g++ etcd-server etcd-client
  openssh-client openssh-server iproute2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  # The package enables a system-wide etcd on 2379/2380 where systemd runs;
  # the harness starts its own clusters on free ports and needs none.
  if [[ " ${missing[*]} " == *" etcd-server "* ]] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
  # Likewise a system-wide sshd on port 22: the tests start their own.
  if [[ " ${missing[*]} " == *" openssh-server "* ]] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now ssh >/dev/null 2>&1 || true
  fi
fi

echo "setup: building bin/nezha ($(go version | cut -d' ' -f3), profile-guided by cmd/nezha/default.pgo)"
go build -buildvcs=auto -o bin/nezha ./cmd/nezha
