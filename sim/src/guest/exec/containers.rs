//! Container programs, `podman` and `crictl`, over an installed node's image cache, podman's
//! containers, the kubelet's pod sandboxes and etcd's data directory.
//!
//! They exist for what sealing does to an installed node (SNC's image-cache preparation and etcd
//! scrub), modelled closely enough that a correct seal works and a wrong one fails:
//! - `nodeip-configuration.service` runs the `baremetal-runtimecfg` image before the kubelet, and
//!   no pod uses that image. `crictl rmi --prune` drops every image no container uses, so the
//!   image survives only pinned by a podman container. A sealed disk (pull secret `{}`) cannot
//!   pull it back, and its kubelet then does not start ([`node_ip_pull`]).
//! - What is missing from the cache is pulled back where a real node would pull it, with the
//!   kubelet's credentials (`/var/lib/kubelet/config.json`, non-empty `auths`):
//!   nodeip-configuration's `podman run` (podman's default `--pull=missing`) at its start, and
//!   CRI-O for every pod the kubelet starts (the kubelet's `IfNotPresent` pulls through CRI-O's
//!   `PullImage`). So an image store CRI-O wiped before the seal refills, as on a real node; the
//!   simulated `podman create|run` never pulls (a step that relies on it fails loudly).
//! - Pods keep running when the kubelet stops (conmon holds them) until `crictl rmp`; while they
//!   run, etcd's static pod holds 127.0.0.1:2379 and a throwaway etcd cannot start.
//! - A throwaway etcd (`podman run -d --rm --name N --network host --privileged --entrypoint etcd
//!   -v /var/lib/etcd:/store IMAGE --data-dir /store`) serves the disk's
//!   [`GuestState::etcd_keys`] to `podman exec N etcdctl get|del`.
//!
//! Payload images are referenced by digest, like a release's ([`payload_image`]). Anything else
//! fails loudly (podman 125, crictl 1): a guess that succeeded would hide a bug of the product.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use super::{Ctx, Machine, Run};
use crate::guest::state::{Container, File, GuestState, Unit, paths};
use crate::guest::time;

pub const NODE_IP_UNIT: &str = "nodeip-configuration.service";
pub const NODE_IP_UNIT_FILE: &str = "/etc/systemd/system/nodeip-configuration.service";
/// etcd's static pod, in JSON as OpenShift's static pod installer writes it.
pub const ETCD_MANIFEST: &str = "/etc/kubernetes/manifests/etcd-pod.yaml";
/// Where a release's payload images live.
pub const PAYLOAD_REPOSITORY: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev";
const KUBELET: &str = "kubelet.service";
/// In [`PODS`]: the release image itself (the cluster-version operator runs it).
const RELEASE: &str = "release";

