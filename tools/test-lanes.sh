#!/usr/bin/env bash
# Every test of the workspace, as `cargo test --workspace --no-fail-fast` would run them, in two
# lanes: the longest scenario binaries (SIDE below) beside all the others. Those binaries spend
# most of their time waiting on simulated guests and Jobs, so side by side the run takes about
# as long as the longer lane instead of the sum. Each lane is one cargo invocation; the side
# lane's output is printed after the main lane's. Exits non-zero when either lane fails.
set -uo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}

# The side lane: scenario binaries of the root package (tests/<name>.rs), about as long together
# as all the others (measured in a fresh clone: 1168 s against 1110 s).
SIDE=(build_install e2e_scripts bundle_restart kubernetes_flavour)

# Compile everything once, so the lanes only run tests.
"$CARGO" test --workspace --no-run || exit 1

side_args=()
main_args=()
for file in tests/*.rs; do
  target=$(basename "$file" .rs)
  if [[ " ${SIDE[*]} " == *" $target "* ]]; then
    side_args+=(--test "$target")
  else
    main_args+=(--test "$target")
  fi
done

side_log=$(mktemp "${TMPDIR:-/tmp}/guestcluster-side-lane.XXXXXX")
trap 'rm -f "$side_log"' EXIT
echo "side lane (output follows the main lane's): ${SIDE[*]}"
"$CARGO" test --workspace --no-fail-fast "${side_args[@]}" >"$side_log" 2>&1 &
side_pid=$!

"$CARGO" test --workspace --no-fail-fast --lib --bins "${main_args[@]}"
main_rc=$?
"$CARGO" test --workspace --doc
doc_rc=$?

wait "$side_pid"
side_rc=$?
echo
echo "----- side lane: ${SIDE[*]} -----"
cat "$side_log"

if [ "$main_rc" -ne 0 ] || [ "$doc_rc" -ne 0 ] || [ "$side_rc" -ne 0 ]; then
  echo "tests failed (main lane: exit $main_rc, doc tests: exit $doc_rc, side lane: exit $side_rc)" >&2
  exit 1
fi
