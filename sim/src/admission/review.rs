//! `AdmissionReview` (admission.k8s.io/v1) in, `AdmissionReview` out: which webhook a request is
//! for, and the answer, with the denial message built as each project builds it.

use serde_json::{Value, json};

use base64::Engine;

use super::{Denial, Verdict, cdi};
use crate::scc::{self, Namespaces};

/// The webhooks served, by their upstream names and paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhook {
    /// CDI's API server: DataVolumes, on create and update.
    DataVolume,
    /// OpenShift's SCC admission (a plugin of the API server upstream, a mutating webhook
    /// here): new pods, under `restricted-v2`.
    SecurityContextConstraints,
}

impl Webhook {
    pub const ALL: [Webhook; 2] = [Webhook::DataVolume, Webhook::SecurityContextConstraints];

    /// The webhook's name: the API server's denial says `admission webhook "<name>"`.
    pub fn name(self) -> &'static str {
        match self {
            Webhook::DataVolume => "datavolume-validate.cdi.kubevirt.io",
            Webhook::SecurityContextConstraints => "security.openshift.io.sim",
        }
    }

    /// The URL path upstream serves it at.
    pub fn path(self) -> &'static str {
        match self {
            Webhook::DataVolume => "/datavolume-validate",
            Webhook::SecurityContextConstraints => "/scc-admission",
        }
    }

    pub fn from_path(path: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.path() == path)
    }
}

/// Why a request body is not an admission request.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not an admission.k8s.io/v1 AdmissionReview with a request")]
    NotARequest,
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
    let verdict: Verdict = cdi::validate(object, old);
    let mut response = json!({"uid": request["uid"], "allowed": verdict.is_ok()});
    if let Err(denials) = verdict {
        response["status"] = status(denials);
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

/// The `metav1.Status` of a denial as CDI words it: every message after a space (so the text
/// starts with one), no reason. The API server puts `admission webhook "<name>" denied the
/// request: ` before its message.
fn status(denials: Vec<Denial>) -> Value {
    let message: String = denials.iter().map(|d| format!(" {}", d.message)).collect();
    json!({"message": message, "code": 422, "details": {"causes": denials}})
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
    fn bodies_that_are_not_reviews_are_refused() {
        assert!(matches!(
            answer_(Webhook::DataVolume, b"{"),
            Err(ReviewError::Json(_))
        ));
        assert!(matches!(
            answer_(Webhook::DataVolume, br#"{"apiVersion": "v1"}"#),
            Err(ReviewError::NotARequest)
        ));
    }
}
