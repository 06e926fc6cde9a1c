//! Leader election on a `coordination.k8s.io/v1` Lease, so that only one operator replica acts.
//!
//! The Lease is updated with optimistic concurrency (its resourceVersion): two candidates can
//! never both believe they hold it. A leader that cannot renew within the renew deadline steps
//! down by ending the process, like controller-runtime does.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading or writing Lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("leader election timing: {0}")]
    InvalidTiming(String),
    #[error("lost leadership of Lease {namespace}/{name}: not renewed within {deadline:?}")]
    Lost {
        namespace: String,
        name: String,
        deadline: Duration,
    },
}

/// How long a Lease holds and how often it is renewed (`--leader-elect-lease-duration`,
/// `--leader-elect-renew-deadline`, `--leader-elect-retry-period`, as kube-controller-manager
/// names them). A shorter lease hands over sooner after a leader dies without releasing it
/// (SIGKILL, a lost node); a renew deadline too close to the lease lets a slow API server end a
/// healthy leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long others wait after the last renewal before taking over; whole seconds, as the
    /// Lease stores it.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// The pause between two attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// The timing, if the three fit together the way client-go requires: the lease outlasts
    /// the renew deadline (a leader steps down before anyone may take over), and the deadline
    /// leaves room for more than one retry (with client-go's jitter of 1.2).
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, Error> {
        let invalid = |why: String| Err(Error::InvalidTiming(why));
        if lease_duration.subsec_nanos() != 0 || lease_duration.is_zero() {
            return invalid(format!(
                "the lease duration ({lease_duration:?}) must be a whole number of seconds, at least 1s: the Lease stores seconds"
            ));
        }
        if renew_deadline >= lease_duration {
            return invalid(format!(
                "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?})"
            ));
        }
        if retry_period.is_zero()
            || renew_deadline.as_secs_f64() <= 1.2 * retry_period.as_secs_f64()
        {
            return invalid(format!(
                "the retry period ({retry_period:?}) must be above zero and the renew deadline ({renew_deadline:?}) more than 1.2 times it"
            ));
        }
        Ok(Self {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }
}

/// Timing and identity of a candidate.
#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    /// Lease name; the Go operator used `28494864.opdev.io`, and keeping it means the two can
    /// never run as leaders side by side.
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Config {
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>, timing: Timing) -> Self {
        Self {
            namespace: namespace.into(),
            name: "28494864.opdev.io".to_owned(),
            identity: identity.into(),
            lease_duration: timing.lease_duration,
            renew_deadline: timing.renew_deadline,
            retry_period: timing.retry_period,
        }
    }
}

/// What a candidate should do with the Lease it observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No Lease exists: create it with us as holder.
    Create,
    /// Free or expired: take it over (a new transition).
    Take,
    /// We hold it: renew.
    Renew,
    /// Someone else holds a live lease.
    Wait { holder: String },
}

