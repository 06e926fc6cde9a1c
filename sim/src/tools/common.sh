# Shared by the simulation's fake tools (sim/src/tools.rs); sourced, never executed.
# @TOOLS_DIR@ is replaced by the tools directory when the tools are installed.

SIM_TOOLS_DIR=@TOOLS_DIR@

# Settings: the environment wins over config.env, which wins over these defaults.
if [ -f "$SIM_TOOLS_DIR/config.env" ]; then
    . "$SIM_TOOLS_DIR/config.env"
fi
: "${SIM_RELEASE_VERSION:=4.22.0}"
: "${SIM_RELEASE_DIGEST:=}"
: "${SIM_RHCOS_VERSION:=9.6.20250101-0}"
: "${SIM_RHCOS_ISO:=$SIM_TOOLS_DIR/rhcos-live.iso}"
: "${SIM_RHCOS_ISO_URL:=file://$SIM_RHCOS_ISO}"
: "${SIM_TOOLS_FAIL:=}"
: "${SIM_TOOLS_FAIL_EXIT:=1}"

die() {
    code=$1
    shift
    printf '%s: %s\n' "$SIM_TOOL" "$*" >&2
    exit "$code"
}

# Exit code 2 is what the real tools' flag parsers use for a command line they do not accept.
usage_error() {
    die 2 "$*"
}

need_arg() {
    [ "$1" -ge 2 ] || usage_error "flag needs an argument: $2"
}

# Records the call, then fails it if it matches SIM_TOOLS_FAIL (a prefix of "<tool> <args>"), so
# scenario tests can make any step of a Job fail without changing the Job.
sim_begin() {
    printf '%s\n' "$*" >>"$SIM_TOOLS_DIR/calls.log" 2>/dev/null || true
    if [ -n "$SIM_TOOLS_FAIL" ]; then
        case "$*" in
        "$SIM_TOOLS_FAIL"*) die "$SIM_TOOLS_FAIL_EXIT" "simulated failure (SIM_TOOLS_FAIL=$SIM_TOOLS_FAIL)" ;;
        esac
    fi
}

json_escape() {
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g'
}

# Single-quotes a word for sh.
shell_quote() {
    printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

sha256_of_string() {
    printf '%s' "$1" | sha256sum | cut -d' ' -f1
}

# The release version: from a `X.Y.Z[-pre]-<arch>` tag, else SIM_RELEASE_VERSION (digest
# pullspecs carry no version, as on a real registry the version comes from the payload).
release_version() {
    last=${1##*/}
    case $last in
    *@*) tag= ;;
    *:*) tag=${last##*:} ;;
    *) tag= ;;
    esac
    case $tag in
    *-x86_64) tag=${tag%-x86_64} ;;
    *-aarch64) tag=${tag%-aarch64} ;;
    *-multi) tag=${tag%-multi} ;;
    esac
    case $tag in
    [0-9]*.[0-9]*.[0-9]*) printf '%s\n' "$tag" ;;
    *) printf '%s\n' "$SIM_RELEASE_VERSION" ;;
    esac
}

# The release digest: the pullspec's own digest, else SIM_RELEASE_DIGEST, else one derived from
# the pullspec (stable, so a tag resolves to the same digest every time).
release_digest() {
    case $1 in
    *@sha256:*) printf 'sha256:%s\n' "${1##*@sha256:}" ;;
    *)
        if [ -n "$SIM_RELEASE_DIGEST" ]; then
            printf '%s\n' "$SIM_RELEASE_DIGEST"
        else
            printf 'sha256:%s\n' "$(sha256_of_string "$1")"
        fi
        ;;
    esac
}

# The repository part of a pullspec (no tag, no digest); a registry port is not a tag.
release_repository() {
    repo=${1%%@*}
    last=${repo##*/}
    case $last in
    *:*) repo=${repo%:*} ;;
    esac
    printf '%s\n' "$repo"
}

# Real oc refuses a registry config it cannot read; so does the fake.
check_registry_config() {
    [ -r "$1" ] || die 1 "error: unable to load --registry-config $1: no such file"
    grep -q '"auths"' "$1" || die 1 "error: --registry-config $1 has no \"auths\""
}
