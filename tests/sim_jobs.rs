//! The simulated node runs Job pods of our image as local processes, against the real Job
//! controller of the test control plane (docs/simulation.md, "Node, scheduling and pods").
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::shared_sim::{self, Setup, SharedSim};
use support::{namespace, unique, wait_for};

const IMAGE: &str = "quay.io/opdev/guestcluster:sim-test";
const NODE: &str = "sim-jobs-node";

/// The one simulation of this test binary (see [`shared_sim`]): two simulated schedulers would
/// race to bind the same pods. A restart fails every pod that runs at that moment.
async fn start() -> &'static SharedSim {
    shared_sim::start(|| Setup {
        root: sim_root(),
        node_name: NODE,
        our_image_prefix: "quay.io/opdev/guestcluster",
        flavour: Default::default(),
    })
    .await
}

/// `<target tmp>/sim_jobs/<pid>`: kept after the run (pod logs are worth reading when a test
/// failed); directories of earlier runs whose process is gone are removed.
fn sim_root() -> PathBuf {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim_jobs");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !Path::new("/proc").join(&pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let root = base.join(std::process::id().to_string());
    std::fs::create_dir_all(&root).expect("simulation root");
    root
}

/// A namespace whose `default` ServiceAccount exists (pods are rejected before it does).
async fn ready_namespace(client: &kube::Client, prefix: &str) -> String {
    let ns = namespace(client, prefix).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    wait_for("the default ServiceAccount", || {
        let accounts = accounts.clone();
        async move { accounts.get_opt("default").await.ok().flatten() }
    })
    .await;
    ns
}

/// A Job of one `main` container of our image; `container` and `spec` are merged in.
fn job(
    name: &str,
    container: serde_json::Value,
    volumes: serde_json::Value,
    spec: serde_json::Value,
) -> Job {
    let mut main = json!({ "name": "main", "image": IMAGE });
    merge(&mut main, container);
    let mut job_spec = json!({
        "backoffLimit": 0,
        "template": { "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [main],
            "volumes": volumes,
        }},
    });
    merge(&mut job_spec, spec);
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name },
        "spec": job_spec,
    }))
    .expect("a valid Job")
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

async fn create_job(client: &kube::Client, ns: &str, job: &Job) -> Api<Job> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    jobs.create(&PostParams::default(), job)
        .await
        .expect("create Job");
    jobs
}

/// Waits for the Job condition `kind` to be `True` and returns the Job.
async fn wait_for_condition(jobs: &Api<Job>, name: &str, kind: &str) -> Job {
    wait_for(&format!("Job {name} condition {kind}"), || async move {
        let job = jobs.get(name).await.ok()?;
        let conditions = job.status.as_ref()?.conditions.as_ref()?;
        conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == "True")
            .then_some(job)
    })
    .await
}

fn condition_reason(job: &Job, kind: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)?
        .reason
        .clone()
}

async fn job_pods(client: &kube::Client, ns: &str, job: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("batch.kubernetes.io/job-name={job}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .expect("list Job pods")
        .items
}

fn sandbox(sim: &SharedSim, pod: &Pod) -> PathBuf {
    sim::kubelet::sandbox_dir(
        sim.root(),
        &pod.namespace().unwrap_or_default(),
        &pod.name_any(),
        &pod.uid().unwrap_or_default(),
    )
}

fn terminated_exit_code(pod: &Pod) -> Option<i32> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    Some(status.state.as_ref()?.terminated.as_ref()?.exit_code)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test]
async fn the_node_is_registered_ready_with_a_lease() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = wait_for("the simulated Node", || {
        let nodes = nodes.clone();
        async move { nodes.get_opt(NODE).await.ok().flatten() }
    })
    .await;
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(ready.status, "True");
    let leases: Api<Lease> = Api::namespaced(client, sim::kubelet::LEASE_NAMESPACE);
    let holder = wait_for("the node Lease", || {
        let leases = leases.clone();
        async move {
            leases
                .get_opt(NODE)
                .await
                .ok()
                .flatten()?
                .spec?
                .holder_identity
        }
    })
    .await;
    assert_eq!(holder, NODE);
}

