//! The build source end to end on the simulated cluster, up to a published golden disk: the build VM's
//! generator boot (the single-node Ignition made in the guest, a day behind), the install boot
//! (bootstrap in place onto the root disk, SNC's certificate steps), the cold restart (ISO
//! removed, clock back to real time, ISO and work volumes deleted) and the kubelet certificates
//! brought to 25 days by guest time, the profile's post-install steps and the user's manifests
//! (Customize), sealing in the guest (Seal) and the sparse copy into the golden PVC (Publish) —
//! each guest step a `guestcluster build-helper` Job run by the simulated kubelet against a
//! guest that checks certificates by its own clock.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::BTreeSet;

use guestcluster::api::CRCBundle;
use guestcluster::api::ClusterInstance;
use guestcluster::api::bundle::{BuildStage, BundlePhase, InstallStep};
use guestcluster::api::common::ObjectIdentity;
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::cdi::{DataSource, DataVolume};
use guestcluster::kubevirt::{VirtualMachine, VirtualMachineInstance};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::api::{ListParams, PostParams};
use support::build::*;
use support::crc::{
    assert_configured, create_instance, create_pool, ready_bundle, ready_instance, team_namespace,
    template,
};
use support::wait_for;
use support::world::OPERATOR_NS;
use support::world::world;

const DAY: i64 = 86_400;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// What a watcher of the build VM saw while the build ran.
#[derive(Default)]
struct Seen {
    /// Every address a VMI of the build VM had (the launcher pods').
    ips: BTreeSet<String>,
    /// The clock offsets of the VMIs, by UID.
    offsets: std::collections::BTreeMap<String, i64>,
    steps: Vec<InstallStep>,
    last_message: String,
    /// For each running build VMI looked at: its launcher pod, and whether the build's guest
    /// NetworkPolicy selects it.
    guarded: std::collections::BTreeMap<String, bool>,
}

async fn look(client: &kube::Client, bundle: &str, seen: &mut Seen) {
    let vm = format!("{bundle}-b1-build");
    if let Ok(Some(vmi)) = Api::<VirtualMachineInstance>::namespaced(client.clone(), OPERATOR_NS)
        .get_opt(&vm)
        .await
    {
        if let Some(ip) = vmi.first_ip() {
            seen.ips.insert(ip.to_owned());
        }
        let offset = vmi.spec.domain.clock_offset_seconds();
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        seen.offsets.insert(uid.clone(), offset);
        if let Some(guarded) = policy_selects_launcher(client, bundle, &uid).await {
            seen.guarded.extend([guarded]);
        }
    }
    if let Ok(b) = Api::<CRCBundle>::all(client.clone()).get(bundle).await
        && let Some(step) = b.status.and_then(|s| s.build).and_then(|b| b.install_step)
        && seen.steps.last() != Some(&step)
    {
        seen.steps.push(step);
    }
}

/// The running launcher pod of the build VMI `uid` (as upstream virt-controller rendered it),
/// and whether the attempt's guest NetworkPolicy selects it.
async fn policy_selects_launcher(
    client: &kube::Client,
    bundle: &str,
    uid: &str,
) -> Option<(String, bool)> {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels(&format!(
            "kubevirt.io=virt-launcher,kubevirt.io/created-by={uid}"
        )))
        .await
        .ok()?;
    let pod = pods
        .items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))?;
    let names = guestcluster::resources::build::Names::of(bundle, 1);
    let policy = Api::<NetworkPolicy>::namespaced(client.clone(), OPERATOR_NS)
        .get_opt(&names.guest_policy)
        .await
        .ok()??;
    let view = sim::network::policy::PodView {
        namespace: OPERATOR_NS.to_owned(),
        name: pod.name_any(),
        labels: pod.labels().clone(),
        ..Default::default()
    };
    Some((
        pod.name_any(),
        sim::network::policy::selects(&policy, &view),
    ))
}