/// The pods an installed node runs (namespace, name, payload components of their images).
const PODS: &[(&str, &str, &[&str])] = &[
    (
        "openshift-etcd",
        "etcd-crc",
        &["etcd", "cluster-etcd-operator"],
    ),
    (
        "openshift-kube-apiserver",
        "kube-apiserver-crc",
        &["hyperkube", "cluster-kube-apiserver-operator"],
    ),
    (
        "openshift-kube-controller-manager",
        "kube-controller-manager-crc",
        &["hyperkube", "cluster-policy-controller"],
    ),
    (
        "openshift-kube-scheduler",
        "openshift-kube-scheduler-crc",
        &["hyperkube"],
    ),
    (
        "openshift-cluster-version",
        "cluster-version-operator-7d8f6c5b9-x2kqp",
        &[RELEASE],
    ),
    (
        "openshift-network-operator",
        "network-operator-6c9d7b8f5-hx8vn",
        &["cluster-network-operator"],
    ),
    (
        "openshift-network-diagnostics",
        "network-check-target-5xk9d",
        &["network-tools"],
    ),
    (
        "openshift-ovn-kubernetes",
        "ovnkube-node-7lq2w",
        &["ovn-kubernetes", "kube-rbac-proxy"],
    ),
    (
        "openshift-dns",
        "dns-default-8s4lp",
        &["coredns", "kube-rbac-proxy"],
    ),
    (
        "openshift-ingress",
        "router-default-5b8c6d7f9-qwz4t",
        &["haproxy-router"],
    ),
    (
        "openshift-marketplace",
        "redhat-operators-m7b2x",
        &["operator-registry"],
    ),
];
/// Pods that ran to completion during the install: records in etcd, no sandbox.
const FINISHED_PODS: &[&str] = &[
    "openshift-etcd/installer-3-crc",
    "openshift-kube-apiserver/installer-7-crc",
    "openshift-kube-apiserver/revision-pruner-7-crc",
];
/// Images only the install ran: nothing uses them afterwards, a prune drops them.
const INSTALL_ONLY: &[&str] = &["cluster-bootstrap", "installer", "installer-artifacts"];
const LEASES: &[&str] = &[
    "kube-node-lease/crc",
    "kube-system/kube-controller-manager",
    "openshift-kube-controller-manager/cluster-policy-controller-lock",
    "openshift-kube-scheduler/kube-scheduler",
    "openshift-cluster-version/version",
    "openshift-network-operator/network-operator-lock",
];
/// Records a scrub must keep (a PodDisruptionBudget shares the `/kubernetes.io/pod` prefix).
const OTHER_KEYS: &[&str] = &[
    "/kubernetes.io/namespaces/default",
    "/kubernetes.io/namespaces/kube-node-lease",
    "/kubernetes.io/namespaces/kube-system",
    "/kubernetes.io/namespaces/openshift-config",
    "/kubernetes.io/minions/crc",
    "/kubernetes.io/secrets/openshift-config/pull-secret",
    "/kubernetes.io/configmaps/openshift-config/admin-kubeconfig-client-ca",
    "/kubernetes.io/deployments/openshift-ingress/router-default",
    "/kubernetes.io/poddisruptionbudgets/openshift-etcd/etcd-guard-pdb",
    "/kubernetes.io/config.openshift.io/clusterversions/version",
];

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A payload image of release `version`:
/// `quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:<sha256 of "<component>:<version>">`,
/// e.g. component `baremetal-runtimecfg` or `etcd`.
pub fn payload_image(component: &str, version: &str) -> String {
    format!(
        "{PAYLOAD_REPOSITORY}@sha256:{}",
        sha256_hex(&format!("{component}:{version}"))
    )
}

/// A container's ID, stable for its name.
fn container_id(name: &str) -> String {
    sha256_hex(&format!("container:{name}"))
}

/// The pod sandboxes of an installed node: ID and images.
fn pods(state: &GuestState) -> Vec<(String, Vec<String>)> {
    let (Some(install), Some(version)) = (&state.install, &state.openshift_version) else {
        return Vec::new();
    };
    PODS.iter()
        .map(|(namespace, name, components)| {
            let images = components
                .iter()
                .map(|&c| match c {
                    RELEASE => install.release_image.clone(),
                    _ => payload_image(c, version),
                })
                .collect();
            (sha256_hex(&format!("sandbox:{namespace}/{name}")), images)
        })
        .collect()
}

/// What an install of `release` (`version`) leaves for the seal to clean: the node IP unit
/// naming the runtimecfg image, etcd's static pod, an image cache of what runs plus the install's
/// leftovers, and etcd's records.
pub fn install(state: &mut GuestState, version: &str, release: &str) {
    let runtimecfg = payload_image("baremetal-runtimecfg", version);
    let etcd = payload_image("etcd", version);
    let operator = payload_image("cluster-etcd-operator", version);
    state.files.insert(
        NODE_IP_UNIT_FILE.to_owned(),
        File::root(node_ip_unit(&runtimecfg), 0o644),
    );
    state.set_unit(NODE_IP_UNIT, Unit::enabled_running());
    state.files.insert(
        ETCD_MANIFEST.to_owned(),
        File::root(etcd_pod(&etcd, &operator), 0o644),
    );

    let mut cache = vec![release.to_owned(), runtimecfg, etcd];
    for (_, _, components) in PODS {
        cache.extend(
            components
                .iter()
                .filter(|&&c| c != RELEASE)
                .map(|c| payload_image(c, version)),
        );
    }
    cache.extend(INSTALL_ONLY.iter().map(|c| payload_image(c, version)));
    let mut seen = BTreeSet::new();
    cache.retain(|image| seen.insert(image.clone()));
    state.image_cache = cache;

    let mut keys: BTreeSet<String> = OTHER_KEYS.iter().map(|k| k.to_string()).collect();
    for (namespace, name, _) in PODS {
        keys.insert(format!("/kubernetes.io/pods/{namespace}/{name}"));
        keys.insert(format!("/kubernetes.io/namespaces/{namespace}"));
    }
    keys.extend(
        FINISHED_PODS
            .iter()
            .map(|p| format!("/kubernetes.io/pods/{p}")),
    );
    keys.extend(LEASES.iter().map(|l| format!("/kubernetes.io/leases/{l}")));
    // One write per key so far.
    state.etcd_history.revision = keys.len() as u64;
    state.etcd_keys = keys;
}