#[tokio::test]
async fn a_job_running_our_subcommand_succeeds_and_writes_into_its_volume() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-crdgen").await;
    let name = unique("crdgen");
    // `$(DIR)` is expanded by the kubelet, then `/out` is rewritten to the emptyDir.
    let container = json!({
        "args": ["crdgen", "--out-dir", "$(DIR)"],
        "env": [{ "name": "DIR", "value": "/out" }],
        "volumeMounts": [{ "name": "out", "mountPath": "/out" }],
    });
    let volumes = json!([{ "name": "out", "emptyDir": {} }]);
    let jobs = create_job(&client, &ns, &job(&name, container, volumes, json!({}))).await;

    let done = wait_for_condition(&jobs, &name, "Complete").await;
    assert_eq!(done.status.and_then(|s| s.succeeded), Some(1));

    let pods = job_pods(&client, &ns, &name).await;
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    let status = pod.status.as_ref().expect("pod status");
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    assert_eq!(terminated_exit_code(pod), Some(0));
    let ip: Ipv4Addr = status
        .pod_ip
        .as_deref()
        .expect("podIP")
        .parse()
        .expect("an IPv4 podIP");
    assert_eq!(ip.octets()[0], 127);
    assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE)
    );

    let out = sandbox(sim, pod).join("volumes/out");
    let crd = out.join("guestcluster.opdev.io_crcbundles.yaml");
    assert!(read(&crd).contains("kind: CustomResourceDefinition"));
    assert!(
        sandbox(sim, pod).join("main.log").exists(),
        "the log is kept"
    );
}

#[tokio::test]
async fn a_failing_process_is_retried_per_backoff_limit_then_the_job_fails() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-fail").await;
    let name = unique("fails");
    let container = json!({ "args": ["no-such-subcommand"] });
    let spec = json!({ "backoffLimit": 1 });
    let jobs = create_job(&client, &ns, &job(&name, container, json!([]), spec)).await;

    let failed = wait_for_condition(&jobs, &name, "Failed").await;
    assert_eq!(
        condition_reason(&failed, "Failed").as_deref(),
        Some("BackoffLimitExceeded")
    );
    assert_eq!(failed.status.and_then(|s| s.failed), Some(2));

    let pods = job_pods(&client, &ns, &name).await;
    assert_eq!(pods.len(), 2, "one pod per attempt");
    for pod in &pods {
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Failed")
        );
        assert_eq!(terminated_exit_code(pod), Some(2), "clap's usage error");
        let log = read(&sandbox(sim, pod).join("main.log"));
        assert!(log.contains("no-such-subcommand"), "{log}");
    }
}

