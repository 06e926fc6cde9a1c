//! Pure decisions of the ClusterLease controller (`docs/operations.md`, "ClusterLease"): what a
//! reconcile does next and the TTL (Go duration syntax). Which instance a pending lease gets is
//! its pool's answer (`crate::actors::pool::bind`), asked for by message.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::duration::{DurationError, parse_duration};
use crate::api::labels::FINALIZER_RELEASE;
use crate::api::lease::{ClusterLease, LeasePhase};

/// The `ttl` of a lease: `None` when unset, empty or zero.
pub fn ttl(lease: &ClusterLease) -> Result<Option<Duration>, DurationError> {
    match lease.spec.ttl.as_deref() {
        None | Some("") => Ok(None),
        Some(s) => parse_duration(s).map(|d| (!d.is_zero()).then_some(d)),
    }
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

#[cfg(test)]
mod tests {

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::lease::fixtures::lease;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn now() -> Time {
        Time(at(1_700_000_000))
    }

    fn bound(ttl: Option<&str>, bound_at: Option<i64>) -> ClusterLease {
        let mut l = lease("l", Some(LeasePhase::Bound), Some("p-0"));
        l.spec.ttl = ttl.map(str::to_owned);
        l.status.as_mut().unwrap().bound_time = bound_at.map(|s| Time(at(s)));
        l
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
}
