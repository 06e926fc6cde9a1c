#!/usr/bin/env bash
# Real-cluster proof of the build's install path (build profile crc-kubevirt-v1).
#
# Creates a build-sourced CRCBundle on a real OpenShift cluster that runs OpenShift
# Virtualization (KubeVirt + CDI) and the guestcluster operator, follows the build through
# Prepare and Install until `Installed=True`, and then checks in the guest the five points of
# docs/design/certificates-and-time.md ("The real-cluster proof"):
#
#   1. the CRC names resolve to 192.168.126.11 and the node's InternalIP is 192.168.126.11;
#   2. the generator and install boots ran a day behind (measured during the install boot);
#   3. after the cold restart the VM has no ISO, runs at offset 0 and boots the root disk alone;
#   4. both kubelet certificates pass `openssl x509 -checkend 2160000` in the guest and were not
#      issued by the installer's first signer (`kubelet-signer`);
#   5. no launcher-pod IP of any VMI the build ran appears under the guest's /etc, in the
#      Infrastructure and Network cluster objects, in the etcd endpoints or in the Node.
#
# It checks right after Installed=True, while the build VM runs Customize (on a real cluster
# several MachineConfig rollouts, many minutes); Seal powers the guest off at its end, so a run
# whose checks have not finished by then reports the guest unreachable. For the whole build to
# Ready and a pool from it, use prove-build.sh. The expected output of a successful run is in
# prove-install-path.expected, next to this file.
#
# Needs on this machine: kubectl (or oc), virtctl, ssh, base64, awk, grep, sort; a kubeconfig
# that may create CRCBundles and Secrets, and read Secrets, VMs, VMIs and Pods in the operator
# namespace.
#
# Environment:
#   RELEASE_IMAGE       required: OpenShift release image pull spec
#   PULL_SECRET_FILE    required: a .dockerconfigjson file that can pull that release
#   NAMESPACE           operator namespace (default guestcluster-system)
#   BUNDLE              name of the CRCBundle to create (default prove-install-path)
#   GOLDEN_VOLUME_SIZE  spec.goldenVolumeSize (default 80Gi; at least the 64Gi build disk)
#   STORAGE_CLASS       spec.storageClassName (default: unset, the cluster's default class)
#   TIMEOUT_MINUTES     how long to wait for Installed=True (default 120)
#   POLL_SECONDS        poll interval (default 10)
#   KEEP                when set (to anything), the bundle and its pull secret are left in place
#   KUBECTL, VIRTCTL    the commands to use (default: kubectl, else oc; virtctl)
#
# Exit status: 0 when all five checks pass, 1 otherwise (or when the build fails or times out).

set -euo pipefail

readonly ME=prove-install-path

NAMESPACE=${NAMESPACE:-guestcluster-system}
BUNDLE=${BUNDLE:-prove-install-path}
RELEASE_IMAGE=${RELEASE_IMAGE:-}
PULL_SECRET_FILE=${PULL_SECRET_FILE:-}
GOLDEN_VOLUME_SIZE=${GOLDEN_VOLUME_SIZE:-80Gi}
STORAGE_CLASS=${STORAGE_CLASS:-}
TIMEOUT_MINUTES=${TIMEOUT_MINUTES:-120}
POLL_SECONDS=${POLL_SECONDS:-10}
KEEP=${KEEP:-}

# What the profile crc-kubevirt-v1 promises (docs/design/network.md, certificates-and-time.md).
readonly NODE_IP=192.168.126.11
readonly CRC_NAMES="api.crc.testing api-int.crc.testing foo.apps-crc.testing"
readonly DAY=86400
readonly DAY_TOLERANCE=600        # install boot: host - guest must be DAY +- this
readonly REAL_TIME_TOLERANCE=300  # after the cold restart: |host - guest| at most this
readonly CHECKEND=2160000         # 25 days, in seconds
readonly FIRST_SIGNER=kubelet-signer
readonly ISO_DISK=installiso
readonly NODE_KUBECONFIG=/etc/kubernetes/static-pod-resources/kube-apiserver-certs/secrets/node-kubeconfigs/localhost.kubeconfig
readonly SSH_TIMEOUT=300          # seconds, per command run in the guest

