//! Pure decisions of the ClusterLease controller (`docs/operations.md`, "ClusterLease"): what a
//! reconcile does next, which instance a pending lease binds, the kubeconfig copy, the TTL (Go
//! duration syntax) and the `status.leaseRef` projection of an instance. The lease's pool actor
//! binds on live reads (`crate::actors::pool::claims`), these functions decide, the actors act and record.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};

use crate::actors::runtime::platform::NamespaceState;
use crate::api::common::LocalRef;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{ClusterInstance, InstancePhase};
use crate::api::labels::FINALIZER_RELEASE;
use crate::api::lease::{ClusterLease, ClusterLeaseStatus, LeasePhase};
use crate::resources::instance::KUBECONFIG_KEY;
use crate::resources::lease::{adopted_kubeconfig_copy, kubeconfig_copy, kubeconfig_secret_name};
use crate::resources::pool::is_member;

/// A `ttl` that is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("invalid duration {0:?}: expected numbers with units such as 2h, 90m or 1h30m")]
    Invalid(String),
    #[error("missing unit in duration {0:?} (use ns, us, ms, s, m or h)")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses a Go duration into signed nanoseconds, accepting exactly what Go's `time.ParseDuration`
/// accepts and computing the same value: an optional sign, then a lone `0` or one or more decimal
/// numbers (`1`, `1.5`, `.5`, `1.`) each followed by a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`,
/// `m`, `h`), within an int64 of nanoseconds. The admission rule of `ttl` accepts the same set.
pub fn go_duration_nanos(input: &str) -> Result<i64, DurationError> {
    // Magnitude of the most negative int64: the bound Go checks while adding up the parts.
    const LIMIT: u64 = 1 << 63;
    const UNITS: [(&str, u64); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let invalid = || DurationError::Invalid(input.to_owned());
    let overflow = || DurationError::Overflow(input.to_owned());
    let (negative, mut rest) = match input.as_bytes().first() {
        None => return Err(DurationError::Empty),
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        Some(_) => (false, input),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(f.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_owned()));
        }
        let scale = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_owned(),
                input: input.to_owned(),
            })?;
        let whole = int_part.bytes().try_fold(0u64, |acc, d| {
            acc.checked_mul(10)
                .and_then(|a| a.checked_add(u64::from(d - b'0')))
                .filter(|a| *a <= LIMIT)
        });
        let mut value = whole
            .and_then(|w| w.checked_mul(scale))
            .filter(|v| *v <= LIMIT)
            .ok_or_else(overflow)?;
        // Go adds a fraction in float64 arithmetic, from the digits that fit an int64; doing the
        // same keeps every value equal to Go's, down to the nanosecond.
        let (mut digits, mut divisor) = (0u64, 1f64);
        for d in frac_part.bytes() {
            match digits
                .checked_mul(10)
                .and_then(|x| x.checked_add(u64::from(d - b'0')))
            {
                Some(next) if next <= LIMIT => {
                    digits = next;
                    divisor *= 10.0;
                }
                _ => break,
            }
        }
        if digits > 0 {
            value += (digits as f64 * (scale as f64 / divisor)) as u64;
            if value > LIMIT {
                return Err(overflow());
            }
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= LIMIT)
            .ok_or_else(overflow)?;
        rest = after;
    }
    if negative {
        // `total` is at most 2^63, so the negation fits an int64.
        return Ok((-i128::from(total)) as i64);
    }
    i64::try_from(total).map_err(|_| overflow())
}

/// A Go duration (see [`go_duration_nanos`]) as a `Duration`. A negative duration is zero: no TTL,
/// as upstream treats `ttl <= 0`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let nanos = go_duration_nanos(input)?;
    Ok(Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)))
}

/// The `ttl` of a lease: `None` when unset, empty or zero.
pub fn ttl(lease: &ClusterLease) -> Result<Option<Duration>, DurationError> {
    match lease.spec.ttl.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => parse_duration(s).map(|d| (!d.is_zero()).then_some(d)),
    }
}

