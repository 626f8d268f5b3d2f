//! The link to the Redis (or Valkey) that several hearth nodes behind one address share.
//!
//! Owns the one connection (the `redis` crate's multiplexed, self-reconnecting manager), the
//! bound on every call (`limits.redis_timeout_ms`), and whether Redis is up: a call that fails or
//! times out marks it down, and from then on calls fail at once (an admission never waits a
//! timeout per frame) until [`Link::watch`]'s probe reaches it again. Going down is logged at
//! once and then once a minute while it lasts; `hearth_redis_up` is 1 or 0. What is kept in
//! Redis is its users': the limiter's buckets (`limiter::shared`) and the shared documents
//! ([`document`]). It imports nothing of hearth.

pub mod broadcast;
pub mod document;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// How often the probe tries a down Redis (and checks an up one is still there).
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// While Redis stays down, it is logged again after this long.
const LOG_EVERY: Duration = Duration::from_secs(60);
/// A report's calls may take this many times `limits.redis_timeout_ms`.
const READ_TIMEOUT_FACTOR: u32 = 40;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Why a call to Redis did not answer.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum LinkError {
    /// Redis is known to be down (a recent call failed); not tried.
    #[error("Redis is unavailable ({0})")]
    Down(String),
    /// The call took longer than `limits.redis_timeout_ms`.
    #[error("Redis did not answer within {0} ms")]
    Timeout(u64),
    /// Redis answered with an error, or the connection failed.
    #[error("Redis: {0}")]
    Redis(String),
    /// Redis answered something other than what hearth keeps there.
    #[error("Redis holds an unexpected value: {0}")]
    Unexpected(String),
}

/// Whether Redis is reachable, for the admin API and page.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct LinkStatus {
    /// Reachable: the last call or probe succeeded.
    pub up: bool,
    /// Since when (Unix seconds) it has been as it is.
    pub since: u64,
    /// Why it is down (`null` when up).
    pub reason: Option<String>,
}

/// The connection to the shared Redis.
pub struct Link {
    client: redis::Client,
    conn: ConnectionManager,
    timeout: Duration,
    prefix: String,
    up: AtomicBool,
    since: AtomicU64,
    reason: Mutex<Option<String>>,
    logged: Mutex<Option<Instant>>,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Link {
    /// A link to `url` whose calls may take `timeout` each, keeping its keys under `prefix`.
    /// Connects lazily: a Redis that is down at start is not an error (the first call, or the
    /// probe, finds out).
    pub fn open(url: &str, timeout: Duration, prefix: &str) -> Result<Link, LinkError> {
        let client = redis::Client::open(url).map_err(|e| LinkError::Redis(e.to_string()))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(timeout))
            .set_connection_timeout(Some(timeout.max(Duration::from_millis(500))))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| LinkError::Redis(e.to_string()))?;
        metrics::gauge!("hearth_redis_up").set(1.0);
        Ok(Link {
            client,
            conn,
            timeout,
            prefix: prefix.to_string(),
            up: AtomicBool::new(true),
            since: AtomicU64::new(unix_now()),
            reason: Mutex::new(None),
            logged: Mutex::new(None),
        })
    }

    /// `prefix` + `parts` joined by `:`: every key hearth keeps in Redis.
    pub fn key(&self, parts: &[&str]) -> String {
        format!("{}{}", self.prefix, parts.join(":"))
    }

    /// The key prefix (`limits.redis_prefix`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A connection handle for one call (cheap: the manager is shared).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// A new publish/subscribe connection (a subscriber holds one of its own).
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, LinkError> {
        let connect = self.client.get_async_pubsub();
        match tokio::time::timeout(self.timeout.max(Duration::from_millis(500)), connect).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(e)) => Err(LinkError::Redis(e.to_string())),
            Err(_) => Err(LinkError::Redis("timed out connecting".into())),
        }
    }

    /// True while Redis is reachable.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Whether Redis is reachable, since when, and why not.
    pub fn status(&self) -> LinkStatus {
        let reason = self.reason.lock().unwrap_or_else(PoisonError::into_inner).clone();
        LinkStatus { up: self.is_up(), since: self.since.load(Ordering::Acquire), reason }
    }

    /// Runs `call` within the timeout; fails at once while Redis is known to be down. A failure
    /// or a timeout marks it down.
    pub async fn call<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, LinkError> {
        if !self.is_up() {
            let reason = self.reason.lock().unwrap_or_else(PoisonError::into_inner).clone();
            return Err(LinkError::Down(reason.unwrap_or_else(|| "unreachable".into())));
        }
        self.attempt(call).await
    }

    /// [`Link::call`] for a report that reads many keys (the admin API's lists): it may take
    /// 40 times the timeout (at least a second), and running out of time
    /// fails only this call; Redis is marked down only when the call itself fails.
    pub async fn call_report<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, LinkError> {
        if !self.is_up() {
            return self.call(call).await;
        }
        let timeout = (self.timeout * READ_TIMEOUT_FACTOR).max(Duration::from_secs(1));
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                let error = LinkError::Redis(e.to_string());
                self.mark_down(&error);
                Err(error)
            }
            Err(_) => Err(LinkError::Timeout(millis(timeout))),
        }
    }

    /// Runs `call` within the timeout whether or not Redis is known to be up (the probe).
    async fn attempt<T>(&self, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, LinkError> {
        let error = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => LinkError::Redis(e.to_string()),
            Err(_) => LinkError::Timeout(millis(self.timeout)),
        };
        self.mark_down(&error);
        Err(error)
    }

    fn mark_down(&self, error: &LinkError) {
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(error.to_string());
        if self.up.swap(false, Ordering::AcqRel) {
            self.since.store(unix_now(), Ordering::Release);
            metrics::gauge!("hearth_redis_up").set(0.0);
        }
        metrics::counter!("hearth_redis_failures_total").increment(1);
        self.log_down(error);
    }

    /// Logs that Redis is down: the first time, then at most once a minute.
    fn log_down(&self, error: &LinkError) {
        let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
        if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            *logged = Some(Instant::now());
            tracing::warn!(error = %error, "the shared Redis is unavailable; admissions follow limits.redis_unavailable");
        }
    }

    fn mark_up(&self) {
        if !self.up.swap(true, Ordering::AcqRel) {
            self.since.store(unix_now(), Ordering::Release);
            *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = None;
            *self.logged.lock().unwrap_or_else(PoisonError::into_inner) = None;
            metrics::gauge!("hearth_redis_up").set(1.0);
            tracing::info!("the shared Redis is reachable again");
        }
    }

    /// Pings Redis now and then until `shutdown`: brings a down link back up once Redis
    /// answers (the manager reconnects on the ping), and finds out an idle one went away.
    pub async fn watch(&self, shutdown: CancellationToken) {
        loop {
            let mut conn = self.connection();
            let ping = async move { redis::cmd("PING").query_async::<String>(&mut conn).await };
            if self.attempt(ping).await.is_ok() {
                self.mark_up();
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(PROBE_EVERY) => {}
            }
        }
    }
}