PULL_SECRET_NAME="$BUNDLE-pull-secret"
KEY_SECRET_NAME="$BUNDLE-ssh-key"

say() { printf '[%s] %s %s\n' "$ME" "$(date -u +%H:%M:%S)" "$*"; }
die() {
  say "error: $*" >&2
  exit 1
}

# ---------------------------------------------------------------------------------------------
# Tools and inputs

if [ -z "${KUBECTL:-}" ]; then
  if command -v kubectl >/dev/null 2>&1; then
    KUBECTL=kubectl
  elif command -v oc >/dev/null 2>&1; then
    KUBECTL=oc
  else
    die "neither kubectl nor oc is on PATH (or set KUBECTL)"
  fi
fi
command -v "$KUBECTL" >/dev/null 2>&1 || die "KUBECTL=$KUBECTL: command not found"
VIRTCTL=${VIRTCTL:-virtctl}
command -v "$VIRTCTL" >/dev/null 2>&1 ||
  die "virtctl is not on PATH (or set VIRTCTL): get it from the OpenShift console (Virtualization > Overview) or a KubeVirt release"
for tool in ssh base64 awk grep sed sort tr; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH (virtctl ssh runs the local ssh client)"
done

[ -n "$RELEASE_IMAGE" ] ||
  die "set RELEASE_IMAGE to an OpenShift release pull spec, e.g. quay.io/openshift-release-dev/ocp-release:<version>-x86_64"
[ -n "$PULL_SECRET_FILE" ] || die "set PULL_SECRET_FILE to a .dockerconfigjson file that can pull RELEASE_IMAGE"
[ -s "$PULL_SECRET_FILE" ] || die "PULL_SECRET_FILE=$PULL_SECRET_FILE is not a readable, non-empty file"
[[ $TIMEOUT_MINUTES =~ ^[1-9][0-9]*$ ]] || die "TIMEOUT_MINUTES=$TIMEOUT_MINUTES is not a positive number"
[[ $POLL_SECONDS =~ ^[1-9][0-9]*$ ]] || die "POLL_SECONDS=$POLL_SECONDS is not a positive number"

if command -v timeout >/dev/null 2>&1; then
  with_timeout() { timeout "$@"; }
else
  with_timeout() {
    shift
    "$@"
  }
fi

kc() { "$KUBECTL" --request-timeout=60s "$@"; }

# ---------------------------------------------------------------------------------------------
# Work directory and cleanup

WORK=$(mktemp -d "${TMPDIR:-/tmp}/$ME.XXXXXX")
KEY_FILE="$WORK/id_ecdsa"
: >"$WORK/vmis"    # one line per VMI seen, in order: <uid> <clock offset> <install step>
: >"$WORK/ips"     # one line per launcher IP seen: <ip> <vmi uid>
: >"$WORK/ssh.log" # stderr of every virtctl ssh
: >"$WORK/ssh.err" # stderr of the last one
SECRET_CREATED=
BUNDLE_CREATED=

