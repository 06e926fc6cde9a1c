//! The CRC plan, driven without an API server: a small in-memory world applies each plan's
//! actions and status, and plays KubeVirt, CDI, the agent and the guest API where the tests say
//! so. Every reason the plan can set is reached here.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

use super::*;
use crate::actors::instance::crc::observe::{self, Observed};
use crate::actors::runtime::views::RouteHost;
use crate::api::bundle::{BundlePhase, BundleSource, CRCBundleSpec, CRCBundleStatus};
use crate::api::instance::{ClusterInstanceSpec, InstancePhase};

const NS: &str = "team-a";
const UID: &str = "instance-uid";
const BUNDLE: &str = "crc-4.16.0-amd64";
const SYSTEM: &str = "guestcluster-system";
const DOMAIN: &str = "apps.mgmt.example.com";
const KEY: &[u8] = b"-----BEGIN OPENSSH PRIVATE KEY-----\nkey\n";
/// 2026-12-01T00:00:00Z: the identity's certificates are issued and checked at this time.
const NOW: i64 = 1_795_996_800;

fn now() -> Time {
    Time(Timestamp::from_second(NOW).unwrap())
}

fn owned(name: &str, uid: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        uid: Some(uid.into()),
        owner_references: Some(vec![OwnerReference {
            api_version: "guestcluster.opdev.io/v1alpha1".into(),
            kind: "ClusterInstance".into(),
            name: "crc-1".into(),
            uid: UID.into(),
            controller: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn foreign(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NS.into()),
        uid: Some(format!("{name}-foreign-uid")),
        ..Default::default()
    }
}

fn secret(meta: ObjectMeta, data: &[(&str, &[u8])]) -> Secret {
    Secret {
        metadata: meta,
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn instance(mut template: serde_json::Value) -> ClusterInstance {
    template["memory"] = json!("16Gi");
    template["cores"] = json!(4);
    if template.get("ocpVersion").is_none() {
        template["ocpVersion"] = json!("4.16.0");
    }
    let spec: ClusterInstanceSpec =
        serde_json::from_value(json!({"type": "crc", "template": template})).unwrap();
    let mut instance = ClusterInstance::new("crc-1", spec);
    instance.metadata.namespace = Some(NS.into());
    instance.metadata.uid = Some(UID.into());
    instance.metadata.generation = Some(1);
    instance
}

fn ready_bundle(uid: &str) -> CRCBundle {
    let spec: CRCBundleSpec = serde_json::from_value(json!({"version": "4.16.0"})).unwrap();
    let mut bundle = CRCBundle::new(BUNDLE, spec);
    bundle.metadata.uid = Some(uid.into());
    bundle.status = Some(CRCBundleStatus {
        phase: Some(BundlePhase::Ready),
        source: Some(BundleSource::Download),
        qcow2_pvc_ref: Some(LocalRef {
            name: format!("{BUNDLE}-golden"),
        }),
        qcow2_pvc_namespace: Some(SYSTEM.into()),
        ssh_key_secret_ref: Some(LocalRef {
            name: format!("{BUNDLE}-ssh-key"),
        }),
        sha256: Some("a".repeat(64)),
        disk_virtual_size: Some(33_285_996_544),
        vm_profile: Some("crc-download-v0".into()),
        ..Default::default()
    });
    bundle
}

/// A controller reference to the bundle [`ready_bundle`] makes with UID `bundle_uid`, as its
/// prep Job sets on the golden PVC and the key Secret.
fn owned_by_bundle(bundle_uid: &str) -> Option<Vec<OwnerReference>> {
    Some(vec![OwnerReference {
        api_version: "guestcluster.opdev.io/v1alpha1".into(),
        kind: "CRCBundle".into(),
        name: BUNDLE.into(),
        uid: bundle_uid.into(),
        controller: Some(true),
        ..Default::default()
    }])
}

fn golden_pvc(uid: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(format!("{BUNDLE}-golden")),
            namespace: Some(SYSTEM.into()),
            uid: Some(uid.into()),
            owner_references: owned_by_bundle("bundle-uid"),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn bundle_key(key: &[u8]) -> Secret {
    let meta = ObjectMeta {
        name: Some(format!("{BUNDLE}-ssh-key")),
        namespace: Some(SYSTEM.into()),
        uid: Some("bundle-key-uid".into()),
        owner_references: owned_by_bundle("bundle-uid"),
        ..Default::default()
    };
    secret(meta, &[(boot_key::KEY, key)])
}

/// An API server, KubeVirt, CDI, agent and guest in memory: the plan's actions land here, and
/// the tests move the parts the operator does not control.
struct World {
    instance: ClusterInstance,
    status: ClusterInstanceStatus,
    o: Observed,
    settings: Settings,
    uids: usize,
}

impl World {
    /// A turnkey instance of `crcVersion: 4.16.0`, its pull secret, a Ready bundle and the
    /// cluster's ingress domain; nothing of the instance's own yet.
    fn turnkey() -> Self {
        Self::with(instance(
            json!({"crcVersion": "4.16.0", "ocpVersion": "4.16.0"}),
        ))
    }

    fn with(instance: ClusterInstance) -> Self {
        let o = Observed {
            pull_secret: Some(secret(
                foreign("pull-secret"),
                &[(".dockerconfigjson", b"{\"auths\":{}}")],
            )),
            bundle: Some(ready_bundle("bundle-uid")),
            bundle_pvc: Some(golden_pvc("golden-uid")),
            bundle_key: Some(bundle_key(KEY)),
            bundle_namespace: SYSTEM.into(),
            ingress_domain: Some(DOMAIN.into()),
            ..Observed::default()
        };
        Self {
            instance,
            status: ClusterInstanceStatus::default(),
            o,
            settings: Settings {
                job_image: "quay.io/opdev/guestcluster:test".into(),
                pod_users: Default::default(),
            },
            uids: 0,
        }
    }

    fn plan(&self) -> Plan {
        plan(&Input {
            instance: &self.instance,
            status: &self.status,
            observed: &self.o,
            now: now(),
            settings: &self.settings,
        })
    }

    /// One pass: plan, apply its actions as the API server would, record its status.
    fn pass(&mut self) -> Plan {
        // As `observe` reads it: the golden PVC by the binding while the clone runs.
        let cloning = self
            .o
            .data_volume
            .as_ref()
            .is_some_and(|dv| dv.status.is_none());
        if cloning && self.o.bound_pvc.is_none() {
            self.o.bound_pvc = self.o.bundle_pvc.clone();
        }
        let planned = self.plan();
        for action in &planned.actions {
            self.apply(action);
        }
        self.status = planned.status.clone();
        planned
    }

    fn uid(&mut self, name: &str) -> String {
        self.uids += 1;
        format!("{name}-uid-{}", self.uids)
    }

    fn stamp(&mut self, meta: &mut ObjectMeta) {
        let name = meta.name.clone().unwrap();
        meta.uid = Some(self.uid(&name));
    }

    fn apply(&mut self, action: &Action) {
        match action {
            Action::Create(new) => match new.clone() {
                New::Secret(mut s) => {
                    self.stamp(&mut s.metadata);
                    let name = s.name_any();
                    if name == res::boot_key_secret_name("crc-1") {
                        self.o.boot_key_copy = Some(*s);
                    } else if name == res::kubeconfig_secret_name("crc-1") {
                        self.o.kubeconfig = Some(*s);
                    } else {
                        panic!("unexpected Secret {name}");
                    }
                }
                New::DataVolume(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.data_volume = Some(*o);
                }
                New::VirtualMachine(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.vm = Some(*o);
                }
                New::Role(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.agent_role = Some(*o);
                }
                New::NetworkPolicy(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.network_policy = Some(*o);
                }
                New::ServiceAccount(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.agent_account = Some(*o);
                }
                New::RoleBinding(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.agent_binding = Some(*o);
                }
                New::Service(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.service = Some(*o);
                }
                New::Route(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.route = Some(*o);
                }
                New::Job(mut o) => {
                    self.stamp(&mut o.metadata);
                    self.o.agent_job = Some(*o);
                }
            },
            Action::CreateIdentity { host } => {
                let identity = identity::generate(host, NOW).unwrap();
                let mut s = res::identity_secret(&self.instance, identity.to_secret_data());
                self.stamp(&mut s.metadata);
                self.o.identity = Some(s);
            }
            Action::CreateGuestKey => {
                let key = crate::guest::keys::generate_ed25519().unwrap();
                let private = crate::guest::keys::to_openssh(&key).unwrap();
                let mut s = res::guest_key_secret(&self.instance, &private, "ssh-ed25519 AAAA");
                self.stamp(&mut s.metadata);
                self.o.guest_key = Some(s);
            }
            Action::Delete(d) => match d.kind {
                DeleteKind::AgentJob => {
                    assert_eq!(
                        self.o.recorded_agent_job.as_ref().unwrap().uid(),
                        Some(d.uid.clone())
                    );
                    self.o.recorded_agent_job = None;
                }
                DeleteKind::Secret if d.name == res::boot_key_secret_name("crc-1") => {
                    assert_eq!(
                        self.o.boot_key_copy.as_ref().unwrap().uid(),
                        Some(d.uid.clone())
                    );
                    self.o.boot_key_copy = None;
                }
                DeleteKind::Secret => {
                    assert_eq!(
                        self.o.kubeconfig.as_ref().unwrap().uid(),
                        Some(d.uid.clone())
                    );
                    self.o.kubeconfig = None;
                }
                DeleteKind::RoleBinding => {
                    assert_eq!(
                        self.o.agent_binding.as_ref().unwrap().uid(),
                        Some(d.uid.clone())
                    );
                    self.o.agent_binding = None;
                }
            },
            Action::RepairRole { rules, .. } => {
                self.o.agent_role.as_mut().unwrap().rules = Some(rules.clone());
            }
            Action::RepairRoleBinding { subjects, .. } => {
                self.o.agent_binding.as_mut().unwrap().subjects = Some(subjects.clone());
            }
            Action::UpdateKubeconfig(wanted) => {
                let existing = self.o.kubeconfig.as_mut().unwrap();
                existing.data = wanted.data.clone();
                existing.metadata.owner_references = wanted.metadata.owner_references.clone();
            }
            Action::Warn { .. } => {}
        }
    }

    /// CDI finished the clone.
    fn disk_cloned(&mut self) {
        let dv = self.o.data_volume.as_mut().unwrap();
        dv.status = Some(
            serde_json::from_value(json!({"phase": "Succeeded", "progress": "100.0%"})).unwrap(),
        );
        // The clone is done: the pass no longer reads the golden PVC by the binding.
        self.o.bound_pvc = None;
    }

    /// KubeVirt started the VM: a Running VMI with `uid` at `ip`.
    fn vm_runs(&mut self, uid: &str, ip: &str) {
        let vm = self.o.vm.as_mut().unwrap();
        vm.status = Some(
            serde_json::from_value(json!({"ready": true, "printableStatus": "Running"})).unwrap(),
        );
        let vmi = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "crc-1", "namespace": NS, "uid": uid},
            "spec": {},
            "status": {"phase": "Running", "interfaces": [{"ipAddress": ip}]},
        });
        self.o.vmi = Some(serde_json::from_value(vmi).unwrap());
    }

    /// The agent of VMI `vmi_uid` published its handoff.
    fn agent_published(&mut self, vmi_uid: &str, ocp_version: &str) {
        let name = res::handoff_secret_name("crc-1", vmi_uid);
        let meta = owned(&name, "handoff-uid");
        // What a guest could put there: none of it may reach the published kubeconfig.
        let kubeconfig = b"apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {server: 'https://evil.example:6443'}\nusers:\n- name: x\n  user:\n    exec: {command: /bin/steal, apiVersion: client.authentication.k8s.io/v1}\n    token: t0ken\n";
        self.o.handoff = Some(secret(
            meta,
            &[
                ("kubeconfig", kubeconfig),
                ("vmiUID", vmi_uid.as_bytes()),
                ("ocpVersion", ocp_version.as_bytes()),
            ],
        ));
    }

    /// A Ready instance: the whole walk, with the guest answering.
    fn ready() -> Self {
        let mut w = Self::turnkey();
        w.converge();
        w
    }

    /// Runs passes, playing CDI, KubeVirt, the agent and the guest, until Ready; returns the
    /// `Ready` reasons passed through.
    fn converge(&mut self) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        for _ in 0..30 {
            let planned = self.pass();
            match &planned.end {
                End::Ready => return reasons,
                End::Probe { .. } => {
                    reasons.push("Probe");
                    self.o.probe = Some(Ok(()));
                    continue;
                }
                End::Stop(stop) => reasons.push(stop.reason),
            }
            if self.o.data_volume.is_some() && self.o.vm.is_some() && self.o.vmi.is_none() {
                self.disk_cloned();
                self.vm_runs("vmi-1", "10.128.0.7");
            }
            if self.o.agent_job.is_some() && self.o.handoff.is_none() {
                self.agent_published("vmi-1", "4.16.0");
            }
        }
        panic!("no Ready after 30 passes: {reasons:?}");
    }
}

fn stop(plan: &Plan) -> &Stop {
    match &plan.end {
        End::Stop(stop) => stop,
        other => panic!("expected a stop, got {other:?}"),
    }
}

fn ready_condition(status: &ClusterInstanceStatus) -> (String, String, String) {
    let c = conditions::find(&status.conditions, types::READY).expect("Ready condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn created_kinds(plan: &Plan) -> Vec<&'static str> {
    plan.actions
        .iter()
        .map(|a| match a {
            Action::Create(New::Secret(_)) => "Secret",
            Action::Create(New::DataVolume(_)) => "DataVolume",
            Action::Create(New::VirtualMachine(_)) => "VirtualMachine",
            Action::Create(New::Role(_)) => "Role",
            Action::Create(New::NetworkPolicy(_)) => "NetworkPolicy",
            Action::Create(New::ServiceAccount(_)) => "ServiceAccount",
            Action::Create(New::RoleBinding(_)) => "RoleBinding",
            Action::Create(New::Service(_)) => "Service",
            Action::Create(New::Route(_)) => "Route",
            Action::Create(New::Job(_)) => "Job",
            Action::CreateIdentity { .. } => "identity",
            Action::CreateGuestKey => "guest key",
            Action::Delete(_) => "delete",
            Action::RepairRoleBinding { .. } | Action::RepairRole { .. } => "repair",
            Action::UpdateKubeconfig(_) => "update",
            Action::Warn { .. } => "warn",
        })
        .collect()
}

#[test]
fn a_turnkey_instance_walks_every_step_in_order_to_ready() {
    let mut w = World::turnkey();
    let mut bundle = ready_bundle("bundle-uid");
    bundle.status.as_mut().unwrap().phase = Some(BundlePhase::Preparing);
    w.o.bundle = Some(bundle);

    // The bundle is not Ready: nothing is created.
    let p = w.pass();
    assert!(p.actions.is_empty());
    assert_eq!(stop(&p).reason, reasons::CRC_BACKING_PENDING);
    assert!(
        stop(&p)
            .message
            .contains("waiting for CRCBundle crc-4.16.0-amd64")
    );
    assert_eq!(p.status.phase, Some(InstancePhase::Provisioning));
    // So the pass did not need the instance's own objects (`observe` skips them).
    assert!(observe::waits_unbound(
        &w.instance,
        &w.status,
        w.o.bundle.as_ref()
    ));

    // Ready: the binding is recorded, alone, before any disk.
    w.o.bundle = Some(ready_bundle("bundle-uid"));
    assert!(!observe::waits_unbound(
        &w.instance,
        &w.status,
        w.o.bundle.as_ref()
    ));
    let p = w.pass();
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(stop(&p).requeue, Some(AFTER_RECORD));
    // Bound: its objects are read whatever the bundle does next.
    let mut gone_back = ready_bundle("bundle-uid");
    gone_back.status.as_mut().unwrap().phase = Some(BundlePhase::Preparing);
    assert!(!observe::waits_unbound(
        &w.instance,
        &w.status,
        Some(&gone_back)
    ));
    let binding = w.status.crc.as_ref().unwrap().boot_key.clone().unwrap();
    assert_eq!(binding.pvc_uid, "golden-uid");
    assert_eq!(binding.key_sha256, boot_key::key_sha256(KEY));

    // Then the key copy and the clone.
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["Secret", "DataVolume"]);
    assert!(
        stop(&p)
            .message
            .contains("creating DataVolume crc-1-rootdisk")
    );
    w.o.bound_pvc = Some(golden_pvc("golden-uid"));

    // While it clones, the VM.
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["VirtualMachine"]);
    let p = w.pass();
    assert!(p.actions.is_empty());
    assert!(
        stop(&p)
            .message
            .contains("waiting for VirtualMachine crc-1 to run"),
        "{}",
        stop(&p).message
    );

    // KubeVirt cannot start it (QEMU cannot open a disk): the instance says so, and waits.
    w.disk_cloned();
    w.o.vmi = Some(
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "crc-1", "namespace": NS, "uid": "vmi-0"},
            "spec": {},
            "status": {"phase": "Scheduled", "conditions": [{"type": "Synchronized",
                "status": "False", "reason": "Synchronizing with the Domain failed.",
                "message": "Could not open 'disk.img': Permission denied"}]},
        }))
        .unwrap(),
    );
    let p = w.pass();
    assert!(p.actions.is_empty());
    assert_eq!(stop(&p).reason, reasons::VM_START_BLOCKED);
    assert_eq!(
        stop(&p).message,
        "KubeVirt cannot start VirtualMachine crc-1: Synchronizing with the Domain failed.: \
         Could not open 'disk.img': Permission denied"
    );

    // The VMI runs: its UID is recorded before anything is named after it.
    w.vm_runs("vmi-1", "10.128.0.7");
    let p = w.pass();
    assert!(p.actions.is_empty());
    assert_eq!(
        w.status.crc.as_ref().unwrap().vmi_uid.as_deref(),
        Some("vmi-1")
    );
    assert_eq!(
        w.status.crc.as_ref().unwrap().ssh_endpoint.as_deref(),
        Some("10.128.0.7")
    );

    // Agent access and Service; the API endpoint is chosen and recorded before the Route.
    let p = w.pass();
    assert_eq!(
        created_kinds(&p),
        [
            "Role",
            "ServiceAccount",
            "RoleBinding",
            "Service",
            "NetworkPolicy"
        ]
    );
    assert!(
        stop(&p).message.contains("API endpoint https://api-"),
        "{}",
        stop(&p).message
    );
    let endpoint = w.status.api_endpoint.clone().unwrap();
    assert!(endpoint.ends_with(DOMAIN));

    // The Route, the identity, the guest key and the agent Job of this VMI.
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["Route", "identity", "guest key", "Job"]);
    assert_eq!(stop(&p).reason, reasons::AGENT_POD_PENDING);
    assert_eq!(
        w.o.agent_job.as_ref().unwrap().name_any(),
        res::agent_job_name("crc-1", "vmi-1")
    );
    let agent = conditions::find(&w.status.conditions, types::CRC_AGENT).unwrap();
    assert_eq!(
        (agent.status.as_str(), agent.reason.as_str()),
        ("Unknown", reasons::AGENT_POD_PENDING)
    );

    // The agent works.
    w.o.agent_pods = vec![
        serde_json::from_value::<Pod>(json!({
        "metadata": {"name": "agent-pod"}, "status": {"phase": "Running"}}))
        .unwrap(),
    ];
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::AGENT_WORKING);

    // The handoff arrives: the plan asks for the probe before anything else.
    w.agent_published("vmi-1", "4.16.0");
    w.o.agent_pods.clear();
    let p = w.plan();
    let End::Probe { kubeconfig } = &p.end else {
        panic!("no probe: {:?}", p.end)
    };
    let text = String::from_utf8_lossy(kubeconfig);
    assert!(
        text.contains("server: https://api-crc-1-"),
        "the operator's kubeconfig"
    );

    // The guest API does not answer yet.
    w.o.probe = Some(Err("connection refused".into()));
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::GUEST_API_UNAVAILABLE);
    assert_eq!(stop(&p).requeue, Some(PROBE_RETRY));
    assert!(stop(&p).message.contains("connection refused"));

    // It answers: the kubeconfig is published and the instance is Ready.
    w.o.probe = Some(Ok(()));
    // The agent revoked the bundle key on this disk (recorded with the handoff): the instance's
    // copy of the bundle key goes too.
    let dv_uid = w.o.data_volume.as_ref().unwrap().uid();
    assert_eq!(
        w.status.crc.as_ref().unwrap().instance_key_data_volume_uid,
        dv_uid
    );
    let copy_uid = w.o.boot_key_copy.as_ref().unwrap().uid().unwrap();
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["delete", "Secret"]);
    assert_eq!(
        p.actions[0],
        Action::Delete(Delete {
            kind: DeleteKind::Secret,
            name: res::boot_key_secret_name("crc-1"),
            uid: copy_uid,
        })
    );
    assert_eq!(p.end, End::Ready);
    assert_eq!(w.status.phase, Some(InstancePhase::Ready));
    let (status, reason, _) = ready_condition(&w.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", reasons::BACKING_RESOURCES_AVAILABLE)
    );
    assert_eq!(w.status.api_endpoint.as_ref(), Some(&endpoint));
    assert_eq!(w.status.ocp_version.as_deref(), Some("4.16.0"));
    assert!(conditions::find(&w.status.conditions, types::CRC_AGENT).is_none());
    let version = conditions::find(&w.status.conditions, types::VERSION_MISMATCH).unwrap();
    assert_eq!(version.reason, reasons::OCP_VERSION_MATCHES);

    // A settled instance plans nothing and keeps its status: no copy comes back.
    let before = w.status.clone();
    let p = w.pass();
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.end, End::Ready);
    assert_eq!(p.status, before);
}