#[tokio::test]
async fn a_built_bundle_goes_through_every_stage_to_ready_and_serves_a_pool_beside_a_downloaded_one()
 {
    let client = support::client().await;
    support::world::world();
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("install");
    good_inputs(&client, &name).await;
    create_build(&client, &name, "30m").await;

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let b = support::wait_long("Published=True", || {
        let (client, api, name, seen) = (client.clone(), api.clone(), name.clone(), seen.clone());
        async move {
            let mut look_now = Seen::default();
            std::mem::swap(&mut look_now, &mut seen.lock().unwrap());
            look(&client, &name, &mut look_now).await;
            *seen.lock().unwrap() = look_now;
            let b = api.get(&name).await.ok()?;
            let build = b.status.as_ref()?.build.as_ref()?;
            // Shown when the wait times out: where the build stood.
            let message = build.message.clone().unwrap_or_default();
            if seen.lock().unwrap().last_message != message {
                eprintln!("build: {message}");
                seen.lock().unwrap().last_message = message;
            }
            assert_ne!(
                build.stage,
                Some(BuildStage::Failed),
                "the build failed: {:?}",
                b.status
            );
            condition(
                &api,
                &name,
                types::PUBLISHED,
                "True",
                reasons::STAGE_SUCCEEDED,
            )
            .await
        }
    })
    .await;
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert!(
        !seen.guarded.is_empty() && seen.guarded.values().all(|selected| *selected),
        "the build's guest NetworkPolicy selects every launcher pod of the build VM: {:?}",
        seen.guarded
    );
    let status = b.status.clone().unwrap();
    let build = status.build.clone().unwrap();
    assert!(
        build.stage >= Some(BuildStage::Validate),
        "{:?}",
        build.stage
    );
    assert_eq!(build.install_step, Some(InstallStep::Certificates));
    let installed = message(&b, types::INSTALLED);
    assert!(installed.contains("more days"), "{installed}");
    for type_ in [types::CUSTOMIZED, types::SEALED] {
        let c = conditions::find(&status.conditions, type_).expect(type_);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", reasons::STAGE_SUCCEEDED)
        );
    }
    let customized = message(&b, types::CUSTOMIZED);
    assert!(
        customized.contains("3 object(s) of postInstallManifestRefs"),
        "{customized}"
    );
    assert!(
        seen.steps.windows(2).all(|w| w[0] < w[1]),
        "steps in order: {:?}",
        seen.steps
    );

    // The VM after the cold restart: no ISO, real time, halted for the copy.
    let vm = Api::<VirtualMachine>::namespaced(client.clone(), OPERATOR_NS)
        .get(&format!("{name}-b1-build"))
        .await
        .unwrap();
    let vm_template = &vm.spec.template.spec;
    assert!(
        vm_template
            .domain
            .devices
            .disks
            .iter()
            .all(|d| d.cdrom.is_none()),
        "no cdrom left: {:?}",
        vm_template.domain.devices.disks
    );
    assert!(vm_template.volumes.iter().all(|v| v.name != "installiso"));
    assert_eq!(
        vm.spec.run_strategy,
        Some(guestcluster::kubevirt::RunStrategy::Halted)
    );
    let vmi_uid = build.vmi_uid.clone().expect("the last VMI recorded");
    assert_eq!(seen.offsets.get(&vmi_uid), Some(&0), "{:?}", seen.offsets);
    assert!(
        seen.offsets.values().filter(|o| **o == -DAY).count() >= 2,
        "the generator and install boots ran a day behind: {:?}",
        seen.offsets
    );

    // The ISOs and the work volume are gone; the root disk stays.
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), OPERATOR_NS);
    for suffix in ["iso", "install-iso", "work"] {
        let gone = pvcs
            .get_opt(&format!("{name}-b1-{suffix}"))
            .await
            .unwrap()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        assert!(gone, "{suffix} PVC deleted by the cold restart");
    }
    assert!(
        pvcs.get_opt(&format!("{name}-b1-root"))
            .await
            .unwrap()
            .is_some()
    );

    // The golden disk: the digest and size in status are the file's.
    let golden = volume_dir(&client, &format!("{name}-golden"))
        .await
        .join("disk.img");
    let bytes = std::fs::metadata(&golden).unwrap().len();
    assert_eq!(status.disk_virtual_size, Some(bytes as i64));
    assert_eq!(
        status.disk_sha256.as_deref(),
        Some(sha256_file(&golden).as_str())
    );
    assert_eq!(
        status.disk_sha256_short.as_deref(),
        status.disk_sha256.as_deref().map(|d| &d[..12])
    );

    // What the golden disk holds, by the guest's own (real-time) clock: both kubelet
    // certificates valid 25 days from a signer that is not the installer's; sealed; customized.
    let state = sim::guest::disk::read_state(&golden)
        .unwrap()
        .expect("a guest on the golden disk");
    for pem in [
        "/var/lib/kubelet/pki/kubelet-client-current.pem",
        "/var/lib/kubelet/pki/kubelet-server-current.pem",
    ] {
        let cert = &state.certificates[pem];
        assert!(cert.not_after - now() >= 25 * DAY, "{pem} valid 25 days");
        assert!(
            !cert.issuer.contains("kubelet-signer"),
            "{pem}: {}",
            cert.issuer
        );
    }
    let file = |path: &str| {
        state
            .files
            .get(path)
            .map(|f| String::from_utf8_lossy(&f.content.0).into_owned())
    };
    assert_eq!(
        file("/var/lib/kubelet/config.json")
            .as_deref()
            .map(str::trim),
        Some("{}"),
        "no pull secret on the node"
    );
    assert!(file("/opt/kubeconfig").is_some_and(|k| k.contains("clusters")));
    let kubelet = &state.units["kubelet.service"];
    assert!(!kubelet.enabled && !kubelet.active, "{kubelet:?}");
    assert_eq!((state.untrimmed_bytes, state.journal_bytes), (0, 0));
    assert_eq!(state.hostname, "crc");
    // The image cache keeps the node IP image and drops what only the install used; etcd keeps
    // no pod record but the network operator's, and no lease.
    let version = state.openshift_version.clone().unwrap();
    let image = |component: &str| sim::guest::exec::containers::payload_image(component, &version);
    assert!(state.image_cache.contains(&image("baremetal-runtimecfg")));
    assert!(!state.image_cache.contains(&image("cluster-bootstrap")));
    // A clone killed rather than shut down boots again with its images: CRI-O's crio-wipe would
    // empty the store after a stop that was not clean, and a sealed disk cannot pull.
    {
        use sim::guest::exec::{Machine, Runtime};
        let runtime = || Runtime::new(64 << 30, 0, false);
        let clone = Machine::power_on(state.clone(), runtime());
        let killed = Machine::power_on(clone.state, runtime());
        assert!(
            killed
                .state
                .image_cache
                .contains(&image("baremetal-runtimecfg")),
            "the node IP image is gone after an unclean restart: {:?}",
            killed.state.journal.get("crio-wipe.service")
        );
    }
    assert!(state.containers.is_empty(), "{:?}", state.containers);
    let stale: Vec<&String> = state
        .etcd_keys
        .iter()
        .filter(|k| {
            (k.starts_with("/kubernetes.io/pods/")
                && !k.starts_with("/kubernetes.io/pods/openshift-network"))
                || k.starts_with("/kubernetes.io/leases/")
        })
        .collect();
    assert!(stale.is_empty(), "left in etcd: {stale:?}");
    assert!(
        state
            .etcd_keys
            .iter()
            .any(|k| k.starts_with("/kubernetes.io/pods/openshift-network")),
        "the network operator's pods stay"
    );
    let (path, content) = POST_INSTALL_FILE;
    assert_eq!(
        file(path).as_deref(),
        Some(content),
        "the post-install MachineConfig rolled out onto the disk"
    );
    let (path, content) = INSTALLED_FILE;
    assert_eq!(
        file(path).as_deref(),
        Some(content),
        "the installation MachineConfig installed onto the disk"
    );

    // No launcher-pod address and no pull secret anywhere in the disk.
    let text = serde_json::to_string(&state).unwrap();
    assert!(!seen.ips.is_empty());
    for ip in &seen.ips {
        assert!(
            !text.contains(ip.as_str()),
            "pod IP {ip} in the built guest"
        );
    }
    assert!(
        !text.contains(PULL_SECRET_AUTH),
        "pull secret on the golden disk"
    );
    // Nor encoded: the MachineConfigs and Secrets the disk's etcd carries hold files and data
    // base64- or URL-encoded (an old rendering keeps the pull secret it was made with).
    let state_json = serde_json::to_value(&state).unwrap();
    assert_eq!(
        encoded_in(&state_json, PULL_SECRET_AUTH, "state"),
        None,
        "pull secret encoded on the golden disk"
    );

    // Validated on a clone, twice, then Ready with everything temporary gone.
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let b = support::wait_long("Ready=True", || {
        let (api, name, last) = (api.clone(), name.clone(), last.clone());
        async move {
            let b = api.get(&name).await.ok()?;
            let message = b.status.as_ref()?.build.as_ref()?.message.clone()?;
            if *last.lock().unwrap() != message {
                eprintln!("build: {message}");
                *last.lock().unwrap() = message;
            }
            condition(&api, &name, types::READY, "True", reasons::BUNDLE_READY).await
        }
    })
    .await;
    let status = b.status.clone().unwrap();
    let validated = message(&b, types::VALIDATED);
    assert!(
        validated.contains("sealing held") || validated.contains("20 days ahead"),
        "{validated}"
    );
    assert_eq!(status.phase, Some(BundlePhase::Ready));
    assert_eq!(
        status.qcow2_pvc_ref.as_ref().map(|r| r.name.as_str()),
        Some(format!("{name}-golden").as_str())
    );
    // Every stage's duration was observed as it ended.
    let metrics = support::world::world().metrics.encode();
    for stage in [
        "Prepare",
        "Install",
        "Customize",
        "Seal",
        "Publish",
        "Validate",
    ] {
        let series = format!(
            "guestcluster_build_stage_duration_seconds_count{{stage=\"{stage}\",result=\"ok\"}}"
        );
        assert!(metrics.contains(&series), "no {series}");
    }
    assert_eq!(status.qcow2_pvc_namespace.as_deref(), Some(OPERATOR_NS));
    assert_eq!(
        status.ssh_key_secret_ref.as_ref().map(|r| r.name.as_str()),
        Some(format!("{name}-ssh-key").as_str())
    );
    let metadata = Api::<ConfigMap>::namespaced(client.clone(), OPERATOR_NS)
        .get(&format!("{name}-metadata"))
        .await
        .expect("the metadata ConfigMap");
    let data = metadata.data.unwrap();
    assert_eq!(data.get("diskSHA256"), status.disk_sha256.as_ref());
    assert_eq!(data.get("ocpVersion"), status.ocp_version.as_ref());
    let source = Api::<DataSource>::namespaced(client.clone(), OPERATOR_NS)
        .get(&name)
        .await
        .expect("the DataSource");
    assert_eq!(
        source.spec.source.pvc.map(|p| p.name),
        Some(format!("{name}-golden"))
    );
    let part = format!("{name}-b1-");
    wait_for("every temporary object deleted", || {
        let (client, part) = (client.clone(), part.clone());
        async move {
            attempt_objects(&client, &part)
                .await
                .is_empty()
                .then_some(())
        }
    })
    .await;
    let b = api.get(&name).await.unwrap();
    assert_eq!(
        conditions::find(&b.status.as_ref().unwrap().conditions, types::READY)
            .unwrap()
            .status,
        "True",
        "Ready stays while the temporary objects go"
    );

    // Credentials are a Secret of the bundle's, never in its status, its Events or the logs and
    // termination messages of its Jobs.
    let status_text = serde_json::to_string(&b.status).unwrap();
    assert!(!status_text.contains("BEGIN"), "no key material in status");
    assert!(!status_text.contains(PULL_SECRET_AUTH));
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let about_it: Vec<_> = events
        .items
        .iter()
        .filter(|e| {
            e.involved_object
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&name))
        })
        .collect();
    assert!(!about_it.is_empty(), "the build's Events");
    for event in about_it {
        let text = serde_json::to_string(event).unwrap();
        assert!(
            !text.contains(PULL_SECRET_AUTH),
            "pull secret in an Event: {text}"
        );
    }
    let pods = world().root.join("sim").join("pods");
    let mut job_logs = 0;
    for entry in std::fs::read_dir(&pods).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.to_string_lossy().contains(&format!("{name}-b1-")) {
            continue;
        }
        // The pod's logs and termination message; its mounted volumes are where the pull
        // secret is meant to be.
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            if path.is_dir() {
                continue;
            }
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            assert!(
                !text.contains(PULL_SECRET_AUTH),
                "pull secret in {}",
                path.display()
            );
            job_logs += 1;
        }
    }
    assert!(job_logs >= 8, "every Job's log read: {job_logs}");
    assert!(
        !world().metrics.encode().contains(PULL_SECRET_AUTH),
        "pull secret in the metrics"
    );

    // Two instances from the built bundle through the normal path, beside an instance of a
    // downloaded bundle.
    let ns = team_namespace(&client).await;
    let downloaded = format!("{name}-download");
    ready_bundle(world(), &client, &downloaded, "4.22.7").await;
    let ocp = status.ocp_version.clone().unwrap_or_default();
    let built_template =
        template(serde_json::json!({"crcBundleRef": {"name": name}, "ocpVersion": ocp}));
    create_pool(&client, &ns, "built", 2, built_template).await;
    let downloaded_template = template(serde_json::json!({"crcBundleRef": {"name": downloaded}}));
    create_instance(&client, &ns, "downloaded", downloaded_template).await;
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let built = support::wait_long("two Ready instances of the built bundle's pool", || async {
        let params = ListParams::default().labels("opdev.io/pool=built");
        let ready = support::ready_instances(&instances, &params).await?;
        (ready.len() == 2).then_some(ready)
    })
    .await;
    for instance in &built {
        let bound = instance
            .status
            .as_ref()
            .and_then(|s| s.crc.as_ref())
            .and_then(|c| c.boot_key.as_ref());
        assert_eq!(
            bound.and_then(|k| k.disk_sha256.clone()),
            status.disk_sha256,
            "the boot key bound to the built disk's digest"
        );
        assert_configured(&client, &ns, instance).await;
        // The user's post-install manifest, applied in the build, is in every clone.
        let secret = Api::<Secret>::namespaced(client.clone(), &ns)
            .get(&guestcluster::resources::instance::kubeconfig_secret_name(
                &instance.name_any(),
            ))
            .await
            .unwrap();
        let kubeconfig = secret.data.unwrap()["kubeconfig"].0.clone();
        let guest = guestcluster::guest::route::RouteAccess::via_proxy(&world().router.to_string())
            .client(&kubeconfig)
            .unwrap();
        let marker = Api::<ConfigMap>::namespaced(guest.clone(), "scenario")
            .get("scenario-marker")
            .await
            .expect("the post-install ConfigMap in the instance's cluster");
        assert_eq!(marker.data.unwrap()["built"], "yes");
        // So is the user's installation MachineConfig: the object, and its file on the node.
        let configs = Api::<kube::api::DynamicObject>::all_with(
            guest,
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk(
                    "machineconfiguration.openshift.io",
                    "v1",
                    "MachineConfig",
                ),
                "machineconfigs",
            ),
        );
        configs
            .get("99-scenario")
            .await
            .expect("the installation MachineConfig in the instance's cluster");
        let vmi = Api::<VirtualMachineInstance>::namespaced(client.clone(), &ns)
            .get(&guestcluster::resources::instance::vm_name(
                &instance.name_any(),
            ))
            .await
            .expect("the instance's VMI");
        let node = world()
            .sim
            .guests
            .state(&vmi.uid().unwrap())
            .expect("the instance's guest runs");
        let (path, content) = INSTALLED_FILE;
        assert_eq!(
            node.file(path),
            Some(content.as_bytes()),
            "the installation MachineConfig's file on the instance's node"
        );
    }
    let other = ready_instance(&instances, "downloaded").await;
    assert_configured(&client, &ns, &other).await;

    // OpenShift assigned the agents' pods the first UID and group of the namespace's range.
    let namespace = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .get(&ns)
        .await
        .unwrap();
    let range = namespace.annotations()["openshift.io/sa.scc.uid-range"].clone();
    let first: i64 = range.split('/').next().unwrap().parse().unwrap();
    let users = support::crc::agent_pod_users(&client, &ns).await;
    assert!(!users.is_empty(), "the agents' pods are listed");
    for user in users {
        assert_eq!(
            user,
            (Some(first), Some(first), Some("restricted-v2".to_owned())),
            "assigned by restricted-v2 from {range}"
        );
    }
    // The default class's StorageProfile prefers Block: the instances' disks are devices, cloned
    // from the Filesystem golden disk the disk Job wrote.
    assert_eq!(
        support::crc::volume_modes(&client, &ns).await,
        std::collections::BTreeSet::from(["Block".to_owned()])
    );
}

