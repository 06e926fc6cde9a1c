//! The guest's disk and machine: where the disk comes from (the manual path's URL and key, or
//! the turnkey boot-key binding and the instance's key copy), the root DataVolume, the
//! VirtualMachine, and waiting for its VMI to run.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use kube::api::Api;

use super::{
    BootKey, Error, FILESYSTEM_OVERHEAD, Flow, MANUAL_KEY_NAMES, Pass, Stop, boot_key, go, stop,
};
use crate::api::bundle::CRCBundle;
use crate::api::common::LocalRef;
use crate::api::conditions::reasons;
use crate::api::instance::{CRCBootKeyStatus, InstancePhase};
use crate::cdi::DataVolume;
use crate::kubevirt::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use crate::resources::instance::{self as res, RootDiskSource, VmProfile};

impl Pass<'_> {
    /// Manual path: the key from `bundleSSHKeyRef`, the disk imported from `releaseImage`.
    pub(super) async fn manual_source(&self) -> Flow<(BootKey, RootDiskSource, Option<String>)> {
        let template = &self.instance.spec.template;
        let Some(url) = template.release_image.clone().filter(|u| !u.is_empty()) else {
            return stop(Stop::failed(
                reasons::RECONCILE_ERROR,
                "the template names no disk: set crcVersion, crcBundleRef, or releaseImage with bundleSSHKeyRef",
            ));
        };
        let missing = |detail: String| {
            Stop::failed(
                reasons::MISSING_BUNDLE_SSH_KEY,
                format!(
                    "{detail}: the manual path needs bundleSSHKeyRef naming a Secret with one of {}",
                    MANUAL_KEY_NAMES.join(", ")
                ),
            )
        };
        let Some(secret_name) = template
            .bundle_ssh_key_ref
            .as_ref()
            .and_then(LocalRef::name)
            .map(str::to_owned)
        else {
            return stop(missing("bundleSSHKeyRef is not set".into()));
        };
        let secret = self.get(&self.api::<Secret>(), &secret_name).await?;
        let data_key = secret.as_ref().and_then(|s| {
            let data = s.data.as_ref()?;
            MANUAL_KEY_NAMES
                .into_iter()
                .find(|k| data.get(*k).is_some_and(|ByteString(b)| !b.is_empty()))
        });
        let Some(data_key) = data_key else {
            return stop(missing(format!(
                "Secret {}/{secret_name} is missing or holds no key",
                self.ns
            )));
        };
        go((
            BootKey {
                secret: secret_name,
                data_key: data_key.to_owned(),
            },
            RootDiskSource::Http { url },
            template
                .storage_class_name
                .clone()
                .filter(|s| !s.is_empty()),
        ))
    }

    /// The bundle a template selects (`crcBundleRef`, else `crc-<crcVersion>-<arch>`).
    pub(super) fn bundle_name(&self) -> String {
        crate::actors::resolve::bundle_name(&self.instance.spec.template).unwrap_or_default()
    }

    /// The bundle's disk and key as they are now, for binding or for proving them unchanged.
    pub(super) async fn bundle_source(
        &self,
        bundle: &CRCBundle,
    ) -> Result<(Option<PersistentVolumeClaim>, Option<Secret>), Error> {
        let status = bundle.status.clone().unwrap_or_default();
        let ns = status
            .qcow2_pvc_namespace
            .clone()
            .unwrap_or_else(|| self.ctx.namespace.clone());
        let pvc = match status.qcow2_pvc_ref.as_ref().and_then(LocalRef::name) {
            Some(name) => {
                self.get(
                    &Api::<PersistentVolumeClaim>::namespaced(self.ctx.client.clone(), &ns),
                    name,
                )
                .await?
            }
            None => None,
        };
        let secret = match status.ssh_key_secret_ref.as_ref().and_then(LocalRef::name) {
            Some(name) => {
                self.get(
                    &Api::<Secret>::namespaced(self.ctx.client.clone(), &ns),
                    name,
                )
                .await?
            }
            None => None,
        };
        Ok((pvc, secret))
    }

    /// The bundle the binding names, if it still exists as that very object.
    pub(super) async fn bound_bundle(
        &self,
        binding: &CRCBootKeyStatus,
    ) -> Result<Option<CRCBundle>, Error> {
        let bundle = self
            .get(
                &Api::<CRCBundle>::all(self.ctx.client.clone()),
                &self.bundle_name(),
            )
            .await?;
        Ok(bundle.filter(|b| b.uid().as_deref() == Some(binding.bundle_uid.as_str())))
    }

    /// Turnkey path: bind the boot key once (before any disk), then keep the instance's copy.
    pub(super) async fn turnkey_source(
        &mut self,
        dv: Option<&DataVolume>,
        vm_name: &str,
        dv_name: &str,
    ) -> Flow<(BootKey, RootDiskSource, Option<String>)> {
        let unavailable =
            |e: boot_key::Error| Stop::pending(reasons::BOOT_KEY_UNAVAILABLE, e.to_string());
        let binding = self.status.crc.as_ref().and_then(|c| c.boot_key.clone());
        let Some(binding) = binding else {
            if self.status.phase == Some(InstancePhase::Ready) {
                return stop(unavailable(boot_key::Error::NotRecorded));
            }
            if dv.is_some() {
                return stop(unavailable(boot_key::Error::UnboundDisk {
                    name: dv_name.to_owned(),
                }));
            }
            let name = self.bundle_name();
            let bundle = self
                .get(&Api::<CRCBundle>::all(self.ctx.client.clone()), &name)
                .await?;
            let ready = bundle
                .as_ref()
                .and_then(|b| b.status.as_ref())
                .is_some_and(|s| s.phase == Some(crate::api::bundle::BundlePhase::Ready));
            let Some(bundle) = bundle.filter(|_| ready) else {
                return stop(Stop::pending(
                    reasons::CRC_BACKING_PENDING,
                    format!("waiting for CRCBundle {name} to become Ready"),
                ));
            };
            let (pvc, secret) = self.bundle_source(&bundle).await?;
            let binding = match boot_key::bind(&boot_key::Source {
                bundle: &bundle,
                pvc: pvc.as_ref(),
                secret: secret.as_ref(),
            }) {
                Ok(b) => b,
                Err(e) => return stop(unavailable(e)),
            };
            let crc = self.crc();
            crc.boot_key = Some(binding);
            crc.vm_name = Some(vm_name.to_owned());
            crc.data_volume_name = Some(dv_name.to_owned());
            return stop(Stop::recorded(format!(
                "bound to the disk and key of CRCBundle {name}"
            )));
        };

        // The instance's own copy of the key: checked when present, restored only from a source
        // provably identical to the binding.
        let copy_name = res::boot_key_secret_name(&self.name);
        let copy = self.get(&self.api::<Secret>(), &copy_name).await?;
        match copy {
            Some(copy) => {
                if let Err(e) = boot_key::check_copy(&copy, &self.uid, &binding) {
                    return stop(unavailable(e));
                }
            }
            None => {
                let bundle = self.bound_bundle(&binding).await?;
                let Some(bundle) = bundle else {
                    return stop(unavailable(boot_key::Error::Changed {
                        what: format!("CRCBundle {} is gone or was recreated", self.bundle_name()),
                    }));
                };
                let (pvc, secret) = self.bundle_source(&bundle).await?;
                let source = boot_key::Source {
                    bundle: &bundle,
                    pvc: pvc.as_ref(),
                    secret: secret.as_ref(),
                };
                if let Err(e) = boot_key::verify_unchanged(&binding, &source) {
                    return stop(unavailable(e));
                }
                let key = secret
                    .as_ref()
                    .and_then(boot_key::key_bytes)
                    .unwrap_or_default();
                self.create(&self.api(), &res::boot_key_copy(self.instance, key))
                    .await?;
            }
        }
        let storage_class = self
            .instance
            .spec
            .template
            .storage_class_name
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| binding.storage_class_name.clone());
        go((
            BootKey {
                secret: copy_name,
                data_key: boot_key::KEY.to_owned(),
            },
            RootDiskSource::Pvc {
                namespace: binding.pvc_namespace.clone(),
                name: binding.pvc_name.clone(),
            },
            storage_class,
        ))
    }

    pub(super) async fn create_data_volume(
        &mut self,
        source: RootDiskSource,
        storage_class: Option<String>,
    ) -> Flow<()> {
        let mut golden_size = None;
        if let Some(binding) = self.status.crc.as_ref().and_then(|c| c.boot_key.clone()) {
            // Right before the clone: the golden disk must still be the bound one.
            let Some(bundle) = self.bound_bundle(&binding).await? else {
                return stop(Stop::pending(
                    reasons::BOOT_KEY_UNAVAILABLE,
                    boot_key::Error::Changed {
                        what: format!("CRCBundle {} is gone or was recreated", self.bundle_name()),
                    }
                    .to_string(),
                ));
            };
            let (pvc, secret) = self.bundle_source(&bundle).await?;
            if let Err(e) = boot_key::verify_unchanged(
                &binding,
                &boot_key::Source {
                    bundle: &bundle,
                    pvc: pvc.as_ref(),
                    secret: secret.as_ref(),
                },
            ) {
                return stop(Stop::pending(reasons::BOOT_KEY_UNAVAILABLE, e.to_string()));
            }
            golden_size = bundle
                .status
                .as_ref()
                .and_then(|s| s.disk_virtual_size)
                .and_then(|s| u64::try_from(s).ok());
        }
        let (size, raised) = match res::root_disk_size(
            self.instance.spec.template.root_volume_size.as_deref(),
            golden_size,
            FILESYSTEM_OVERHEAD,
        ) {
            Ok(v) => v,
            Err(e) => {
                return stop(Stop::failed(
                    reasons::RECONCILE_ERROR,
                    format!("rootVolumeSize: {e}"),
                ));
            }
        };
        if let Some(raised) = raised {
            self.ctx
                .events
                .publish(
                    self.instance,
                    crate::actors::events::Kind::Warning,
                    "RootVolumeRaised",
                    &raised.message(),
                )
                .await;
        }
        let dv = res::root_data_volume(self.instance, source, size, storage_class);
        self.create(&self.api(), &dv).await?;
        go(())
    }

    /// An existing DataVolume must clone the bound disk, and while it is still cloning, that
    /// disk must still be the bound PVC.
    pub(super) async fn check_data_volume(&self, dv: &DataVolume) -> Flow<()> {
        let Some(binding) = self.status.crc.as_ref().and_then(|c| c.boot_key.clone()) else {
            return go(());
        };
        let source = dv.spec.source.as_ref().and_then(|s| s.pvc.as_ref());
        if source.is_none_or(|p| p.namespace != binding.pvc_namespace || p.name != binding.pvc_name)
        {
            return stop(Stop::pending(
                reasons::BOOT_KEY_UNAVAILABLE,
                format!(
                    "DataVolume {} does not clone the bound golden PVC {}/{}; delete the instance",
                    dv.name_any(),
                    binding.pvc_namespace,
                    binding.pvc_name
                ),
            ));
        }
        let done = dv
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|p| p.is_succeeded());
        if !done {
            let pvc = self
                .get(
                    &Api::<PersistentVolumeClaim>::namespaced(
                        self.ctx.client.clone(),
                        &binding.pvc_namespace,
                    ),
                    &binding.pvc_name,
                )
                .await?;
            if pvc.and_then(|p| p.uid()).as_deref() != Some(binding.pvc_uid.as_str()) {
                return stop(Stop::pending(
                    reasons::BOOT_KEY_UNAVAILABLE,
                    boot_key::Error::Changed {
                        what: format!(
                            "golden PVC {}/{} was replaced while the clone ran",
                            binding.pvc_namespace, binding.pvc_name
                        ),
                    }
                    .to_string(),
                ));
            }
        }
        go(())
    }

    pub(super) async fn create_vm(&self, dv_name: &str) -> Flow<()> {
        let profile = match self.status.crc.as_ref().and_then(|c| c.boot_key.clone()) {
            None => VmProfile::CrcDownloadV0,
            Some(binding) => {
                let Some(bundle) = self.bound_bundle(&binding).await? else {
                    return stop(Stop::pending(
                        reasons::BOOT_KEY_UNAVAILABLE,
                        format!(
                            "CRCBundle {} is gone or was recreated; its VM profile is unknown",
                            self.bundle_name()
                        ),
                    ));
                };
                match VmProfile::of_bundle(&bundle) {
                    Ok(p) => p,
                    Err(e) => return stop(Stop::failed(reasons::RECONCILE_ERROR, e.to_string())),
                }
            }
        };
        let template = &self.instance.spec.template;
        let vm = res::virtual_machine(
            self.instance,
            profile,
            dv_name,
            &template.memory,
            template.cores,
            &template.vm_node_selector,
        );
        self.create(&self.api(), &vm).await?;
        go(())
    }

    /// The VM is ready and its VMI runs with an address: its UID and IP.
    pub(super) fn running_vmi(
        &mut self,
        vm: &VirtualMachine,
        vmi: Option<&VirtualMachineInstance>,
        dv: &DataVolume,
    ) -> Flow<(String, String)> {
        let ready = vm.status.as_ref().is_some_and(|s| s.ready);
        let vmi_running = vmi
            .and_then(|v| v.status.as_ref())
            .is_some_and(|s| s.phase == Some(VmiPhase::Running));
        if !ready || !vmi_running {
            let disk = dv
                .status
                .as_ref()
                .and_then(|s| s.phase.map(|p| (p, s)))
                .map(|(phase, s)| {
                    format!(
                        "{phase:?}{}",
                        s.progress
                            .as_deref()
                            .map(|p| format!(" {p}"))
                            .unwrap_or_default()
                    )
                });
            let printable = vm
                .status
                .as_ref()
                .and_then(|s| s.printable_status)
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "not started".into());
            return stop(Stop::pending(
                reasons::CRC_BACKING_PENDING,
                format!(
                    "waiting for VirtualMachine {} to run ({printable}; root disk {}: {})",
                    vm.name_any(),
                    dv.name_any(),
                    disk.unwrap_or_else(|| "no status yet".into())
                ),
            ));
        }
        let Some(vmi) = vmi else {
            return stop(Stop::pending(reasons::CRC_BACKING_PENDING, "no VMI"));
        };
        let uid = vmi.uid().unwrap_or_default();
        let ip = vmi
            .status
            .as_ref()
            .and_then(|s| s.interfaces.iter().find_map(|i| i.ip_address.clone()))
            .filter(|ip| !ip.is_empty());
        let Some(ip) = ip else {
            return stop(Stop::pending(
                reasons::CRC_BACKING_PENDING,
                format!(
                    "waiting for VirtualMachineInstance {} to report an IP",
                    vmi.name_any()
                ),
            ));
        };
        let crc = self.crc();
        crc.ssh_endpoint = Some(ip.clone());
        if crc.vmi_uid.as_deref().is_none_or(str::is_empty) {
            // Write-ahead: the agent Job is named after this VMI, so its UID is recorded before
            // the Job can exist; after a crash a replaced VMI still finds (and removes) its Job.
            crc.vmi_uid = Some(uid.clone());
            return stop(Stop::recorded(format!(
                "VirtualMachineInstance {} runs at {ip}",
                vmi.name_any()
            )));
        }
        go((uid, ip))
    }
}