#[test]
fn a_lost_guest_key_is_not_replaced_once_the_guest_authorizes_only_it() {
    let mut w = World::ready();
    w.o.guest_key = None;
    let p = w.pass();
    let stop = stop(&p);
    assert_eq!(stop.reason, reasons::BOOT_KEY_UNAVAILABLE);
    assert!(stop.failed);
    assert!(
        stop.message.contains("delete the DataVolume"),
        "{}",
        stop.message
    );
    assert!(
        !p.actions.contains(&Action::CreateGuestKey),
        "a new key would never open the guest"
    );
}

#[test]
fn a_replaced_root_disk_needs_the_bundle_key_again() {
    let mut w = World::ready();
    assert!(
        w.o.boot_key_copy.is_none(),
        "the copy went after the handoff"
    );

    // Another DataVolume under the name: a fresh clone, which authorizes the bundle key only.
    w.o.data_volume.as_mut().unwrap().metadata.uid = Some("rootdisk-uid-2".into());
    let p = w.pass();
    assert!(
        created_kinds(&p).contains(&"Secret") && w.o.boot_key_copy.is_some(),
        "the copy is restored from the bound bundle: {:?}",
        p.actions
    );
}

#[test]
fn the_reasons_of_a_walk_from_nothing() {
    let mut w = World::turnkey();
    assert_eq!(
        w.converge(),
        [
            reasons::CRC_BACKING_PENDING, // bound
            reasons::CRC_BACKING_PENDING, // creating DataVolume
            reasons::CRC_BACKING_PENDING, // creating VirtualMachine
            reasons::CRC_BACKING_PENDING, // VMI recorded
            reasons::CRC_BACKING_PENDING, // endpoint recorded
            reasons::AGENT_POD_PENDING,
            "Probe",
        ]
    );
}

