#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) from the pinned
# Go modules in this directory, once per machine, into a cache directory.
#
# Idempotent: the output directory is keyed by a hash of the pinned module files,
# so a second run only checks that the binaries exist and takes seconds. Prints
# the directory holding the binaries on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GUESTCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/guestcluster}
key=$(cat "$here"/build.sh "$here"/kube/go.mod "$here"/kube/go.sum "$here"/etcd/go.mod "$here"/etcd/go.sum \
  "$here"/etcd/main.go | sha256sum | cut -c1-16)
out="$cache/controlplane/$key"
bins=(kube-apiserver kube-controller-manager kubectl etcd)

complete() {
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if complete; then
  echo "$out/bin"
  exit 0
fi

command -v go >/dev/null || {
  echo "go is required to build the control plane (https://go.dev/doc/install)" >&2
  exit 1
}

mkdir -p "$out/bin"
tmp=$(mktemp -d "$out/bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
echo "building etcd ($(grep -oE 'etcd/server/v3 v[0-9.]+' "$here/etcd/go.mod" | head -1))..." >&2
(cd "$here/etcd" && go build -trimpath -ldflags='-s -w' -o "$tmp/etcd" .)
k8s_version=$(grep -oE 'k8s.io/kubernetes v[0-9.]+' "$here/kube/go.mod" | head -1 | cut -d' ' -f2)
echo "building kube-apiserver, kube-controller-manager and kubectl (k8s.io/kubernetes $k8s_version)..." >&2
# Stamp the version the way upstream release builds do, so /version and kubectl report it.
minor=$(echo "$k8s_version" | cut -d. -f2)
stamp="-X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
stamp+=" -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version -X k8s.io/client-go/pkg/version.gitMajor=1"
stamp+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
(cd "$here/kube" && go build -trimpath -ldflags="-s -w $stamp" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl)
# Move into place only when everything built, so an interrupted build is redone.
for b in "${bins[@]}"; do mv "$tmp/$b" "$out/bin/$b"; done
# Builds of older pins are dead weight (hundreds of MB each).
for old in "$cache"/controlplane/*/; do
  [ "${old%/}" = "$out" ] || rm -rf "$old"
done
echo "control plane built in $(( $(date +%s) - start ))s" >&2
echo "$out/bin"
