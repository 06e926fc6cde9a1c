#!/usr/bin/env bash
# Installs the system packages the tests and the demo use when they are missing:
# qemu-img (Debian's qemu-utils) — the bundle preparation converts qcow2 with the real tool;
# chromium-headless-shell — the dashboard test loads the operator's page in a real browser;
# ssh (openssh-client) — hack/e2e/prove-install-path.sh reaches simulated guests with it, as
# `virtctl ssh --local-ssh=true` does on a real cluster.
set -euo pipefail
missing=()
command -v qemu-img >/dev/null || missing+=(qemu-utils)
command -v chromium-headless-shell >/dev/null || missing+=(chromium-headless-shell)
command -v ssh >/dev/null || missing+=(openssh-client)
# Text in its screenshots needs a font; a minimal system may have none.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
[ ${#missing[@]} -eq 0 ] && exit 0
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "installing ${missing[*]} ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  }
else
  echo "missing ${missing[*]}: install them with your package manager (e.g. sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