#[test]
fn a_guest_api_version_other_than_the_template_asks_is_reported() {
    let mut w = World::ready();
    w.agent_published("vmi-1", "4.17.1");
    w.pass();
    let version = conditions::find(&w.status.conditions, types::VERSION_MISMATCH).unwrap();
    assert_eq!(
        (version.status.as_str(), version.reason.as_str()),
        ("True", reasons::OCP_VERSION_MISMATCH)
    );
    assert_eq!(w.status.ocp_version.as_deref(), Some("4.17.1"));
}

#[test]
fn objects_of_our_names_that_we_do_not_control_are_conflicts() {
    for break_it in [
        (|o: &mut Observed| o.vm.as_mut().unwrap().metadata = foreign("crc-1"))
            as fn(&mut Observed),
        |o| o.data_volume.as_mut().unwrap().metadata = foreign("crc-1-rootdisk"),
        |o| o.agent_account.as_mut().unwrap().metadata = foreign("sa"),
        |o| o.agent_binding.as_mut().unwrap().metadata = foreign("rb"),
        |o| {
            o.route.as_mut().unwrap().metadata = foreign("route");
        },
        |o| o.identity.as_mut().unwrap().metadata = foreign("identity"),
        |o| o.agent_role.as_mut().unwrap().metadata = foreign("role"),
        // Unowned: taken over by earlier versions, a conflict now.
        |o| o.kubeconfig.as_mut().unwrap().metadata = foreign("crc-1-kubeconfig"),
        |o| o.service.as_mut().unwrap().metadata = foreign("crc-1-crc-api"),
        |o| o.network_policy.as_mut().unwrap().metadata = foreign("policy"),
        |o| {
            o.kubeconfig.as_mut().unwrap().metadata = {
                let mut m = foreign("crc-1-kubeconfig");
                m.owner_references = Some(vec![OwnerReference {
                    uid: "someone".into(),
                    controller: Some(true),
                    ..Default::default()
                }]);
                m
            }
        },
    ] {
        let mut w = World::ready();
        break_it(&mut w.o);
        let p = w.pass();
        assert_eq!(
            stop(&p).reason,
            reasons::RESOURCE_OWNERSHIP_CONFLICT,
            "{}",
            stop(&p).message
        );
        assert!(stop(&p).failed);
        assert!(stop(&p).message.contains("delete or rename it"));
        assert_eq!(p.status.phase, Some(InstancePhase::Failed));
        assert!(
            !p.actions
                .iter()
                .any(|a| matches!(a, Action::Create(_) | Action::Delete(_)))
        );
    }
}

