//! `AdmissionReview` (admission.k8s.io/v1) in, `AdmissionReview` out: which webhook a request is
//! for, and the answer, with the denial message built as each project builds it.

use serde_json::{Value, json};

use base64::Engine;

use crate::scc::{self, Namespaces};

/// The webhooks served, by their upstream names and paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhook {
    /// OpenShift's SCC admission (a plugin of the API server upstream, a mutating webhook
    /// here): new pods, under `restricted-v2`.
    SecurityContextConstraints,
}

impl Webhook {
    pub const ALL: [Webhook; 1] = [Webhook::SecurityContextConstraints];

    /// The webhook's name: the API server's denial says `admission webhook "<name>"`.
    pub fn name(self) -> &'static str {
        match self {
            Webhook::SecurityContextConstraints => "security.openshift.io.sim",
        }
    }

    /// The URL path upstream serves it at.
    pub fn path(self) -> &'static str {
        match self {
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
    match webhook {
        Webhook::SecurityContextConstraints => {
            let namespace = request["namespace"].as_str().unwrap_or_default();
            let ranges = namespaces.get(namespace);
            let mut response = json!({"uid": request["uid"], "allowed": true});
            let user = request["userInfo"]["username"].as_str().unwrap_or_default();
            match scc::restricted_v2::admit(namespace, object, ranges.as_ref(), user) {
                Ok(patch) => {
                    let patch = serde_json::to_vec(&patch)?;
                    response["patchType"] = json!("JSONPatch");
                    response["patch"] =
                        json!(base64::engine::general_purpose::STANDARD.encode(patch));
                }
                // The plugin's answer upstream: `Forbidden`, one message.
                Err(message) => {
                    response["allowed"] = json!(false);
                    response["status"] =
                        json!({"message": message, "reason": "Forbidden", "code": 403});
                }
            }
            Ok(review_of(response))
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn answer_(webhook: Webhook, body: &[u8]) -> Result<Value, ReviewError> {
        answer(webhook, body, &Namespaces::default())
    }

    #[test]
    fn webhooks_are_found_by_path() {
        for webhook in Webhook::ALL {
            assert_eq!(Webhook::from_path(webhook.path()), Some(webhook));
        }
        assert_eq!(Webhook::from_path("/mutate"), None);
    }

    #[test]
    fn a_pod_is_admitted_with_the_request_uid_and_a_patch() {
        let namespaces = Namespaces::default();
        namespaces.set(
            "ns",
            crate::scc::NamespaceRanges {
                uids: Some("1000000000/10000".into()),
                groups: None,
                mcs: Some("s0:c1,c0".into()),
            },
        );
        let body = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "7d3f", "operation": "CREATE", "namespace": "ns",
                        "object": {"metadata": {"name": "p"},
                                   "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        }))
        .unwrap();
        let answer = answer(Webhook::SecurityContextConstraints, &body, &namespaces).unwrap();
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(answer["response"]["uid"], "7d3f");
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
    }

    #[test]
    fn bodies_that_are_not_reviews_are_refused() {
        assert!(matches!(
            answer_(Webhook::SecurityContextConstraints, b"{"),
            Err(ReviewError::Json(_))
        ));
        assert!(matches!(
            answer_(
                Webhook::SecurityContextConstraints,
                br#"{"apiVersion": "v1"}"#
            ),
            Err(ReviewError::NotARequest)
        ));
    }
}
