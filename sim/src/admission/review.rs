//! `AdmissionReview` (admission.k8s.io/v1) in, `AdmissionReview` out: which webhook a request is
//! for, and the answer, with the denial message built as each project builds it.

use serde_json::{Value, json};

use base64::Engine;

use super::{Denial, Verdict, cdi, kubevirt};
use crate::scc::{self, Namespaces};

/// The webhooks served, by their upstream names and paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhook {
    /// virt-api: VirtualMachines, on create and update.
    VirtualMachine,
    /// virt-api: new VirtualMachineInstances.
    VirtualMachineInstanceCreate,
    /// CDI's API server: DataVolumes, on create and update.
    DataVolume,
    /// OpenShift's SCC admission (a plugin of the API server upstream, a mutating webhook
    /// here): new pods, under `restricted-v2`.
    SecurityContextConstraints,
    /// virt-api: evictions of virt-launcher pods ([`super::eviction`]; it reads the cluster, so
    /// the server answers it, not [`answer`]).
    LauncherEviction,
}

/// How a project words a denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wording {
    /// KubeVirt: the first ten messages joined with `, `, the rest counted; reason `Invalid`.
    KubeVirt,
    /// CDI: every message after a space (so the text starts with one); no reason.
    Cdi,
}

/// Causes KubeVirt lists before counting the rest.
const KUBEVIRT_MAX_CAUSES: usize = 10;

impl Webhook {
    pub const ALL: [Webhook; 5] = [
        Webhook::VirtualMachine,
        Webhook::VirtualMachineInstanceCreate,
        Webhook::DataVolume,
        Webhook::SecurityContextConstraints,
        Webhook::LauncherEviction,
    ];

    /// The webhook's name: the API server's denial says `admission webhook "<name>"`.
    pub fn name(self) -> &'static str {
        match self {
            Webhook::VirtualMachine => "virtualmachine-validator.kubevirt.io",
            Webhook::VirtualMachineInstanceCreate => {
                "virtualmachineinstances-create-validator.kubevirt.io"
            }
            Webhook::DataVolume => "datavolume-validate.cdi.kubevirt.io",
            Webhook::SecurityContextConstraints => "security.openshift.io.sim",
            Webhook::LauncherEviction => super::eviction::NAME,
        }
    }

    /// The URL path upstream serves it at.
    pub fn path(self) -> &'static str {
        match self {
            Webhook::VirtualMachine => "/virtualmachines-validate",
            Webhook::VirtualMachineInstanceCreate => "/virtualmachineinstances-validate-create",
            Webhook::DataVolume => "/datavolume-validate",
            Webhook::SecurityContextConstraints => "/scc-admission",
            Webhook::LauncherEviction => super::eviction::PATH,
        }
    }

    pub fn from_path(path: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.path() == path)
    }

    fn wording(self) -> Wording {
        match self {
            Webhook::VirtualMachine | Webhook::VirtualMachineInstanceCreate => Wording::KubeVirt,
            Webhook::DataVolume => Wording::Cdi,
            Webhook::SecurityContextConstraints | Webhook::LauncherEviction => {
                unreachable!("SCC admission and the eviction interceptor word their own")
            }
        }
    }
}

/// Why a request body is not an admission request.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not an admission.k8s.io/v1 AdmissionReview with a request")]
    NotARequest,
    #[error("this webhook reads the cluster: the server answers it")]
    ReadsTheCluster,
}

/// The answer of `webhook` to the `AdmissionReview` `body`; SCC admission reads the ranges of
/// the request's namespace from `namespaces`.
pub fn answer(
    webhook: Webhook,
    body: &[u8],
    namespaces: &Namespaces,
) -> Result<Value, ReviewError> {
    let review = parse(body)?;
    let request = &review["request"];
    let object = &request["object"];
    let old = match request["operation"].as_str() {
        Some("UPDATE") => Some(&request["oldObject"]),
        _ => None,
    };
    if webhook == Webhook::SecurityContextConstraints {
        let namespace = request["namespace"].as_str().unwrap_or_default();
        let ranges = namespaces.get(namespace);
        let mut response = json!({"uid": request["uid"], "allowed": true});
        match scc::restricted_v2::admit(namespace, object, ranges.as_ref()) {
            Ok(patch) => {
                let patch = serde_json::to_vec(&patch)?;
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
            }
            // The plugin's answer upstream: `Forbidden`, one message.
            Err(message) => {
                response["allowed"] = json!(false);
                response["status"] =
                    json!({"message": message, "reason": "Forbidden", "code": 403});
            }
        }
        return Ok(review_of(response));
    }
    let (verdict, warnings): (Verdict, Vec<String>) = match webhook {
        Webhook::VirtualMachine => (kubevirt::validate_vm(object), kubevirt::vm_warnings(object)),
        Webhook::VirtualMachineInstanceCreate => {
            (kubevirt::validate_vmi_create(object), Vec::new())
        }
        Webhook::DataVolume => (cdi::validate(object, old), Vec::new()),
        Webhook::SecurityContextConstraints => unreachable!("answered above"),
        Webhook::LauncherEviction => return Err(ReviewError::ReadsTheCluster),
    };
    let mut response = json!({"uid": request["uid"], "allowed": verdict.is_ok()});
    match verdict {
        Ok(()) if !warnings.is_empty() => response["warnings"] = json!(warnings),
        Ok(()) => {}
        Err(denials) => response["status"] = status(webhook.wording(), denials),
    }
    Ok(review_of(response))
}

