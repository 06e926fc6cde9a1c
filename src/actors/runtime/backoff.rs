//! Exponential backoff: for restarting failed actors ([`Backoff::default`]) and for retrying
//! failed reconciles of one object ([`Backoff::reconcile`]).

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// Delays that double per consecutive failure, capped, and forget old failures.
#[derive(Clone, Debug)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    /// A failure this long after the previous one starts the count again.
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(200),
            max: Duration::from_secs(60),
            reset_after: Duration::from_secs(300),
        }
    }
}

/// Failure history of one supervised child, or of one object's reconciles.
#[derive(Clone, Debug, Default)]
pub struct Failures {
    pub consecutive: u32,
    pub last: Option<Instant>,
}

impl Failures {
    /// A success: the next failure waits the base delay again.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// The most a retry is moved earlier by [`Backoff::spread`], as a fraction of its delay.
pub const SPREAD: f64 = 0.1;

impl Backoff {
    /// Retries of a failing reconcile: 1 s doubling to 5 min. A reconcile that succeeds starts
    /// over ([`Failures::reset`]); a failing one is always retried within the cap, so
    /// `reset_after` never comes into play while an object keeps failing.
    pub fn reconcile() -> Self {
        Self {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }

    /// Records a failure at `now` and returns how long to wait before restarting.
    pub fn next_delay(&self, failures: &mut Failures, now: Instant) -> Duration {
        let stale = failures
            .last
            .is_some_and(|last| now.saturating_duration_since(last) >= self.reset_after);
        failures.consecutive = if stale {
            1
        } else {
            failures.consecutive.saturating_add(1)
        };
        failures.last = Some(now);
        let factor = 2u32.saturating_pow(failures.consecutive - 1);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// `delay` made up to [`SPREAD`] shorter by an amount fixed by `key` (an object's UID), so
    /// objects that fail together (the API server was away) do not all retry at the same
    /// instant, while one object's retries stay reproducible.
    pub fn spread(delay: Duration, key: &str) -> Duration {
        // A fixed-key hash: the same key gives the same fraction in every run and process.
        let mut hasher = std::hash::DefaultHasher::new();
        key.hash(&mut hasher);
        let fraction = (hasher.finish() % 1000) as f64 / 1000.0;
        delay.mul_f64(1.0 - SPREAD * fraction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_resets() {
        let b = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(5),
            reset_after: Duration::from_secs(100),
        };
        let mut f = Failures::default();
        let t0 = Instant::now();
        let delays: Vec<_> = (0..5)
            .map(|i| b.next_delay(&mut f, t0 + Duration::from_secs(i)).as_secs())
            .collect();
        assert_eq!(delays, vec![1, 2, 4, 5, 5]);
        assert_eq!(
            b.next_delay(&mut f, t0 + Duration::from_secs(500)),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn reconcile_retries_double_from_a_second_to_five_minutes_and_restart_on_success() {
        let b = Backoff::reconcile();
        let mut f = Failures::default();
        let mut now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..12 {
            let delay = b.next_delay(&mut f, now);
            delays.push(delay.as_secs());
            // The retry comes when it was scheduled, and fails again.
            now += delay;
        }
        assert_eq!(
            delays,
            vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300],
            "a failing object keeps its count while it retries at the cap"
        );
        f.reset();
        assert_eq!(b.next_delay(&mut f, now), Duration::from_secs(1));
        assert_eq!(b.next_delay(&mut f, now), Duration::from_secs(2));
    }

    #[test]
    fn the_spread_is_fixed_per_key_shorter_and_bounded() {
        let delay = Duration::from_secs(100);
        let low = delay.mul_f64(1.0 - SPREAD);
        let spread: Vec<Duration> = (0..50)
            .map(|i| Backoff::spread(delay, &format!("uid-{i}")))
            .collect();
        assert!(
            spread.iter().all(|d| *d <= delay && *d >= low),
            "{spread:?}"
        );
        let distinct: std::collections::BTreeSet<_> = spread.iter().collect();
        assert!(distinct.len() > 40, "keys spread out: {distinct:?}");
        assert_eq!(
            Backoff::spread(delay, "uid-7"),
            spread[7],
            "same key, same delay"
        );
        assert_eq!(Backoff::spread(Duration::ZERO, "uid-7"), Duration::ZERO);
    }
}