/// The unit as the MCO renders it for a platform-`none` single node (machine-config-operator
/// 7ff337a, `templates/common/_base/units/nodeip-configuration.service.yaml`): `ExecStart` is a
/// `bash -c` loop over `podman run` continued over several lines, the image alone on one of them.
fn node_ip_unit(image: &str) -> String {
    format!(
        "[Unit]\nDescription=Writes IP address configuration so that kubelet and crio services select a valid node IP\nWants=NetworkManager-wait-online.service\nAfter=NetworkManager-wait-online.service firstboot-osupdate.target\nBefore=kubelet-dependencies.target ovs-configuration.service\n\n[Service]\n# Need oneshot to delay kubelet\nType=oneshot\nSyslogIdentifier=nodeip-configuration\nExecStart=/bin/bash -c \" \\\n  until \\\n  /usr/bin/podman run --rm \\\n  --authfile {pull_secret} \\\n  --env 'ENABLE_NODEIP_DEBUG=true' \\\n  --net=host \\\n  --security-opt label=disable \\\n  --volume /etc/systemd/system:/etc/systemd/system \\\n  --volume /run/nodeip-configuration:/run/nodeip-configuration \\\n  {image} \\\n  node-ip \\\n  set \\\n  --retry-on-failure \\\n  --network-type OVNKubernetes \\\n  ${{NODEIP_HINT:-${{KUBELET_NODEIP_HINT:-}}}}; \\\n  do \\\n  sleep 5; \\\n  done\"\nExecStart=/bin/systemctl daemon-reload\nExecStartPre=/bin/mkdir -p /run/nodeip-configuration\nStandardOutput=journal+console\nStandardError=journal+console\n\nEnvironmentFile=-/etc/default/nodeip-configuration\n\n[Install]\nRequiredBy=kubelet-dependencies.target\n",
        pull_secret = paths::PULL_SECRET
    )
}

/// etcd's static pod: the `etcd` container is one of several, some of another image.
fn etcd_pod(etcd: &str, operator: &str) -> String {
    let container = |name: &str, image: &str| serde_json::json!({"name": name, "image": image});
    serde_json::json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "etcd",
            "namespace": "openshift-etcd",
            "labels": {"app": "etcd", "etcd": "true", "k8s-app": "etcd", "revision": "3"}
        },
        "spec": {
            "initContainers": [
                container("setup", etcd),
                container("etcd-ensure-env-vars", operator),
                container("etcd-resources-copy", operator),
            ],
            "containers": [
                container("etcdctl", etcd),
                container("etcd", etcd),
                container("etcd-metrics", etcd),
                container("etcd-readyz", operator),
            ],
            "hostNetwork": true,
            "priorityClassName": "system-node-critical",
            "volumes": [{"name": "data-dir", "hostPath": {"path": "/var/lib/etcd"}}]
        },
        "status": {}
    })
    .to_string()
}

fn has_pull_credentials(state: &GuestState) -> bool {
    state
        .pull_secret()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(bytes).ok())
        .and_then(|secret| Some(!secret.get("auths")?.as_object()?.is_empty()))
        .unwrap_or(false)
}