fn sha256_file(path: &std::path::Path) -> String {
    use sha2::Digest as _;
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).unwrap();
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).unwrap();
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn a_root_disk_deleted_mid_install_fails_the_attempt_and_is_not_adopted() {
    lost_mid_build("install-lost", types::INSTALLED, |build| {
        build.resources.as_ref()?.root_data_volume.clone()
    })
    .await;
}

#[tokio::test]
async fn a_validation_clone_deleted_mid_validate_fails_the_attempt_and_is_not_adopted() {
    lost_mid_build("validate-lost", types::VALIDATED, |build| {
        helper_running(build, BuildStage::Validate, "-validate-")
            .then_some(())
            .and(build.resources.as_ref()?.validation_data_volume.clone())
    })
    .await;
}

/// A node drain while the build VM runs a day behind. KubeVirt's cluster default on OpenShift
/// Virtualization, `LiveMigrate`, would hold the drain for the whole build (the root disk is
/// `ReadWriteOnce`) or, on shared storage, migrate the guest and reset its clock; the build VM's
/// own `evictionStrategy: None` lets the drain kill it, the guest starts again on the same
/// shifted clock, and the build goes on.
#[tokio::test]
async fn a_drain_mid_install_kills_the_shifted_build_vm_and_the_build_goes_on() {
    use k8s_openapi::api::core::v1::Pod;

    let client = support::client().await;
    support::world::world();
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("drained");
    good_inputs(&client, &name).await;
    create_build(&client, &name, "30m").await;
    let vm = format!("{name}-b1-build");
    let vmis = Api::<VirtualMachineInstance>::namespaced(client.clone(), OPERATOR_NS);
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NS);
    let (vmi_uid, pod) = support::wait_long("the install boot running a day behind", || async {
        let vmi = vmis.get_opt(&vm).await.ok()??;
        let install_iso = vmi.spec.volumes.iter().any(|v| {
            v.claim_name()
                .is_some_and(|claim| claim.ends_with("-install-iso"))
        });
        let shifted = vmi.spec.domain.clock_offset_seconds() == -DAY;
        if !(install_iso && shifted && vmi.is_ready()) {
            return None;
        }
        let uid = vmi.metadata.uid.clone()?;
        let selector = format!("{}={uid}", guestcluster::kubevirt::labels::CREATED_BY);
        let pod = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .ok()?
            .items
            .pop()?;
        Some((uid, pod.name_any()))
    })
    .await;

    support::evict_once(OPERATOR_NS, &pod)
        .await
        .unwrap_or_else(|(code, message)| panic!("the drain is held ({code}): {message}"));
    let restarted =
        support::wait_long("the build VM started again, still a day behind", || async {
            let vmi = vmis.get_opt(&vm).await.ok()??;
            (vmi.metadata.uid.as_deref() != Some(vmi_uid.as_str()) && vmi.is_ready()).then_some(vmi)
        })
        .await;
    assert_eq!(restarted.spec.domain.clock_offset_seconds(), -DAY);
    let installed = support::wait_long("Installed", || async {
        let b = api.get(&name).await.ok()?;
        let c = conditions::find(&b.status.as_ref()?.conditions, types::INSTALLED)?;
        (c.status == "True").then_some(c.message.clone())
    })
    .await;
    assert!(installed.contains(&vm), "{installed}");
}

