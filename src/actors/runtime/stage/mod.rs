//! The child actors of a bundle's actor: one per stage in flight, each following the one object
//! of that stage whose identity (name + UID) the bundle's status holds.
//!
//! ```text
//! crcbundle/<uid>                       parent: decides, creates and deletes, writes status (alone)
//! ├── crcbundle.prepjob/<uid>           download source: the prep Job named in status.prepJob
//! ├── crcbundle.installerjob/<uid>      build, Prepare: the installer Job
//! ├── crcbundle.buildvm/<uid>           build, Install: the build VM through its three boots
//! └── crcbundle.guestsession/<uid>      build, Install: the helper Job of the current step and VMI
//! ```
//!
//! A child never writes anything: it observes its object and reports to its parent by message
//! ([`Report`]: progress, done, failed with a detail, lost, replaced). The parent records an
//! object's name before creating it and its UID right after, and starts the child from that
//! recorded identity — after a crash of the child, of the parent, or of the whole operator — so a
//! restarted child follows the same object and never a namesake. Reports are triggers with a
//! payload, not state: a lost report is sent again by the next child, because every child starts
//! by reporting what it sees.
//!
//! A stage is one [`Stage`] implementation: how its object is identified (its slot in the
//! status), which object kind it watches, how it reads an object of its own into an
//! [`Observation`], and what a lost object means for the stage ([`WhenLost`]). The prep Job of the
//! download source is the first ([`prep_job::PrepJob`]); each build stage (installer Job, build
//! VM, guest session, disk copy, validation clone) is one more.

pub mod actor;
pub mod children;

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::actors::runtime::context::Context;
use crate::api::bundle::{BuildResources, CRCBundleStatus};
use crate::api::common::ObjectIdentity;
use crate::api::conditions::reasons;

/// What a child saw of its object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// The object is ours and still working; what it is doing.
    Progress(String),
    /// The object is ours and finished its work; what it reported (a Job's termination
    /// message, empty when it wrote none).
    Done(String),
    /// The object is ours and failed; the detail a person can act on.
    Failed(String),
    /// No object under the recorded name.
    Lost,
    /// An object under the recorded name that is not the recorded one: another UID, or not
    /// controlled by the bundle. It is never adopted.
    Replaced { uid: String },
}

/// A child's report to its parent: what it saw of the object with `uid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The child's kind ([`Stage::KIND`]), which names the slot.
    pub kind: &'static str,
    /// The recorded UID the child follows; a report about an identity the parent no longer
    /// records is stale and ignored.
    pub uid: String,
    pub observation: Observation,
}

/// A stage's Job as the bundle's status and the Job's child actor know it (any source's: the
/// download's prep Job, the build's installer, helper and disk Jobs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum JobState {
    /// No Job recorded.
    #[default]
    None,
    /// Its name is recorded, not yet its UID: it is to be created (or was, just before a crash).
    Named,
    /// Recorded; its child has not reported yet (it just started): wait.
    Unreported,
    /// Recorded, and its child saw this.
    Seen(Observation),
}

/// What a lost object means for its stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenLost {
    /// The object is made again (the download source's prep Job, as upstream does).
    Recreate,
    /// The attempt fails with `ResourceLost`: the object held work that cannot be redone
    /// safely in the same attempt (the build's temporary objects; `docs/decisions.md`, "A
    /// deleted prep Job is made again; a replaced one fails the bundle").
    FailAttempt,
}

/// One stage of a bundle, followed by one child actor.
pub trait Stage: Send + Sync + 'static {
    /// The object the stage follows; it lives in the operator namespace.
    type Object: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;

    /// Registered kind of the child actors: `<parent kind>.<stage>` (e.g. `crcbundle.prepjob`),
    /// the label under which `/metrics` counts them.
    const KIND: &'static str;

    /// What a lost object means for the stage.
    const WHEN_LOST: WhenLost;

    /// While `object` is in progress, how often to observe it again without an event of its
    /// own: what keeps a Job's pod from starting (a volume the kubelet refuses, an image it
    /// cannot pull) changes the pod and its Events, never the Job. `None`: its events suffice.
    fn recheck(_object: &Self::Object) -> Option<std::time::Duration> {
        None
    }

    /// The stage's slot in the bundle's status: the identity of its object, once its UID is
    /// recorded (a child follows only an object that exists under a recorded UID).
    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity>;

    /// Reads an object of ours (already checked by [`judge`]) into an observation; may read
    /// related objects (a failed Job's pods for their termination message).
    fn observe(
        object: &Self::Object,
        ctx: &Context,
    ) -> impl std::future::Future<Output = Result<Observation, kube::Error>> + Send;
}

/// A build stage's slot: one of `status.build.resources`, once its UID is recorded.
pub fn build_slot(
    status: &CRCBundleStatus,
    field: impl FnOnce(&BuildResources) -> Option<&ObjectIdentity>,
) -> Option<&ObjectIdentity> {
    field(status.build.as_ref()?.resources.as_ref()?).filter(|object| !object.uid.is_empty())
}

