//! The walk's root disk: where it comes from (the bundle bound by the boot key, or the manual
//! path's release image and key), and its DataVolume created and checked.

use super::*;

impl<'a> Walk<'a> {
    /// Manual path: the key from `bundleSSHKeyRef`, the disk imported from `releaseImage`.
    pub(super) fn manual_source(&self) -> Flow<DiskSource> {
        let template = &self.instance.spec.template;
        let Some(url) = template.release_image.clone().filter(|u| !u.is_empty()) else {
            return Err(Stop::failed(
                reasons::RECONCILE_ERROR,
                "the template names no disk: set crcVersion, crcBundleRef, or releaseImage with \
                 bundleSSHKeyRef",
            ));
        };
        let missing = |detail: String| {
            Stop::failed_on_secret(
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
            return Err(missing("bundleSSHKeyRef is not set".into()));
        };
        let data_key = self.o.manual_key.as_ref().and_then(|s| {
            let data = s.data.as_ref()?;
            MANUAL_KEY_NAMES
                .into_iter()
                .find(|k| data.get(*k).is_some_and(|ByteString(b)| !b.is_empty()))
        });
        let Some(data_key) = data_key else {
            return Err(missing(format!(
                "Secret {}/{secret_name} is missing or holds no key",
                self.ns
            )));
        };
        Ok(DiskSource {
            key: BootKey {
                secret: secret_name,
                data_key: data_key.to_owned(),
            },
            disk: RootDiskSource::Http { url },
            storage_class: template
                .storage_class_name
                .clone()
                .filter(|s| !s.is_empty()),
        })
    }

    /// The bundle the binding names, if it still exists as that very object.
    pub(super) fn bound_bundle(&self, binding: &CRCBootKeyStatus) -> Option<&'a CRCBundle> {
        self.o
            .bundle
            .as_ref()
            .filter(|b| b.uid().as_deref() == Some(binding.bundle_uid.as_str()))
    }