/// nodeip-configuration, which the kubelet waits for: its image must be cached, or pullable,
/// which needs credentials (a sealed disk's pull secret is `{}`); a pullable one is pulled into
/// the cache. `Err` is the image it lacks.
pub fn node_ip_pull(state: &mut GuestState) -> Result<(), String> {
    let image = node_ip_image(state);
    match image {
        Some(image) if !state.image_cache.contains(&image) => {
            if !has_pull_credentials(state) {
                return Err(image);
            }
            state.image_cache.push(image);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The image nodeip-configuration runs, if the node has the unit.
fn node_ip_image(state: &GuestState) -> Option<String> {
    let unit = String::from_utf8_lossy(state.file(NODE_IP_UNIT_FILE)?);
    unit.split(|c: char| c.is_whitespace() || c == '"')
        .find(|word| word.contains("@sha256:"))
        .map(str::to_owned)
}

/// Records nodeip-configuration failing for want of `image` (unit failed, journal) and returns
/// why, for `systemctl`.
pub fn node_ip_failed(state: &mut GuestState, now: i64, image: &str) -> String {
    let pull = format!(
        "Error: initializing source docker://{image}: unauthorized: access to the requested resource is not authorized"
    );
    let host = state.hostname.clone();
    let stamp = time::journal_date(now);
    let journal = state.journal.entry(NODE_IP_UNIT.to_owned()).or_default();
    journal.push(format!("{stamp} {host} bash[1893]: {pull}"));
    journal.push(format!(
        "{stamp} {host} systemd[1]: {NODE_IP_UNIT}: Failed with result 'exit-code'."
    ));
    let unit = state.units.entry(NODE_IP_UNIT.to_owned()).or_default();
    unit.active = false;
    unit.failed = true;
    format!(
        "{NODE_IP_UNIT} failed: image {image} is not in the image cache and {} holds no credentials to pull it ({pull})",
        paths::PULL_SECRET
    )
}

/// A boot: podman's containers are stopped (`--rm` ones removed); the kubelet, if it starts,
/// waits for nodeip-configuration and then runs the node's pods.
pub fn boot(machine: &mut Machine) {
    let state = &mut machine.state;
    state
        .containers
        .retain(|_, c| !(c.running && c.remove_on_stop));
    for container in state.containers.values_mut() {
        container.running = false;
    }
    if machine.unit_active(KUBELET)
        && let Err(image) = node_ip_pull(&mut machine.state)
    {
        let now = machine.guest_time(time::host_now()).0;
        node_ip_failed(&mut machine.state, now, &image);
        // A failed dependency leaves the kubelet inactive, not failed.
        if let Some(kubelet) = machine.state.units.get_mut(KUBELET) {
            kubelet.active = false;
        }
    }
    kubelet_started(machine);
}

/// The kubelet runs the pods of an installed node; they then outlive it. CRI-O pulls the
/// images of theirs that are missing when the kubelet has credentials.
pub fn kubelet_started(machine: &mut Machine) {
    let pods = pods(&machine.state);
    if !machine.unit_active(KUBELET) || pods.is_empty() {
        return;
    }
    machine.runtime.pods_running = true;
    if has_pull_credentials(&machine.state) {
        let cache = &mut machine.state.image_cache;
        for image in pods.into_iter().flat_map(|(_, images)| images) {
            if !cache.contains(&image) {
                cache.push(image);
            }
        }
    }
}

fn podman_fail(message: impl AsRef<str>) -> Run {
    Run::fail(125, format!("Error: {}", message.as_ref()))
}

fn no_such_container(name: &str) -> String {
    format!("no container with name or ID \"{name}\" found: no such container")
}

/// Options by name; a switch's value is empty.
type Options<'a> = Vec<(&'a str, &'a str)>;

/// podman's options before the first operand (later words go to the container): `--opt VALUE`
/// or `--opt=VALUE` for those in `valued`, bare `switches`; any other option is an error.
fn options<'a>(
    args: &'a [String],
    valued: &[&str],
    switches: &[&str],
) -> Result<(Options<'a>, &'a [String]), Run> {
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i).filter(|a| a.starts_with('-')) {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (arg.as_str(), None),
        };
        if valued.contains(&name) {
            let value = match inline {
                Some(value) => value,
                None => {
                    i += 1;
                    match args.get(i) {
                        Some(value) => value.as_str(),
                        None => return Err(podman_fail(format!("flag needs an argument: {name}"))),
                    }
                }
            };
            found.push((name, value));
        } else if switches.contains(&name) && inline.is_none() {
            found.push((name, ""));
        } else {
            return Err(podman_fail(format!("unknown flag: {arg} (not simulated)")));
        }
        i += 1;
    }
    Ok((found, &args[i..]))
}

fn value<'a>(options: &[(&str, &'a str)], names: &[&str]) -> Option<&'a str> {
    options
        .iter()
        .rev()
        .find(|(n, _)| names.contains(n))
        .map(|(_, v)| *v)
}

fn has(options: &[(&str, &str)], names: &[&str]) -> bool {
    options.iter().any(|(n, _)| names.contains(n))
}

