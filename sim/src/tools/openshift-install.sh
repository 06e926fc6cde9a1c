#!/bin/sh
# Fake `openshift-install` of the simulated cluster (docs/simulation.md, "Fake tools"). It is not
# on PATH: `oc adm release extract --command=openshift-install` writes a launcher for it that
# names the release, as the real installer is extracted from the release payload.
set -eu
. @TOOLS_DIR@/lib/common.sh
SIM_TOOL=openshift-install
sim_begin openshift-install "$@"
# The certificate record format and the certificates to mint are the simulation's
# (sim::installer), shared with the guest's own installer.
CERT_MAGIC=@CERT_MAGIC@
CERTS_TABLE=$SIM_TOOLS_DIR/lib/installer-certs

[ -n "${SIM_INSTALL_RELEASE_IMAGE:-}" ] ||
    die 1 "not extracted from a release image (use: oc adm release extract --command=openshift-install)"

# A top-level scalar of a YAML file, unquoted; a block scalar (`key: |`) yields its first line.
yaml_top() {
    awk -v key="$1" '
        index($0, key ":") == 1 {
            v = substr($0, length(key) + 2)
            sub(/^[ \t]+/, "", v)
            if (v ~ /^[|>]/) {
                # A block scalar: its indented lines, folded (>) with spaces or kept (|).
                sep = (v ~ /^>/) ? " " : "\n"
                v = ""
                while ((getline line) > 0 && line ~ /^[ \t]/) {
                    sub(/^[ \t]+/, "", line)
                    v = (v == "" ? line : v sep line)
                }
            }
            sub(/[ \t]+$/, "", v)
            if (v ~ /^".*"$/) {
                # Double-quoted: its escapes resolved, as a YAML parser does.
                v = substr(v, 2, length(v) - 2)
                gsub(/\\"/, "\"", v)
                gsub(/\\\\/, "\\", v)
            } else if (v ~ /^\047.*\047$/) {
                v = substr(v, 2, length(v) - 2)
                gsub(/\047\047/, "\047", v)
            }
            print v
            exit
        }' "$2"
}

# A scalar anywhere in the file (first occurrence), unquoted.
yaml_any() {
    awk -v key="$1" '
        {
            line = $0
            sub(/^[ \t-]+/, "", line)
            if (index(line, key ":") == 1) {
                v = substr(line, length(key) + 2)
                sub(/^[ \t]+/, "", v)
                gsub(/^["\047]|["\047][ \t]*$/, "", v)
                print v
                exit
            }
        }' "$2"
}

# The first value of FIELD in the block under the first `BLOCK:` line (at any depth): a
# `FIELD: value` line, or with FIELD `-` the first list item; unquoted. List items may sit at the
# block key's own indentation, as YAML allows.
yaml_in() {
    awk -v block="$1" -v field="$2" '
        function depth(s) { match(s, /^[ \t]*/); return RLENGTH }
        !inside {
            l = $0; sub(/^[ \t-]+/, "", l)
            if (l == block ":") { inside = 1; d = depth($0) }
            next
        }
        depth($0) <= d && $0 !~ /^[ \t]*- / { exit }
        {
            l = $0; sub(/^[ \t]+/, "", l)
            if (field == "-") {
                if (l !~ /^- /) next
                v = substr(l, 3)
            } else {
                sub(/^- /, "", l)
                if (index(l, field ":") != 1) next
                v = substr(l, length(field) + 2)
            }
            sub(/^[ \t]+/, "", v)
            gsub(/^["\047]|["\047][ \t]*$/, "", v)
            print v
            exit
        }' "$3"
}

