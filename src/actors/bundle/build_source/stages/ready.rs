//! The Ready stage: the bundle published (its metadata ConfigMap and CDI DataSource, then
//! `Ready=True` with the golden PVC and key Secret in status), then every temporary object
//! deleted while Ready stays.

use crate::actors::bundle::build_source::step::{Action, Observed, Owned, Step, release};
use crate::actors::bundle::build_source::temps::Temp;
use crate::api::bundle::BundlePhase;
use crate::api::common::LocalRef;
use crate::api::conditions::{reasons, types};
use crate::resources::build::Names;

/// The metadata ConfigMap and the DataSource published, and only once both are seen
/// `Ready=True` (a consumer that sees Ready finds them), then every temporary object deleted
/// (Ready stays while they go).
pub fn decide(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let bundle = crate::resources::bundle::Names::of(names.bundle());
    let mut publishing = false;
    for (owned, action, kind, name) in [
        (
            observed.metadata,
            Action::PublishMetadata,
            "ConfigMap",
            &bundle.metadata,
        ),
        (
            observed.data_source,
            Action::PublishDataSource,
            "DataSource",
            &names.bundle().to_owned(),
        ),
    ] {
        match owned {
            Owned::Ours => {}
            Owned::Missing => {
                actions.push(action);
                publishing = true;
            }
            Owned::NotOurs => {
                step.fail(
                    types::VALIDATED,
                    reasons::RESOURCE_REPLACED,
                    format!(
                        "{kind} {name} exists but this bundle does not control it; the bundle is not published into it. Delete it to retry"
                    ),
                );
                return;
            }
        }
    }
    if publishing {
        step.build_mut().message = Some(format!(
            "publishing ConfigMap {} and DataSource {}",
            bundle.metadata,
            names.bundle()
        ));
        return;
    }
    let now = step.now.clone();
    let status = &mut step.status;
    status.phase = Some(BundlePhase::Ready);
    status.qcow2_pvc_ref = Some(LocalRef::new(&bundle.golden_pvc));
    status.qcow2_pvc_namespace = Some(observed.namespace.clone());
    status.ssh_key_secret_ref = Some(LocalRef::new(&bundle.ssh_secret));
    let build = step.build_mut();
    if build.finished_at.is_none() {
        build.finished_at = Some(now);
    }
    let resources = build.resources.get_or_insert_with(Default::default);
    release(resources, observed, Temp::ALL, actions);
    let left = Temp::ALL
        .iter()
        .filter(|t| t.slot(resources).is_some())
        .count();
    let message = format!(
        "golden disk {}/{} is ready (sha256 {})",
        observed.namespace,
        bundle.golden_pvc,
        step.status.disk_sha256.as_deref().unwrap_or_default()
    );
    step.build_mut().message = Some(if left == 0 {
        "ready; every temporary object deleted".to_owned()
    } else {
        format!("ready; deleting {left} temporary object(s)")
    });
    step.set(types::READY, true, reasons::BUNDLE_READY, message);
}

#[cfg(test)]
mod tests {
    use crate::actors::bundle::build_source::tests::*;

    #[test]
    fn ready_publishes_then_deletes_every_temporary_object_and_stays_ready() {
        let (b, mut observed) = later(BuildStage::Ready, running("vmi-clone", BuildBoot::Aged));
        observed.namespace = "ops".into();
        let d = decide(&b, &observed, HOUR, at(100));
        assert_eq!(
            d.actions,
            [Action::PublishMetadata, Action::PublishDataSource],
            "published first; nothing is Ready or deleted before both are seen"
        );
        assert_ne!(reason(&d.status, types::READY).0, "True");
        assert_eq!(d.requeue, None, "their watch events wake the bundle");

        // Both seen: Ready, and the temporary objects go.
        observed.metadata = Owned::Ours;
        observed.data_source = Owned::Ours;
        let d = decide(&b, &observed, HOUR, at(101));
        assert!(d.actions.contains(&Action::Delete {
            temp: Temp::ValidationVm,
            name: "ValidationVm".into(),
            uid: "uid-ValidationVm".into(),
        }));
        assert_eq!(
            reason(&d.status, types::READY),
            ("True".into(), reasons::BUNDLE_READY.into())
        );
        assert_eq!(d.status.phase, Some(BundlePhase::Ready));
        assert_eq!(d.status.qcow2_pvc_namespace.as_deref(), Some("ops"));
        assert_eq!(d.requeue, None, "no deadline once Ready");

        // Published and everything gone: nothing left to do, still Ready, far past the deadline.
        observed.metadata = Owned::Ours;
        observed.data_source = Owned::Ours;
        for temp in Temp::ALL {
            observed.temps.insert(*temp, Some(Observation::Lost));
        }
        observed
            .jobs
            .insert(Temp::InstallerJob, JobState::Seen(Observation::Lost));
        let b = applied(b, &d);
        let d = decide(&b, &observed, HOUR, at(100_000));
        assert_eq!(reason(&d.status, types::READY).0, "True");
        assert!(
            d.actions.iter().all(|a| !matches!(a, Action::Create(_))),
            "{:?}",
            d.actions
        );
    }
}