/// The `AdmissionReview` in `body`, checked to be an admission.k8s.io/v1 one with a request.
pub fn parse(body: &[u8]) -> Result<Value, ReviewError> {
    let review: Value = serde_json::from_slice(body)?;
    if review["apiVersion"] != "admission.k8s.io/v1" || !review["request"].is_object() {
        return Err(ReviewError::NotARequest);
    }
    Ok(review)
}

/// The `AdmissionReview` that answers with `response`.
pub fn review_of(response: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

/// The `metav1.Status` of a denial; the API server puts `admission webhook "<name>" denied the
/// request: ` before its message.
fn status(wording: Wording, mut denials: Vec<Denial>) -> Value {
    match wording {
        Wording::KubeVirt => {
            let more = denials.len().saturating_sub(KUBEVIRT_MAX_CAUSES);
            denials.truncate(KUBEVIRT_MAX_CAUSES);
            let mut message = denials
                .iter()
                .map(|d| d.message.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            if more > 0 {
                message.push_str(&format!(", and {more} more validation errors"));
            }
            json!({
                "message": message,
                "reason": "Invalid",
                "code": 422,
                "details": {"causes": denials},
            })
        }
        Wording::Cdi => {
            let message: String = denials.iter().map(|d| format!(" {}", d.message)).collect();
            json!({"message": message, "code": 422, "details": {"causes": denials}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer_(webhook: Webhook, body: &[u8]) -> Result<Value, ReviewError> {
        answer(webhook, body, &Namespaces::default())
    }

    fn review(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "7d3f",
                "operation": operation,
                "object": object,
                "oldObject": old,
            },
        }))
        .unwrap()
    }

    #[test]
    fn webhooks_are_found_by_path() {
        for webhook in Webhook::ALL {
            assert_eq!(Webhook::from_path(webhook.path()), Some(webhook));
        }
        assert_eq!(Webhook::from_path("/mutate"), None);
    }

    #[test]
    fn an_admitted_object_is_allowed_with_the_request_uid() {
        let dv = json!({"metadata": {"name": "d"}, "spec": {
            "source": {"blank": {}},
            "storage": {"resources": {"requests": {"storage": "1Gi"}}},
        }});
        let answer = answer_(Webhook::DataVolume, &review("CREATE", dv, None)).unwrap();
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(answer["response"], json!({"uid": "7d3f", "allowed": true}));
    }

    #[test]
    fn kubevirt_joins_messages_with_commas_and_counts_past_ten() {
        let disks: Vec<Value> = (0..12)
            .map(|i| json!({"name": format!("d{i}"), "disk": {"bus": "ide"}}))
            .collect();
        let volumes: Vec<Value> = (0..12)
            .map(|i| json!({"name": format!("d{i}"), "emptyDisk": {"capacity": "1Gi"}}))
            .collect();
        let vm = json!({"spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {"disks": disks}}, "volumes": volumes,
        }}}});
        let answer = answer_(Webhook::VirtualMachine, &review("CREATE", vm, None)).unwrap();
        let response = &answer["response"];
        assert_eq!(response["allowed"], false);
        let status = &response["status"];
        assert_eq!(status["code"], 422);
        assert_eq!(status["reason"], "Invalid");
        let expected = format!(
            "{}, and 2 more validation errors",
            ["IDE bus is not supported"; 10].join(", ")
        );
        assert_eq!(status["message"], expected);
        assert_eq!(status["details"]["causes"].as_array().unwrap().len(), 10);
        assert_eq!(
            status["details"]["causes"][0],
            json!({"reason": "FieldValueInvalid", "message": "IDE bus is not supported",
                   "field": "spec.template.spec.domain.devices.disks[0].disk.bus"})
        );
    }

    #[test]
    fn cdi_puts_a_space_before_each_message() {
        let dv = json!({"metadata": {"name": "d"}, "spec": {"source": {"blank": {}}}});
        let answer = answer_(Webhook::DataVolume, &review("CREATE", dv, None)).unwrap();
        let status = &answer["response"]["status"];
        assert_eq!(status["message"], " Missing Data volume PVC");
        assert_eq!(status["code"], 422);
        assert!(status.get("reason").is_none());
    }

    #[test]
    fn an_update_is_checked_against_the_old_object() {
        let dv = |size: &str| {
            json!({"metadata": {"name": "d"}, "spec": {
                "source": {"blank": {}},
                "storage": {"resources": {"requests": {"storage": size}}},
            }})
        };
        let same = review("UPDATE", dv("1Gi"), Some(dv("1Gi")));
        assert_eq!(
            answer_(Webhook::DataVolume, &same).unwrap()["response"]["allowed"],
            true
        );
        let grown = review("UPDATE", dv("2Gi"), Some(dv("1Gi")));
        let answer = answer_(Webhook::DataVolume, &grown).unwrap();
        assert_eq!(
            answer["response"]["status"]["message"],
            " Cannot update DataVolume Spec"
        );
    }

    #[test]
    fn a_vm_with_running_gets_the_deprecation_warning() {
        let vm = json!({"spec": {"running": true, "template": {"spec": {
            "domain": {"devices": {}},
        }}}});
        let answer = answer_(Webhook::VirtualMachine, &review("CREATE", vm, None)).unwrap();
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(
            answer["response"]["warnings"],
            json!([kubevirt::RUNNING_DEPRECATED])
        );
    }

    #[test]
    fn bodies_that_are_not_reviews_are_refused() {
        assert!(matches!(
            answer_(Webhook::VirtualMachine, b"{"),
            Err(ReviewError::Json(_))
        ));
        assert!(matches!(
            answer_(Webhook::VirtualMachine, br#"{"apiVersion": "v1"}"#),
            Err(ReviewError::NotARequest)
        ));
    }
}