# The Infrastructure and Network `cluster` manifests, as the native installer writes them.
write_cluster_manifests() {
    name=$(cluster_name "$1")
    domain=$(yaml_top baseDomain "$1")
    topology=HighlyAvailable
    [ "$(yaml_in controlPlane replicas "$1")" = 1 ] && topology=SingleReplica
    network_type=$(yaml_in networking networkType "$1")
    cluster_cidr=$(yaml_in clusterNetwork cidr "$1")
    host_prefix=$(yaml_in clusterNetwork hostPrefix "$1")
    service=$(yaml_in serviceNetwork - "$1")
    printf 'apiVersion: config.openshift.io/v1\nkind: Infrastructure\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  cloudConfig:\n    name: ""\n  platformSpec:\n    type: None\nstatus:\n  apiServerInternalURI: https://api-int.%s.%s:6443\n  apiServerURL: https://api.%s.%s:6443\n  controlPlaneTopology: %s\n  cpuPartitioning: None\n  etcdDiscoveryDomain: ""\n  infrastructureName: %s-sim01\n  infrastructureTopology: %s\n  platform: None\n  platformStatus:\n    type: None\n' \
        "$name" "$domain" "$name" "$domain" "$topology" "$name" "$topology" \
        >"$2/cluster-infrastructure-02-config.yml"
    printf 'apiVersion: config.openshift.io/v1\nkind: Network\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  clusterNetwork:\n  - cidr: %s\n    hostPrefix: %s\n  externalIP:\n    policy: {}\n  networkType: %s\n  serviceNetwork:\n  - %s\nstatus: {}\n' \
        "${cluster_cidr:-10.128.0.0/14}" "${host_prefix:-23}" "${network_type:-OVNKubernetes}" "${service:-172.30.0.0/16}" \
        >"$2/cluster-network-02-config.yml"
}

# metadata.name of an install-config.
cluster_name() {
    awk '
        /^metadata:/ { m = 1; next }
        m && /^[ \t]+name:/ { v = $0; sub(/^[ \t]+name:[ \t]*/, "", v); gsub(/["\047]/, "", v); print v; exit }
        /^[^ \t]/ { m = 0 }' "$1"
}

parse_dir() {
    dir=.
    while [ $# -gt 0 ]; do
        case $1 in
        --dir) need_arg $# "$1"; dir=$2; shift 2 ;;
        --dir=*) dir=${1#*=}; shift ;;
        --log-level) need_arg $# "$1"; shift 2 ;;
        --log-level=*) shift ;;
        *) usage_error "unknown flag: $1" ;;
        esac
    done
}

state_dir() {
    printf '%s/.openshift_install_state\n' "$dir"
}

# The install-config to use: the one in --dir (consumed), else the one `create manifests` kept.
install_config() {
    if [ -f "$dir/install-config.yaml" ]; then
        printf '%s/install-config.yaml\n' "$dir"
    elif [ -f "$(state_dir)/install-config.yaml" ]; then
        printf '%s/install-config.yaml\n' "$(state_dir)"
    else
        die 1 "failed to fetch Install Config: $dir/install-config.yaml does not exist"
    fi
}

validate_install_config() {
    [ -n "$(yaml_top baseDomain "$1")" ] || die 1 "invalid install-config: baseDomain is required"
    [ -n "$(cluster_name "$1")" ] || die 1 "invalid install-config: metadata.name is required"
    [ -n "$(yaml_top pullSecret "$1")" ] || die 1 "invalid install-config: pullSecret is required"
}

# The install-config as the ConfigMap the real installer renders (kube-system/cluster-config-v1).
# The cluster's pull secret, from the install-config, as `create manifests` writes it.
write_pull_secret() {
    printf 'apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\nmetadata:\n  name: pull-secret\n  namespace: openshift-config\ndata:\n  .dockerconfigjson: %s\n' \
        "$(printf '%s' "$(yaml_top pullSecret "$1")" | base64 -w0)" >"$2"
}

write_cluster_config() {
    {
        echo 'apiVersion: v1'
        echo 'kind: ConfigMap'
        echo 'metadata:'
        echo '  name: cluster-config-v1'
        echo '  namespace: kube-system'
        echo 'data:'
        echo '  install-config: |'
        # The cluster keeps the install-config without its pull secret.
        sed -e 's/^pullSecret:.*/pullSecret: ""/' -e 's/^/    /' "$1"
    } >"$2"
}