#[test]
fn a_replaced_vmi_withdraws_the_handoff_and_the_guest_is_configured_again() {
    let mut w = World::ready();
    // The old agent Job is still around under its VMI's name.
    let mut old_job = Job {
        metadata: owned(&res::agent_job_name("crc-1", "vmi-1"), "old-job-uid"),
        ..Default::default()
    };
    old_job.metadata.labels = Some(BTreeMap::new());
    w.o.recorded_agent_job = Some(old_job);
    let kubeconfig_uid = w.o.kubeconfig.as_ref().unwrap().uid().unwrap();
    w.vm_runs("vmi-2", "10.128.0.9");
    w.o.handoff = None;
    w.o.agent_job = None;
    w.o.probe = None;

    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::VMI_REPLACED);
    assert!(stop(&p).message.contains("vmi-1 → vmi-2"));
    assert_eq!(
        p.actions,
        [
            Action::Delete(Delete {
                kind: DeleteKind::AgentJob,
                name: res::agent_job_name("crc-1", "vmi-1"),
                uid: "old-job-uid".into()
            }),
            Action::Delete(Delete {
                kind: DeleteKind::Secret,
                name: res::kubeconfig_secret_name("crc-1"),
                uid: kubeconfig_uid
            }),
        ]
    );
    assert_eq!(w.status.kubeconfig_secret_ref, None);
    assert_eq!(
        w.status.crc.as_ref().unwrap().vmi_uid.as_deref(),
        Some("vmi-2")
    );
    assert_eq!(p.status.phase, Some(InstancePhase::Provisioning));

    // The next pass lets the agent's Role name the new VMI's handoff (and no longer the old
    // one's) and starts the agent of the new VMI, keeping identity, Route and key.
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["repair", "Job"]);
    let handoffs: Vec<String> =
        w.o.agent_role
            .as_ref()
            .unwrap()
            .rules
            .iter()
            .flatten()
            .flat_map(|r| r.resource_names.clone().unwrap_or_default())
            .collect();
    assert_eq!(
        handoffs,
        ["crc-1", &res::handoff_secret_name("crc-1", "vmi-2")]
    );
    assert_eq!(
        w.o.agent_job.as_ref().unwrap().name_any(),
        res::agent_job_name("crc-1", "vmi-2")
    );
    w.agent_published("vmi-2", "4.16.0");
    w.o.probe = Some(Ok(()));
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["Secret"]);
    assert_eq!(p.end, End::Ready);
}