/// Decides the next step from the observed Lease at `now`.
pub fn decide(lease: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Step {
    let Some(spec) = lease else {
        return Step::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return Step::Renew;
    }
    let expires = spec
        .renew_time
        .as_ref()
        .zip(spec.lease_duration_seconds)
        .map(|(renewed, secs)| {
            renewed
                .0
                .saturating_add(SignedDuration::from_secs(i64::from(secs)))
                .unwrap_or(renewed.0)
        });
    match expires {
        Some(expires) if !holder.is_empty() && expires > now => Step::Wait {
            holder: holder.to_owned(),
        },
        _ => Step::Take,
    }
}

/// A candidate for leadership.
pub struct Elector {
    api: Api<Lease>,
    config: Config,
}

impl Elector {
    pub fn new(client: kube::Client, config: Config) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Blocks until this candidate holds the Lease.
    pub async fn acquire(&self) -> Result<(), Error> {
        let mut announced = None;
        loop {
            match self.try_acquire_or_renew().await? {
                Step::Wait { holder } => {
                    if announced.as_ref() != Some(&holder) {
                        tracing::info!(lease = %self.config.name, %holder, "waiting for leadership");
                        announced = Some(holder);
                    }
                }
                _ => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "acquired leadership");
                    return Ok(());
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews the Lease until renewal fails for longer than the renew deadline; returns why.
    pub async fn hold(&self) -> Error {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(Step::Renew | Step::Take | Step::Create) => {
                    last_renewal = tokio::time::Instant::now()
                }
                Ok(Step::Wait { holder }) => {
                    tracing::error!(%holder, "another replica took the lease");
                    return self.lost();
                }
                Err(err) => tracing::warn!("renewing leadership failed: {err}"),
            }
            if last_renewal.elapsed() > self.config.renew_deadline {
                return self.lost();
            }
        }
    }

    /// Gives the Lease up so a standby replica takes over without waiting for expiry.
    pub async fn release(&self) -> Result<(), Error> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.api_err(e))?
        else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.api_err(e))?;
        Ok(())
    }

    /// One round: observe the Lease and create, take or renew it when allowed. A write conflict
    /// (someone else wrote first) is reported as `Wait`.
    pub async fn try_acquire_or_renew(&self) -> Result<Step, Error> {
        let existing = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.api_err(e))?;
        let now = Timestamp::now();
        let step = decide(
            existing.as_ref().and_then(|l| l.spec.as_ref()),
            &self.config.identity,
            now,
        );
        let write = match (&step, existing) {
            (Step::Wait { .. }, _) => return Ok(step),
            (Step::Create, _) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(None, now, 0)),
                };
                return match crate::write::create_new(&self.api, &lease).await {
                    Ok(true) => Ok(step),
                    // Someone else created it first.
                    Ok(false) => Ok(Step::Wait {
                        holder: "unknown (write conflict)".to_owned(),
                    }),
                    Err(e) => Err(self.api_err(e)),
                };
            }
            (_, Some(mut lease)) => {
                let old = lease.spec.take().unwrap_or_default();
                let (acquired, transitions) = match step {
                    Step::Renew => (old.acquire_time, old.lease_transitions.unwrap_or(0)),
                    _ => (None, old.lease_transitions.unwrap_or(0) + 1),
                };
                lease.spec = Some(self.spec(acquired, now, transitions));
                self.api
                    .replace(&self.config.name, &PostParams::default(), &lease)
                    .await
            }
            (_, None) => return Ok(Step::Create),
        };
        match write {
            Ok(_) => Ok(step),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Step::Wait {
                holder: "unknown (write conflict)".to_owned(),
            }),
            Err(e) => Err(self.api_err(e)),
        }
    }

    fn spec(&self, acquired: Option<MicroTime>, now: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                self.config
                    .lease_duration
                    .as_secs()
                    .try_into()
                    .unwrap_or(i32::MAX),
            ),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    fn api_err(&self, source: kube::Error) -> Error {
        Error::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    fn lost(&self) -> Error {
        Error::Lost {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            deadline: self.config.renew_deadline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed: i64, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            lease_duration_seconds: Some(secs),
            ..Default::default()
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn decisions() {
        assert_eq!(decide(None, "me", t(0)), Step::Create);
        assert_eq!(decide(Some(&lease("me", 0, 15)), "me", t(100)), Step::Renew);
        assert_eq!(
            decide(Some(&lease("other", 90, 15)), "me", t(100)),
            Step::Wait {
                holder: "other".into()
            }
        );
        assert_eq!(
            decide(Some(&lease("other", 80, 15)), "me", t(100)),
            Step::Take
        );
        assert_eq!(decide(Some(&lease("", 99, 15)), "me", t(100)), Step::Take);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "me", t(100)),
            Step::Take
        );
    }

    #[test]
    fn timing_fits_together_as_client_go_requires() {
        let secs = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(
            Timing::new(secs(15), secs(10), secs(2)).unwrap(),
            Timing::default()
        );
        assert!(Timing::new(secs(4), secs(3), ms(500)).is_ok());
        for (lease, renew, retry, says) in [
            (ms(1500), secs(1), ms(200), "whole number of seconds"),
            (secs(0), ms(0), ms(0), "whole number of seconds"),
            (
                secs(10),
                secs(10),
                secs(2),
                "shorter than the lease duration",
            ),
            (secs(15), secs(2), secs(2), "more than 1.2 times"),
            (secs(15), secs(10), secs(0), "above zero"),
        ] {
            let err = Timing::new(lease, renew, retry).unwrap_err().to_string();
            assert!(err.contains(says), "{lease:?}/{renew:?}/{retry:?}: {err}");
        }
    }
}
