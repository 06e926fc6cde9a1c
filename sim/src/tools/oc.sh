#!/bin/sh
# Fake `oc` of the simulated cluster (docs/simulation.md, "Fake tools"). Only the release
# commands a bundle build uses are simulated; anything else exits 2.
set -eu
. @TOOLS_DIR@/lib/common.sh
SIM_TOOL=oc
# Recognised by the simulated guest, which runs its own installer for such a file.
LAUNCHER_MARKER=@LAUNCHER_MARKER@
sim_begin oc "$@"

release_info() {
    image=
    output=
    while [ $# -gt 0 ]; do
        case $1 in
        -o | --output) need_arg $# "$1"; output=$2; shift 2 ;;
        -o=* | --output=*) output=${1#*=}; shift ;;
        -ojson) output=json; shift ;;
        -a | --registry-config) need_arg $# "$1"; check_registry_config "$2"; shift 2 ;;
        -a=* | --registry-config=*) check_registry_config "${1#*=}"; shift ;;
        --insecure | --insecure=*) shift ;;
        --)
            # pflag (cobra's flag parser): `--` ends the flags, what follows are operands.
            shift
            [ $# -le 1 ] && [ -z "$image" ] || usage_error "only one release image may be given"
            image=${1:-}
            [ $# -eq 0 ] || shift
            ;;
        -*) usage_error "unknown flag: $1" ;;
        *)
            [ -z "$image" ] || usage_error "only one release image may be given"
            image=$1
            shift
            ;;
        esac
    done
    [ -n "$image" ] || usage_error "a release image is required"
    [ "$output" = json ] || usage_error "only '-o json' is simulated"
    version=$(release_version "$image")
    digest=$(release_digest "$image")
    repo=$(json_escape "$(release_repository "$image")")
    cat <<EOF
{
  "image": "$(json_escape "$image")",
  "digest": "$digest",
  "contentDigest": "$digest",
  "listDigest": "",
  "config": {
    "architecture": "amd64",
    "os": "linux"
  },
  "metadata": {
    "kind": "cincinnati-metadata-v0",
    "version": "$version",
    "previous": []
  },
  "references": {
    "kind": "ImageStream",
    "apiVersion": "image.openshift.io/v1",
    "metadata": {
      "name": "$version"
    },
    "spec": {
      "tags": [
        {
          "name": "installer",
          "from": {
            "kind": "DockerImage",
            "name": "$repo@sha256:$(sha256_of_string "installer $image")"
          }
        },
        {
          "name": "machine-os-images",
          "from": {
            "kind": "DockerImage",
            "name": "$repo@sha256:$(sha256_of_string "machine-os-images $image")"
          }
        }
      ]
    }
  }
}
EOF
}

release_extract() {
    image=
    to=.
    command=
    while [ $# -gt 0 ]; do
        case $1 in
        --command) need_arg $# "$1"; command=$2; shift 2 ;;
        --command=*) command=${1#*=}; shift ;;
        --to) need_arg $# "$1"; to=$2; shift 2 ;;
        --to=*) to=${1#*=}; shift ;;
        -a | --registry-config) need_arg $# "$1"; check_registry_config "$2"; shift 2 ;;
        -a=* | --registry-config=*) check_registry_config "${1#*=}"; shift ;;
        --command-os=* | --insecure | --insecure=*) shift ;;
        --)
            # pflag (cobra's flag parser): `--` ends the flags, what follows are operands.
            shift
            [ $# -le 1 ] && [ -z "$image" ] || usage_error "only one release image may be given"
            image=${1:-}
            [ $# -eq 0 ] || shift
            ;;
        -*) usage_error "unknown flag: $1" ;;
        *)
            [ -z "$image" ] || usage_error "only one release image may be given"
            image=$1
            shift
            ;;
        esac
    done
    [ -n "$image" ] || usage_error "a release image is required"
    [ "$command" = openshift-install ] || usage_error "only --command=openshift-install is simulated"
    mkdir -p "$to"
    # The extracted installer remembers which release it came from, like the real binary.
    {
        echo '#!/bin/sh'
        echo "$LAUNCHER_MARKER"
        printf 'SIM_INSTALL_RELEASE_IMAGE=%s\n' "$(shell_quote "$image")"
        printf 'SIM_INSTALL_RELEASE_VERSION=%s\n' "$(shell_quote "$(release_version "$image")")"
        printf 'SIM_INSTALL_RELEASE_DIGEST=%s\n' "$(shell_quote "$(release_digest "$image")")"
        echo 'export SIM_INSTALL_RELEASE_IMAGE SIM_INSTALL_RELEASE_VERSION SIM_INSTALL_RELEASE_DIGEST'
        printf 'exec %s "$@"\n' "$(shell_quote "$SIM_TOOLS_DIR/libexec/openshift-install")"
    } >"$to/.openshift-install.tmp"
    chmod 755 "$to/.openshift-install.tmp"
    mv -f "$to/.openshift-install.tmp" "$to/openshift-install"
}

case "${1:-} ${2:-} ${3:-}" in
"adm release info")
    shift 3
    release_info "$@"
    ;;
"adm release extract")
    shift 3
    release_extract "$@"
    ;;
*) usage_error "unknown command \"$*\" (simulated: adm release info, adm release extract)" ;;
esac