#[test]
fn a_ready_instance_whose_vmi_stopped_waits_for_kubevirt() {
    let mut w = World::ready();
    w.o.vmi = None;
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::VMI_UNAVAILABLE);
    assert!(matches!(
        p.actions.as_slice(),
        [Action::Delete(Delete {
            kind: DeleteKind::Secret,
            ..
        })]
    ));
    assert_eq!(w.status.crc.as_ref().unwrap().vmi_uid, None);
    // Not Ready any more: the next pass waits for the VM to run again, without deleting more.
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::CRC_BACKING_PENDING);
    assert!(p.actions.is_empty());
}

#[test]
fn the_user_secrets_an_instance_waits_for_are_its_pull_secret_and_manual_key() {
    let w = World::turnkey();
    assert_eq!(
        crate::actors::instance::crc::inputs::user_secret_names(&w.instance),
        [Some("pull-secret".to_owned()), None]
    );
}

#[test]
fn a_missing_or_empty_pull_secret_fails_with_the_command_to_create_it() {
    for pull in [
        None,
        Some(secret(
            foreign("pull-secret"),
            &[(".dockerconfigjson", b"")],
        )),
    ] {
        let mut w = World::turnkey();
        w.o.pull_secret = pull;
        let p = w.pass();
        assert_eq!(stop(&p).reason, reasons::INVALID_PULL_SECRET);
        assert!(stop(&p).failed);
        // The Secret watch (by name, metadata only) wakes the instance: no timer.
        assert_eq!(stop(&p).requeue, None);
        assert!(
            stop(&p)
                .message
                .contains("kubectl -n team-a create secret generic pull-secret")
        );
        assert!(p.actions.is_empty());
    }
}

