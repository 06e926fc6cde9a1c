#!/usr/bin/env bash
# Real-cluster run of the whole build source (mission §5–§6) and its consumers.
#
# On an OpenShift cluster with OpenShift Virtualization (KubeVirt + CDI) and the guestcluster
# operator: builds a CRCBundle from RELEASE_IMAGE with one post-install manifest (a marker
# ConfigMap), follows every stage to Ready, then creates a pool of two from its crcBundleRef and
# checks:
#
#   1. the bundle is Ready with diskSHA256, diskVirtualSize, its golden PVC, key Secret, metadata
#      ConfigMap (same digest) and a CDI DataSource at the golden PVC;
#   2. every stage condition is True, and no object of the attempt is left;
#   3. two ClusterInstances of the pool become Ready, bound to the built disk's digest;
#   4. each instance's published kubeconfig reaches its cluster (`get clusterversion`), and the
#      post-install marker ConfigMap is there: the user's manifest is in every clone.
#
# The expected output of a successful run is in prove-build.expected, next to this file.
#
# Needs: kubectl (or oc), base64, awk, grep; a kubeconfig that may create CRCBundles, Secrets,
# ConfigMaps, Namespaces and ClusterPools, and read what they make. The guests' Route hosts must
# resolve and be reachable from this machine (the cluster's ingress).
#
# Environment:
#   RELEASE_IMAGE       required: OpenShift release image pull spec
#   PULL_SECRET_FILE    required: a .dockerconfigjson file that can pull that release
#   NAMESPACE           operator namespace (default guestcluster-system)
#   BUNDLE              name of the CRCBundle (default prove-build)
#   POOL_NAMESPACE      where the pool runs (default prove-build-pool; created, enabled)
#   GOLDEN_VOLUME_SIZE  spec.goldenVolumeSize (default 80Gi; at least vm.diskSize)
#   DISK_SIZE           spec.build.vm.diskSize (default: unset, the operator's 64Gi)
#   STORAGE_CLASS       spec.storageClassName (default: unset, the cluster's default class)
#   TIMEOUT_MINUTES     how long to wait for each of: the bundle Ready, the pool Ready (default 480,
#                       the bundle's spec.build.deadline too: no less than the operator's default)
#   POLL_SECONDS        poll interval (default 15)
#   KEEP                when set, everything made is left in place
#
# Exit status: 0 when every check passes, 1 otherwise.

set -euo pipefail

readonly ME=prove-build
NAMESPACE=${NAMESPACE:-guestcluster-system}
BUNDLE=${BUNDLE:-prove-build}
POOL_NAMESPACE=${POOL_NAMESPACE:-prove-build-pool}
RELEASE_IMAGE=${RELEASE_IMAGE:-}
PULL_SECRET_FILE=${PULL_SECRET_FILE:-}
GOLDEN_VOLUME_SIZE=${GOLDEN_VOLUME_SIZE:-80Gi}
DISK_SIZE=${DISK_SIZE:-}
STORAGE_CLASS=${STORAGE_CLASS:-}
TIMEOUT_MINUTES=${TIMEOUT_MINUTES:-480}
POLL_SECONDS=${POLL_SECONDS:-15}
KEEP=${KEEP:-}
readonly STAGES="Prepared Installed Customized Sealed Published Validated"

say() { printf '[%s] %s %s\n' "$ME" "$(date -u +%H:%M:%S)" "$*"; }
die() {
  say "error: $*" >&2
  exit 1
}
FAILED=0
pass() { say "PASS: $*"; }
fail() {
  say "FAIL: $*"
  FAILED=1
}