# Mints the certificates of one stage (manifests, ignition) into $dir/tls/ as certificate
# records, stamped with this process's clock: like the real installer, notBefore is "now".
mint_certs() {
    now=$(date +%s)
    mkdir -p "$dir/tls"
    while IFS='|' read -r name subject issuer lifetime stage; do
        [ "$stage" = "$1" ] || continue
        printf '%s\nsubject: %s\nissuer: %s\nnotBefore: %s\nnotAfter: %s\n' \
            "$CERT_MAGIC" "$subject" "$issuer" "$now" "$((now + lifetime))" >"$dir/tls/$name.crt"
    done <"$CERTS_TABLE"
}

create_manifests() {
    parse_dir "$@"
    config=$(install_config)
    validate_install_config "$config"
    mkdir -p "$dir/manifests" "$dir/openshift" "$(state_dir)"
    write_cluster_config "$config" "$dir/manifests/cluster-config.yaml"
    # The two installer manifests a CRC build edits, as the native installer writes them.
    printf 'apiVersion: config.openshift.io/v1\nkind: ClusterVersion\nmetadata:\n  name: version\n  namespace: openshift-cluster-version\nspec:\n  channel: stable-4.22\n  clusterID: 00000000-0000-4000-8000-000000000000\n' \
        >"$dir/manifests/cvo-overrides.yaml"
    printf 'apiVersion: config.openshift.io/v1\nkind: Ingress\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  domain: apps.%s.%s\nstatus: {}\n' \
        "$(cluster_name "$config")" "$(yaml_top baseDomain "$config")" \
        >"$dir/manifests/cluster-ingress-02-config.yml"
    write_cluster_manifests "$config" "$dir/manifests"
    write_pull_secret "$config" "$dir/manifests/openshift-config-secret-pull-secret.yaml"
    mint_certs manifests
    if [ "$config" = "$dir/install-config.yaml" ]; then
        mv -f "$config" "$(state_dir)/install-config.yaml"
    fi
}

file_entry() {
    printf '{"path":"%s","mode":%s,"overwrite":true,"contents":{"source":"data:;base64,%s"}}' \
        "$(json_escape "$1")" "$3" "$(base64 -w0 <"$2")"
}

string_entry() {
    printf '%s\n' "$2" >"$tmp/entry"
    file_entry "$1" "$tmp/entry" 420
}

# Every file of one directory as Ignition file entries under /opt/openshift/<sub>/.
manifest_entries() {
    [ -d "$dir/$1" ] || return 0
    for f in "$dir/$1"/*; do
        [ -f "$f" ] || continue
        printf ','
        file_entry "/opt/openshift/$1/${f##*/}" "$f" 420
    done
}

write_ignition() {
    key=$(json_escape "$(yaml_top sshKey "$config")")
    disk=$(yaml_any installationDisk "$config")
    {
        printf '{"ignition":{"version":"3.2.0"},'
        printf '"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["%s"]}]},' "$key"
        printf '"storage":{"files":['
        file_entry /opt/openshift/install-config.yaml "$config" 384
        printf ','
        string_entry /opt/openshift/release-image "${OPENSHIFT_INSTALL_RELEASE_IMAGE_OVERRIDE:-$SIM_INSTALL_RELEASE_IMAGE}"
        printf ','
        string_entry /opt/openshift/release-version "$SIM_INSTALL_RELEASE_VERSION"
        printf ','
        string_entry /opt/openshift/installation-disk "$disk"
        # The installer skips an address that does not parse (a loose check here).
        case "${OPENSHIFT_INSTALL_BOOTSTRAP_NODE_IP:-}" in
        *[!0-9a-fA-F.:]* | "") ;;
        *)
            printf ','
            string_entry /opt/openshift/bootstrap-node-ip "$OPENSHIFT_INSTALL_BOOTSTRAP_NODE_IP"
            ;;
        esac
        manifest_entries tls
        manifest_entries manifests
        manifest_entries openshift
        printf ']},'
        printf '"systemd":{"units":[{"name":"bootkube.service","enabled":true},'
        printf '{"name":"install-to-disk.service","enabled":true}]}}\n'
    } >"$dir/.bootstrap-in-place-for-live-iso.ign.tmp"
    mv -f "$dir/.bootstrap-in-place-for-live-iso.ign.tmp" "$dir/bootstrap-in-place-for-live-iso.ign"
}