/// `sudo podman create|run|exec|stop|rm|ps|image exists …`.
pub fn podman(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    if !ctx.root {
        return podman_fail(
            "the simulated guest models root's container storage only: run podman with sudo",
        );
    }
    let Some((command, rest)) = args.split_first() else {
        return podman_fail("missing command 'podman COMMAND'");
    };
    match command.as_str() {
        "create" => create(ctx, rest),
        "run" => run(ctx, rest),
        "exec" => exec(ctx, rest),
        "stop" => stop(ctx, rest),
        "rm" => rm(ctx, rest),
        "ps" => ps(ctx, rest),
        "image" if rest.len() == 2 && rest[0] == "exists" => {
            let cached = ctx.state().image_cache.contains(&rest[1]);
            Run::ok().with_code(if cached { 0 } else { 1 })
        }
        _ => podman_fail(format!("podman {} is not simulated", args.join(" "))),
    }
}

/// Why a new container `name` of `image` cannot be made, if it cannot.
fn cannot_make(ctx: &Ctx<'_>, name: &str, image: &str, authfile: Option<&str>) -> Option<Run> {
    if ctx.state().containers.contains_key(name) {
        return Some(podman_fail(format!(
            "creating container storage: the container name \"{name}\" is already in use by {}. You have to remove that container to be able to reuse that name: that name is already in use",
            container_id(name)
        )));
    }
    if let Some(path) = authfile.filter(|p| !ctx.state().files.contains_key(*p)) {
        return Some(podman_fail(format!(
            "credential file is not accessible: stat {path}: no such file or directory"
        )));
    }
    if !ctx.state().image_cache.iter().any(|i| i == image) {
        return Some(podman_fail(format!(
            "{image}: image not known (the simulated guest pulls nothing; a real podman would try, and fail with a sealed disk's pull secret {{}})"
        )));
    }
    None
}

/// `podman create [--authfile F] --name N IMAGE [ARG…]`: a stopped container that pins IMAGE.
fn create(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let (opts, operands) = match options(args, &["--authfile", "--name"], &[]) {
        Ok(parsed) => parsed,
        Err(run) => return run,
    };
    let Some(image) = operands.first() else {
        return podman_fail("requires at least 1 arg(s), only received 0");
    };
    let Some(name) = value(&opts, &["--name"]) else {
        return podman_fail("the simulated podman create needs --name");
    };
    if let Some(refused) = cannot_make(ctx, name, image, value(&opts, &["--authfile"])) {
        return refused;
    }
    ctx.state_mut().containers.insert(
        name.to_owned(),
        Container {
            image: image.clone(),
            running: false,
            remove_on_stop: false,
        },
    );
    Run::out(format!("{}\n", container_id(name)))
}