    pub(super) fn bundle_source<'b>(&self, bundle: &'b CRCBundle) -> boot_key::Source<'b>
    where
        'a: 'b,
    {
        boot_key::Source {
            bundle,
            namespace: &self.o.bundle_namespace,
            pvc: self.o.bundle_pvc.as_ref(),
            secret: self.o.bundle_key.as_ref(),
        }
    }

    pub(super) fn bundle_gone(&self) -> boot_key::Error {
        boot_key::Error::Changed {
            what: format!(
                "CRCBundle {} is gone or was recreated",
                bundle_name(self.instance)
            ),
        }
    }

    /// Turnkey path: bind the boot key once (before any disk), then keep the instance's copy.
    pub(super) fn turnkey_source(&mut self, vm_name: &str, dv_name: &str) -> Flow<DiskSource> {
        let unavailable =
            |e: boot_key::Error| Stop::pending(reasons::BOOT_KEY_UNAVAILABLE, e.to_string());
        let Some(binding) = self.binding().cloned() else {
            if self.status.phase == Some(InstancePhase::Ready) {
                return Err(unavailable(boot_key::Error::NotRecorded));
            }
            if self.o.data_volume.is_some() {
                return Err(unavailable(boot_key::Error::UnboundDisk {
                    name: dv_name.to_owned(),
                }));
            }
            let name = bundle_name(self.instance);
            let ready = self.o.bundle.as_ref().filter(|b| {
                b.status
                    .as_ref()
                    .is_some_and(|s| s.phase == Some(BundlePhase::Ready))
            });
            let Some(bundle) = ready else {
                // The bundle view wakes the instance when the bundle changes.
                return Err(Stop::watched(
                    reasons::CRC_BACKING_PENDING,
                    format!("waiting for CRCBundle {name} to become Ready"),
                ));
            };
            let binding = boot_key::bind(&self.bundle_source(bundle)).map_err(unavailable)?;
            let crc = self.crc();
            crc.boot_key = Some(binding);
            crc.vm_name = Some(vm_name.to_owned());
            crc.data_volume_name = Some(dv_name.to_owned());
            return Err(Stop::recorded(format!(
                "bound to the disk and key of CRCBundle {name}"
            )));
        };

        // The instance's own copy of the key: checked when present, restored only from a source
        // provably identical to the binding.
        let keyed = self.keyed();
        match &self.o.boot_key_copy {
            // The guest no longer authorizes the bundle key: the copy has no use left, and a
            // bundle key lying in a tenant namespace is one more way in.
            Some(copy) if keyed => {
                if self.controlled(copy) {
                    self.actions.push(Action::Delete(Delete {
                        kind: DeleteKind::Secret,
                        name: copy.name_any(),
                        uid: copy.uid().unwrap_or_default(),
                    }));
                }
            }
            Some(copy) => boot_key::check_copy(copy, &self.uid, &binding).map_err(unavailable)?,
            None if keyed => {}
            None => {
                let bundle = self
                    .bound_bundle(&binding)
                    .ok_or_else(|| unavailable(self.bundle_gone()))?;
                boot_key::verify_unchanged(&binding, &self.bundle_source(bundle))
                    .map_err(unavailable)?;
                let key = self
                    .o
                    .bundle_key
                    .as_ref()
                    .and_then(boot_key::key_bytes)
                    .unwrap_or_default();
                let copy = res::boot_key_copy(self.instance, key);
                self.create(New::Secret(Box::new(copy)));
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
        Ok(DiskSource {
            key: BootKey {
                secret: res::boot_key_secret_name(&self.name),
                data_key: boot_key::KEY.to_owned(),
            },
            disk: RootDiskSource::Pvc {
                namespace: binding.pvc_namespace.clone(),
                name: binding.pvc_name.clone(),
            },
            storage_class,
        })
    }

    pub(super) fn create_data_volume(
        &mut self,
        dv_name: &str,
        source: RootDiskSource,
        storage_class: Option<String>,
    ) -> Flow<()> {
        let mut golden_size = None;
        if let Some(binding) = self.binding() {
            // Right before the clone: the golden disk must still be the bound one.
            let unavailable =
                |e: boot_key::Error| Stop::pending(reasons::BOOT_KEY_UNAVAILABLE, e.to_string());
            let bundle = self
                .bound_bundle(binding)
                .ok_or_else(|| unavailable(self.bundle_gone()))?;
            boot_key::verify_unchanged(binding, &self.bundle_source(bundle))
                .map_err(unavailable)?;
            golden_size = bundle
                .status
                .as_ref()
                .and_then(|s| s.disk_virtual_size)
                .and_then(|s| u64::try_from(s).ok());
        }
        let (size, raised) = res::root_disk_size(
            self.instance.spec.template.root_volume_size.as_deref(),
            golden_size,
            FILESYSTEM_OVERHEAD,
        )
        .map_err(|e| Stop::failed(reasons::RECONCILE_ERROR, format!("rootVolumeSize: {e}")))?;
        if let Some(raised) = raised {
            self.actions.push(Action::Warn {
                reason: reasons::ROOT_VOLUME_RAISED,
                message: raised.message(),
            });
        }
        let mut dv = res::root_data_volume(self.instance, source, size, storage_class);
        // The name recorded with the binding (upstream's instances record theirs) is the one the
        // pass looks for.
        dv.metadata.name = Some(dv_name.to_owned());
        self.create(New::DataVolume(Box::new(dv)));
        Ok(())
    }

    /// An existing DataVolume must clone the bound disk, and while it is still cloning, that
    /// disk must still be the bound PVC.
    pub(super) fn check_data_volume(&self, dv: &DataVolume) -> Flow<()> {
        let Some(binding) = self.binding() else {
            return Ok(());
        };
        let source = dv.spec.source.as_ref().and_then(|s| s.pvc.as_ref());
        if source.is_none_or(|p| p.namespace != binding.pvc_namespace || p.name != binding.pvc_name)
        {
            return Err(Stop::pending(
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
        let same_pvc = self.o.bound_pvc.as_ref().and_then(|p| p.uid()).as_deref()
            == Some(binding.pvc_uid.as_str());
        if !done && !same_pvc {
            return Err(Stop::pending(
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
        Ok(())
    }
}

/// `Succeeded`, `CloneInProgress 45%`, … of the root DataVolume, for the waiting message, with
/// what CDI says is wrong: it never fails an import (it restarts the importer and puts the error
/// on the `Running` condition) and gives a clone it refuses no phase, only a `Ready` reason.
pub(super) fn disk_progress(dv: &DataVolume) -> String {
    let Some(status) = dv.status.as_ref() else {
        return "no status yet".into();
    };
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "False")
            .and_then(|c| Some((c.reason.as_deref()?, c.message.as_deref()?)))
    };
    let Some(phase) = status.phase else {
        return match condition("Ready") {
            Some((reason, message)) => format!("{reason}: {message}"),
            None => "no status yet".into(),
        };
    };
    let progress = status
        .progress
        .as_deref()
        .map(|p| format!(" {p}"))
        .unwrap_or_default();
    let restarts = status.restart_count.unwrap_or(0);
    match condition("Running").filter(|(reason, _)| *reason == "Error") {
        Some((_, message)) if restarts > 0 => {
            format!("{phase:?}{progress}, {restarts} restarts after: {message}")
        }
        Some((_, message)) => format!("{phase:?}{progress}: {message}"),
        None => format!("{phase:?}{progress}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dv(status: serde_json::Value) -> DataVolume {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "i-rootdisk"}, "spec": {}, "status": status,
        }))
        .unwrap()
    }

    // Statuses as upstream cdi-controller v1.65.0 writes them (seen in tests/sim_storage.rs).
    #[test]
    fn a_failing_import_shows_cdis_error_and_its_restarts() {
        let failing = dv(serde_json::json!({
            "phase": "ImportInProgress", "progress": "N/A", "restartCount": 2,
            "conditions": [
                {"type": "Bound", "status": "True", "reason": "Bound"},
                {"type": "Ready", "status": "False"},
                {"type": "Running", "status": "False", "reason": "Error",
                 "message": "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"},
            ],
        }));
        assert_eq!(
            disk_progress(&failing),
            "ImportInProgress N/A, 2 restarts after: Unable to connect to http data source: \
             expected status code 200, got 404. Status: 404 Not Found"
        );
    }

    #[test]
    fn a_refused_clone_has_no_phase_but_its_reason() {
        let refused = dv(serde_json::json!({
            "conditions": [
                {"type": "Bound", "status": "False", "reason": "CloneValidationFailed",
                 "message": "The clone doesn't meet the validation requirements: target resources requests storage size is smaller than the source 33554432 < 67108864"},
                {"type": "Ready", "status": "False", "reason": "CloneValidationFailed",
                 "message": "The clone doesn't meet the validation requirements: target resources requests storage size is smaller than the source 33554432 < 67108864"},
                {"type": "Running", "status": "False"},
            ],
        }));
        assert_eq!(
            disk_progress(&refused),
            "CloneValidationFailed: The clone doesn't meet the validation requirements: target \
             resources requests storage size is smaller than the source 33554432 < 67108864"
        );
    }

    #[test]
    fn a_running_transfer_shows_phase_and_progress() {
        let running = dv(serde_json::json!({
            "phase": "CloneInProgress", "progress": "45.20%",
            "conditions": [{"type": "Running", "status": "True", "reason": "Pod is running"}],
        }));
        assert_eq!(disk_progress(&running), "CloneInProgress 45.20%");
    }
}