/// Whether `object` (what is under the recorded name now) is the recorded object of the bundle
/// with `owner_uid`: `None` when it is, and the child goes on to observe it; otherwise what the
/// child reports instead.
pub fn judge<K: Resource>(
    recorded: &ObjectIdentity,
    owner_uid: &str,
    object: Option<&K>,
) -> Option<Observation> {
    judge_meta(recorded, owner_uid, object.map(Resource::meta))
}

/// [`judge`] on an object's metadata (what a metadata-only read returns).
pub fn judge_meta(
    recorded: &ObjectIdentity,
    owner_uid: &str,
    meta: Option<&ObjectMeta>,
) -> Option<Observation> {
    let Some(meta) = meta else {
        return Some(Observation::Lost);
    };
    let uid = meta.uid.clone().unwrap_or_default();
    if uid != recorded.uid || !meta_controlled_by(meta, owner_uid) {
        return Some(Observation::Replaced { uid });
    }
    // Being deleted: its work will not finish, and the next object under the name is another.
    if meta.deletion_timestamp.is_some() {
        return Some(Observation::Lost);
    }
    None
}

/// Whether the object with `meta` is controlled by the object with `owner_uid`.
pub fn meta_controlled_by(meta: &ObjectMeta, owner_uid: &str) -> bool {
    !owner_uid.is_empty()
        && meta
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && r.uid == owner_uid)
}

/// The failure an observation means for an attempt under `when_lost`: `(reason, message)`, or
/// `None` when it is no failure of the attempt (a lost object that is made again, or an object
/// still working or done).
pub fn attempt_failure(
    when_lost: WhenLost,
    recorded: &ObjectIdentity,
    observation: &Observation,
) -> Option<(&'static str, String)> {
    match observation {
        Observation::Lost if when_lost == WhenLost::FailAttempt => Some((
            reasons::RESOURCE_LOST,
            format!(
                "{} (UID {}) was deleted while the attempt used it; retry with the annotation guestcluster.opdev.io/retry",
                recorded.name, recorded.uid
            ),
        )),
        Observation::Replaced { uid } => Some((
            reasons::RESOURCE_REPLACED,
            format!(
                "{} is not the object this bundle created (UID {}, found {}); it is not adopted. Delete it to retry",
                recorded.name,
                recorded.uid,
                if uid.is_empty() { "none" } else { uid.as_str() }
            ),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;

    const OWNER: &str = "bundle-uid";

    fn recorded() -> ObjectIdentity {
        ObjectIdentity {
            name: "b-prep".into(),
            uid: "job-1".into(),
        }
    }

    fn job(uid: &str, owner: &str) -> Job {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "b-prep", "uid": uid,
            "ownerReferences": [{"apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "CRCBundle",
                "name": "b", "uid": owner, "controller": true}]}}))
        .unwrap()
    }

    #[test]
    fn the_recorded_object_of_ours_is_observed() {
        assert_eq!(judge(&recorded(), OWNER, Some(&job("job-1", OWNER))), None);
    }

    #[test]
    fn a_missing_or_deleting_object_is_lost() {
        assert_eq!(
            judge::<Job>(&recorded(), OWNER, None),
            Some(Observation::Lost)
        );
        let mut deleting = job("job-1", OWNER);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(
            judge(&recorded(), OWNER, Some(&deleting)),
            Some(Observation::Lost)
        );
    }

    #[test]
    fn another_uid_or_owner_is_replaced_never_adopted() {
        assert_eq!(
            judge(&recorded(), OWNER, Some(&job("job-2", OWNER))),
            Some(Observation::Replaced {
                uid: "job-2".into()
            })
        );
        assert_eq!(
            judge(&recorded(), OWNER, Some(&job("job-1", "someone-else"))),
            Some(Observation::Replaced {
                uid: "job-1".into()
            })
        );
    }

    #[test]
    fn a_lost_object_fails_the_attempt_only_where_it_cannot_be_made_again() {
        let lost = Observation::Lost;
        assert_eq!(
            attempt_failure(WhenLost::Recreate, &recorded(), &lost),
            None
        );
        let (reason, message) = attempt_failure(WhenLost::FailAttempt, &recorded(), &lost).unwrap();
        assert_eq!(reason, reasons::RESOURCE_LOST);
        assert!(
            message.contains("b-prep") && message.contains("job-1"),
            "{message}"
        );
    }

    #[test]
    fn a_replaced_object_fails_the_attempt_under_every_policy() {
        let replaced = Observation::Replaced {
            uid: "job-2".into(),
        };
        for policy in [WhenLost::Recreate, WhenLost::FailAttempt] {
            let (reason, message) = attempt_failure(policy, &recorded(), &replaced).unwrap();
            assert_eq!(reason, reasons::RESOURCE_REPLACED);
            assert!(message.contains("job-2"), "{message}");
        }
        for fine in [
            Observation::Done(String::new()),
            Observation::Progress("x".into()),
            Observation::Failed("y".into()),
        ] {
            assert_eq!(
                attempt_failure(WhenLost::FailAttempt, &recorded(), &fine),
                None
            );
        }
    }
}
