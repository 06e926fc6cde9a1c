//! The Helm chart `helm/guestcluster-operator`, with a real `helm` built from its pinned module:
//! it lints clean, renders what is committed, carries the generated CRDs and a Grafana dashboard
//! whose every query names a metric the operator exposes, and grants no wildcard, `escalate`,
//! `bind` or `impersonate`. Installed into the test control plane, the operator runs as the
//! chart's Deployment pod (its ServiceAccount and RBAC only) and takes a downloaded bundle, a pool
//! and a lease to two Ready instances; SubjectAccessReviews show what the operator's and each
//! Job's accounts can and cannot do; headless Chromium loads `/dashboard` and saves a screenshot;
//! and `helm uninstall` leaves nothing of the operator's behind but the CRDs.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use guestcluster::api::{CRCBundle, ClusterInstance, ClusterLease, ClusterPool};
use guestcluster::cdi::DataVolume;
use guestcluster::kubevirt::VirtualMachine;
use guestcluster::manifests;
use guestcluster::resources::instance as names;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::crc::{ready_bundle, team_namespace, template};
use support::helm::{CHART, helm_ok, template as render};
use support::world::bare_world;
use support::{wait_for, wait_long};

/// The release and namespace of the install scenario (the chart's documented install).
const RELEASE: &str = "guestcluster-operator";
const NAMESPACE: &str = "guestcluster-helm";
/// The committed render: every template, with the optional ServiceMonitor and dashboard on.
const RENDERED: &str = "helm/rendered.yaml";
const ALL_ON: [&str; 2] = [
    "metrics.serviceMonitor.enabled=true",
    "grafanaDashboard.enabled=true",
];
const DASHBOARD_JSON: &str = "helm/guestcluster-operator/files/dashboards/guestcluster.json";

fn path(relative: &str) -> PathBuf {
    support::project_dir().join(relative)
}

fn rendered_objects(sets: &[&str]) -> Vec<kube::api::DynamicObject> {
    manifests::parse(&render(RELEASE, "guestcluster-system", sets)).expect("the render parses")
}

#[test]
fn the_chart_lints_clean() {
    for sets in [&[][..], &ALL_ON[..]] {
        let mut args = vec!["lint", "--strict", CHART];
        for set in sets {
            args.extend(["--set", set]);
        }
        let out = helm_ok(&args);
        assert!(out.contains("0 chart(s) failed"), "{out}");
        assert!(!out.contains("[WARNING]"), "{out}");
    }
}

/// Hardening item 5: by default the dashboard listens on the pod's loopback only, and a
/// NetworkPolicy lets only the monitoring namespaces reach the metrics port (and anyone the
/// health port, for kubelet probes).
#[test]
fn the_dashboard_is_loopback_and_the_metrics_port_is_for_monitoring_only() {
    let objects = rendered_objects(&[]);
    let kind = |k: &str| {
        objects
            .iter()
            .find(|o| o.types.as_ref().is_some_and(|t| t.kind == k))
            .unwrap_or_else(|| panic!("no {k} rendered"))
    };
    let args = kind("Deployment").data["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--dashboard-bind-address=127.0.0.1:8082"),
        "{args}"
    );
    let policy = &kind("NetworkPolicy").data["spec"];
    assert_eq!(policy["policyTypes"], serde_json::json!(["Ingress"]));
    let ingress = policy["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2, "{policy}");
    assert_eq!(ingress[0]["ports"][0]["port"], "metrics");
    assert_eq!(
        ingress[0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["openshift-monitoring", "openshift-user-workload-monitoring"])
    );
    assert_eq!(ingress[1]["ports"][0]["port"], "health");
    assert!(ingress[1].get("from").is_none(), "health from anywhere");
    // Off, or without metrics, there is none.
    for sets in [
        &["metrics.networkPolicy.enabled=false"][..],
        &["metrics.enabled=false"][..],
    ] {
        assert!(
            !rendered_objects(sets)
                .iter()
                .any(|o| o.types.as_ref().is_some_and(|t| t.kind == "NetworkPolicy")),
            "{sets:?}"
        );
    }
}

#[test]
fn the_rendered_chart_is_committed() {
    let rendered = render(RELEASE, "guestcluster-system", &ALL_ON);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path(RENDERED), &rendered).expect("write the render");
    }
    let committed = std::fs::read_to_string(path(RENDERED)).unwrap_or_default();
    if committed != rendered {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "the end".to_owned(), |n| format!("line {}", n + 1));
        panic!(
            "{RENDERED} drifted from the chart (first difference at {line}); \
             run `UPDATE_GOLDEN=1 cargo test --test helm rendered` and review the diff"
        );
    }
}