/// Deletes the DataVolume `recorded` names once the build records it, and checks the stage's
/// condition says `ResourceLost` naming it and the attempt's VMs go.
async fn lost_mid_build(
    prefix: &str,
    condition: &str,
    recorded: impl Fn(&guestcluster::api::bundle::BuildStatus) -> Option<ObjectIdentity>,
) {
    let client = support::client().await;
    support::world::world();
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique(prefix);
    good_inputs(&client, &name).await;
    create_build(&client, &name, "30m").await;

    let lost = support::wait_long("the DataVolume recorded", || async {
        let build = api.get(&name).await.ok()?.status?.build?;
        recorded(&build).filter(|r| !r.uid.is_empty())
    })
    .await;
    let dvs = Api::<guestcluster::cdi::DataVolume>::namespaced(client.clone(), OPERATOR_NS);
    dvs.delete(&lost.name, &DeleteParams::default())
        .await
        .unwrap();

    let b = wait_for("ResourceLost", || async {
        let b = api.get(&name).await.ok()?;
        let c = conditions::find(&b.status.as_ref()?.conditions, condition)?;
        (c.reason == reasons::RESOURCE_LOST).then_some(b)
    })
    .await;
    let text = message(&b, condition);
    assert!(
        text.contains(&lost.name) && text.contains(&lost.uid),
        "{text}"
    );
    // The attempt's objects go, its VMs first among them.
    for vm in ["build", "validation"] {
        wait_for(&format!("the {vm} VM deleted"), || async {
            Api::<VirtualMachine>::namespaced(client.clone(), OPERATOR_NS)
                .get_opt(&format!("{name}-b1-{vm}"))
                .await
                .ok()?
                .is_none_or(|vm| vm.metadata.deletion_timestamp.is_some())
                .then_some(())
        })
        .await;
    }
}

