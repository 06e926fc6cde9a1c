//! The names actors are registered under (`<kind>/<uid>`, `supervisor/<kind>`, `root`): how
//! actors find each other, and what the live-actor gauge counts.

/// Registered name of the actor for the object with `uid` of `kind` (e.g. `crcbundle/<uid>`).
pub fn object_actor_name(kind: &str, uid: &str) -> String {
    format!("{kind}/{uid}")
}

/// Registered name of the supervisor of `kind`.
pub fn supervisor_name(kind: &str) -> String {
    format!("supervisor/{kind}")
}

/// Live actors per kind, from the names actors are registered under (`<kind>/<uid>`,
/// `supervisor/<kind>`, `root`).
pub fn live_actor_counts() -> std::collections::BTreeMap<String, i64> {
    let mut counts = std::collections::BTreeMap::new();
    for name in ractor::registry::registered() {
        *counts.entry(kind_of(&name).to_owned()).or_insert(0) += 1;
    }
    counts
}

/// The kind a registered name counts under: `<kind>/<uid>` → `<kind>`, `supervisor/<kind>` →
/// `supervisor`, `root` → `root`.
pub fn kind_of(name: &str) -> &str {
    match name.split_once('/') {
        Some(("supervisor", _)) => "supervisor",
        Some((kind, _)) => kind,
        None => name,
    }
}
