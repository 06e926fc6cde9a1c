#!/usr/bin/env bash
# Builds KubeVirt's control plane (virt-controller, virt-api) from the pinned module in this
# directory, once per machine, into a cache directory keyed by the pins. Prints the directory
# holding the binaries on its last line (see tools/controlplane/build.sh, which this mirrors).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GUESTCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/guestcluster}
key=$( (cat "$here"/build.sh "$here"/go.mod "$here"/go.sum "$here"/install/*.go; find "$here/unserved" -type f | sort | xargs cat) \
  | sha256sum | cut -c1-16)
out="$cache/kubevirt/$key"
bins=(virt-controller virt-api kubevirt-install)

complete() {
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if complete; then
  echo "$out/bin"
  exit 0
fi

command -v go >/dev/null || {
  echo "go is required to build KubeVirt's control plane (https://go.dev/doc/install)" >&2
  exit 1
}

mkdir -p "$out/bin"
tmp=$(mktemp -d "$out/bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
version=$(grep -oE 'kubevirt.io/kubevirt v[0-9.]+' "$here/go.mod" | head -1 | cut -d' ' -f2)
echo "building virt-controller, virt-api and kubevirt-install (kubevirt.io/kubevirt $version)..." >&2
# Stamp the version as upstream's release builds do: virt-controller writes it into each VMI's
# status and launcher pods carry it.
stamp="-X kubevirt.io/client-go/version.gitVersion=$version -X kubevirt.io/client-go/version.gitTreeState=clean"
(cd "$here" && go build -trimpath -ldflags="-s -w $stamp" -o "$tmp/" \
  kubevirt.io/kubevirt/cmd/virt-controller kubevirt.io/kubevirt/cmd/virt-api)
(cd "$here" && go build -trimpath -ldflags="-s -w" -o "$tmp/kubevirt-install" ./install)
for b in "${bins[@]}"; do mv "$tmp/$b" "$out/bin/$b"; done
for old in "$cache"/kubevirt/*/; do
  [ "${old%/}" = "$out" ] || rm -rf "$old"
done
echo "KubeVirt's control plane built in $(( $(date +%s) - start ))s" >&2
echo "$out/bin"