write_auth() {
    name=$(cluster_name "$config")
    domain=$(yaml_top baseDomain "$config")
    mkdir -p "$dir/auth"
    placeholder=$(printf 'simulated' | base64 -w0)
    cat >"$dir/auth/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: $placeholder
    server: https://api.$name.$domain:6443
  name: $name
contexts:
- context:
    cluster: $name
    user: admin
  name: admin
current-context: admin
users:
- name: admin
  user:
    client-certificate-data: $placeholder
    client-key-data: $placeholder
EOF
    head -c 18 /dev/urandom | base64 -w0 | tr '+/' 'Kp' >"$dir/auth/kubeadmin-password"
    id=$(cat /proc/sys/kernel/random/uuid)
    printf '{"clusterName":"%s","clusterID":"%s","infraID":"%s-sim"}\n' \
        "$(json_escape "$name")" "$id" "$(json_escape "$name")" >"$dir/metadata.json"
}

create_single_node_ignition_config() {
    parse_dir "$@"
    config=$(install_config)
    validate_install_config "$config"
    [ -n "$(yaml_any installationDisk "$config")" ] ||
        die 1 "invalid install-config: bootstrapInPlace.installationDisk is required for single-node-ignition-config"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # Without a prior `create manifests` the installer renders the manifests itself.
    if [ ! -f "$dir/manifests/cluster-config.yaml" ]; then
        mkdir -p "$dir/manifests"
        write_cluster_config "$config" "$dir/manifests/cluster-config.yaml"
        write_pull_secret "$config" "$dir/manifests/openshift-config-secret-pull-secret.yaml"
    fi
    [ -f "$dir/tls/root-ca.crt" ] || mint_certs manifests
    mint_certs ignition
    write_ignition
    write_auth
    # The real installer consumes the assets it used.
    rm -rf "$dir/manifests" "$dir/openshift" "$(state_dir)"
    rm -f "$dir/install-config.yaml"
}

print_stream_json() {
    [ -f "$SIM_RHCOS_ISO" ] || die 1 "the simulated RHCOS live ISO $SIM_RHCOS_ISO does not exist"
    sha=$(sha256sum <"$SIM_RHCOS_ISO" | cut -d' ' -f1)
    url=$(json_escape "$SIM_RHCOS_ISO_URL")
    minor=$(printf '%s' "$SIM_INSTALL_RELEASE_VERSION" | cut -d. -f1-2)
    printf '{\n  "stream": "rhcos-%s",\n  "metadata": {\n    "last-modified": "2025-01-01T00:00:00Z",\n    "generator": "guestcluster-sim"\n  },\n  "architectures": {' "$minor"
    sep=
    for arch in x86_64 aarch64; do
        printf '%s\n    "%s": {\n      "artifacts": {\n        "metal": {\n          "release": "%s",\n' "$sep" "$arch" "$SIM_RHCOS_VERSION"
        printf '          "formats": {\n            "iso": {\n              "disk": {\n'
        printf '                "location": "%s",\n                "sha256": "%s"\n' "$url" "$sha"
        printf '              }\n            }\n          }\n        }\n      }\n    }'
        sep=,
    done
    printf '\n  }\n}\n'
}

version() {
    printf 'openshift-install %s\n' "$SIM_INSTALL_RELEASE_VERSION"
    printf 'built from commit 0000000000000000000000000000000000000000\n'
    printf 'release image %s@%s\n' "$(release_repository "$SIM_INSTALL_RELEASE_IMAGE")" "$SIM_INSTALL_RELEASE_DIGEST"
    printf 'release architecture amd64\n'
}

case "${1:-} ${2:-}" in
"version ")
    version
    ;;
"create manifests")
    shift 2
    create_manifests "$@"
    ;;
"create single-node-ignition-config")
    shift 2
    create_single_node_ignition_config "$@"
    ;;
"coreos print-stream-json")
    shift 2
    [ $# -eq 0 ] || usage_error "unknown arguments: $*"
    print_stream_json
    ;;
*) usage_error "unknown command \"$*\" (simulated: version, create manifests, create single-node-ignition-config, coreos print-stream-json)" ;;
esac