/// Where `needle` hides in `value` in an encoding: a `data:` URL (base64 or percent-encoded) or a
/// base64 string (Secret data); the JSON path of the first such string.
fn encoded_in(value: &serde_json::Value, needle: &str, path: &str) -> Option<String> {
    use base64::Engine as _;
    match value {
        serde_json::Value::String(text) => {
            let decoded = if text.starts_with("data:") {
                guestcluster::resources::profile::ignition_config::decode_data_url(text)
            } else {
                base64::engine::general_purpose::STANDARD.decode(text).ok()
            };
            decoded
                .filter(|bytes| String::from_utf8_lossy(bytes).contains(needle))
                .map(|_| path.to_owned())
        }
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| encoded_in(item, needle, &format!("{path}[{i}]"))),
        serde_json::Value::Object(fields) => fields
            .iter()
            .find_map(|(key, item)| encoded_in(item, needle, &format!("{path}.{key}"))),
        _ => None,
    }
}

/// A deletion-relevant watch event: the object, the etcd revision of the event (one counter for
/// every resource, so events of different kinds are ordered by it), and whether it was the
/// object's removal or the start of its deletion.
#[derive(Clone, Debug)]
struct Change {
    kind: &'static str,
    name: String,
    revision: u64,
    gone: bool,
}

