//! The validating admission webhook of CDI, for the rules the objects we write can break, and
//! OpenShift's SCC admission. KubeVirt's are virt-api's own (`testenv::ControlPlane::kubevirt`).
//! See `docs/simulation.md` ("Admission") for the rules and what is not checked.
//!
//! The rules are pure functions of the object's JSON, as the API server sends it (after its own
//! schema validation, defaulting and pruning), each returning every [`Denial`] with the field and
//! the message upstream gives; [`review`] turns an `AdmissionReview` into its answer, with the
//! message built the way each project builds it. [`server`] serves them over HTTPS on loopback
//! and registers them with the real API server, which then refuses a bad object with
//! `admission webhook "<name>" denied the request: <message>`, as on a real cluster.
//!
//! | module | upstream |
//! |---|---|
//! | [`cdi`] | `datavolume-validate.cdi.kubevirt.io` |

pub mod cdi;
pub mod review;
pub mod server;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// One reason an object is refused: a `metav1.StatusCause` of the denial.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// The cause type (`FieldValueInvalid`, …), serialized as the cause's `reason`.
    #[serde(rename = "reason")]
    pub cause: CauseType,
    pub message: String,
    /// The field path, `spec.template.spec.domain.devices.disks[0].bootOrder`.
    pub field: String,
}

impl Denial {
    pub fn new(cause: CauseType, field: impl fmt::Display, message: impl Into<String>) -> Self {
        Self {
            cause,
            message: message.into(),
            field: field.to_string(),
        }
    }

    pub fn invalid(field: impl fmt::Display, message: impl Into<String>) -> Self {
        Self::new(CauseType::FieldValueInvalid, field, message)
    }
}

/// `metav1.CauseType` values the rules use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CauseType {
    FieldValueInvalid,
    FieldValueRequired,
    FieldValueDuplicate,
    FieldValueNotSupported,
}

/// What the rules of one admission return: `Err` with every denial, in upstream's order.
pub type Verdict = Result<(), Vec<Denial>>;

/// A field path as Kubernetes prints it (`k8s.io/apimachinery/pkg/util/validation/field`):
/// children joined with `.`, indexes as `[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    pub fn new(root: &str) -> Self {
        Self(root.to_owned())
    }

    pub fn child(&self, name: &str) -> Self {
        Self(format!("{}.{name}", self.0))
    }

    /// Several children at once: `path.children(&["domain", "devices"])`.
    pub fn children(&self, names: &[&str]) -> Self {
        names
            .iter()
            .fold(self.clone(), |path, name| path.child(name))
    }

    pub fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `key` is set on `object` the way a Go pointer field is: present and not `null`
/// (`masquerade: {}` is set).
fn is_set(object: &Value, key: &str) -> bool {
    object.get(key).is_some_and(|v| !v.is_null())
}

/// The array at `key`, empty when absent.
fn items<'a>(object: &'a Value, key: &str) -> &'a [Value] {
    object
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The string at `key`, empty when absent (a Go string field's zero value).
fn text<'a>(object: &'a Value, key: &str) -> &'a str {
    object.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The sign and size of a `resource.Quantity` as `Quantity.Value()` gives it (rounded up to a
/// whole unit); `None` when absent or not a quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Amount {
    Negative,
    Bytes(u64),
}

fn quantity(value: Option<&Value>) -> Option<Amount> {
    let text = match value? {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    match text.strip_prefix('-') {
        Some(rest) => crate::quantity::parse_quantity(rest).map(|n| {
            if n == 0 {
                Amount::Bytes(0)
            } else {
                Amount::Negative
            }
        }),
        None => crate::quantity::parse_quantity(&text).map(Amount::Bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_paths_print_like_kubernetes() {
        let disks = FieldPath::new("spec").children(&["domain", "devices", "disks"]);
        assert_eq!(
            disks.index(2).child("bootOrder").to_string(),
            "spec.domain.devices.disks[2].bootOrder"
        );
    }

    #[test]
    fn set_means_present_and_not_null() {
        let v = json!({"a": {}, "b": null, "c": false});
        assert!(is_set(&v, "a"));
        assert!(!is_set(&v, "b"));
        assert!(is_set(&v, "c"));
        assert!(!is_set(&v, "d"));
    }

    #[test]
    fn quantities_keep_their_sign() {
        assert_eq!(quantity(Some(&json!("1Gi"))), Some(Amount::Bytes(1 << 30)));
        assert_eq!(quantity(Some(&json!("0"))), Some(Amount::Bytes(0)));
        assert_eq!(quantity(Some(&json!("-0"))), Some(Amount::Bytes(0)));
        assert_eq!(quantity(Some(&json!("-1Mi"))), Some(Amount::Negative));
        assert_eq!(quantity(Some(&json!(512))), Some(Amount::Bytes(512)));
        assert_eq!(quantity(Some(&json!("lots"))), None);
        assert_eq!(quantity(None), None);
    }
}