/// Names of the instances claimed by any of `leases`, deleting ones included (a deleting lease
/// still holds its instance until the release has deleted it).
pub fn claimed(leases: &[ClusterLease]) -> BTreeSet<String> {
    leases
        .iter()
        .filter_map(ClusterLease::instance)
        .map(str::to_owned)
        .collect()
}

/// Whether the lease waits for an instance: phase unset or `Pending`.
pub fn is_pending(lease: &ClusterLease) -> bool {
    matches!(
        lease.status.as_ref().and_then(|s| s.phase),
        None | Some(LeasePhase::Pending)
    )
}

/// What a reconcile of a lease (as cached) does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing until the next trigger.
    Done,
    /// Add the finalizer `guestcluster.opdev.io/release`; its update event brings us back.
    AddFinalizer,
    /// Deleting with our finalizer: delete the bound instance, then remove the finalizer.
    Release,
    /// Pending: ask the pool's actor to bind an instance (on live reads).
    Bind,
    /// Delete the lease: the TTL expired, or the legacy phase `Releasing`.
    Delete,
    /// Bound with a TTL that has not expired: look again after this long.
    WaitFor(Duration),
    /// Bound with a `ttl` that does not parse: no expiry (admission normally prevents this).
    BadTtl(DurationError),
}

/// The next step for `lease` at `now`.
pub fn step(lease: &ClusterLease, now: Timestamp) -> Step {
    let has_finalizer = lease.finalizers().iter().any(|f| f == FINALIZER_RELEASE);
    if lease.metadata.deletion_timestamp.is_some() {
        return if has_finalizer {
            Step::Release
        } else {
            Step::Done
        };
    }
    if !has_finalizer {
        return Step::AddFinalizer;
    }
    let status = lease.status.as_ref();
    match status.and_then(|s| s.phase) {
        None | Some(LeasePhase::Pending) => Step::Bind,
        Some(LeasePhase::Releasing) => Step::Delete,
        Some(LeasePhase::Released | LeasePhase::Failed) => Step::Done,
        Some(LeasePhase::Bound) => {
            let ttl = match ttl(lease) {
                Ok(Some(ttl)) => ttl,
                Ok(None) => return Step::Done,
                Err(err) => return Step::BadTtl(err),
            };
            let Some(bound) = status.and_then(|s| s.bound_time.as_ref()) else {
                // Bound without a bound time is not something we write; count from now.
                return Step::WaitFor(ttl);
            };
            let elapsed = Duration::try_from(now.duration_since(bound.0)).unwrap_or_default();
            match ttl.checked_sub(elapsed) {
                Some(left) if !left.is_zero() => Step::WaitFor(left),
                _ => Step::Delete,
            }
        }
    }
}

/// What a pending lease does, decided by its pool's actor on live reads.
#[derive(Debug, Clone, PartialEq)]
pub enum BindDecision {
    /// The live lease is no longer pending: nothing.
    NotPending,
    /// Record `status` (still Pending, `Bound=False`) and look again later.
    Wait(ClusterLeaseStatus),
    /// Copy the kubeconfig Secret `source_secret` of `instance`, then record `status`.
    Bind {
        instance: String,
        source_secret: String,
        status: ClusterLeaseStatus,
    },
}

/// Whether `instance` can be bound: not deleting, phase Ready, a kubeconfig Secret published.
pub fn bindable(instance: &ClusterInstance) -> Option<&str> {
    if instance.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = instance.status.as_ref()?;
    if status.phase != Some(InstancePhase::Ready) {
        return None;
    }
    status
        .kubeconfig_secret_ref
        .as_ref()
        .and_then(LocalRef::name)
}

/// The status of a lease that stays Pending with `Bound=False reason`.
pub fn unbound_status(
    lease: &ClusterLease,
    reason: &str,
    message: &str,
    now: Time,
) -> ClusterLeaseStatus {
    let mut status = lease.status.clone().unwrap_or_default();
    status.phase = Some(LeasePhase::Pending);
    conditions::set(
        &mut status.conditions,
        conditions::new(
            types::BOUND,
            false,
            reason,
            message,
            lease.metadata.generation,
            now,
        ),
    );
    status
}

