#!/usr/bin/env bash
# Builds the helm CLI (lints and renders helm/guestcluster-operator) from the pinned
# Go module in this directory, once per machine, into a cache directory.
#
# Idempotent: the output directory is keyed by a hash of the pinned module files,
# so a second run only checks that the binary exists and takes seconds. Prints
# the directory holding the binary on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GUESTCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/guestcluster}
key=$(cat "$here"/build.sh "$here"/go.mod "$here"/go.sum "$here"/tools.go | sha256sum | cut -c1-16)
out="$cache/helm/$key"
bins=(helm)

complete() {
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || return 1; done
}

if complete; then
  echo "$out/bin"
  exit 0
fi

command -v go >/dev/null || {
  echo "go is required to build helm (https://go.dev/doc/install)" >&2
  exit 1
}

mkdir -p "$out/bin"
tmp=$(mktemp -d "$out/bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
helm_version=$(grep -oE 'helm.sh/helm/v4 v[0-9.]+' "$here/go.mod" | head -1 | cut -d' ' -f2)
echo "building helm ($helm_version)..." >&2
# Stamp the version the way upstream release builds of a tag do (empty metadata),
# so "helm version" reports it instead of the bare minor ("v4.3") in the source.
stamp="-X helm.sh/helm/v4/internal/version.version=$helm_version"
stamp+=" -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
(cd "$here" && go build -trimpath -ldflags="-s -w $stamp" -o "$tmp/helm" helm.sh/helm/v4/cmd/helm)
# Move into place only when everything built, so an interrupted build is redone.
for b in "${bins[@]}"; do mv "$tmp/$b" "$out/bin/$b"; done
# Builds of older pins are dead weight (tens of MB each).
for old in "$cache"/helm/*/; do
  [ "${old%/}" = "$out" ] || rm -rf "$old"
done
echo "helm built in $(( $(date +%s) - start ))s" >&2
echo "$out/bin"