cleanup() {
  local rc=$?
  set +e
  if [ -n "$BUNDLE_CREATED$SECRET_CREATED" ]; then
    if [ -n "$KEEP" ]; then
      say "KEEP is set: leaving CRCBundle $BUNDLE and Secret $NAMESPACE/$PULL_SECRET_NAME;" \
        "remove them with: $KUBECTL delete crcbundle $BUNDLE && $KUBECTL -n $NAMESPACE delete secret $PULL_SECRET_NAME"
    else
      say "deleting CRCBundle $BUNDLE (its build objects go with it) and Secret $NAMESPACE/$PULL_SECRET_NAME"
      if [ -n "$BUNDLE_CREATED" ]; then
        "$KUBECTL" delete crcbundle "$BUNDLE" --ignore-not-found --wait=true --timeout=10m >/dev/null ||
          say "warning: could not delete CRCBundle $BUNDLE; delete it by hand"
      fi
      "$KUBECTL" -n "$NAMESPACE" delete secret "$PULL_SECRET_NAME" --ignore-not-found >/dev/null ||
        say "warning: could not delete Secret $NAMESPACE/$PULL_SECRET_NAME; delete it by hand"
    fi
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# The guest, over virtctl ssh

fetch_key() {
  local b64
  [ -s "$KEY_FILE" ] && return 0
  b64=$(kc -n "$NAMESPACE" get secret "$KEY_SECRET_NAME" -o jsonpath='{.data.id_ecdsa}' 2>>"$WORK/ssh.log") || return 1
  [ -n "$b64" ] || return 1
  (
    umask 077
    printf '%s' "$b64" | base64 -d >"$KEY_FILE"
  ) || return 1
  [ -s "$KEY_FILE" ]
}

# guest COMMAND: runs one command line in the build VM as user core (with `sudo` in it for root)
# and prints its stdout; returns its exit status (255 when ssh itself failed). Each call is one
# simple command (pipes at most), with the parsing done here: no script travels to the guest,
# the same rule the operator keeps, so the line means the same to any login shell.
guest() {
  local rc=0
  if ! fetch_key; then
    echo "no SSH key: cannot read key id_ecdsa of Secret $NAMESPACE/$KEY_SECRET_NAME" | tee -a "$WORK/ssh.log" >"$WORK/ssh.err"
    return 255
  fi
  with_timeout "$SSH_TIMEOUT" "$VIRTCTL" -n "$NAMESPACE" ssh "vm/$VM" \
    --username=core \
    --identity-file="$KEY_FILE" \
    --local-ssh=true \
    --local-ssh-opts="-o StrictHostKeyChecking=no" \
    --local-ssh-opts="-o UserKnownHostsFile=/dev/null" \
    --local-ssh-opts="-o LogLevel=ERROR" \
    --local-ssh-opts="-o BatchMode=yes" \
    --local-ssh-opts="-o ConnectTimeout=20" \
    --command="$1" </dev/null 2>"$WORK/ssh.err" || rc=$?
  cat "$WORK/ssh.err" >>"$WORK/ssh.log"
  [ "$rc" -eq 0 ] || echo "(exit status $rc)" >>"$WORK/ssh.err"
  return "$rc"
}

# oc ARGS…: `sudo oc` in the guest with the node's own kubeconfig.
guest_oc() { guest "sudo oc --kubeconfig $NODE_KUBECONFIG $*"; }

# The error output of the last guest call, and of all of them so far.
ssh_err() { tail -n 3 "$WORK/ssh.err" 2>/dev/null | tr '\n' ' ' | sed 's/ *$//'; }
ssh_log_tail() { tail -n 3 "$WORK/ssh.log" 2>/dev/null | tr '\n' ' ' | sed 's/ *$//'; }

# ---------------------------------------------------------------------------------------------
# Recording the build VM's VMIs and their launcher-pod addresses

is_ip() { [[ $1 =~ ^[0-9a-fA-F:.]+$ && $1 == *[.:]* ]]; }

# record_vmi STEP: notes the current VMI of the build VM (uid, clock offset, install step when
# first seen) and every address of its launcher pod, from the VMI's `default` interface and from
# the pod itself. The guest-side masquerade addresses are the same in every pod by design
# (docs/design/network.md) and are not launcher addresses, so they are left out.
record_vmi() {
  local out uid offset phase ifips podips ip
  out=$(kc -n "$NAMESPACE" get vmi "$VM" --ignore-not-found -o jsonpath='{.metadata.uid}{"|"}{.spec.domain.clock.utc.offsetSeconds}{"|"}{.status.phase}{"|"}{range .status.interfaces[?(@.name=="default")]}{.ipAddress}{" "}{.ipAddresses[*]}{" "}{end}' 2>/dev/null) || return 0
  [ -n "$out" ] || return 0
  IFS='|' read -r uid offset phase ifips <<<"$out"
  [ -n "$uid" ] || return 0
  if ! grep -q "^$uid " "$WORK/vmis"; then
    echo "$uid ${offset:-0} ${1:-none}" >>"$WORK/vmis"
    say "VMI $VM $uid first seen in step ${1:-none}: clock offset ${offset:-0} s"
  fi
  podips=$(kc -n "$NAMESPACE" get pods -l "kubevirt.io/created-by=$uid" -o jsonpath='{.items[*].status.podIPs[*].ip}' 2>/dev/null) || podips=""
  for ip in $ifips $podips; do
    case "$ip" in
    10.0.2.* | fd10:0:2::* | fe80:* | "$NODE_IP") continue ;;
    esac
    is_ip "$ip" || continue
    if ! grep -qxF "$ip $uid" "$WORK/ips"; then
      echo "$ip $uid" >>"$WORK/ips"
      say "launcher IP $ip recorded (VMI $uid)"
    fi
  done
}