/// Records every deletion start and removal of `K` objects whose name contains `part`.
fn record_deletions<K>(
    client: &kube::Client,
    part: String,
    into: std::sync::Arc<std::sync::Mutex<Vec<Change>>>,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let api = Api::<K>::namespaced(client.clone(), OPERATOR_NS);
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let (object, gone) = match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => (o, false),
                Ok(Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let meta = object.meta();
            let name = meta.name.clone().unwrap_or_default();
            if !name.contains(&part) || (!gone && meta.deletion_timestamp.is_none()) {
                continue;
            }
            let revision = meta
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or_default();
            into.lock().unwrap().push(Change {
                kind: K::kind(&()).to_string().leak(),
                name,
                revision,
                gone,
            });
        }
    })
}

#[tokio::test]
async fn a_bundle_deleted_mid_install_stops_its_jobs_and_vm_before_any_volume_and_leaves_nothing() {
    deleted_mid_build(
        "install-deleted",
        "the install boot's helper Job running",
        |build| build.install_step == Some(InstallStep::Install),
        WITH_VM,
    )
    .await;
}

#[tokio::test]
async fn a_bundle_deleted_mid_customize_stops_its_helper_and_vm_before_any_volume_and_leaves_nothing()
 {
    deleted_mid_build(
        "customize-deleted",
        "the customize helper Job running",
        |build| helper_running(build, BuildStage::Customize, "-customize-"),
        WITH_VM,
    )
    .await;
}

