//! Exponential backoff for restarting failed actors.

use std::time::{Duration, Instant};

/// Restart delays that double per consecutive failure, capped, and forget old failures.
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

/// Failure history of one supervised child.
#[derive(Clone, Debug, Default)]
pub struct Failures {
    pub consecutive: u32,
    pub last: Option<Instant>,
}

impl Backoff {
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
}