# The install-boot clock reading: host - guest, in seconds, and the VMI it was taken in.
CLOCK_DELTA=
CLOCK_VMI=

# measure_install_clock: returns 2 while the build VM's current VMI is not yet the install boot
# (the generator boot may still be shutting down when the step changes) or not yet Running, 1 when
# the install boot runs but SSH into it fails, 0 once the clock is read.
measure_install_clock() {
  local out uid offset phase h0 g h1
  out=$(kc -n "$NAMESPACE" get vmi "$VM" --ignore-not-found -o jsonpath='{.metadata.uid}{"|"}{.spec.domain.clock.utc.offsetSeconds}{"|"}{.status.phase}' 2>/dev/null) || return 2
  IFS='|' read -r uid offset phase <<<"$out"
  [ -n "$uid" ] && [ "$phase" = Running ] || return 2
  grep -q "^$uid [^ ]* Install$" "$WORK/vmis" || return 2
  h0=$(date -u +%s)
  g=$(guest 'date -u +%s') || return 1
  h1=$(date -u +%s)
  g=${g//[^0-9]/}
  [ -n "$g" ] || return 1
  CLOCK_DELTA=$(((h0 + h1) / 2 - g))
  CLOCK_VMI=$uid
  say "install boot (VMI $uid, offset ${offset:-0} s): guest clock is $CLOCK_DELTA s behind the host (expected $DAY ± $DAY_TOLERANCE)"
}

# ---------------------------------------------------------------------------------------------
# 1. Inputs and the bundle

server=$(kc config view --minify -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null || echo unknown)
say "cluster $server; namespace $NAMESPACE; bundle $BUNDLE"
say "release $RELEASE_IMAGE"

kc get crd crcbundles.guestcluster.opdev.io >/dev/null 2>&1 ||
  die "the CRCBundle CRD is not installed (kubectl apply -f crds/), or the cluster is unreachable"
kc get crd virtualmachines.kubevirt.io >/dev/null 2>&1 ||
  die "KubeVirt is not installed: this proof needs OpenShift Virtualization"
kc get crd datavolumes.cdi.kubevirt.io >/dev/null 2>&1 ||
  die "CDI is not installed: this proof needs OpenShift Virtualization"
kc get namespace "$NAMESPACE" >/dev/null 2>&1 ||
  die "namespace $NAMESPACE does not exist: set NAMESPACE to the operator's namespace"
existing=$(kc get crcbundle "$BUNDLE" --ignore-not-found -o name) ||
  die "cannot read CRCBundles"
[ -z "$existing" ] ||
  die "CRCBundle $BUNDLE already exists (left by a KEEP run?): delete it ($KUBECTL delete crcbundle $BUNDLE) or set BUNDLE"

kc -n "$NAMESPACE" create secret generic "$PULL_SECRET_NAME" \
  --type=kubernetes.io/dockerconfigjson \
  --from-file=.dockerconfigjson="$PULL_SECRET_FILE" \
  --dry-run=client -o yaml |
  kc label --local -f - "guestcluster.opdev.io/build-input=$BUNDLE" -o yaml |
  kc apply --server-side --force-conflicts --field-manager="$ME" -f - >/dev/null
SECRET_CREATED=1
say "created Secret $NAMESPACE/$PULL_SECRET_NAME from $PULL_SECRET_FILE"

{
  cat <<EOF
apiVersion: guestcluster.opdev.io/v1alpha1
kind: CRCBundle
metadata:
  name: $BUNDLE
  labels:
    app.kubernetes.io/created-by: $ME
spec:
  goldenVolumeSize: "$GOLDEN_VOLUME_SIZE"
EOF
  if [ -n "$STORAGE_CLASS" ]; then
    printf '  storageClassName: "%s"\n' "$STORAGE_CLASS"
  fi
  cat <<EOF
  build:
    releaseImage: "$RELEASE_IMAGE"
    pullSecretRef:
      name: $PULL_SECRET_NAME
EOF
} | kc create -f - >/dev/null
BUNDLE_CREATED=1
say "created CRCBundle $BUNDLE (goldenVolumeSize $GOLDEN_VOLUME_SIZE, storage class ${STORAGE_CLASS:-cluster default})"

# ---------------------------------------------------------------------------------------------
# 2. Follow the build to Installed=True, recording VMIs and reading the install boot's clock

say "waiting up to $TIMEOUT_MINUTES min for Installed=True (polling every $POLL_SECONDS s)"
start=$SECONDS
deadline=$((SECONDS + TIMEOUT_MINUTES * 60))
attempt="" stage="" step="" installed="" last="" warned_no_status="" ssh_waiting=""
VM=""
while :; do
  if state=$(kc get crcbundle "$BUNDLE" -o jsonpath='{.status.build.attempt}{"|"}{.status.build.stage}{"|"}{.status.build.installStep}{"|"}{.status.conditions[?(@.type=="Installed")].status}' 2>/dev/null); then
    IFS='|' read -r attempt stage step installed <<<"$state"
  fi

  if [ -n "$attempt" ] && [ "$attempt|$stage|$step" != "$last" ]; then
    last="$attempt|$stage|$step"
    say "stage ${stage:-none}${step:+, step $step} (attempt $attempt)"
  fi

  if [ "$stage" = Failed ]; then
    ready=$(kc get crcbundle "$BUNDLE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null || true)
    say "the build failed: ${ready:-no Ready message}"
    printf 'FAIL: build reached Installed=True: stage Failed: %s\n' "${ready:-no Ready message}"
    exit 1
  fi

  if [ -z "$stage" ] && [ -z "$warned_no_status" ] && ((SECONDS - start > 300)); then
    warned_no_status=1
    say "warning: no build status after 5 min: is the operator running with --namespace $NAMESPACE?"
  fi

  if [ -n "$attempt" ]; then
    VM="$BUNDLE-b$attempt-build"
    record_vmi "$step"
    if [ "$stage" = Install ] && [ "$step" = Install ] && [ -z "$CLOCK_DELTA" ]; then
      measured=0
      measure_install_clock || measured=$?
      if [ "$measured" = 1 ] && [ -z "$ssh_waiting" ]; then
        ssh_waiting=1
        say "waiting for SSH into the install boot"
      fi
    fi
  fi

  [ "$installed" = True ] && break

  if ((SECONDS >= deadline)); then
    ready=$(kc get crcbundle "$BUNDLE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null || true)
    say "timed out after $TIMEOUT_MINUTES min in stage ${stage:-none}${step:+, step $step}: ${ready:-no Ready message}"
    printf 'FAIL: build reached Installed=True: timed out in stage %s\n' "${stage:-none}${step:+/$step}"
    exit 1
  fi
  sleep "$POLL_SECONDS"
done

ready=$(kc get crcbundle "$BUNDLE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null || true)
say "Installed=True after $(((SECONDS - start) / 60)) min; stage $stage: ${ready:-no Ready message}"
record_vmi "$step"
ip_list=$(awk '{print $1}' "$WORK/ips" | sort -u)
ip_words=$(printf '%s\n' "$ip_list" | paste -sd' ' -)
say "recorded $(wc -l <"$WORK/vmis" | tr -d ' ') VMIs and $(printf '%s' "$ip_list" | grep -c . || true) launcher IPs: $ip_words"

# ---------------------------------------------------------------------------------------------
# 3. The checks. Each sets DETAIL and returns non-zero on failure.

FAILED=0
DETAIL=""

run_check() {
  local name=$1
  shift
  DETAIL=""
  if "$@"; then
    printf 'PASS: %s\n' "$name"
  else
    printf 'FAIL: %s: %s\n' "$name" "${DETAIL:-no detail}"
    FAILED=$((FAILED + 1))
  fi
}

# 1. Names and node IP.
check_names() {
  local name got summary="" bad=""
  for name in $CRC_NAMES; do
    # getent exits 2 for a name it cannot resolve: that is a finding, not a failed call.
    got=$(guest "getent hosts $name") || [ $? -eq 2 ] || {
      DETAIL="could not run getent in the guest: $(ssh_err)"
      return 1
    }
    got=$(printf '%s\n' "$got" | awk 'NF { print $1 }' | sort -u | paste -sd, -)
    summary="$summary $name=$got"
    [ "$got" = "$NODE_IP" ] || bad="$bad $name=${got:-<nothing>}"
  done
  got=$(guest_oc "get nodes -o 'jsonpath={.items[*].status.addresses[?(@.type==\"InternalIP\")].address}'") || {
    DETAIL="could not run oc in the guest: $(ssh_err)"
    return 1
  }
  say "check 1:$summary node-internal-ip=$got"
  [ "$got" = "$NODE_IP" ] || bad="$bad node-internal-ip=${got:-<nothing>}"
  [ -z "$bad" ] || {
    DETAIL="expected $NODE_IP, got${bad}"
    return 1
  }
}

# 2. The generator and install boots ran a day behind.
check_day_behind() {
  local seen_before offsets
  if [ -z "$CLOCK_DELTA" ]; then
    DETAIL="no guest clock reading during the install boot (last ssh errors: $(ssh_log_tail))"
    return 1
  fi
  # The VMIs up to and including the measured one are the generator and install boots.
  seen_before=$(awk -v u="$CLOCK_VMI" '$1 == u { exit } { n++ } END { print n + 0 }' "$WORK/vmis")
  offsets=$(awk -v u="$CLOCK_VMI" '{ print $1 "=" $2 } $1 == u { exit }' "$WORK/vmis" | paste -sd' ' -)
  say "check 2: install boot host - guest = $CLOCK_DELTA s; offsets of the boots before the restart:" "$offsets"
  if ((CLOCK_DELTA < DAY - DAY_TOLERANCE || CLOCK_DELTA > DAY + DAY_TOLERANCE)); then
    DETAIL="host - guest was $CLOCK_DELTA s during the install boot, expected $DAY ± $DAY_TOLERANCE"
    return 1
  fi
  if [ "$seen_before" -lt 1 ]; then
    DETAIL="the generator boot was never seen (only the install boot $CLOCK_VMI)"
    return 1
  fi
  if awk -v u="$CLOCK_VMI" -v d="-$DAY" '$2 != d { bad = 1 } $1 == u { exit } END { exit bad }' "$WORK/vmis"; then
    return 0
  fi
  DETAIL="a generator or install boot VMI did not have clock offset -$DAY: $offsets"
  return 1
}

# 3. The cold restart boots the root disk alone, on real time.
check_cold_restart() {
  local vm vm_disks vm_volumes vm_offset vmi vmi_uid vmi_phase vmi_offset vmi_disks vmi_volumes vmi_cdrom
  local h0 out g h1 delta live bad=""
  vm=$(kc -n "$NAMESPACE" get vm "$VM" -o jsonpath='{.spec.template.spec.domain.devices.disks[*].name}{"|"}{.spec.template.spec.volumes[*].name}{"|"}{.spec.template.spec.domain.clock.utc.offsetSeconds}') || {
    DETAIL="cannot read VirtualMachine $NAMESPACE/$VM"
    return 1
  }
  IFS='|' read -r vm_disks vm_volumes vm_offset <<<"$vm"
  vmi=$(kc -n "$NAMESPACE" get vmi "$VM" -o jsonpath='{.metadata.uid}{"|"}{.status.phase}{"|"}{.spec.domain.clock.utc.offsetSeconds}{"|"}{.spec.domain.devices.disks[*].name}{"|"}{.spec.volumes[*].name}{"|"}{.spec.domain.devices.disks[*].cdrom}') || {
    DETAIL="cannot read VirtualMachineInstance $NAMESPACE/$VM"
    return 1
  }
  IFS='|' read -r vmi_uid vmi_phase vmi_offset vmi_disks vmi_volumes vmi_cdrom <<<"$vmi"
  h0=$(date -u +%s)
  if out=$(guest 'date -u +%s'); then
    h1=$(date -u +%s)
    g=$(printf '%s' "$out" | tr -cd '0-9')
  else
    h1=$h0 g=""
    bad="$bad; ssh into the restarted guest failed: $(ssh_err)"
  fi
  if out=$(guest 'cat /proc/cmdline'); then
    case " $out " in *" coreos.liveiso="*) live=yes ;; *) live=no ;; esac
  else
    live=""
  fi
  if [ -n "$g" ]; then delta=$(((h0 + h1) / 2 - g)); else delta=unknown; fi
  say "check 3: VM disks [$vm_disks] volumes [$vm_volumes]; VMI $vmi_uid $vmi_phase, disks [$vmi_disks], offset ${vmi_offset:-0} s, host - guest = $delta s, live system: ${live:-unknown}"

  case " $vm_disks $vm_volumes " in *" $ISO_DISK "*) bad="$bad; the VM still has the $ISO_DISK disk or volume" ;; esac
  case " $vmi_disks $vmi_volumes " in *" $ISO_DISK "*) bad="$bad; the VMI still has the $ISO_DISK disk or volume" ;; esac
  [ -z "$vmi_cdrom" ] || bad="$bad; the VMI has a cdrom"
  [ "${vm_offset:-0}" = 0 ] || bad="$bad; the VM's clock offset is $vm_offset s"
  [ "${vmi_offset:-0}" = 0 ] || bad="$bad; the VMI's clock offset is $vmi_offset s"
  [ "$vmi_phase" = Running ] || bad="$bad; the VMI is ${vmi_phase:-missing}, not Running"
  [ -n "$CLOCK_VMI" ] && [ "$vmi_uid" = "$CLOCK_VMI" ] && bad="$bad; the VMI is still the install boot's ($vmi_uid)"
  [ "$live" = no ] || bad="$bad; the guest is not running the installed system (live ISO: ${live:-unknown})"
  if [ "$delta" = unknown ]; then
    bad="$bad; no guest time"
  elif ((delta > REAL_TIME_TOLERANCE || delta < -REAL_TIME_TOLERANCE)); then
    bad="$bad; host - guest is $delta s, expected within ± $REAL_TIME_TOLERANCE"
  fi
  [ -z "$bad" ] || {
    DETAIL=${bad#; }
    return 1
  }
}

# 4. The kubelet certificates, judged by guest time.
check_certificates() {
  local f p rc out c i e bad=""
  for f in kubelet-client-current.pem kubelet-server-current.pem; do
    p=/var/lib/kubelet/pki/$f
    # openssl's -checkend exits 1 for a certificate that expires within the time.
    rc=0
    guest "sudo openssl x509 -checkend $CHECKEND -noout -in $p" >/dev/null || rc=$?
    case $rc in
    0) c=passes ;;
    1) c=fails ;;
    *)
      DETAIL="could not run openssl in the guest: $(ssh_err)"
      return 1
      ;;
    esac
    out=$(guest "sudo openssl x509 -noout -issuer -enddate -in $p") || {
      DETAIL="could not read $p in the guest: $(ssh_err)"
      return 1
    }
    i=$(printf '%s\n' "$out" | grep -m1 '^issuer=' || true)
    e=$(printf '%s\n' "$out" | sed -n 's/^notAfter=//p' | head -n 1)
    say "check 4: $f: -checkend $CHECKEND $c in the guest, not after $e, $i"
    [ "$c" = passes ] || bad="$bad; $f expires within 25 days by guest time (not after $e)"
    case "$i" in *"$FIRST_SIGNER"*) bad="$bad; $f was issued by the installer's $FIRST_SIGNER ($i)" ;; esac
  done
  [ -z "$bad" ] || {
    DETAIL=${bad#; }
    return 1
  }
}