#[test]
fn the_charts_crds_are_the_generated_ones_and_its_version_the_crates() {
    let generated: BTreeSet<String> = std::fs::read_dir(path("crds"))
        .expect("crds/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let charted: BTreeSet<String> = std::fs::read_dir(path(&format!("{CHART}/crds")))
        .expect("chart crds/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        charted, generated,
        "the chart's crds/ has other files than crds/"
    );
    for name in &generated {
        let a = std::fs::read(path(&format!("crds/{name}"))).expect("read");
        let b = std::fs::read(path(&format!("{CHART}/crds/{name}"))).expect("read");
        assert!(
            a == b,
            "{CHART}/crds/{name} differs from crds/{name}: run `make crds` (it copies them)"
        );
    }
    let chart = std::fs::read_to_string(path(&format!("{CHART}/Chart.yaml"))).expect("Chart.yaml");
    let app_version = format!("appVersion: \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(
        chart.lines().any(|l| l == app_version),
        "Chart.yaml must say {app_version}"
    );
}

/// Every rule of every Role and ClusterRole the chart renders.
fn chart_rules() -> Vec<(String, serde_json::Value)> {
    rendered_objects(&ALL_ON)
        .into_iter()
        .filter(|o| {
            let kind = o.types.as_ref().map(|t| t.kind.as_str());
            matches!(kind, Some("Role" | "ClusterRole"))
        })
        .flat_map(|o| {
            let name = o.name_any();
            let rules = o.data["rules"].as_array().cloned().unwrap_or_default();
            rules.into_iter().map(move |r| (name.clone(), r))
        })
        .collect()
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn no_chart_role_grants_wildcards_escalate_bind_or_impersonate() {
    let rules = chart_rules();
    for (role, rule) in &rules {
        for field in ["verbs", "resources", "apiGroups", "resourceNames"] {
            assert!(
                !strings(&rule[field]).iter().any(|v| v.contains('*')),
                "{role} grants a wildcard in {field}: {rule}"
            );
        }
        for verb in strings(&rule["verbs"]) {
            assert!(
                !["escalate", "bind", "impersonate"].contains(&verb.as_str()),
                "{role} grants {verb}: {rule}"
            );
        }
    }
    let operator = rules.iter().filter(|(role, _)| role == RELEASE).count();
    eprintln!("the operator's account has {operator} rules (ClusterRole and Role)");
    assert!(operator > 0, "no rules for the operator");
}

#[test]
fn the_scenarios_prep_role_is_the_charts() {
    let rules = |value: &serde_json::Value| -> BTreeSet<(String, String, String)> {
        let mut set = BTreeSet::new();
        for rule in value.as_array().into_iter().flatten() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        set.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
        set
    };
    let chart = rendered_objects(&[])
        .into_iter()
        .find(|o| o.name_any() == format!("{RELEASE}-bundle-prep"))
        .expect("the chart's bundle-prep Role");
    let sim = serde_json::to_value(sim::job_accounts::prep_role("ns")).expect("json");
    assert_eq!(rules(&sim["rules"]), rules(&chart.data["rules"]));
}

/// Metric names `/metrics` shows: each metric's `# TYPE` name, with `_total` for counters and
/// `_bucket`, `_sum` and `_count` for histograms.
fn exposed_metrics(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (words.next(), words.next(), words.next(), words.next())
        {
            names.insert(name.to_owned());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        }
    }
    names
}

/// Every `guestcluster_…` name the dashboard's queries use, with the panel using it.
fn dashboard_metrics() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path(DASHBOARD_JSON)).expect("the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard parses");
    assert_eq!(dashboard["title"], "guestcluster");
    let mut used = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            let mut rest = expr;
            while let Some(at) = rest.find("guestcluster_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                used.push((title.clone(), name));
            }
        }
    }
    used
}