/// `podman run -d [--rm] --name N --network host --privileged --entrypoint etcd
/// -v /var/lib/etcd:DIR IMAGE --data-dir DIR`: the only container the simulation runs.
/// A real `podman run -d` returns 0 and its etcd exits at once when it cannot start; the
/// simulation fails the `run` instead (exit 1, etcd's error), naming the cause.
fn run(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let valued = [
        "--name",
        "--network",
        "--net",
        "--entrypoint",
        "-v",
        "--volume",
        "--authfile",
    ];
    let switches = ["-d", "--detach", "--rm", "--privileged"];
    let (opts, operands) = match options(args, &valued, &switches) {
        Ok(parsed) => parsed,
        Err(run) => return run,
    };
    let Some((image, command)) = operands.split_first() else {
        return podman_fail("requires at least 1 arg(s), only received 0");
    };
    let Some(name) = value(&opts, &["--name"]) else {
        return podman_fail("the simulated podman run needs --name");
    };
    if !has(&opts, &["-d", "--detach"]) {
        return podman_fail("the simulated podman runs containers detached (-d) only");
    }
    if value(&opts, &["--entrypoint"]) != Some("etcd") {
        return podman_fail("the simulated podman runs etcd only (--entrypoint etcd)");
    }
    if value(&opts, &["--network", "--net"]) != Some("host") {
        return podman_fail("the simulated podman runs etcd on the host network only");
    }
    let data_dir = match command {
        [flag, dir] if flag == "--data-dir" => dir.as_str(),
        [arg] if arg.starts_with("--data-dir=") => &arg["--data-dir=".len()..],
        _ => {
            return podman_fail(format!(
                "the simulated etcd takes --data-dir DIR only, not {command:?}"
            ));
        }
    };
    let etcd_volume = opts.iter().any(|(n, v)| {
        (*n == "-v" || *n == "--volume")
            && v.split(':').next().map(|s| s.trim_end_matches('/')) == Some("/var/lib/etcd")
            && v.split(':').nth(1) == Some(data_dir)
    });
    if !etcd_volume {
        return podman_fail(format!(
            "the simulated etcd serves /var/lib/etcd only: mount it at its --data-dir {data_dir}"
        ));
    }
    if let Some(refused) = cannot_make(ctx, name, image, value(&opts, &["--authfile"])) {
        return refused;
    }
    let remove_on_stop = has(&opts, &["--rm"]);
    let failure = if !has(&opts, &["--privileged"]) {
        Some(format!(
            "open {data_dir}/member/snap/db: permission denied (SELinux keeps /var/lib/etcd from an unprivileged container)"
        ))
    } else if ctx.runtime().pods_running || ctx.state().containers.values().any(|c| c.running) {
        Some(
            "listen tcp 127.0.0.1:2379: bind: address already in use (etcd's static pod still runs: pods outlive the kubelet until crictl rmp)"
                .to_owned(),
        )
    } else {
        None
    };
    if let Some(error) = &failure
        && remove_on_stop
    {
        return Run::fail(1, format!("{name}: etcd exited at once: {error}"));
    }
    ctx.state_mut().containers.insert(
        name.to_owned(),
        Container {
            image: image.clone(),
            running: failure.is_none(),
            remove_on_stop,
        },
    );
    match failure {
        Some(error) => Run::fail(1, format!("{name}: etcd exited at once: {error}")),
        None => Run::out(format!("{}\n", container_id(name))),
    }
}

/// `podman exec NAME etcdctl …`.
fn exec(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let (_, operands) = match options(args, &[], &[]) {
        Ok(parsed) => parsed,
        Err(run) => return run,
    };
    let Some((name, command)) = operands.split_first() else {
        return podman_fail("exec requires the name or ID of a container");
    };
    match ctx.state().containers.get(name) {
        None => return podman_fail(no_such_container(name)),
        Some(c) if !c.running => {
            return podman_fail(
                "can only create exec sessions on running containers: container state improper",
            );
        }
        Some(_) => {}
    }
    match command.split_first() {
        Some((program, args)) if program == "etcdctl" => super::etcd::etcdctl(ctx, args),
        Some((program, _)) => podman_fail(format!(
            "the simulated etcd container runs etcdctl only, not {program}"
        )),
        None => podman_fail("must provide a non-empty command to start an exec session"),
    }
}

/// `podman stop NAME…`: prints the names; a `--rm` container goes.
fn stop(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let (_, names) = match options(args, &[], &[]) {
        Ok(parsed) => parsed,
        Err(run) => return run,
    };
    if names.is_empty() {
        return podman_fail("you must provide at least one name or id");
    }
    let mut out = String::new();
    for name in names {
        let Some(container) = ctx.state().containers.get(name).cloned() else {
            return podman_fail(no_such_container(name));
        };
        let containers = &mut ctx.state_mut().containers;
        if container.remove_on_stop {
            containers.remove(name);
        } else if let Some(c) = containers.get_mut(name) {
            c.running = false;
        }
        out.push_str(&format!("{name}\n"));
    }
    Run::out(out)
}

/// `podman rm [-f] NAME…`: a running container only with `-f`.
fn rm(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let (opts, names) = match options(args, &[], &["-f", "--force"]) {
        Ok(parsed) => parsed,
        Err(run) => return run,
    };
    if names.is_empty() {
        return podman_fail("you must provide at least one name or id");
    }
    let force = has(&opts, &["-f", "--force"]);
    let mut out = String::new();
    for name in names {
        match ctx.state().containers.get(name) {
            None => {
                return Run::fail(1, format!("Error: {}", no_such_container(name)));
            }
            Some(c) if c.running && !force => {
                return Run::fail(
                    2,
                    format!(
                        "Error: cannot remove container {} as it is running - running or paused containers cannot be removed without force: container state improper",
                        container_id(name)
                    ),
                );
            }
            Some(_) => {}
        }
        ctx.state_mut().containers.remove(name);
        out.push_str(&format!("{name}\n"));
    }
    Run::out(out)
}