#[tokio::test]
async fn secrets_config_maps_env_and_fake_tools_reach_the_process() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-inputs").await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "creds" },
        "stringData": { "token": "s3cret", "unused": "x" },
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create Secret");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "settings" },
        "data": { "level": "debug" },
    }))
    .expect("configmap");
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create ConfigMap");

    // Paths reach the script as arguments and env, so they are rewritten to the host.
    let script = r#"
        set -e
        cat "$1" > "$3/secret"
        cat "$2" > "$3/config"
        printf '%s %s %s' "$TOKEN" "$POD_NAME" "$POD_NAMESPACE" > "$3/env"
        printf '%s' "$OUT" > "$3/out-env"
        oc adm release info quay.io/openshift-release-dev/ocp-release:4.22.1-x86_64 -o json > "$3/release.json"
        echo "hello from the pod"
        echo "and from stderr" >&2
    "#;
    let name = unique("inputs");
    let container = json!({
        "command": ["sh", "-c", script, "sh", "/etc/creds/token", "/etc/settings/level.conf", "$(OUT)"],
        "env": [
            { "name": "OUT", "value": "/out" },
            { "name": "TOKEN", "valueFrom": { "secretKeyRef": { "name": "creds", "key": "token" } } },
            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
        ],
        "volumeMounts": [
            { "name": "out", "mountPath": "/out" },
            { "name": "creds", "mountPath": "/etc/creds", "readOnly": true },
            { "name": "settings", "mountPath": "/etc/settings" },
        ],
    });
    let volumes = json!([
        { "name": "out", "emptyDir": {} },
        { "name": "creds", "secret": { "secretName": "creds" } },
        { "name": "settings", "configMap": {
            "name": "settings", "items": [{ "key": "level", "path": "level.conf" }],
        }},
    ]);
    let jobs = create_job(&client, &ns, &job(&name, container, volumes, json!({}))).await;
    wait_for_condition(&jobs, &name, "Complete").await;

    let pod = job_pods(&client, &ns, &name).await.remove(0);
    let dir = sandbox(sim, &pod);
    let out = dir.join("volumes/out");
    assert_eq!(read(&out.join("secret")), "s3cret");
    assert_eq!(read(&out.join("config")), "debug");
    assert_eq!(
        read(&out.join("env")),
        format!("s3cret {} {ns}", pod.name_any())
    );
    assert_eq!(read(&out.join("out-env")), out.display().to_string());
    let release: serde_json::Value =
        serde_json::from_str(&read(&out.join("release.json"))).expect("release JSON");
    assert_eq!(release["metadata"]["version"], "4.22.1");

    // Logs outlive the pod.
    jobs.delete(&name, &DeleteParams::background())
        .await
        .expect("delete Job");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod_name = pod.name_any();
    wait_for("the Job's pod to be gone", || {
        let pods = pods.clone();
        let pod_name = pod_name.clone();
        async move { pods.get_opt(&pod_name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    let log = read(&dir.join("main.log"));
    assert!(
        log.contains("hello from the pod") && log.contains("and from stderr"),
        "{log}"
    );
}

#[tokio::test]
async fn the_active_deadline_kills_the_process_and_fails_the_job() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-deadline").await;
    let name = unique("sleeper");
    // Not our binary: the host's `sleep`, after writing its pid where the test can read it
    // (`$$$$` is the shell's `$$`: the kubelet expands `$$` to `$`).
    let container = json!({
        "command": ["sh", "-c", "echo $$$$ > \"$1\"; exec sleep 600", "sh", "/out/pid"],
        "volumeMounts": [{ "name": "out", "mountPath": "/out" }],
    });
    let volumes = json!([{ "name": "out", "emptyDir": {} }]);
    let spec = json!({ "activeDeadlineSeconds": 3 });
    let jobs = create_job(&client, &ns, &job(&name, container, volumes, spec)).await;

    let pod = wait_for("a running pod", || {
        let client = client.clone();
        let (ns, name) = (ns.clone(), name.clone());
        async move {
            let pods = job_pods(&client, &ns, &name).await;
            let running = pods
                .into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))?;
            sandbox(sim, &running)
                .join("volumes/out/pid")
                .exists()
                .then_some(running)
        }
    })
    .await;
    let pid = wait_for("the process's pid", || {
        let path = sandbox(sim, &pod).join("volumes/out/pid");
        async move {
            std::fs::read_to_string(path)
                .ok()?
                .trim()
                .parse::<u32>()
                .ok()
        }
    })
    .await;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    assert!(proc_dir.exists(), "the process runs");

    let failed = wait_for_condition(&jobs, &name, "Failed").await;
    assert_eq!(
        condition_reason(&failed, "Failed").as_deref(),
        Some("DeadlineExceeded")
    );
    wait_for("the process to be gone", || {
        let gone = !proc_dir.exists();
        async move { gone.then_some(()) }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod_name = pod.name_any();
    wait_for("the deleted pod to be removed", || {
        let pods = pods.clone();
        let pod_name = pod_name.clone();
        async move { pods.get_opt(&pod_name).await.ok()?.is_none().then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_claim_is_mounted_as_its_volume_directory() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-pvc").await;
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": { "name": "work" },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": "1Gi" } },
        },
    }))
    .expect("pvc");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("create PVC");
    let name = unique("crdgen-pvc");
    let container = json!({
        "args": ["crdgen", "--out-dir=/work/crds"],
        "volumeMounts": [{ "name": "work", "mountPath": "/work" }],
    });
    let volumes = json!([{ "name": "work", "persistentVolumeClaim": { "claimName": "work" } }]);
    let jobs = create_job(&client, &ns, &job(&name, container, volumes, json!({}))).await;
    wait_for_condition(&jobs, &name, "Complete").await;

    let uid = pvcs.get("work").await.expect("PVC").uid().expect("uid");
    let dir = sim.root().join("volumes").join(uid).join("crds");
    assert!(
        read(&dir.join("guestcluster.opdev.io_crcbundles.yaml"))
            .contains("CustomResourceDefinition")
    );
}