# 5. No launcher-pod IP in the installed cluster.

# The objects read through the guest API, as "label|oc arguments".
OBJECTS=(
  "Infrastructure cluster|get infrastructure.config.openshift.io cluster -o yaml"
  "Network cluster|get network.config.openshift.io cluster -o yaml"
  "etcd Endpoints|-n openshift-etcd get endpoints -o yaml"
  "etcd EndpointSlices|-n openshift-etcd get endpointslices.discovery.k8s.io -o yaml"
  "Node|get nodes -o yaml"
)

check_no_launcher_ip() {
  local out files rc entry label args found bad="" searched=""
  if [ -z "$ip_list" ]; then
    DETAIL="no launcher-pod IP was recorded, so there is nothing to look for"
    return 1
  fi
  printf '%s\n' "$ip_list" >"$WORK/ip-patterns"

  # The IPs passed is_ip: no spaces, quotes or globs, so they can be written into the line.
  rc=0
  out=$(guest "sudo grep -rlswF $(printf -- '-e %s ' $ip_words)/etc") || rc=$?
  files=$(printf '%s\n' "$out" | paste -sd' ' - || true)
  case "$rc" in
  0) bad="$bad; under /etc: $files" ;;
  1) searched="/etc" ;;
  *) bad="$bad; grep over /etc failed (exit $rc): $(ssh_err)" ;;
  esac

  for entry in "${OBJECTS[@]}"; do
    label=${entry%%|*}
    args=${entry#*|}
    if ! guest_oc "$args" >"$WORK/object.yaml"; then
      bad="$bad; could not read $label: $(ssh_err)"
      continue
    fi
    if [ ! -s "$WORK/object.yaml" ]; then
      bad="$bad; $label: empty output"
      continue
    fi
    found=$(grep -owF -f "$WORK/ip-patterns" "$WORK/object.yaml" | sort -u | paste -sd, - || true)
    if [ -n "$found" ]; then
      bad="$bad; in $label: $found"
    else
      searched="$searched, $label"
    fi
  done
  say "check 5: looked for $ip_words in: ${searched:-nothing}"
  [ -z "$bad" ] || {
    DETAIL=${bad#; }
    return 1
  }
}

run_check "1 guest names and node InternalIP are $NODE_IP" check_names
run_check "2 generator and install boots ran a day behind" check_day_behind
run_check "3 cold restart booted the root disk alone on real time" check_cold_restart
run_check "4 kubelet certificates valid 25 days by guest time, not from $FIRST_SIGNER" check_certificates
run_check "5 no launcher-pod IP in the installed cluster" check_no_launcher_ip

if [ "$FAILED" -eq 0 ]; then
  say "5 of 5 checks passed"
  exit 0
fi
say "$FAILED of 5 checks failed"
exit 1