/// Which instance the pending `lease` binds, given live lists of its namespace's state, its
/// pool's instances and every lease of its namespace: the first (by name) pool instance that is
/// not deleting, Ready, and claimed by no lease.
pub fn decide_bind(
    lease: &ClusterLease,
    namespace: NamespaceState,
    instances: &[ClusterInstance],
    leases: &[ClusterLease],
    now: Time,
) -> BindDecision {
    if !is_pending(lease) || lease.metadata.deletion_timestamp.is_some() {
        return BindDecision::NotPending;
    }
    let ns = lease.metadata.namespace.as_deref().unwrap_or_default();
    // A disabled namespace does not block binding existing capacity; a terminating one does.
    if matches!(
        namespace,
        NamespaceState::Terminating | NamespaceState::Missing
    ) && let Some((reason, message)) = namespace.refusal(ns)
    {
        return BindDecision::Wait(unbound_status(lease, reason, &message, now));
    }
    let Some(pool) = lease.spec.pool_ref.name() else {
        return BindDecision::Wait(unbound_status(
            lease,
            reasons::POOL_NOT_SET,
            "spec.poolRef.name is empty: name the ClusterPool (in this namespace) to lease from",
            now,
        ));
    };
    let taken = claimed(leases);
    let mut candidates: Vec<&ClusterInstance> = instances
        .iter()
        .filter(|i| is_member(pool, i))
        .filter(|i| !taken.contains(&i.name_any()))
        .filter(|i| bindable(i).is_some())
        .collect();
    candidates.sort_by_key(|i| i.name_any());
    let Some(instance) = candidates.first() else {
        return BindDecision::Wait(unbound_status(
            lease,
            reasons::WAITING_FOR_CAPACITY,
            &format!("no Ready, unclaimed instance in pool {pool}; waiting for one"),
            now,
        ));
    };
    let name = instance.name_any();
    let source_secret = bindable(instance).unwrap_or_default().to_owned();
    let istatus = instance.status.clone().unwrap_or_default();
    let mut status = lease.status.clone().unwrap_or_default();
    status.phase = Some(LeasePhase::Bound);
    status.instance_ref = Some(LocalRef::new(name.clone()));
    status.kubeconfig_secret_ref = Some(LocalRef::new(kubeconfig_secret_name(&lease.name_any())));
    status.ocp_version = istatus.ocp_version;
    status.topology = Some(istatus.topology.unwrap_or(instance.spec.type_));
    status.api_endpoint = istatus.api_endpoint;
    status.bound_time = Some(now.clone());
    conditions::set(
        &mut status.conditions,
        conditions::new(
            types::BOUND,
            true,
            reasons::INSTANCE_BOUND,
            format!("bound to ClusterInstance {name} of pool {pool}"),
            lease.metadata.generation,
            now,
        ),
    );
    BindDecision::Bind {
        instance: name,
        source_secret,
        status,
    }
}

/// What to do about the lease's kubeconfig copy `<lease>-kubeconfig`.
#[derive(Debug, Clone, PartialEq)]
pub enum CopyAction {
    Create(Secret),
    /// Replace the existing Secret (its resourceVersion is kept as a precondition).
    Replace(Secret),
    /// The copy is already right.
    Unchanged,
    /// The instance's Secret is missing or lacks the `kubeconfig` key.
    Unavailable(String),
    /// `<lease>-kubeconfig` exists and another object controls it.
    Conflict(String),
}

