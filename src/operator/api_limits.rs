//! The operator's client-side limit on API requests: a token bucket in front of every request
//! its client sends (watches included), like client-go's QPS and burst.
//!
//! The reconcile concurrency bound ([`crate::actors::runtime::context::Tuning::max_concurrent_reconciles`])
//! keeps a thousand first passes from starting at once; this bucket caps what they send
//! together, so a restart of the operator in front of a large cluster never becomes a burst the
//! API server's priority and fairness has to absorb.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// Client-side request limits (`--kube-api-qps`, `--kube-api-burst`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApiLimits {
    /// Sustained requests per second; `0` turns the limit off.
    pub qps: f64,
    /// Requests that may be sent at once after a quiet period.
    pub burst: u32,
}

impl ApiLimits {
    pub const DEFAULT_QPS: f64 = 100.0;
    pub const DEFAULT_BURST: u32 = 200;
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            qps: Self::DEFAULT_QPS,
            burst: Self::DEFAULT_BURST,
        }
    }
}

/// Errors building the limited client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--kube-api-qps must be a finite number ≥ 0, got {0}")]
    InvalidQps(f64),
    #[error("--kube-api-burst must be at least 1 when --kube-api-qps is set")]
    InvalidBurst,
    #[error("building the API client: {0}")]
    Client(#[from] kube::Error),
}

/// A client for `config` whose requests pass the token bucket of `limits`, each counted in
/// `metrics` by verb and response code.
pub fn client(
    config: kube::Config,
    limits: ApiLimits,
    metrics: &Metrics,
) -> Result<kube::Client, Error> {
    if !limits.qps.is_finite() || limits.qps < 0.0 {
        return Err(Error::InvalidQps(limits.qps));
    }
    let builder =
        kube::client::ClientBuilder::try_from(config)?.with_layer(&CountLayer(metrics.clone()));
    if limits.qps == 0.0 {
        return Ok(builder.build());
    }
    if limits.burst == 0 {
        return Err(Error::InvalidBurst);
    }
    Ok(builder.with_layer(&RateLimitLayer(limits)).build())
}

/// The operator's clients for `config`: the actors' through the bucket of `limits`, leader
/// election's without one; both counted in `metrics`.
pub fn clients(
    config: kube::Config,
    limits: ApiLimits,
    metrics: &Metrics,
) -> Result<super::Clients, Error> {
    let unlimited = ApiLimits { qps: 0.0, ..limits };
    Ok(super::Clients {
        work: client(config.clone(), limits, metrics)?,
        election: client(config, unlimited, metrics)?,
    })
}

/// Counts every request the client sends ([`Metrics::api_request`]).
#[derive(Clone)]
pub struct CountLayer(pub Metrics);

impl<S> Layer<S> for CountLayer {
    type Service = Count<S>;

    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Count<S> {
    inner: S,
    metrics: Metrics,
}

impl<S, B, RB> Service<http::Request<B>> for Count<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    RB: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verb = verb(&request);
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            metrics.api_request(verb, result.as_ref().ok().map(|r| r.status().as_u16()));
            result
        })
    }
}

/// The request's verb as the metric names it: the HTTP method, `WATCH` for a watch.
fn verb<B>(request: &http::Request<B>) -> &'static str {
    let watch = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    match *request.method() {
        http::Method::GET if watch => "WATCH",
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// The bucket: `tokens` refill at `qps` per second up to `burst`; a request takes one.
#[derive(Clone, Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn new(limits: ApiLimits, now: Instant) -> Self {
        Self {
            qps: limits.qps,
            burst: f64::from(limits.burst),
            tokens: f64::from(limits.burst),
            at: now,
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// Puts a [`Bucket`] in front of a service.
#[derive(Clone, Copy, Debug)]
pub struct RateLimitLayer(pub ApiLimits);

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: Bucket::new(self.0, Instant::now()),
            wait: None,
            admitted: false,
        }
    }
}

/// A service whose `poll_ready` waits for a token. kube's client puts a buffer in front of it,
/// so callers queue there in arrival order (fair) while the bucket refills.
pub struct RateLimit<S> {
    inner: S,
    bucket: Bucket,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next call.
    admitted: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.admitted {
            if let Some(wait) = &mut self.wait {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.admitted = true,
                Err(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.admitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(qps: f64, burst: u32) -> ApiLimits {
        ApiLimits { qps, burst }
    }

    #[test]
    fn a_full_bucket_lets_a_burst_through_then_paces_at_qps() {
        let start = Instant::now();
        let mut bucket = Bucket::new(limits(10.0, 3), start);
        for _ in 0..3 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        let wait = bucket.take(start).expect_err("empty");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(start + Duration::from_millis(100)), Ok(()));
        assert!(bucket.take(start + Duration::from_millis(150)).is_err());
    }

    #[test]
    fn a_quiet_period_refills_no_more_than_the_burst() {
        let start = Instant::now();
        let mut bucket = Bucket::new(limits(10.0, 2), start);
        bucket.take(start).unwrap();
        bucket.take(start).unwrap();
        let later = start + Duration::from_secs(60);
        assert_eq!(bucket.take(later), Ok(()));
        assert_eq!(bucket.take(later), Ok(()));
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn a_watch_is_its_own_verb() {
        let request = |method: http::Method, uri: &str| {
            http::Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .unwrap()
        };
        assert_eq!(
            verb(&request(http::Method::GET, "/api/v1/pods?watch=true&rv=1")),
            "WATCH"
        );
        assert_eq!(
            verb(&request(http::Method::GET, "/api/v1/pods?limit=5")),
            "GET"
        );
        assert_eq!(
            verb(&request(http::Method::PATCH, "/api/v1/pods/a")),
            "PATCH"
        );
    }

    #[test]
    fn invalid_limits_are_refused_before_any_client_is_built() {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        assert!(matches!(
            client(config.clone(), limits(-1.0, 10), &Metrics::default()),
            Err(Error::InvalidQps(_))
        ));
        assert!(matches!(
            client(config.clone(), limits(f64::NAN, 10), &Metrics::default()),
            Err(Error::InvalidQps(_))
        ));
        assert!(matches!(
            client(config, limits(5.0, 0), &Metrics::default()),
            Err(Error::InvalidBurst)
        ));
    }

    #[tokio::test]
    async fn the_service_waits_for_each_token() {
        use tower::ServiceExt;
        let service =
            tower::service_fn(|n: u32| async move { Ok::<_, std::convert::Infallible>(n) });
        let mut limited = RateLimitLayer(limits(50.0, 1)).layer(service);
        let start = Instant::now();
        let mut answers = Vec::new();
        for n in 0..3 {
            answers.push(limited.ready().await.unwrap().call(n).await.unwrap());
        }
        assert_eq!(answers, [0, 1, 2]);
        // One at once, then one per 20 ms: the third cannot have been let through sooner.
        assert!(
            start.elapsed() >= Duration::from_millis(40),
            "{:?}",
            start.elapsed()
        );
    }
}