/// `podman ps [-a] --format {{.Names}}`.
fn ps(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let (opts, operands) = match options(args, &["--format"], &["-a", "--all"]) {
        Ok(parsed) => parsed,
        Err(run) => return run,
    };
    if !operands.is_empty() || value(&opts, &["--format"]) != Some("{{.Names}}") {
        return podman_fail("the simulated podman ps takes [-a] --format {{.Names}} only");
    }
    let all = has(&opts, &["-a", "--all"]);
    Run::out(
        ctx.state()
            .containers
            .iter()
            .filter(|(_, c)| all || c.running)
            .map(|(name, _)| format!("{name}\n"))
            .collect::<String>(),
    )
}

/// `sudo crictl rmi --prune`, `sudo crictl rmp -a -f`, `sudo crictl pods -q`.
pub fn crictl(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    const SOCKET: &str = "unix:///var/run/crio/crio.sock";
    if !ctx.root {
        return Run::fail(
            1,
            format!(
                "level=fatal msg=\"validate service connection: validate CRI v1 runtime API for endpoint \\\"{SOCKET}\\\": dial unix /var/run/crio/crio.sock: connect: permission denied\""
            ),
        );
    }
    if !ctx.machine().unit_active("crio.service") {
        return Run::fail(
            1,
            format!(
                "level=fatal msg=\"validate service connection: validate CRI v1 runtime API for endpoint \\\"{SOCKET}\\\": dial unix /var/run/crio/crio.sock: connect: no such file or directory\""
            ),
        );
    }
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["rmi", "--prune"] => prune(ctx),
        ["pods", "-q" | "--quiet"] => {
            let running = ctx.runtime().pods_running;
            Run::out(
                pods(ctx.state())
                    .iter()
                    .filter(|_| running)
                    .map(|(id, _)| format!("{id}\n"))
                    .collect::<String>(),
            )
        }
        ["rmp", flags @ ..] => rmp(ctx, flags),
        _ => Run::fail(1, format!("crictl {} is not simulated", args.join(" "))),
    }
}

/// Every cached image no container uses goes: neither a podman container (of any state) nor a
/// running pod.
fn prune(ctx: &mut Ctx<'_>) -> Run {
    let mut in_use: BTreeSet<String> = ctx
        .state()
        .containers
        .values()
        .map(|c| c.image.clone())
        .collect();
    if ctx.runtime().pods_running {
        in_use.extend(pods(ctx.state()).into_iter().flat_map(|(_, images)| images));
    }
    let unused: Vec<String> = ctx
        .state()
        .image_cache
        .iter()
        .filter(|i| !in_use.contains(*i))
        .cloned()
        .collect();
    if !unused.is_empty() {
        ctx.state_mut().image_cache.retain(|i| in_use.contains(i));
    }
    Run::out(
        unused
            .iter()
            .map(|i| format!("Deleted: {i}\n"))
            .collect::<String>(),
    )
}

/// `crictl rmp --all --force` (`-a -f`, `-af`, `-fa`).
fn rmp(ctx: &mut Ctx<'_>, flags: &[&str]) -> Run {
    let (mut all, mut force) = (false, false);
    for flag in flags {
        match *flag {
            "-a" | "--all" => all = true,
            "-f" | "--force" => force = true,
            "-af" | "-fa" => (all, force) = (true, true),
            other => {
                return Run::fail(
                    1,
                    format!("crictl rmp: {other} is not simulated (only --all --force)"),
                );
            }
        }
    }
    if !all {
        return Run::fail(
            1,
            "crictl rmp: ID cannot be empty (the simulation removes --all only)",
        );
    }
    if !ctx.runtime().pods_running {
        return Run::ok();
    }
    let ids: Vec<String> = pods(ctx.state()).into_iter().map(|(id, _)| id).collect();
    if !force {
        return Run::fail(
            1,
            format!(
                "removing the pod sandbox \"{}\": pod sandbox is running, please stop it first",
                ids.first().map_or("", String::as_str)
            ),
        );
    }
    // A running kubelet recreates its pods at once.
    let kubelet = ctx.machine().unit_active(KUBELET);
    ctx.runtime_mut().pods_running = kubelet;
    Run::out(
        ids.iter()
            .map(|id| format!("Stopped sandbox {id}\nRemoved sandbox {id}\n"))
            .collect::<String>(),
    )
}

#[cfg(test)]
mod tests;