/// The copy of `source` (the instance's kubeconfig Secret, `None` when missing) the lease needs,
/// given the `existing` `<lease>-kubeconfig`: type Opaque, the source's data, controlled by the
/// lease. An existing Secret without a controller is adopted, one controlled by another object
/// is a conflict.
pub fn copy_kubeconfig(
    lease: &ClusterLease,
    source_name: &str,
    source: Option<&Secret>,
    existing: Option<&Secret>,
) -> CopyAction {
    let name = kubeconfig_secret_name(&lease.name_any());
    let Some(data) = source
        .and_then(|s| s.data.as_ref())
        .filter(|d| d.contains_key(KUBECONFIG_KEY))
    else {
        return CopyAction::Unavailable(format!(
            "Secret {source_name} of the instance is missing or has no key {KUBECONFIG_KEY}"
        ));
    };
    let Some(owner) = lease.controller_owner_ref(&()) else {
        return CopyAction::Unavailable("the lease has no UID yet".to_owned());
    };
    let Some(existing) = existing else {
        return CopyAction::Create(kubeconfig_copy(lease, owner, data));
    };
    if let Some(other) = existing
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true) && r.uid != owner.uid)
    {
        return CopyAction::Conflict(format!(
            "Secret {name} exists and is controlled by {} {}",
            other.kind, other.name
        ));
    }
    let ours = existing
        .owner_references()
        .iter()
        .any(|r| r.uid == owner.uid);
    let same_data = existing.data.as_ref() == Some(data);
    let opaque = existing.type_.as_deref().unwrap_or("Opaque") == "Opaque";
    if ours && same_data {
        return CopyAction::Unchanged;
    }
    if !opaque {
        // The type of a Secret is immutable.
        return CopyAction::Conflict(format!(
            "Secret {name} exists with type {}",
            existing.type_.as_deref().unwrap_or_default()
        ));
    }
    CopyAction::Replace(adopted_kubeconfig_copy(existing, owner, data))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use crate::api::common::ClusterType;
    use crate::api::instance::ClusterInstanceStatus;
    use crate::api::labels::{MANAGED_BY, MANAGED_BY_OPERATOR, POOL};
    use crate::resources::lease::kubeconfig_data;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn now() -> Time {
        Time(at(1_700_000_000))
    }

    fn lease(name: &str, phase: Option<LeasePhase>, instance: Option<&str>) -> ClusterLease {
        let mut l: ClusterLease = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterLease",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "generation": 1, "finalizers": [FINALIZER_RELEASE]},
            "spec": {"poolRef": {"name": "p"}},
        }))
        .unwrap();
        if phase.is_some() || instance.is_some() {
            l.status = Some(ClusterLeaseStatus {
                phase,
                instance_ref: instance.map(LocalRef::new),
                ..ClusterLeaseStatus::default()
            });
        }
        l
    }

    fn bound(ttl: Option<&str>, bound_at: Option<i64>) -> ClusterLease {
        let mut l = lease("l", Some(LeasePhase::Bound), Some("p-0"));
        l.spec.ttl = ttl.map(str::to_owned);
        l.status.as_mut().unwrap().bound_time = bound_at.map(|s| Time(at(s)));
        l
    }

    fn instance(name: &str, pool: &str, ready: bool) -> ClusterInstance {
        let mut i: ClusterInstance = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterInstance",
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {POOL: pool, MANAGED_BY: MANAGED_BY_OPERATOR}},
            "spec": {"type": "crc", "poolRef": {"name": pool},
                     "template": {"ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4}},
        }))
        .unwrap();
        i.status = Some(ClusterInstanceStatus {
            phase: Some(if ready {
                InstancePhase::Ready
            } else {
                InstancePhase::Provisioning
            }),
            kubeconfig_secret_ref: ready.then(|| LocalRef::new(format!("{name}-kubeconfig"))),
            ocp_version: Some("4.22.7".into()),
            api_endpoint: Some(format!("https://api.{name}.example")),
            ..ClusterInstanceStatus::default()
        });
        i
    }

    fn bound_condition(status: &ClusterLeaseStatus) -> (&str, &str) {
        let c = conditions::find(&status.conditions, types::BOUND).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn parses_go_durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("2h"), Duration::from_secs(7200));
        assert_eq!(ok("90m"), Duration::from_secs(5400));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("3us"), Duration::from_micros(3));
        assert_eq!(ok("3µs"), Duration::from_micros(3));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
        assert_eq!(ok("1h1m1s1ms"), Duration::from_millis(3_661_001));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(ok("-5s"), Duration::ZERO, "negative: no TTL");
        assert_eq!(ok("0s"), Duration::ZERO);
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("5"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("1h5"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("5d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("h"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("."),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("-"),
            Err(DurationError::Invalid(_))
        ));
        assert!(matches!(
            parse_duration("3000000h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999999999999999999999s"),
            Err(DurationError::Overflow(_))
        ));
    }

    /// Go 1.26's `time.ParseDuration` on each input: the nanoseconds, or `None` for an error.
    const GO_PARSE_DURATION: &[(&str, Option<i64>)] = &[
        ("0", Some(0)),
        ("+0", Some(0)),
        ("-0", Some(0)),
        ("0s", Some(0)),
        ("0.0s", Some(0)),
        ("00s", Some(0)),
        ("2h", Some(7_200_000_000_000)),
        ("+2h", Some(7_200_000_000_000)),
        ("-2h", Some(-7_200_000_000_000)),
        (".5h", Some(1_800_000_000_000)),
        ("1.h", Some(3_600_000_000_000)),
        ("1.5h", Some(5_400_000_000_000)),
        ("1h30m", Some(5_400_000_000_000)),
        ("90m", Some(5_400_000_000_000)),
        ("500ms", Some(500_000_000)),
        ("1µs", Some(1_000)),
        ("1μs", Some(1_000)),
        ("1us", Some(1_000)),
        ("7ns", Some(7)),
        ("2h0m0s", Some(7_200_000_000_000)),
        ("1h1m1.5s", Some(3_661_500_000_000)),
        ("-.5m", Some(-30_000_000_000)),
        ("3.000000000000000000001s", Some(3_000_000_000)),
        ("9223372036854775807ns", Some(i64::MAX)),
        ("9223372036854775808ns", None),
        ("-9223372036854775808ns", Some(i64::MIN)),
        ("-9223372036854775809ns", None),
        ("2562047h47m16.854775807s", Some(i64::MAX)),
        ("2562047h47m16.854775808s", None),
        ("-2562047h47m16.854775808s", Some(i64::MIN)),
        ("2562047h", Some(9_223_369_200_000_000_000)),
        ("2562048h", None),
        ("9223372036854775808000000000000ns", None),
        ("", None),
        ("+", None),
        ("-", None),
        (".", None),
        (".s", None),
        ("s", None),
        ("h", None),
        ("5", None),
        ("00", None),
        ("1h5", None),
        ("1d", None),
        ("5D", None),
        ("1H", None),
        ("+-1s", None),
        ("--1s", None),
        ("1hm", None),
        ("1e3s", None),
        (" 1s", None),
        ("1s ", None),
        ("1 s", None),
        ("1.2.3s", None),
        ("1..2s", None),
        ("0x10s", None),
        ("1_000s", None),
        ("１s", None),
        ("1µ", None),
        ("1mss", None),
    ];

    #[test]
    fn accepts_and_computes_exactly_what_go_does() {
        for (input, go) in GO_PARSE_DURATION {
            assert_eq!(
                go_duration_nanos(input).ok(),
                *go,
                "{input:?}: {:?}",
                go_duration_nanos(input)
            );
        }
    }

    #[test]
    fn ttl_unset_empty_or_zero_means_none() {
        assert_eq!(ttl(&bound(None, None)), Ok(None));
        assert_eq!(ttl(&bound(Some(""), None)), Ok(None));
        assert_eq!(ttl(&bound(Some("0s"), None)), Ok(None));
        assert_eq!(ttl(&bound(Some("0"), None)), Ok(None));
        assert_eq!(ttl(&bound(Some("-5m"), None)), Ok(None));
        assert_eq!(step(&bound(Some("0"), Some(0)), at(10_000)), Step::Done);
        assert_eq!(
            ttl(&bound(Some("1m"), None)),
            Ok(Some(Duration::from_secs(60)))
        );
    }

    #[test]
    fn finalizer_first_then_by_phase() {
        let mut l = lease("l", None, None);
        l.metadata.finalizers = None;
        assert_eq!(step(&l, at(0)), Step::AddFinalizer);
        let l = lease("l", None, None);
        assert_eq!(step(&l, at(0)), Step::Bind);
        let l = lease("l", Some(LeasePhase::Pending), None);
        assert_eq!(step(&l, at(0)), Step::Bind);
        let l = lease("l", Some(LeasePhase::Releasing), Some("p-0"));
        assert_eq!(step(&l, at(0)), Step::Delete);
        for phase in [LeasePhase::Released, LeasePhase::Failed] {
            assert_eq!(step(&lease("l", Some(phase), None), at(0)), Step::Done);
        }
        assert_eq!(step(&bound(None, Some(0)), at(10_000)), Step::Done);
    }

    #[test]
    fn deletion_releases_only_with_our_finalizer() {
        let mut l = lease("l", Some(LeasePhase::Bound), Some("p-0"));
        l.metadata.deletion_timestamp = Some(now());
        assert_eq!(step(&l, at(0)), Step::Release);
        l.metadata.finalizers = Some(vec!["other".into()]);
        assert_eq!(step(&l, at(0)), Step::Done);
    }

    #[test]
    fn ttl_counts_from_bound_time() {
        let l = bound(Some("1h"), Some(1_000));
        assert_eq!(
            step(&l, at(1_000)),
            Step::WaitFor(Duration::from_secs(3600))
        );
        assert_eq!(
            step(&l, at(1_000 + 3599)),
            Step::WaitFor(Duration::from_secs(1))
        );
        assert_eq!(step(&l, at(1_000 + 3600)), Step::Delete);
        assert_eq!(step(&l, at(1_000 + 99_999)), Step::Delete);
        // A clock behind the bound time waits the whole TTL.
        assert_eq!(step(&l, at(500)), Step::WaitFor(Duration::from_secs(3600)));
        assert_eq!(
            step(&bound(Some("30s"), None), at(0)),
            Step::WaitFor(Duration::from_secs(30))
        );
        assert!(matches!(
            step(&bound(Some("5d"), Some(0)), at(0)),
            Step::BadTtl(DurationError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn binds_first_ready_unclaimed_instance_of_its_pool() {
        let l = lease("l", None, None);
        let mut deleting = instance("p-0", "p", true);
        deleting.metadata.deletion_timestamp = Some(now());
        let mut foreign = instance("a-0", "other", true);
        foreign.metadata.name = Some("a-0".into());
        let mut unmanaged = instance("b-0", "p", true);
        unmanaged.labels_mut().remove(MANAGED_BY);
        let instances = [
            instance("p-4", "p", true),
            deleting,
            foreign,
            unmanaged,
            instance("p-1", "p", false),
            instance("p-2", "p", true),
            instance("p-3", "p", true),
        ];
        let other_lease = lease("x", Some(LeasePhase::Bound), Some("p-2"));
        let leases = [l.clone(), other_lease];
        let d = decide_bind(&l, NamespaceState::Enabled, &instances, &leases, now());
        let BindDecision::Bind {
            instance,
            source_secret,
            status,
        } = d
        else {
            panic!("expected a bind, got {d:?}");
        };
        assert_eq!(instance, "p-3");
        assert_eq!(source_secret, "p-3-kubeconfig");
        assert_eq!(status.phase, Some(LeasePhase::Bound));
        assert_eq!(status.instance_ref, Some(LocalRef::new("p-3")));
        assert_eq!(
            status.kubeconfig_secret_ref,
            Some(LocalRef::new("l-kubeconfig"))
        );
        assert_eq!(status.ocp_version.as_deref(), Some("4.22.7"));
        assert_eq!(status.topology, Some(ClusterType::Crc));
        assert_eq!(
            status.api_endpoint.as_deref(),
            Some("https://api.p-3.example")
        );
        assert_eq!(status.bound_time, Some(now()));
        assert_eq!(bound_condition(&status), ("True", reasons::INSTANCE_BOUND));
    }

    #[test]
    fn an_empty_pool_ref_binds_nothing() {
        // Go clients write an unset reference as `{}`; a standalone instance has `poolRef: {}`
        // too, and a lease naming no pool must not take it.
        let mut l = lease("l", None, None);
        l.spec.pool_ref = LocalRef::default();
        let mut standalone = instance("s", "", true);
        standalone.spec.pool_ref = Some(LocalRef::default());
        let d = decide_bind(&l, NamespaceState::Enabled, &[standalone], &[], now());
        let BindDecision::Wait(status) = d else {
            panic!("expected a wait, got {d:?}");
        };
        assert_eq!(status.phase, Some(LeasePhase::Pending));
        assert_eq!(bound_condition(&status), ("False", reasons::POOL_NOT_SET));
    }

    #[test]
    fn empty_refs_in_status_name_nothing() {
        let l = lease("l", Some(LeasePhase::Bound), Some(""));
        assert_eq!(l.instance(), None);
        assert!(claimed(&[l]).is_empty());
        let mut ready = instance("p-0", "p", true);
        ready.status.as_mut().unwrap().kubeconfig_secret_ref = Some(LocalRef::default());
        assert_eq!(bindable(&ready), None);
    }

    #[test]
    fn deleting_leases_still_claim_their_instance() {
        let l = lease("l", None, None);
        let mut going = lease("x", Some(LeasePhase::Bound), Some("p-0"));
        going.metadata.deletion_timestamp = Some(now());
        let d = decide_bind(
            &l,
            NamespaceState::Enabled,
            &[instance("p-0", "p", true)],
            &[going],
            now(),
        );
        let BindDecision::Wait(status) = d else {
            panic!("expected to wait, got {d:?}");
        };
        assert_eq!(status.phase, Some(LeasePhase::Pending));
        assert_eq!(
            bound_condition(&status),
            ("False", reasons::WAITING_FOR_CAPACITY)
        );
    }

    #[test]
    fn waits_without_capacity_and_keeps_the_transition_time() {
        let l = lease("l", None, None);
        let first = decide_bind(
            &l,
            NamespaceState::Enabled,
            &[instance("p-0", "p", false)],
            &[],
            now(),
        );
        let BindDecision::Wait(status) = first else {
            panic!("expected to wait, got {first:?}");
        };
        let mut again = l.clone();
        again.status = Some(status.clone());
        let later = Time(at(1_700_000_100));
        let BindDecision::Wait(second) =
            decide_bind(&again, NamespaceState::Enabled, &[], &[], later)
        else {
            panic!("expected to wait");
        };
        assert_eq!(second, status, "an unchanged status is not rewritten");
    }

    #[test]
    fn terminating_namespace_blocks_binding_disabled_does_not() {
        let l = lease("l", None, None);
        let ready = [instance("p-0", "p", true)];
        for (state, reason) in [
            (NamespaceState::Terminating, reasons::NAMESPACE_TERMINATING),
            (NamespaceState::Missing, reasons::NAMESPACE_UNAVAILABLE),
        ] {
            let d = decide_bind(&l, state, &ready, &[], now());
            let BindDecision::Wait(status) = d else {
                panic!("expected to wait, got {d:?}");
            };
            assert_eq!(bound_condition(&status), ("False", reason));
        }
        let d = decide_bind(&l, NamespaceState::Disabled, &ready, &[], now());
        assert!(matches!(d, BindDecision::Bind { .. }), "{d:?}");
    }

    #[test]
    fn a_bound_or_deleting_lease_is_not_bound_again() {
        let ready = [instance("p-0", "p", true)];
        let b = lease("l", Some(LeasePhase::Bound), Some("p-1"));
        assert_eq!(
            decide_bind(&b, NamespaceState::Enabled, &ready, &[], now()),
            BindDecision::NotPending
        );
        let mut d = lease("l", None, None);
        d.metadata.deletion_timestamp = Some(now());
        assert_eq!(
            decide_bind(&d, NamespaceState::Enabled, &ready, &[], now()),
            BindDecision::NotPending
        );
    }

    #[test]
    fn a_lease_claims_the_instance_it_names_until_it_is_deleting() {
        let mut deleting = lease("a", Some(LeasePhase::Bound), Some("p-0"));
        deleting.metadata.deletion_timestamp = Some(now());
        let leases = [
            deleting,
            lease("b", Some(LeasePhase::Bound), Some("p-1")),
            lease("c", Some(LeasePhase::Pending), None),
        ];
        let claims: Vec<_> = leases.iter().map(ClusterLease::claim).collect();
        assert_eq!(claims, [None, Some("p-1"), None]);
        assert_eq!(
            claimed(&leases),
            BTreeSet::from(["p-0".to_owned(), "p-1".to_owned()]),
            "a deleting lease still holds its instance"
        );
    }

    fn secret(data: Option<BTreeMap<String, ByteString>>, owner_uid: Option<&str>) -> Secret {
        let mut s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "l-kubeconfig", "namespace": "ns", "resourceVersion": "7"},
            "type": "Opaque",
        }))
        .unwrap();
        s.data = data;
        if let Some(uid) = owner_uid {
            s.metadata.owner_references = Some(vec![
                serde_json::from_value(json!({"apiVersion": "v1", "kind": "Other",
                    "name": "o", "uid": uid, "controller": true}))
                .unwrap(),
            ]);
        }
        s
    }

    #[test]
    fn kubeconfig_copy_is_created_owned_by_the_lease() {
        let l = lease("l", None, None);
        let source = secret(Some(kubeconfig_data("cfg")), None);
        let CopyAction::Create(s) = copy_kubeconfig(&l, "p-0-kubeconfig", Some(&source), None)
        else {
            panic!("expected a create");
        };
        assert_eq!(s.name_any(), "l-kubeconfig");
        assert_eq!(s.namespace().as_deref(), Some("ns"));
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        assert_eq!(s.data, Some(kubeconfig_data("cfg")));
        let owner = &s.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ClusterLease", "uid-l", Some(true))
        );
    }

    #[test]
    fn kubeconfig_copy_missing_source_or_key_is_unavailable() {
        let l = lease("l", None, None);
        assert!(matches!(
            copy_kubeconfig(&l, "p-0-kubeconfig", None, None),
            CopyAction::Unavailable(_)
        ));
        let wrong_key = secret(
            Some(BTreeMap::from([("other".into(), ByteString(vec![1]))])),
            None,
        );
        assert!(matches!(
            copy_kubeconfig(&l, "p-0-kubeconfig", Some(&wrong_key), None),
            CopyAction::Unavailable(_)
        ));
    }

    #[test]
    fn kubeconfig_copy_refuses_a_foreign_controller_and_adopts_or_updates_others() {
        let l = lease("l", None, None);
        let source = secret(Some(kubeconfig_data("new")), None);
        let foreign = secret(Some(kubeconfig_data("old")), Some("someone-else"));
        assert!(matches!(
            copy_kubeconfig(&l, "src", Some(&source), Some(&foreign)),
            CopyAction::Conflict(_)
        ));
        let ours_same = secret(Some(kubeconfig_data("new")), Some("uid-l"));
        assert_eq!(
            copy_kubeconfig(&l, "src", Some(&source), Some(&ours_same)),
            CopyAction::Unchanged
        );
        let ours_stale = secret(Some(kubeconfig_data("old")), Some("uid-l"));
        let CopyAction::Replace(r) = copy_kubeconfig(&l, "src", Some(&source), Some(&ours_stale))
        else {
            panic!("expected a replace");
        };
        assert_eq!(r.data, Some(kubeconfig_data("new")));
        assert_eq!(r.resource_version().as_deref(), Some("7"));
        assert_eq!(r.owner_references().len(), 1);
        let unowned = secret(Some(kubeconfig_data("old")), None);
        let CopyAction::Replace(r) = copy_kubeconfig(&l, "src", Some(&source), Some(&unowned))
        else {
            panic!("expected an adoption");
        };
        assert_eq!(r.owner_references()[0].uid, "uid-l");
        let mut typed = secret(Some(kubeconfig_data("old")), None);
        typed.type_ = Some("kubernetes.io/tls".into());
        assert!(matches!(
            copy_kubeconfig(&l, "src", Some(&source), Some(&typed)),
            CopyAction::Conflict(_)
        ));
    }
}