/// Metrics with one sample in every family: `/metrics` leaves out a family nobody has a sample
/// in yet, so this is what the operator exposes once each thing has happened once.
fn every_metric_once() -> guestcluster::metrics::Metrics {
    use std::time::Duration;
    let metrics = guestcluster::metrics::Metrics::default();
    metrics.init_kind("crcbundle");
    metrics.actor_restarted("crcbundle");
    metrics.reconciled("crcbundle", "ok", Duration::from_millis(5));
    metrics.build_stage_ended("Install", "ok", Duration::from_secs(600));
    metrics.api_request("GET", Some(200));
    metrics.retrying("crcbundle", "uid", Duration::from_secs(1));
    metrics.count_live_actors_with(|| BTreeMap::from([("crcbundle".to_owned(), 1)]));
    metrics.count_mailboxes_with(|| BTreeMap::from([("crcbundle".to_owned(), 0)]));
    metrics.count_objects_with("crcbundle", || BTreeMap::from([("Ready".to_owned(), 1)]));
    metrics.set_bundle_stages(&BTreeMap::from([(
        ("Build".to_owned(), "Install".to_owned()),
        1,
    )]));
    metrics.set_pool_sizes(&std::collections::BTreeMap::from([("min", 2)]));
    metrics
}

#[test]
fn the_grafana_dashboard_shows_each_concern_with_metrics_the_operator_exposes() {
    let exposed = exposed_metrics(&every_metric_once().encode());
    let used = dashboard_metrics();
    for (panel, name) in &used {
        assert!(
            exposed.contains(name),
            "panel {panel:?} queries {name}, which /metrics does not expose"
        );
    }
    let titles: BTreeSet<&str> = used.iter().map(|(t, _)| t.as_str()).collect();
    for wanted in [
        "Bundles by phase",
        "Bundles by source and stage",
        "Build stage duration p50 / p90 (24h)",
        "Pool capacity",
        "Instances by phase",
        "Live actors",
        "Actor restarts",
        "Reconcile errors",
        "API request rate",
    ] {
        assert!(titles.contains(wanted), "no panel {wanted:?}: {titles:?}");
    }
    // The ConfigMap carries the file as it is.
    let configmap = rendered_objects(&ALL_ON)
        .into_iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap"))
        .expect("the dashboard ConfigMap");
    let text = std::fs::read_to_string(path(DASHBOARD_JSON)).expect("the dashboard");
    let carried = configmap.data["data"]["guestcluster.json"].as_str();
    assert_eq!(carried.map(str::trim_end), Some(text.trim_end()));
}

/// Whether `user` may `verb` the `resource` (`group`) in `namespace` (cluster-wide when `None`),
/// named `name`, as the API server's authorizer answers.
async fn may(
    client: &kube::Client,
    user: &str,
    verb: &str,
    (group, resource): (&str, &str),
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (resource, None),
    };
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "resourceAttributes": {
                "verb": verb, "group": group, "resource": resource,
                "subresource": subresource, "namespace": namespace, "name": name,
            },
        },
    }))
    .expect("a review");
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

