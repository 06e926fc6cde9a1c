#!/usr/bin/env bash
# Builds CDI's control plane (cdi-controller and cdi-apiserver, each upstream's packages under a
# main of ours that takes its fixed ports and paths as flags) and cdi-install from the pinned
# module in this directory, once per machine, into a cache directory keyed by the pins. Prints the
# directory holding the binaries on its last line (see tools/kubevirt/build.sh, which this
# mirrors). What cdi-operator gives them: README.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GUESTCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/guestcluster}
key=$( (cat "$here"/build.sh "$here"/go.mod "$here"/go.sum "$here"/install/*.go "$here"/apiserver/*.go "$here"/controller/*.go "$here"/internal/*/*.go; find "$here" -path "$here/unserved/*" -type f | sort | xargs -r cat) \
  | sha256sum | cut -c1-16)
out="$cache/cdi/$key"
bins=(cdi-controller cdi-apiserver cdi-install)

complete() {
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if complete; then
  echo "$out/bin"
  exit 0
fi

command -v go >/dev/null || {
  echo "go is required to build CDI's control plane (https://go.dev/doc/install)" >&2
  exit 1
}

mkdir -p "$out/bin"
tmp=$(mktemp -d "$out/bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
version=$(grep -oE '^\s*kubevirt.io/containerized-data-importer v[0-9]+\.[0-9]+\.[0-9]+' "$here/go.mod" | head -1 | awk '{print $2}')
echo "building cdi-controller, cdi-apiserver and cdi-install (kubevirt.io/containerized-data-importer $version)..." >&2
# Stamp the version as upstream's release builds do (hack/version.sh): cdi-apiserver prints it for
# --version and serves it as its OpenAPI info version.
stamp="-X kubevirt.io/containerized-data-importer/pkg/version.gitVersion=$version -X kubevirt.io/containerized-data-importer/pkg/version.gitTreeState=clean"
# cdi-apiserver: upstream's server (pkg/apiserver) under a main of ours that takes the listening
# address as flags (upstream's cmd/cdi-apiserver binds 0.0.0.0:8443 with no flag).
(cd "$here" && go build -trimpath -ldflags="-s -w $stamp" -o "$tmp/cdi-apiserver" ./apiserver)
(cd "$here" && go build -trimpath -ldflags="-s -w $stamp" -o "$tmp/cdi-controller" ./controller)
(cd "$here" && go build -trimpath -ldflags="-s -w" -o "$tmp/cdi-install" ./install)
for b in "${bins[@]}"; do mv "$tmp/$b" "$out/bin/$b"; done
for old in "$cache"/cdi/*/; do
  [ "${old%/}" = "$out" ] || rm -rf "$old"
done
echo "CDI's control plane built in $(( $(date +%s) - start ))s" >&2
echo "$out/bin"
