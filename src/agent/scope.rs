//! VMI scoping (`docs/architecture.md`, "The crc-agent"): the agent works for exactly one VMI —
//! the one the operator saw, by UID, while it is `Running`. A replaced, stopped or deleted VMI
//! ends the work at once and the agent exits successfully without publishing, because its result
//! would describe a guest that no longer exists.

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::watcher;

use crate::kubevirt::{VirtualMachineInstance, VmiPhase};

/// Reading the VMI failed (not: the VMI is gone, which is a [`Verdict`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading VirtualMachineInstance {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

/// Whether the agent may keep working for its VMI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    /// The VMI is not the one the agent was started for any more; why.
    Stop(String),
}

/// The scoping rule: the VMI exists, has the expected UID and is `Running`.
pub fn verdict(vmi: Option<&VirtualMachineInstance>, expected_uid: &str) -> Verdict {
    let Some(vmi) = vmi else {
        return Verdict::Stop("the VMI is gone".into());
    };
    let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
    if uid != expected_uid {
        return Verdict::Stop(format!(
            "the VMI was replaced (UID {uid:?}, expected {expected_uid:?})"
        ));
    }
    if vmi.metadata.deletion_timestamp.is_some() {
        return Verdict::Stop("the VMI is being deleted".into());
    }
    match vmi.phase() {
        VmiPhase::Running => Verdict::Proceed,
        phase => Verdict::Stop(format!("the VMI is {} (not Running)", phase.as_str())),
    }
}

/// One look at the VMI.
pub async fn check(
    vmis: &Api<VirtualMachineInstance>,
    namespace: &str,
    name: &str,
    expected_uid: &str,
) -> Result<Verdict, Error> {
    let vmi = vmis.get_opt(name).await.map_err(|source| Error::Read {
        namespace: namespace.to_string(),
        name: name.to_string(),
        source,
    })?;
    Ok(verdict(vmi.as_ref(), expected_uid))
}

/// Watches the VMI and returns, with the reason, once it must no longer be worked on; runs
/// forever while it stays. Watch errors are retried after `retry` (the watcher re-lists).
pub async fn watch_until_gone(
    vmis: Api<VirtualMachineInstance>,
    name: String,
    expected_uid: String,
    retry: Duration,
) -> String {
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .any_semantic();
    let mut stream = std::pin::pin!(watcher(vmis, config));
    // During a (re-)list the VMI counts as present only if the list contains it.
    let mut listed = false;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                tracing::warn!(vmi = %name, error = %err, "VMI watch failed, retrying");
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        let verdict = match event {
            watcher::Event::Init => {
                listed = false;
                continue;
            }
            watcher::Event::InitApply(vmi) => {
                listed = true;
                verdict(Some(&vmi), &expected_uid)
            }
            watcher::Event::InitDone if !listed => verdict(None, &expected_uid),
            watcher::Event::InitDone => continue,
            watcher::Event::Apply(vmi) => verdict(Some(&vmi), &expected_uid),
            watcher::Event::Delete(vmi) => {
                // A deleted VMI of another UID (an old one under the same name) says nothing.
                if vmi.metadata.uid.as_deref() == Some(expected_uid.as_str()) {
                    verdict(None, &expected_uid)
                } else {
                    continue;
                }
            }
        };
        if let Verdict::Stop(reason) = verdict {
            return reason;
        }
    }
    // The watcher stream never ends on its own; if it does, nothing watches the VMI any more.
    "the VMI watch ended".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(uid: &str, phase: &str, deleting: bool) -> VirtualMachineInstance {
        let mut value = serde_json::json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "demo", "namespace": "team", "uid": uid},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase},
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn running_vmi_with_the_uid_proceeds() {
        assert_eq!(
            verdict(Some(&vmi("u1", "Running", false)), "u1"),
            Verdict::Proceed
        );
    }

    #[test]
    fn missing_replaced_stopped_or_deleting_vmis_stop() {
        let stop = |v: Verdict| match v {
            Verdict::Stop(reason) => reason,
            Verdict::Proceed => panic!("expected Stop"),
        };
        assert!(stop(verdict(None, "u1")).contains("gone"));
        assert!(stop(verdict(Some(&vmi("u2", "Running", false)), "u1")).contains("replaced"));
        assert!(stop(verdict(Some(&vmi("u1", "Succeeded", false)), "u1")).contains("Succeeded"));
        assert!(stop(verdict(Some(&vmi("u1", "Scheduled", false)), "u1")).contains("not Running"));
        assert!(stop(verdict(Some(&vmi("u1", "Running", true)), "u1")).contains("deleted"));
    }
}
