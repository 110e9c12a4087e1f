#!/usr/bin/env bash
# Builds the container image nezha:<tag> and nezha:latest from this checkout
# (docs/containers.md), with no registry: deploy/Dockerfile is FROM scratch
# and copies a root file system this script assembles in a temporary
# directory. <tag> is what the binary prints for `nezha version -imageTag`
# (12 hex digits of the git revision, -dirty for uncommitted changes), the
# same as for a bin/nezha built from the checkout.
#
#   scripts/image.sh        # prints the image id, tags, size and build time
#   NEZHA_IMAGE=nezha:mine scripts/image.sh   # that tag only (not latest)
#
# The binary is linked statically (kept as bin/nezha-static, which hosts
# without librocksdb can run); if the static link fails, the image gets
# bin/nezha with the exact shared libraries ldd says it loads, and the
# loader. etcd and etcdctl (the reference system) come from the build
# machine with their shared libraries, when installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
source scripts/setup.sh # packages; builds bin/nezha

if ! docker info >/dev/null 2>&1; then
  echo "image: no Docker daemon answers (docker info failed)" >&2
  exit 1
fi

echo "image: linking bin/nezha-static (static: RocksDB and its codecs, glibc; Go's resolver)"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs

binary=bin/nezha-static
if ! CGO_LDFLAGS="${CGO_LDFLAGS:-} -static -lbz2 -lgflags" go build -buildvcs=auto -tags netgo,osusergo \
  -ldflags '-linkmode external -extldflags "-static"' -o bin/nezha-static ./cmd/nezha 2>"$ctx/static.log"; then
  tail -n 3 "$ctx/static.log" | cut -c 1-300 >&2
  echo "image: the static link failed; the image gets bin/nezha and the shared libraries it loads" >&2
  rm -f bin/nezha-static
  binary=bin/nezha
fi

tag=$("$binary" version -imageTag)
if [ "$tag" != "$(bin/nezha version -imageTag)" ]; then
  echo "image: $binary says $tag, bin/nezha says $(bin/nezha version -imageTag): the checkout changed meanwhile" >&2
  exit 1
fi
latest="${tag%%:*}:latest"
if [ -n "${NEZHA_IMAGE:-}" ]; then
  # A tag of the caller's (tests, a worktree without a revision), alone.
  tag=$NEZHA_IMAGE latest=$NEZHA_IMAGE
fi
revision=$(go version -m "$binary" | awk '$1 == "build" && $2 ~ /^vcs\.revision=/ { sub(/^vcs\.revision=/, "", $2); print $2 }')
if [ -z "$revision" ]; then
  revision=unknown
elif go version -m "$binary" | grep -q 'vcs.modified=true'; then
  revision="$revision-dirty"
fi

# install_with_libs SRC DEST: SRC at rootfs/DEST, and each shared library
# and loader that ldd lists for SRC at its own path (symbolic links
# resolved). A static binary lists none.
install_with_libs() {
  install -D -m 0755 "$1" "$root$2"
  local lib
  for lib in $(ldd "$1" 2>/dev/null | grep -o '/[^ ]*' || true); do
    [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
}

install_with_libs "$binary" /nezha
for tool in etcd etcdctl; do
  if path=$(command -v "$tool"); then
    install_with_libs "$path" "/usr/bin/$tool"
  else
    echo "image: $tool is not installed; the image has none" >&2
  fi
done
install -d -m 1777 "$root/tmp"

# The images these tags name now, removed below once no tag names them
# (a rebuild would otherwise leave one dangling image per build).
replaced=$(docker image inspect --format '{{.Id}}' "$tag" "$latest" 2>/dev/null || true)

echo "image: building $tag from deploy/Dockerfile; the image holds:"
(cd "$root" && find . -type f -printf '  /%P %s bytes\n' | sort)
docker build -q -f deploy/Dockerfile \
  --build-arg NEZHA_VERSION="${tag#*:}" --build-arg NEZHA_REVISION="$revision" \
  -t "$tag" -t "$latest" "$ctx" >/dev/null
for id in $replaced; do
  if [ "$(docker image inspect --format '{{len .RepoTags}}' "$id" 2>/dev/null)" = 0 ]; then
    docker image rm "$id" >/dev/null 2>&1 || true
  fi
done
docker image inspect "$tag" --format 'image: id {{.Id}}, tags{{range .RepoTags}} {{.}}{{end}}, size {{.Size}} bytes'
echo "image: built in $((SECONDS - start)) s"