#[tokio::test]
async fn a_bundle_deleted_mid_seal_stops_its_helper_and_vm_before_any_volume_and_leaves_nothing() {
    deleted_mid_build(
        "seal-deleted",
        "the seal helper Job running",
        |build| helper_running(build, BuildStage::Seal, "-seal-"),
        WITH_VM,
    )
    .await;
}

#[tokio::test]
async fn a_bundle_deleted_mid_validation_stops_both_vms_before_any_volume_and_leaves_nothing() {
    deleted_mid_build(
        "validate-deleted",
        "the validation clone's helper Job running",
        |build| helper_running(build, BuildStage::Validate, "-validate-"),
        WITH_VM,
    )
    .await;
}

#[tokio::test]
async fn a_golden_pvc_of_someone_elses_fails_publish_cleans_up_and_a_retry_builds_to_ready() {
    use guestcluster::api::labels::RETRY_ANNOTATION;
    use kube::api::{Patch, PatchParams};

    let client = support::client().await;
    support::world::world();
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("golden-taken");
    good_inputs(&client, &name).await;
    // A PVC under the golden PVC's name that the bundle does not control: never written to.
    let squatter: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-golden")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), OPERATOR_NS);
    let squatter_uid = pvcs
        .create(&PostParams::default(), &squatter)
        .await
        .unwrap()
        .metadata
        .uid;
    create_build(&client, &name, "30m").await;

    let b = support::wait_long("Published=False ResourceReplaced", || {
        condition(
            &api,
            &name,
            types::PUBLISHED,
            "False",
            reasons::RESOURCE_REPLACED,
        )
    })
    .await;
    let status = b.status.clone().unwrap();
    assert_eq!(status.phase, Some(BundlePhase::Failed));
    assert!(
        message(&b, types::PUBLISHED).contains(&format!("PersistentVolumeClaim {name}-golden")),
        "{}",
        message(&b, types::PUBLISHED)
    );
    for type_ in [types::INSTALLED, types::CUSTOMIZED, types::SEALED] {
        let c = conditions::find(&status.conditions, type_).expect(type_);
        assert_eq!(
            c.status, "True",
            "{type_} is kept after a later stage fails"
        );
    }
    let part = format!("{name}-b1-");
    wait_for("the failed attempt's objects deleted", || {
        let (client, part) = (client.clone(), part.clone());
        async move {
            attempt_objects(&client, &part)
                .await
                .is_empty()
                .then_some(())
        }
    })
    .await;
    let kept = pvcs.get(&format!("{name}-golden")).await.unwrap();
    assert_eq!(
        kept.metadata.uid, squatter_uid,
        "the same PVC, not replaced"
    );
    assert!(
        kept.metadata.owner_references.is_none(),
        "never adopted: {:?}",
        kept.metadata.owner_references
    );

    // The name freed and a retry asked for: attempt 2 builds to Ready into its own golden PVC.
    pvcs.delete(&format!("{name}-golden"), &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the squatter gone", || async {
        pvcs.get_opt(&format!("{name}-golden"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {RETRY_ANNOTATION: "1"}}})),
    )
    .await
    .unwrap();
    let b = support::wait_long("attempt 2 Ready", || {
        condition(&api, &name, types::READY, "True", reasons::BUNDLE_READY)
    })
    .await;
    let build = b.status.unwrap().build.unwrap();
    assert_eq!(
        (build.attempt, build.retry.as_deref()),
        (Some(2), Some("1"))
    );
    let golden = pvcs.get(&format!("{name}-golden")).await.unwrap();
    assert!(
        golden
            .metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .any(|r| r.controller == Some(true) && r.name == name),
        "the golden PVC is the bundle's now"
    );
}

#[tokio::test]
async fn a_bundle_deleted_mid_publish_stops_its_disk_job_before_any_volume_and_leaves_nothing() {
    // The build VM is stopped before the disk Job starts, so no VMI is running then.
    deleted_mid_build(
        "publish-deleted",
        "the disk Job running",
        |build| {
            build.stage == Some(BuildStage::Publish)
                && build
                    .resources
                    .as_ref()
                    .and_then(|r| r.disk_job.as_ref())
                    .is_some_and(|j| !j.uid.is_empty())
        },
        &["Job", "PersistentVolumeClaim", "DataVolume"],
    )
    .await;
}

/// What a build deleted while its VM runs must be seen removing.
const WITH_VM: &[&str] = &[
    "Job",
    "VirtualMachineInstance",
    "PersistentVolumeClaim",
    "DataVolume",
];

/// Whether the build is in `stage` with the helper Job of the step named `part` recorded.
fn helper_running(
    build: &guestcluster::api::bundle::BuildStatus,
    stage: BuildStage,
    part: &str,
) -> bool {
    build.stage == Some(stage)
        && build
            .resources
            .as_ref()
            .and_then(|r| r.helper_job.as_ref())
            .is_some_and(|h| h.name.contains(part))
}

