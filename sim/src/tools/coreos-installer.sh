#!/bin/sh
# Fake `coreos-installer` of the simulated cluster (docs/simulation.md, "Fake tools"). A simulated
# live ISO is a text file: the line "GUESTCLUSTER-SIM-ISO v1", `key: value` header lines, and at
# most one last line "ignition: <Ignition JSON on one line>" (see `sim::tools::read_embedded_ignition`).
set -eu
. @TOOLS_DIR@/lib/common.sh
SIM_TOOL=coreos-installer
sim_begin coreos-installer "$@"

MAGIC='GUESTCLUSTER-SIM-ISO v1'

check_iso() {
    [ -f "$1" ] || die 1 "Error: opening $1: No such file or directory"
    [ "$(head -n 1 "$1")" = "$MAGIC" ] || die 1 "Error: $1 is not a live ISO image"
}

has_ignition() {
    grep -q '^ignition: ' "$1"
}

embed() {
    ignition=
    output=
    force=
    iso=
    while [ $# -gt 0 ]; do
        case $1 in
        -i | --ignition-file) need_arg $# "$1"; ignition=$2; shift 2 ;;
        -i=* | --ignition-file=*) ignition=${1#*=}; shift ;;
        -o | --output) need_arg $# "$1"; output=$2; shift 2 ;;
        -o=* | --output=*) output=${1#*=}; shift ;;
        -f | --force) force=1; shift ;;
        -*) usage_error "unknown flag: $1" ;;
        *)
            [ -z "$iso" ] || usage_error "only one ISO may be given"
            iso=$1
            shift
            ;;
        esac
    done
    [ -n "$iso" ] || usage_error "the ISO image is required"
    check_iso "$iso"
    if [ -n "$ignition" ]; then
        [ -f "$ignition" ] || die 1 "Error: opening $ignition: No such file or directory"
        config=$(tr -d '\n' <"$ignition")
    else
        config=$(tr -d '\n')
    fi
    case $config in
    "{"*"}") ;;
    *) die 1 "Error: the Ignition config is not a JSON object" ;;
    esac
    if has_ignition "$iso" && [ -z "$force" ]; then
        die 1 "Error: This ISO image already has an embedded Ignition config; use -f to force."
    fi
    target=${output:-$iso}
    # Upstream writes a temporary file beside the target (tempfile's: mode 0600) and renames it
    # into place, so the target ends up 0600 whatever the umask. Into `-o` it persists without
    # clobbering: an existing output file is refused (src/live/util.rs, `write_live_iso`).
    if [ -n "$output" ] && [ -e "$output" ]; then
        die 1 "Error: persisting output file to $output: File exists (os error 17)"
    fi
    tmp="$(dirname "$target")/.coreos-installer-temp-$$"
    (
        umask 077
        {
            grep -v '^ignition: ' "$iso"
            printf 'ignition: %s\n' "$config"
        } >"$tmp"
    )
    mv -f "$tmp" "$target"
}

show() {
    [ $# -eq 1 ] || usage_error "usage: coreos-installer iso ignition show <ISO>"
    check_iso "$1"
    has_ignition "$1" || die 1 "Error: No embedded Ignition config."
    sed -n 's/^ignition: //p' "$1"
}

case "${1:-} ${2:-} ${3:-}" in
"iso ignition embed")
    shift 3
    embed "$@"
    ;;
"iso ignition show")
    shift 3
    show "$@"
    ;;
*) usage_error "unknown command \"$*\" (simulated: iso ignition embed, iso ignition show)" ;;
esac