KUBECTL=${KUBECTL:-$(command -v kubectl || command -v oc || true)}
[ -n "$KUBECTL" ] || die "neither kubectl nor oc is on PATH (or set KUBECTL)"
for tool in base64 awk grep; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH"
done
[ -n "$RELEASE_IMAGE" ] || die "set RELEASE_IMAGE to an OpenShift release pull spec"
[ -s "$PULL_SECRET_FILE" ] || die "set PULL_SECRET_FILE to a readable .dockerconfigjson file"
[[ $TIMEOUT_MINUTES =~ ^[1-9][0-9]*$ ]] || die "TIMEOUT_MINUTES=$TIMEOUT_MINUTES is not a positive number"
[[ $POLL_SECONDS =~ ^[1-9][0-9]*$ ]] || die "POLL_SECONDS=$POLL_SECONDS is not a positive number"
kc() { "$KUBECTL" --request-timeout=60s "$@"; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/$ME.XXXXXX")
MADE=
cleanup() {
  local rc=$?
  set +e
  if [ -n "$MADE" ] && [ -z "$KEEP" ]; then
    say "deleting ClusterPool, namespace $POOL_NAMESPACE, CRCBundle $BUNDLE and its inputs"
    "$KUBECTL" delete namespace "$POOL_NAMESPACE" --ignore-not-found --wait=true --timeout=15m >/dev/null
    "$KUBECTL" delete crcbundle "$BUNDLE" --ignore-not-found --wait=true --timeout=15m >/dev/null
    "$KUBECTL" -n "$NAMESPACE" delete secret "$BUNDLE-pull-secret" --ignore-not-found >/dev/null
    "$KUBECTL" -n "$NAMESPACE" delete configmap "$BUNDLE-post-install" --ignore-not-found >/dev/null
  elif [ -n "$MADE" ]; then
    say "KEEP is set: CRCBundle $BUNDLE, namespace $POOL_NAMESPACE and the inputs are left in place"
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

jp() { kc get "$@" 2>/dev/null || true; }
condition() { jp crcbundle "$BUNDLE" -o "jsonpath={.status.conditions[?(@.type==\"$1\")].$2}"; }

say "cluster $(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}'); namespace $NAMESPACE; bundle $BUNDLE"

# ---------------------------------------------------------------------------------------------
# The inputs and the bundle

MADE=1
# Build inputs carry the label that lets this bundle (and only it) use them.
shared() { kc label --local -f - "guestcluster.opdev.io/build-input=$BUNDLE" -o yaml; }
kc -n "$NAMESPACE" create secret generic "$BUNDLE-pull-secret" \
  --type=kubernetes.io/dockerconfigjson --from-file=.dockerconfigjson="$PULL_SECRET_FILE" \
  --dry-run=client -o yaml | shared | kc apply -f - >/dev/null
cat >"$WORK/marker.yaml" <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: prove-build
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: marker
  namespace: prove-build
data:
  built-by: guestcluster
EOF
kc -n "$NAMESPACE" create configmap "$BUNDLE-post-install" --from-file=marker.yaml="$WORK/marker.yaml" \
  --dry-run=client -o yaml | shared | kc apply -f - >/dev/null
{
  printf 'apiVersion: guestcluster.opdev.io/v1alpha1\nkind: CRCBundle\nmetadata:\n  name: %s\nspec:\n' "$BUNDLE"
  printf '  goldenVolumeSize: %s\n' "$GOLDEN_VOLUME_SIZE"
  [ -z "$STORAGE_CLASS" ] || printf '  storageClassName: %s\n' "$STORAGE_CLASS"
  printf '  build:\n    releaseImage: %s\n    pullSecretRef:\n      name: %s-pull-secret\n' "$RELEASE_IMAGE" "$BUNDLE"
  printf '    postInstallManifestRefs:\n      - name: %s-post-install\n' "$BUNDLE"
  printf '    deadline: %sm\n' "$TIMEOUT_MINUTES"
  [ -z "$DISK_SIZE" ] || printf '    vm:\n      diskSize: %s\n' "$DISK_SIZE"
} >"$WORK/bundle.yaml"
kc apply -f "$WORK/bundle.yaml" >/dev/null
say "created CRCBundle $BUNDLE from $RELEASE_IMAGE with post-install manifest $NAMESPACE/$BUNDLE-post-install"

# ---------------------------------------------------------------------------------------------
# Every stage to Ready

deadline=$((SECONDS + TIMEOUT_MINUTES * 60))
last=
while :; do
  # One read, so the stage and the message are of the same status.
  state=$(jp crcbundle "$BUNDLE" -o jsonpath='{.status.build.stage}{"\t"}{.status.build.message}')
  stage=${state%%$'\t'*}
  message=${state#*$'\t'}
  line="stage ${stage:-?}: ${message:-}"
  if [ "$line" != "$last" ]; then
    say "$line"
    last=$line
  fi
  [ "$stage" != Failed ] || die "the build failed: $(condition Ready message)"
  [ "$(condition Ready status)" != True ] || break
  [ "$SECONDS" -lt "$deadline" ] || die "CRCBundle $BUNDLE not Ready within $TIMEOUT_MINUTES min"
  sleep "$POLL_SECONDS"
done
for type in $STAGES; do
  if [ "$(condition "$type" status)" = True ]; then
    pass "$type: $(condition "$type" message)"
  else
    fail "$type is $(condition "$type" status) $(condition "$type" reason): $(condition "$type" message)"
  fi
done

digest=$(jp crcbundle "$BUNDLE" -o jsonpath='{.status.diskSHA256}')
size=$(jp crcbundle "$BUNDLE" -o jsonpath='{.status.diskVirtualSize}')
golden=$(jp crcbundle "$BUNDLE" -o jsonpath='{.status.qcow2PVCRef.name}')
[[ $digest =~ ^[0-9a-f]{64}$ && $size =~ ^[0-9]+$ && -n $golden ]] &&
  pass "golden PVC $NAMESPACE/$golden: raw disk of $size bytes, sha256 $digest" ||
  fail "status lacks diskSHA256, diskVirtualSize or qcow2PVCRef: '$digest' '$size' '$golden'"
[ "$(jp -n "$NAMESPACE" configmap "$BUNDLE-metadata" -o jsonpath='{.data.diskSHA256}')" = "$digest" ] &&
  pass "ConfigMap $NAMESPACE/$BUNDLE-metadata has the same diskSHA256" ||
  fail "ConfigMap $NAMESPACE/$BUNDLE-metadata is missing or has another diskSHA256"
[ "$(jp -n "$NAMESPACE" datasource.cdi.kubevirt.io "$BUNDLE" -o jsonpath='{.spec.source.pvc.name}')" = "$golden" ] &&
  pass "DataSource $NAMESPACE/$BUNDLE points at $golden" ||
  fail "DataSource $NAMESPACE/$BUNDLE is missing or points elsewhere"
[ -n "$(jp -n "$NAMESPACE" secret "$BUNDLE-ssh-key" -o jsonpath='{.data.id_ecdsa}')" ] &&
  pass "Secret $NAMESPACE/$BUNDLE-ssh-key holds id_ecdsa" || fail "Secret $NAMESPACE/$BUNDLE-ssh-key has no id_ecdsa"
left=
for _ in $(seq 1 40); do
  left=$(kc -n "$NAMESPACE" get jobs,vm,vmi,dv,pvc,secrets,serviceaccounts,roles,rolebindings \
    -l "opdev.io/crc-bundle=$BUNDLE,guestcluster.opdev.io/build-attempt" -o name 2>/dev/null | tr '\n' ' ')
  [ -n "$left" ] || break
  sleep "$POLL_SECONDS"
done
[ -z "$left" ] && pass "no object of the build attempt is left" || fail "left behind: $left"

# ---------------------------------------------------------------------------------------------
# A pool of two from crcBundleRef

ocp=$(jp crcbundle "$BUNDLE" -o jsonpath='{.status.ocpVersion}')
kc create namespace "$POOL_NAMESPACE" --dry-run=client -o yaml | kc apply -f - >/dev/null
kc label namespace "$POOL_NAMESPACE" guestcluster.opdev.io/enabled=true --overwrite >/dev/null
kc -n "$POOL_NAMESPACE" create secret generic pull-secret \
  --type=kubernetes.io/dockerconfigjson --from-file=.dockerconfigjson="$PULL_SECRET_FILE" \
  --dry-run=client -o yaml | kc apply -f - >/dev/null
cat <<EOF | kc apply -f - >/dev/null
apiVersion: guestcluster.opdev.io/v1alpha1
kind: ClusterPool
metadata:
  name: built
  namespace: $POOL_NAMESPACE
spec:
  type: crc
  minSize: 2
  maxSize: 2
  template:
    crcBundleRef:
      name: $BUNDLE
    ocpVersion: "$ocp"
    memory: 16Gi
    cores: 4
EOF
say "created ClusterPool $POOL_NAMESPACE/built of two from crcBundleRef $BUNDLE"
deadline=$((SECONDS + TIMEOUT_MINUTES * 60))
while :; do
  ready=$(kc -n "$POOL_NAMESPACE" get clusterinstances -l opdev.io/pool=built \
    -o jsonpath='{range .items[?(@.status.phase=="Ready")]}{.metadata.name}{" "}{end}' 2>/dev/null || true)
  [ "$(wc -w <<<"$ready")" -lt 2 ] || break
  [ "$SECONDS" -lt "$deadline" ] || die "the pool's instances were not Ready within $TIMEOUT_MINUTES min: ${ready:-none}"
  sleep "$POLL_SECONDS"
done
for instance in $ready; do
  bound=$(jp -n "$POOL_NAMESPACE" clusterinstance "$instance" -o jsonpath='{.status.crc.bootKey.diskSHA256}')
  [ "$bound" = "$digest" ] && pass "$instance is Ready, bound to the built disk" ||
    fail "$instance is bound to '$bound', not $digest"
  jp -n "$POOL_NAMESPACE" secret "$instance-kubeconfig" -o jsonpath='{.data.kubeconfig}' | base64 -d >"$WORK/$instance.kubeconfig"
  version=$("$KUBECTL" --kubeconfig "$WORK/$instance.kubeconfig" --request-timeout=60s get clusterversion version \
    -o jsonpath='{.status.desired.version}' 2>"$WORK/err") &&
    pass "$instance's kubeconfig reaches its cluster: OpenShift $version" ||
    fail "$instance's kubeconfig does not reach its cluster: $(tail -n 2 "$WORK/err" | tr '\n' ' ')"
  marker=$("$KUBECTL" --kubeconfig "$WORK/$instance.kubeconfig" --request-timeout=60s -n prove-build \
    get configmap marker -o jsonpath='{.data.built-by}' 2>/dev/null || true)
  [ "$marker" = guestcluster ] && pass "$instance has the post-install manifest's ConfigMap" ||
    fail "$instance lacks ConfigMap prove-build/marker from the post-install manifest"
done

[ "$FAILED" -eq 0 ] && say "all checks passed" || say "some checks failed"
exit "$FAILED"