/// Deletes a build once `until` holds of its status with a helper Job created, and checks the
/// finalizer came first, every Job, VMI and pod went before any volume, an object of each of
/// `removed` kinds went, and nothing is left.
async fn deleted_mid_build(
    prefix: &str,
    what: &str,
    until: impl Fn(&guestcluster::api::bundle::BuildStatus) -> bool,
    removed: &[&str],
) {
    use k8s_openapi::api::core::v1::Pod;

    let client = support::client().await;
    support::world::world();
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique(prefix);
    good_inputs(&client, &name).await;
    // Every state the bundle passes through (a watch misses none): whether it carried the
    // finalizer, and whether anything of the build was recorded yet.
    let states = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let bundle_watch = {
        use futures::StreamExt;
        use kube::runtime::watcher::{self, Event};
        let states = states.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher::watcher(api.clone(), config);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(Event::Apply(b) | Event::InitApply(b)) = event {
                    let finalized = b
                        .metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|f| f == "guestcluster.opdev.io/build-cleanup");
                    let recorded = b
                        .status
                        .and_then(|s| s.build)
                        .and_then(|b| b.resources)
                        .is_some();
                    states.lock().unwrap().push((finalized, recorded));
                }
            }
        })
    };
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    create_build(&client, &name, "30m").await;
    support::wait_long(what, || async {
        let build = api.get(&name).await.ok()?.status?.build?;
        let holds = until(&build);
        let helper = build.resources?.helper_job.filter(|j| !j.uid.is_empty())?;
        holds.then_some(helper)
    })
    .await;
    bundle_watch.abort();
    let states = states.lock().unwrap().clone();
    let first_recorded = states
        .iter()
        .position(|(_, recorded)| *recorded)
        .expect("the build recorded its objects");
    assert!(
        states[..=first_recorded]
            .iter()
            .any(|(finalized, _)| *finalized)
            && states[first_recorded..]
                .iter()
                .all(|(finalized, _)| *finalized),
        "the finalizer comes before anything of the build is recorded: {states:?}"
    );

    let changes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let part = format!("{name}-b1");
    let watches = [
        record_deletions::<Job>(&client, part.clone(), changes.clone()),
        record_deletions::<VirtualMachineInstance>(&client, part.clone(), changes.clone()),
        record_deletions::<Pod>(&client, part.clone(), changes.clone()),
        record_deletions::<PersistentVolumeClaim>(&client, part.clone(), changes.clone()),
        record_deletions::<DataVolume>(&client, part.clone(), changes.clone()),
    ];
    // Let the watches list first, so no change of the deletion is missed.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    // Volumes whose deletion started before this (the cold restart's) are not this order's.
    let cut: u64 = api
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .and_then(|b| b.metadata.resource_version)
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    support::wait_long("the bundle gone", || async {
        api.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    // Nothing of the build is left once its finalizer is off.
    let remaining = attempt_objects(&client, &part).await;
    assert!(remaining.is_empty(), "left behind: {remaining:?}");
    // The watches trail the reads: wait until each has delivered the removals that already
    // happened (every deletion start seen has its removal, and each expected kind has one).
    support::wait_long("the watches to deliver every removal", || {
        let changes = changes.clone();
        async move {
            let changes = changes.lock().unwrap();
            let started_and_gone = changes.iter().filter(|c| !c.gone).all(|start| {
                changes
                    .iter()
                    .any(|c| c.gone && c.kind == start.kind && c.name == start.name)
            });
            let every_kind = removed
                .iter()
                .all(|kind| changes.iter().any(|c| c.gone && c.kind == *kind));
            (started_and_gone && every_kind).then_some(())
        }
    })
    .await;
    for watch in watches {
        watch.abort();
    }

    let changes = changes.lock().unwrap().clone();
    let stopped = changes
        .iter()
        .filter(|c| c.gone && matches!(c.kind, "Job" | "VirtualMachineInstance" | "Pod"))
        .map(|c| c.revision)
        .max()
        .expect("the Jobs, the VMI and the pods went");
    // Deleted before (the cold restart's ISO and work volumes, held until the pods that mounted
    // them go): their removal now finishes an earlier deletion, not one of this order.
    let earlier: BTreeSet<&str> = changes
        .iter()
        .filter(|c| c.revision <= cut)
        .map(|c| c.name.as_str())
        .collect();
    let first_volume = changes
        .iter()
        .filter(|c| !earlier.contains(c.name.as_str()))
        .filter(|c| matches!(c.kind, "PersistentVolumeClaim" | "DataVolume"))
        .min_by_key(|c| c.revision)
        .expect("the volumes were deleted");
    assert!(
        stopped < first_volume.revision,
        "{} {} was deleted while a Job, VMI or pod still existed: {changes:#?}",
        first_volume.kind,
        first_volume.name
    );
}