#[test]
fn the_manual_path_needs_a_release_image_and_a_key_secret() {
    let manual = |template| {
        let mut w = World::with(instance(template));
        w.o.bundle = None;
        w
    };
    let mut w = manual(json!({}));
    assert!(
        !observe::waits_unbound(&w.instance, &w.status, None),
        "no bundle to wait for: a manual instance reads its objects"
    );
    let p = w.pass();
    assert_eq!(
        (stop(&p).reason, stop(&p).failed),
        (reasons::RECONCILE_ERROR, true)
    );
    assert!(stop(&p).message.contains("names no disk"));

    let mut w = manual(json!({"releaseImage": "https://mirror/crc.img"}));
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::MISSING_BUNDLE_SSH_KEY);
    assert_eq!(stop(&p).requeue, None);
    assert!(stop(&p).message.contains("bundleSSHKeyRef is not set"));

    let mut w = manual(
        json!({"releaseImage": "https://mirror/crc.img", "bundleSSHKeyRef": {"name": "key"}}),
    );
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::MISSING_BUNDLE_SSH_KEY);
    assert!(
        stop(&p)
            .message
            .contains("Secret team-a/key is missing or holds no key")
    );

    // With the key under one of the accepted names, the disk is imported over HTTP, unbound.
    w.o.manual_key = Some(secret(foreign("key"), &[("ssh-privatekey", KEY)]));
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["DataVolume"]);
    let Action::Create(New::DataVolume(dv)) = &p.actions[0] else {
        unreachable!()
    };
    let dv = serde_json::to_value(dv).unwrap();
    assert_eq!(
        dv["spec"]["source"]["http"]["url"],
        "https://mirror/crc.img"
    );
    assert!(
        w.status
            .crc
            .as_ref()
            .and_then(|c| c.boot_key.as_ref())
            .is_none()
    );
}

#[test]
fn the_boot_key_is_never_bound_late_nor_restored_from_a_changed_bundle() {
    let unavailable = |w: &mut World| {
        let p = w.pass();
        assert_eq!(
            stop(&p).reason,
            reasons::BOOT_KEY_UNAVAILABLE,
            "{}",
            stop(&p).message
        );
        assert!(!stop(&p).failed);
        assert!(
            !p.actions.iter().any(|a| matches!(a, Action::Create(_))),
            "{:?}",
            p.actions
        );
        stop(&p).message.clone()
    };

    // Ready without a recorded binding.
    let mut w = World::ready();
    w.status.crc.as_mut().unwrap().boot_key = None;
    assert!(unavailable(&mut w).contains("no boot key is recorded"));

    // A disk exists that no binding describes.
    let mut w = World::turnkey();
    w.pass();
    w.pass();
    w.status.crc.as_mut().unwrap().boot_key = None;
    unavailable(&mut w);

    // The instance's copy is not ours, or holds another key (while the guest still needs it).
    let not_keyed = || {
        let mut w = World::ready();
        w.status.crc.as_mut().unwrap().instance_key_data_volume_uid = None;
        w.pass();
        assert!(
            w.o.boot_key_copy.is_some(),
            "restored for a guest not keyed yet"
        );
        // As before a handoff: the guest still opens to the bundle key.
        w.status.crc.as_mut().unwrap().instance_key_data_volume_uid = None;
        w
    };
    let mut w = not_keyed();
    w.o.boot_key_copy.as_mut().unwrap().metadata = foreign("crc-1-crc-boot-key");
    unavailable(&mut w);
    let mut w = not_keyed();
    w.o.boot_key_copy.as_mut().unwrap().data = Some(BTreeMap::from([(
        boot_key::KEY.into(),
        ByteString(b"other".to_vec()),
    )]));
    unavailable(&mut w);

    // The copy is gone and the bundle was recreated, or its key changed: refusing recovery.
    let mut w = not_keyed();
    w.o.boot_key_copy = None;
    w.o.bundle = Some(ready_bundle("recreated-uid"));
    assert!(unavailable(&mut w).contains("gone or was recreated"));
    let mut w = not_keyed();
    w.o.boot_key_copy = None;
    w.o.bundle_key = Some(bundle_key(b"rotated"));
    unavailable(&mut w);
    // Unchanged: the copy is restored from the bundle.
    let mut w = not_keyed();
    w.o.boot_key_copy = None;
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["Secret"]);
    let restored = w.o.boot_key_copy.as_ref().unwrap();
    assert_eq!(boot_key::key_bytes(restored), Some(KEY));

    // The DataVolume clones another PVC, or the golden PVC was replaced while the clone ran.
    let mut w = World::ready();
    w.o.data_volume
        .as_mut()
        .unwrap()
        .spec
        .source
        .as_mut()
        .unwrap()
        .pvc
        .as_mut()
        .unwrap()
        .name = "other".into();
    assert!(unavailable(&mut w).contains("does not clone the bound golden PVC"));
    let mut w = World::turnkey();
    for _ in 0..3 {
        w.pass();
    }
    w.o.bound_pvc = Some(golden_pvc("replaced-uid"));
    assert!(unavailable(&mut w).contains("replaced while the clone ran"));

    // Right before the clone, the golden disk must still be the bound one.
    let mut w = World::turnkey();
    w.pass();
    w.pass();
    w.o.data_volume = None;
    w.o.bundle_pvc = Some(golden_pvc("replaced-uid"));
    unavailable(&mut w);
}