#[tokio::test]
async fn pods_of_other_images_are_bound_but_not_run() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-foreign").await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "busybox" },
        "spec": {
            "nodeSelector": { "disktype": "ssd" },
            "containers": [{ "name": "main", "image": "busybox", "command": ["true"] }],
        },
    }))
    .expect("pod");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let bound = wait_for("the pod to be bound despite its nodeSelector", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("busybox").await.ok()?;
            let node = pod.spec.as_ref()?.node_name.clone()?;
            Some((pod, node))
        }
    })
    .await;
    assert_eq!(bound.1, NODE);
    assert!(
        bound.0.status.and_then(|s| s.start_time).is_none(),
        "not run"
    );

    // A bound pod nobody runs still goes away when deleted.
    pods.delete("busybox", &DeleteParams::default())
        .await
        .expect("delete pod");
    wait_for("the foreign pod to be removed", || {
        let pods = pods.clone();
        async move { pods.get_opt("busybox").await.ok()?.is_none().then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn after_a_restart_pods_of_the_old_kubelet_fail_and_their_processes_are_gone() {
    let sim = start().await;
    let exclusive = sim.exclusive().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-restart").await;
    let name = unique("survivor");
    let container = json!({
        "command": ["sh", "-c", "echo $$$$ > \"$1\"; exec sleep 600", "sh", "/out/pid"],
        "volumeMounts": [{ "name": "out", "mountPath": "/out" }],
    });
    let volumes = json!([{ "name": "out", "emptyDir": {} }]);
    let jobs = create_job(&client, &ns, &job(&name, container, volumes, json!({}))).await;
    let (pod, pid) = wait_for("a running pod and its pid", || {
        let client = client.clone();
        let (ns, name) = (ns.clone(), name.clone());
        async move {
            let pod = job_pods(&client, &ns, &name)
                .await
                .into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))?;
            let pid = std::fs::read_to_string(sandbox(sim, &pod).join("volumes/out/pid")).ok()?;
            let pid: u32 = pid.trim().parse().ok()?;
            Some((pod, pid))
        }
    })
    .await;

    sim.restart(&exclusive).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod_name = pod.name_any();
    let lost = wait_for("the pod to be marked Failed", || {
        let pods = pods.clone();
        let pod_name = pod_name.clone();
        async move {
            let pod = pods.get(&pod_name).await.ok()?;
            (pod.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(pod)
        }
    })
    .await;
    let terminated = lost
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|s| s.into_iter().next())
        .and_then(|s| s.state)
        .and_then(|s| s.terminated)
        .expect("terminated state");
    assert_eq!(terminated.reason.as_deref(), Some("ContainerStatusUnknown"));
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    wait_for("the old process to be gone", || {
        let gone = !proc_dir.exists();
        async move { gone.then_some(()) }
    })
    .await;
    let failed = wait_for_condition(&jobs, &name, "Failed").await;
    assert_eq!(
        condition_reason(&failed, "Failed").as_deref(),
        Some("BackoffLimitExceeded")
    );
}

/// A pod reaches the API server as its own ServiceAccount, through the credentials mounted at the
/// in-cluster path, and a pod without them (`automountServiceAccountToken: false`) cannot reach
/// it at all: RBAC of every Job is what a real cluster would enforce.
#[tokio::test]
async fn pods_talk_to_the_api_server_as_their_service_account_only() {
    let sim = start().await;
    let _shared = sim.share().await;
    let client = support::client().await;
    let ns = ready_namespace(&client, "sim-identity").await;
    let cp = testenv::ControlPlane::shared()
        .await
        .expect("control plane");
    // The pods' users cannot reach the machine's cache (under root's home): a copy of their own.
    let kubectl = sim.root().join("bin/kubectl");
    std::fs::create_dir_all(kubectl.parent().unwrap()).expect("bin directory");
    std::fs::copy(cp.kubectl().get_program(), &kubectl).expect("copy kubectl");
    let kubectl = kubectl.to_str().expect("a UTF-8 path").to_owned();
    let script = r#"
        set -u
        "$1" auth whoami -o jsonpath='{.status.userInfo.username}' > "$2/who" 2>&1
        if "$1" get secrets > "$2/secrets" 2>&1; then echo allowed; else echo refused; fi > "$2/verdict"
        printf '%s' "${KUBECONFIG:-none}" > "$2/kubeconfig"
    "#;
    let run = |name: String, automount: bool| {
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": { "name": name },
            "spec": { "backoffLimit": 0, "template": { "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": automount,
                "containers": [{
                    "name": "main", "image": IMAGE,
                    "command": ["sh", "-c", script, "sh", kubectl.as_str(), "/out"],
                    "volumeMounts": [{ "name": "out", "mountPath": "/out" }],
                }],
                "volumes": [{ "name": "out", "emptyDir": {} }],
            }}},
        }))
        .expect("a valid Job");
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let jobs = create_job(&client, &ns, &job).await;
            wait_for_condition(&jobs, &name, "Complete").await;
            sandbox(sim, &job_pods(&client, &ns, &name).await.remove(0)).join("volumes/out")
        }
    };

    let out = run(unique("with-token"), true).await;
    assert_eq!(
        read(&out.join("who")),
        format!("system:serviceaccount:{ns}:default")
    );
    assert_eq!(read(&out.join("verdict")).trim(), "refused");
    assert!(
        read(&out.join("secrets")).contains("Forbidden"),
        "{}",
        read(&out.join("secrets"))
    );

    let out = run(unique("without-token"), false).await;
    assert_eq!(read(&out.join("kubeconfig")), "none");
    assert_eq!(read(&out.join("verdict")).trim(), "refused");
    assert!(
        !read(&out.join("who")).contains("system:"),
        "no identity without a token: {}",
        read(&out.join("who"))
    );
}