fn account(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// `N` distinct free loopback ports, outside the range client connections are given: the
/// operator pod's process binds them on the simulated node.
fn free_ports<const N: usize>() -> [u16; N] {
    let held = [(); N].map(|()| testenv::ports::reserve().expect("a free port"));
    held.map(|l| l.local_addr().expect("addr").port())
}

/// A plain HTTP/1.0 GET on loopback (no client library needed for the operator's endpoints).
async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// The operator pod's log on the simulated node (for failure messages).
fn operator_log(root: &Path) -> String {
    let pods = root.join("sim/pods");
    let mut logs = String::new();
    for entry in std::fs::read_dir(&pods).into_iter().flatten().flatten() {
        let dir = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{NAMESPACE}_{RELEASE}-")) {
            let log = std::fs::read_to_string(dir.join("operator.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            logs += &format!("--- {name}\n");
            for line in tail.into_iter().rev() {
                logs += line;
                logs += "\n";
            }
        }
    }
    logs
}

/// Runs headless Chromium from Debian's packages (installed by `make deps`).
fn chromium(args: &[&str]) -> String {
    let out = std::process::Command::new("chromium-headless-shell")
        .args(["--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run chromium-headless-shell ({e}): `make deps` installs it (apt-get install chromium-headless-shell)")
        });
    assert!(
        out.status.success(),
        "chromium {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn listed<K>(api: Api<K>, labels: &str) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default().labels(labels))
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
        .collect()
}

/// Objects of the release, or made by the operator, that still exist (by kind). Only the Helm
/// scenario makes such objects in this test binary's control plane.
async fn leftovers(client: &kube::Client) -> BTreeMap<&'static str, Vec<String>> {
    let release = format!("app.kubernetes.io/instance={RELEASE}");
    let managed = "opdev.io/managed-by=guestcluster-operator";
    let c = || client.clone();
    let mut left = BTreeMap::from([
        (
            "Deployment",
            listed(Api::<Deployment>::all(c()), &release).await,
        ),
        (
            "ServiceAccount (chart)",
            listed(Api::<ServiceAccount>::all(c()), &release).await,
        ),
        (
            "Service (chart)",
            listed(Api::<Service>::all(c()), &release).await,
        ),
        (
            "ClusterRole",
            listed(Api::<ClusterRole>::all(c()), &release).await,
        ),
        (
            "ClusterRoleBinding",
            listed(Api::<ClusterRoleBinding>::all(c()), &release).await,
        ),
        (
            "Role (chart)",
            listed(Api::<Role>::all(c()), &release).await,
        ),
        ("Job", listed(Api::<Job>::all(c()), managed).await),
        (
            "PVC",
            listed(Api::<PersistentVolumeClaim>::all(c()), managed).await,
        ),
        ("Secret", listed(Api::<Secret>::all(c()), managed).await),
        (
            "ConfigMap",
            listed(Api::<ConfigMap>::all(c()), managed).await,
        ),
        (
            "ServiceAccount",
            listed(Api::<ServiceAccount>::all(c()), managed).await,
        ),
        ("Role", listed(Api::<Role>::all(c()), managed).await),
        (
            "RoleBinding",
            listed(Api::<RoleBinding>::all(c()), managed).await,
        ),
        ("Service", listed(Api::<Service>::all(c()), managed).await),
        (
            "DataVolume",
            listed(Api::<DataVolume>::all(c()), managed).await,
        ),
        (
            "VirtualMachine",
            listed(Api::<VirtualMachine>::all(c()), managed).await,
        ),
    ]);
    left.retain(|_, names| !names.is_empty());
    left
}

#[tokio::test]
async fn installed_with_helm_the_operator_runs_as_its_pod_under_least_privilege() {
    let world = bare_world();
    let client = support::client().await;
    let cp = testenv::ControlPlane::shared()
        .await
        .expect("control plane");
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    let [metrics_port, health_port, dashboard_port] = free_ports();
    let router = format!("http://{}", world.router);
    let sets = [
        "image.tag=scenario".to_owned(),
        format!("metrics.port={metrics_port}"),
        format!("health.port={health_port}"),
        format!("dashboard.port={dashboard_port}"),
        "poolCrcVersions=*".to_owned(),
        format!("routeProxy={router}"),
    ];
    let mut install = vec![
        "install",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--kubeconfig",
        &kubeconfig,
        "--wait",
        "--timeout",
        "3m",
    ];
    for set in &sets {
        install.extend(["--set", set]);
    }
    let notes = helm_ok(&install);
    assert!(
        notes.contains("rollout status deploy/guestcluster-operator"),
        "{notes}"
    );

    // The operator runs as the Deployment's pod, with the chart's account.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let operator_pods = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .expect("pods")
        .items;
    assert_eq!(operator_pods.len(), 1, "one operator pod");
    let spec = operator_pods[0].spec.as_ref().expect("spec");
    assert_eq!(spec.service_account_name.as_deref(), Some(RELEASE));
    wait_for("the operator ready", || async {
        (get(health_port, "/readyz").await?.0 == 200).then_some(())
    })
    .await;

    // The flow, through the chart's operator: a downloaded bundle, a pool of two, a lease.
    let bundle = support::unique("helm-bundle");
    ready_bundle(world, &client, &bundle, "4.22.7").await;
    let ns = team_namespace(&client).await;
    let pool: ClusterPool = serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterPool",
        "metadata": {"name": "ci"},
        "spec": {"type": "crc", "minSize": 2, "maxSize": 2,
                 "template": template(json!({"crcBundleRef": {"name": bundle}}))}
    }))
    .expect("pool");
    let pools: Api<ClusterPool> = Api::namespaced(client.clone(), &ns);
    pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("create pool");
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let ready = wait_long("two Ready instances", || async {
        let ready = support::ready_instances(&instances, &ListParams::default()).await?;
        (ready.len() == 2).then_some(ready)
    })
    .await;
    let lease: ClusterLease = serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterLease",
        "metadata": {"name": "ci-lease"},
        "spec": {"poolRef": {"name": "ci"}, "requestedBy": "helm scenario"},
    }))
    .expect("lease");
    let leases: Api<ClusterLease> = Api::namespaced(client.clone(), &ns);
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
    let leased = wait_long("the lease bound to an instance", || async {
        let lease = leases.get("ci-lease").await.ok()?;
        lease.status?.instance_ref.map(|r| r.name)
    })
    .await;

    // The dashboard in a real browser: every object and the actor tree down to the instances.
    // On its own loopback listener (hardening item 5), not beside /metrics.
    let url = format!("http://127.0.0.1:{dashboard_port}/dashboard");
    assert_eq!(
        get(metrics_port, "/dashboard").await.map(|(code, _)| code),
        Some(404),
        "the metrics port serves no dashboard"
    );
    let dom = chromium(&["--dump-dom", &url]);
    let mut expected = vec![
        bundle.clone(),
        "ci".to_owned(),
        "ci-lease".to_owned(),
        leased.clone(),
        "data-name=\"root\"".to_owned(),
        "data-name=\"supervisor/clusterinstance\"".to_owned(),
        "data-name=\"supervisor/crcbundle\"".to_owned(),
        "Download".to_owned(),
    ];
    for instance in &ready {
        expected.push(instance.name_any());
        expected.push(format!(
            "data-name=\"clusterinstance/{}\"",
            instance.uid().expect("uid")
        ));
    }
    for text in &expected {
        assert!(
            dom.contains(text.as_str()),
            "the dashboard shows no {text}:\n{dom}\n{}",
            operator_log(&world.root)
        );
    }
    let screenshot = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/")
        .join("dashboard.png");
    chromium(&[
        &format!("--screenshot={}", screenshot.display()),
        "--window-size=1400,1800",
        &url,
    ]);
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot"
    );
    eprintln!("dashboard screenshot: {}", screenshot.display());

    // What the dashboard queries, the running operator exposes.
    let (code, exposition) = get(metrics_port, "/metrics").await.expect("metrics");
    assert_eq!(code, 200);
    let exposed = exposed_metrics(&exposition);
    for (panel, name) in dashboard_metrics() {
        // No bundle is built here, so no build stage has ended yet.
        if name.starts_with("guestcluster_build_stage_duration_seconds") {
            continue;
        }
        assert!(
            exposed.contains(&name),
            "panel {panel:?}: {name} not in /metrics"
        );
    }
    // No tenant's object is named in /metrics (hardening item 5).
    for name in [
        ns.as_str(),
        bundle.as_str(),
        leased.as_str(),
        "pool=",
        "namespace=",
    ]
    .into_iter()
    .chain(
        ready
            .iter()
            .map(|i| i.metadata.name.as_deref().unwrap_or_default()),
    ) {
        assert!(
            !exposition.contains(name),
            "/metrics names {name}:\n{exposition}"
        );
    }
    for series in [
        "guestcluster_pool_instances{state=\"total\"} 2".to_owned(),
        "guestcluster_pool_instances{state=\"pools\"} 1".to_owned(),
        "guestcluster_bundles{source=\"Download\",stage=\"Ready\"} 1".to_owned(),
        "guestcluster_leader 1".to_owned(),
    ] {
        assert!(
            exposition.contains(&series),
            "no {series} in:\n{exposition}"
        );
    }

    // Least privilege, as the API server's authorizer answers.
    let operator = account(NAMESPACE, RELEASE);
    let prep = account(NAMESPACE, sim::job_accounts::PREP_ACCOUNT);
    let (first, second) = (ready[0].name_any(), ready[1].name_any());
    let agent = account(&ns, &names::agent_account_name(&first));
    let team = Some(ns.as_str());
    let home = Some(NAMESPACE);
    let core = |r| ("", r);
    let rbac = |r| ("rbac.authorization.k8s.io", r);
    let ours = |r| ("guestcluster.opdev.io", r);
    let allowed = [
        (&operator, "watch", ours("crcbundles"), None, None),
        (
            &operator,
            "patch",
            ours("clusterinstances/status"),
            team,
            None,
        ),
        (&operator, "create", core("secrets"), team, None),
        (&operator, "create", ("batch", "jobs"), team, None),
        (&operator, "create", rbac("roles"), team, None),
        (
            &operator,
            "update",
            ("coordination.k8s.io", "leases"),
            home,
            Some("28494864.opdev.io"),
        ),
        (&prep, "create", core("secrets"), home, None),
        (&prep, "patch", core("configmaps"), home, None),
        (
            &agent,
            "get",
            ("kubevirt.io", "virtualmachineinstances"),
            team,
            Some(first.as_str()),
        ),
    ];
    let first_kubeconfig = names::kubeconfig_secret_name(&first);
    let second_kubeconfig = names::kubeconfig_secret_name(&second);
    let second_key = names::guest_key_secret_name(&second);
    let denied = [
        // Never a way to more rights than it holds, nor anyone else's identity.
        (&operator, "escalate", rbac("roles"), team, None),
        (&operator, "bind", rbac("clusterroles"), None, None),
        (&operator, "create", rbac("clusterroles"), None, None),
        (&operator, "create", rbac("clusterrolebindings"), None, None),
        (
            &operator,
            "impersonate",
            core("serviceaccounts"),
            team,
            None,
        ),
        (&operator, "impersonate", core("users"), None, None),
        (&operator, "*", core("secrets"), team, None),
        // Nothing it does not use.
        (&operator, "delete", core("namespaces"), None, None),
        (&operator, "create", core("pods"), team, None),
        (&operator, "create", core("pods/exec"), team, None),
        (
            &operator,
            "update",
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            None,
            None,
        ),
        (&operator, "get", core("configmaps"), team, None),
        (
            &operator,
            "update",
            ("coordination.k8s.io", "leases"),
            team,
            None,
        ),
        (
            &operator,
            "update",
            ("coordination.k8s.io", "leases"),
            home,
            Some("another-lease"),
        ),
        // The prep Job publishes in the operator namespace only, and reads nothing.
        (&prep, "get", core("secrets"), home, None),
        (&prep, "list", core("secrets"), home, None),
        (&prep, "create", core("secrets"), team, None),
        (&prep, "delete", core("configmaps"), home, None),
        // An agent touches nothing of another instance, nor its own published kubeconfig.
        (
            &agent,
            "get",
            core("secrets"),
            team,
            Some(second_kubeconfig.as_str()),
        ),
        (
            &agent,
            "get",
            core("secrets"),
            team,
            Some(second_key.as_str()),
        ),
        (
            &agent,
            "get",
            core("secrets"),
            team,
            Some(first_kubeconfig.as_str()),
        ),
        (&agent, "list", core("secrets"), team, None),
        (
            &agent,
            "get",
            ("kubevirt.io", "virtualmachineinstances"),
            team,
            Some(second.as_str()),
        ),
    ];
    for (user, verb, resource, namespace, name) in allowed {
        assert!(
            may(&client, user, verb, resource, namespace, name).await,
            "{user} may not {verb} {resource:?} in {namespace:?} {name:?}"
        );
    }
    for (user, verb, resource, namespace, name) in denied {
        assert!(
            !may(&client, user, verb, resource, namespace, name).await,
            "{user} may {verb} {resource:?} in {namespace:?} {name:?}"
        );
    }

    // Users delete their objects while the operator runs (its finalizers clean up), then the
    // chart goes: nothing of the operator's is left but the CRDs.
    leases
        .delete("ci-lease", &DeleteParams::default())
        .await
        .expect("delete lease");
    pools
        .delete("ci", &DeleteParams::default())
        .await
        .expect("delete pool");
    wait_long("the pool's instances gone", || async {
        let list = instances.list(&ListParams::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    let bundles: Api<CRCBundle> = Api::all(client.clone());
    bundles
        .delete(&bundle, &DeleteParams::default())
        .await
        .expect("delete bundle");
    wait_long("the bundle gone", || async {
        bundles.get_opt(&bundle).await.ok()?.is_none().then_some(())
    })
    .await;
    helm_ok(&[
        "uninstall",
        RELEASE,
        "--namespace",
        NAMESPACE,
        "--kubeconfig",
        &kubeconfig,
        "--wait",
        "--timeout",
        "2m",
    ]);
    wait_long("the operator pod gone", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    // Owned objects go by garbage collection, a moment after their owner: wait for it.
    let mut left = leftovers(&client).await;
    for _ in 0..120 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        left = leftovers(&client).await;
    }
    assert!(left.is_empty(), "left behind after uninstall: {left:?}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "crcbundles",
        "clusterpools",
        "clusterinstances",
        "clusterleases",
    ] {
        assert!(
            crds.get_opt(&format!("{crd}.guestcluster.opdev.io"))
                .await
                .expect("get")
                .is_some(),
            "the CRD {crd} stays"
        );
    }
}