#[test]
fn a_root_disk_raised_for_the_golden_disk_is_a_warning() {
    let mut w = World::with(instance(
        json!({"crcVersion": "4.16.0", "rootVolumeSize": "10Gi"}),
    ));
    w.pass();
    let p = w.pass();
    assert!(
        matches!(
            &p.actions[..],
            [
                Action::Create(New::Secret(_)),
                Action::Warn {
                    reason: reasons::ROOT_VOLUME_RAISED,
                    ..
                },
                Action::Create(New::DataVolume(_))
            ]
        ),
        "{:?}",
        created_kinds(&p)
    );

    let mut w = World::with(instance(
        json!({"crcVersion": "4.16.0", "rootVolumeSize": "lots"}),
    ));
    w.pass();
    let p = w.pass();
    assert_eq!(
        (stop(&p).reason, stop(&p).failed),
        (reasons::RECONCILE_ERROR, true)
    );
    assert!(stop(&p).message.starts_with("rootVolumeSize:"));
}

#[test]
fn the_vm_needs_the_bound_bundle_for_its_profile() {
    let mut w = World::turnkey();
    w.pass();
    w.pass();
    w.o.bundle = Some(ready_bundle("recreated-uid"));
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::BOOT_KEY_UNAVAILABLE);
    assert!(stop(&p).message.contains("its VM profile is unknown"));

    let mut w = World::turnkey();
    w.pass();
    w.pass();
    w.o.bundle.as_mut().unwrap().status.as_mut().unwrap().source = Some(BundleSource::Build);
    w.o.bundle
        .as_mut()
        .unwrap()
        .status
        .as_mut()
        .unwrap()
        .vm_profile = Some("crc-future-v9".into());
    let p = w.pass();
    assert_eq!(
        (stop(&p).reason, stop(&p).failed),
        (reasons::RECONCILE_ERROR, true)
    );
}

#[test]
fn a_running_vmi_without_an_address_is_waited_for() {
    let mut w = World::ready();
    w.o.vmi
        .as_mut()
        .unwrap()
        .status
        .as_mut()
        .unwrap()
        .interfaces
        .clear();
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::CRC_BACKING_PENDING);
    assert!(stop(&p).message.contains("to report an IP"));
}

#[test]
fn agent_access_is_repaired_or_refused() {
    // Widened rules are put back.
    let mut w = World::ready();
    w.o.agent_role.as_mut().unwrap().rules = Some(vec![PolicyRule {
        verbs: vec!["*".into()],
        ..Default::default()
    }]);
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["repair"]);
    let Some(Action::RepairRole { rules, .. }) = p.actions.first() else {
        panic!("{:?}", p.actions)
    };
    assert!(rules.iter().all(|r| !r.verbs.contains(&"*".to_owned())));

    // A Role of the same name that is not the instance's is never used.
    let mut w = World::ready();
    w.o.agent_role.as_mut().unwrap().metadata.owner_references = None;
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::RESOURCE_OWNERSHIP_CONFLICT);

    // Our binding bound elsewhere (an earlier version's shared ClusterRole) is made again.
    let mut w = World::ready();
    w.o.agent_binding.as_mut().unwrap().role_ref = RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "ClusterRole".into(),
        name: "crc-agent-instance-role".into(),
    };
    let p = w.pass();
    assert!(
        matches!(
            p.actions.as_slice(),
            [Action::Delete(Delete {
                kind: DeleteKind::RoleBinding,
                ..
            })]
        ),
        "{:?}",
        p.actions
    );
    assert!(!stop(&p).failed);

    let mut w = World::ready();
    w.o.agent_binding.as_mut().unwrap().subjects = None;
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["repair"]);
    assert_eq!(p.end, End::Ready);
    w.pass();
    let p = w.pass();
    assert!(p.actions.is_empty());
}

#[test]
fn the_api_endpoint_is_unique_known_and_never_changes() {
    // Taken by another Route before ours exists.
    let mut w = World::turnkey();
    w.converge();
    let host = w
        .status
        .api_endpoint
        .clone()
        .unwrap()
        .replace("https://", "");
    let mut w2 = World::turnkey();
    for _ in 0..5 {
        w2.pass();
        if w2.o.data_volume.is_some() && w2.o.vm.is_some() && w2.o.vmi.is_none() {
            w2.disk_cloned();
            w2.vm_runs("vmi-1", "10.128.0.7");
        }
    }
    w2.o.route_hosts = vec![RouteHost {
        namespace: "other".into(),
        name: "r".into(),
        host: host.clone(),
    }];
    let p = w2.pass();
    assert_eq!(
        (stop(&p).reason, stop(&p).failed),
        (reasons::API_ENDPOINT_CONFLICT, true)
    );
    assert!(stop(&p).message.contains("already used by Route other/r"));

    // Unknown ingress domain.
    let mut w3 = World::turnkey();
    w3.o.ingress_domain = None;
    for _ in 0..6 {
        w3.pass();
        if w3.o.data_volume.is_some() && w3.o.vm.is_some() && w3.o.vmi.is_none() {
            w3.disk_cloned();
            w3.vm_runs("vmi-1", "10.128.0.7");
        }
    }
    let p = w3.pass();
    assert_eq!(stop(&p).reason, reasons::CRC_BACKING_PENDING);
    assert!(stop(&p).message.contains("ingress domain is unknown"));

    // The Route's host disagrees with the recorded endpoint.
    let mut w = World::ready();
    w.o.route.as_mut().unwrap().spec.host = Some(format!("elsewhere.{DOMAIN}"));
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::API_ENDPOINT_CONFLICT);
    assert!(stop(&p).message.contains("disagrees"));
}

#[test]
fn an_identity_that_does_not_match_the_host_is_never_replaced() {
    let mut w = World::ready();
    let other = identity::generate(&format!("other.{DOMAIN}"), NOW).unwrap();
    let mut s = res::identity_secret(&w.instance, other.to_secret_data());
    s.metadata.uid = Some("identity-uid".into());
    w.o.identity = Some(s);
    // The Route keeps the recorded host, so the identity is what disagrees.
    let p = w.pass();
    assert_eq!(
        (stop(&p).reason, stop(&p).failed),
        (reasons::RECONCILE_ERROR, true)
    );
    assert!(
        stop(&p).message.contains("never replaced automatically"),
        "{}",
        stop(&p).message
    );
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::CreateIdentity { .. }))
    );
}

#[test]
fn a_failed_agent_fails_the_instance_with_its_reason() {
    let mut w = World::turnkey();
    let mut reasons_seen = Vec::new();
    for _ in 0..10 {
        let p = w.pass();
        reasons_seen.push(stop(&p).reason);
        if w.o.agent_job.is_some() {
            break;
        }
        if w.o.data_volume.is_some() && w.o.vm.is_some() && w.o.vmi.is_none() {
            w.disk_cloned();
            w.vm_runs("vmi-1", "10.128.0.7");
        }
    }
    w.o.agent_job.as_mut().unwrap().status = Some(serde_json::from_value(json!({
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]
    })).unwrap());
    let p = w.pass();
    assert_eq!(
        (stop(&p).reason, stop(&p).failed),
        (reasons::AGENT_JOB_FAILED, true)
    );
    assert_eq!(p.status.phase, Some(InstancePhase::Failed));
    let agent = conditions::find(&w.status.conditions, types::CRC_AGENT).unwrap();
    assert_eq!(
        (agent.status.as_str(), agent.reason.as_str()),
        ("False", reasons::AGENT_JOB_FAILED)
    );

    // A Job of that name that is not ours is a conflict.
    w.o.agent_job.as_mut().unwrap().metadata = foreign("job");
    let p = w.pass();
    assert_eq!(stop(&p).reason, reasons::RESOURCE_OWNERSHIP_CONFLICT);
}

#[test]
fn a_drifted_or_deleted_kubeconfig_is_published_again() {
    let mut w = World::ready();
    w.o.kubeconfig.as_mut().unwrap().data = Some(BTreeMap::new());
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["update"]);
    assert_eq!(p.end, End::Ready);

    let mut w = World::ready();
    w.o.kubeconfig = None;
    let p = w.pass();
    assert_eq!(created_kinds(&p), ["Secret"]);
}

#[test]
fn a_handoff_for_another_vmi_or_instance_is_not_accepted() {
    let mut w = World::ready();
    w.agent_published("vmi-0", "4.16.0");
    let p = w.pass();
    assert_ne!(p.end, End::Ready);
    assert!(matches!(p.end, End::Stop(_)));

    // One the instance does not control (anyone may create a Secret of that name).
    let mut w = World::ready();
    w.o.handoff
        .as_mut()
        .unwrap()
        .metadata
        .owner_references
        .as_mut()
        .unwrap()[0]
        .controller = None;
    let p = w.pass();
    assert_ne!(p.end, End::Ready);
}

#[test]
fn the_published_kubeconfig_is_the_operators_never_the_guests() {
    let w = World::ready();
    let published = w.o.kubeconfig.as_ref().unwrap().data.as_ref().unwrap();
    let text = String::from_utf8(published["kubeconfig"].0.clone()).unwrap();
    for planted in ["evil.example", "exec", "/bin/steal", "t0ken"] {
        assert!(!text.contains(planted), "{planted} published:\n{text}");
    }
    let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(value["clusters"].as_array().unwrap().len(), 1);
    assert_eq!(value["users"].as_array().unwrap().len(), 1);
    assert_eq!(value["contexts"].as_array().unwrap().len(), 1);
    let server = value["clusters"][0]["cluster"]["server"].as_str().unwrap();
    let host = w.status.api_endpoint.clone().unwrap();
    assert_eq!(server, format!("{host}:443"), "the Route, nothing else");
    assert_eq!(
        value["users"][0]["user"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["client-certificate-data", "client-key-data"]
    );
}

#[test]
fn an_instance_whose_bundle_now_publishes_another_disk_is_stale() {
    let stale = |w: &World| {
        conditions::find(&w.status.conditions, types::STALE)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let mut w = World::turnkey();
    let mut preparing = ready_bundle("bundle-uid");
    preparing.status.as_mut().unwrap().phase = Some(BundlePhase::Preparing);
    w.o.bundle = Some(preparing);
    w.pass();
    assert_eq!(stale(&w), None, "not bound: nothing to be stale against");

    let mut w = World::ready();
    let (status, reason, _) = stale(&w).expect("bound and the bundle Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", reasons::BUNDLE_CURRENT)
    );

    // Deleted and made again with the same disk: still current.
    w.o.bundle = Some(ready_bundle("recreated-uid"));
    w.pass();
    assert_eq!(stale(&w).unwrap().1, reasons::BUNDLE_CURRENT);

    // Rebuilt: another disk under the same name.
    w.o.bundle.as_mut().unwrap().status.as_mut().unwrap().sha256 = Some("b".repeat(64));
    w.pass();
    let (status, reason, message) = stale(&w).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", reasons::BUNDLE_REBUILT)
    );
    assert!(
        message.contains("aaaaaaaaaaaa") && message.contains("bbbbbbbbbbbb"),
        "{message}"
    );

    // Not Ready (being rebuilt): it cannot say, and the last word stands.
    w.o.bundle.as_mut().unwrap().status.as_mut().unwrap().phase = Some(BundlePhase::Preparing);
    w.pass();
    assert_eq!(stale(&w).unwrap().1, reasons::BUNDLE_REBUILT);
}
