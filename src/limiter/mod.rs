//! THE shared admission limiter: one component, one API, used by every transport.
//!
//! Owns per-principal quota state (GCRA, see [`gcra`]), the live limits every admission reads,
//! the global handler bound (`unavailable`), refusal counts and the usage report the admin API
//! exposes. WebSocket frames and REST calls of the same principal are billed here against the same
//! buckets. It knows nothing about frames or HTTP: callers say who ([`Principal`]) and what
//! ([`LimitType`]), and get `Ok` or a [`Refused`] with an exact, truthful retry time.
//!
//! State is bounded: a table (`table.rs`) of at most `limits.max_tracked_principals` entries with sampled
//! LRU eviction and an idle time, so floods of fresh keys or IPs cannot grow memory.

pub mod clock;
pub mod gcra;
pub mod principal;
mod table;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use clock::{Clock, ManualClock, SystemClock};
use gcra::{NANOS, Quota};
pub use principal::Principal;

use crate::config::{LimitsConfig, TierLimits, parse_pubkey};
use crate::protocol::{PubKey, Timestamp};
use table::Table;

/// Idle principals are forgotten after this many seconds (longer than any quota's refill window).
const IDLE_SECS: u32 = 3600;
/// Failed admin credentials allowed per IP: a burst of this many, refilling over a minute.
pub const ADMIN_AUTH_FAILURES_PER_MIN: u64 = 10;

/// What is billed. The names are stable: they appear in messages, metrics and the admin API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitType {
    /// EVENT, REQ and COUNT frames on a WebSocket, on arrival.
    WsEvents,
    /// Durable (non-ephemeral) events, after verification and the duplicate check.
    Messages,
    /// REST calls.
    ApiCalls,
    /// Failed admin API credentials, per client IP (a fixed quota, not per tier).
    AdminAuth,
    /// The global bound on concurrently handled work.
    Unavailable,
}

impl LimitType {
    /// The quota-backed limit types, in report order.
    pub const QUOTAS: [LimitType; 3] = [LimitType::WsEvents, LimitType::Messages, LimitType::ApiCalls];
    /// Every limit type.
    pub const ALL: [LimitType; 5] =
        [LimitType::WsEvents, LimitType::Messages, LimitType::ApiCalls, LimitType::AdminAuth, LimitType::Unavailable];

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitType::WsEvents => "ws_events",
            LimitType::Messages => "messages",
            LimitType::ApiCalls => "api_calls",
            LimitType::AdminAuth => "admin_auth",
            LimitType::Unavailable => "unavailable",
        }
    }

    fn index(self) -> usize {
        match self {
            LimitType::WsEvents => 0,
            LimitType::Messages => 1,
            LimitType::ApiCalls => 2,
            LimitType::AdminAuth => 3,
            LimitType::Unavailable => 4,
        }
    }
}

/// Quota tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Everyone by default.
    Human,
    /// Pubkeys listed in `limits.agent_pubkeys`.
    Agent,
}

/// A refusal with its exact retry time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Which limit refused.
    pub limit_type: LimitType,
    /// How long until the same request would be admitted (given no other traffic).
    pub retry_after: Duration,
}

impl Refused {
    /// Whole seconds to wait: rounded up, at least 1.
    pub fn retry_secs(&self) -> u64 {
        gcra::retry_secs(u64::try_from(self.retry_after.as_nanos()).unwrap_or(u64::MAX))
    }

    /// `"quota"` or `"unavailable"`: the metric's `reason` label.
    pub fn reason(&self) -> &'static str {
        if self.limit_type == LimitType::Unavailable { "unavailable" } else { "quota" }
    }

    /// The text after `rate-limited: `, e.g. `quota exceeded (messages); retry in 12s`.
    pub fn text(&self) -> String {
        let what = if self.limit_type == LimitType::Unavailable { "relay busy" } else { "quota exceeded" };
        format!("{what} ({}); retry in {}s", self.limit_type.as_str(), self.retry_secs())
    }

    /// The full message, e.g. `rate-limited: quota exceeded (messages); retry in 12s`.
    pub fn message(&self) -> String {
        format!("rate-limited: {}", self.text())
    }
}

/// One tier's quotas as GCRA parameters.
#[derive(Clone, Copy, Debug)]
struct TierQuotas([Quota; 3]);

impl TierQuotas {
    fn of(t: &TierLimits) -> TierQuotas {
        TierQuotas([
            Quota::new(t.ws_events_per_sec, 1, t.ws_events_per_sec.saturating_mul(t.ws_burst_window_secs)),
            Quota::new(t.messages_per_min, 60, t.messages_per_min),
            Quota::new(t.api_calls_per_min, 60, t.api_calls_per_min),
        ])
    }
}

/// The live limits, swapped whole.
struct Policy {
    config: LimitsConfig,
    human: TierQuotas,
    agent: TierQuotas,
    agents: HashSet<PubKey>,
}

impl Policy {
    fn of(config: LimitsConfig) -> Policy {
        Policy {
            human: TierQuotas::of(&config.human),
            agent: TierQuotas::of(&config.agent),
            agents: config.agent_pubkeys.iter().filter_map(|p| parse_pubkey(p)).collect(),
            config,
        }
    }

    fn tier(&self, principal: &Principal) -> Tier {
        match principal {
            Principal::Pubkey(pk) if self.agents.contains(pk) => Tier::Agent,
            _ => Tier::Human,
        }
    }

    /// The quota of `limit_type` (not `Unavailable`) for `principal`.
    fn quota(&self, principal: &Principal, limit_type: LimitType) -> Quota {
        let tier = match self.tier(principal) {
            Tier::Human => &self.human,
            Tier::Agent => &self.agent,
        };
        match limit_type {
            LimitType::AdminAuth => Quota::new(ADMIN_AUTH_FAILURES_PER_MIN, 60, ADMIN_AUTH_FAILURES_PER_MIN),
            other => tier.0[other.index().min(2)],
        }
    }
}

/// Per-principal state: one GCRA timestamp per quota (with the interval it was computed under,
/// so a live limit change keeps the cells in use), refusal counts, first/last seen.
#[derive(Debug)]
struct State {
    tat: [(u64, u64); 4],
    refusals: [u32; 5],
    first_seen: Timestamp,
    last_seen: Timestamp,
}

impl State {
    fn fresh() -> State {
        let now = Timestamp::now();
        State { tat: [(0, 0); 4], refusals: [0; 5], first_seen: now, last_seen: now }
    }
}

/// Usage of one limit, exactly as the limiter decides with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LimitUsage {
    /// Cells of the burst in use now.
    pub used: u64,
    /// The burst size.
    pub limit: u64,
    /// `limit - used`.
    pub remaining: u64,
    /// Seconds for an empty bucket to refill completely.
    pub window_secs: u64,
    /// Seconds until one more request would be admitted (0 = now).
    pub retry_in_secs: u64,
}

/// A principal's usage report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// The principal (hex pubkey or IP).
    pub principal: String,
    /// Its tier.
    pub tier: Tier,
    /// Per quota: `ws_events`, `messages`, `api_calls`.
    pub limits: BTreeMap<&'static str, LimitUsage>,
    /// Refusals per limit type since start (or since the state was last forgotten).
    pub refusals: BTreeMap<&'static str, u64>,
    /// First admission seen (Unix seconds); `null` when never seen (or forgotten).
    pub first_seen: Option<u64>,
    /// Latest admission seen (Unix seconds).
    pub last_seen: Option<u64>,
}

/// A time on the limiter's clock in whole seconds, as the table keeps it.
fn secs(now_ns: u64) -> u32 {
    u32::try_from(now_ns / NANOS).unwrap_or(u32::MAX)
}

/// Counts a refusal in the metrics.
fn count_metric(refused: &Refused) {
    metrics::counter!(
        "hearth_admission_rejections_total",
        "reason" => refused.reason(),
        "limit_type" => refused.limit_type.as_str()
    )
    .increment(1);
}

/// The admission limiter.
pub struct Limiter {
    policy: RwLock<Arc<Policy>>,
    states: Table<State>,
    clock: Arc<dyn Clock>,
    permits: Arc<Semaphore>,
    handler_wait: Duration,
}

impl Limiter {
    /// A limiter with `config` limits, timing by `clock`.
    pub fn new(config: &LimitsConfig, clock: Arc<dyn Clock>) -> Limiter {
        Limiter {
            states: Table::new(config.max_tracked_principals, IDLE_SECS),
            permits: Arc::new(Semaphore::new(config.handler_permits)),
            handler_wait: Duration::from_millis(config.handler_wait_ms),
            policy: RwLock::new(Arc::new(Policy::of(config.clone()))),
            clock,
        }
    }

    fn policy(&self) -> Arc<Policy> {
        match self.policy.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> LimitsConfig {
        self.policy().config.clone()
    }

    /// Replaces the limits; the next admission of every connection uses them. (`handler_permits`
    /// and `max_tracked_principals` are sized at start-up and keep their start-up values.)
    pub fn set_limits(&self, config: LimitsConfig) {
        let policy = Arc::new(Policy::of(config));
        match self.policy.write() {
            Ok(mut p) => *p = policy,
            Err(poisoned) => *poisoned.into_inner() = policy,
        }
    }

    /// The tier `principal` is billed at.
    pub fn tier(&self, principal: &Principal) -> Tier {
        self.policy().tier(principal)
    }

    /// The limiter clock in whole seconds: the table's idle time runs on it.
    fn now_secs(&self) -> u32 {
        secs(self.clock.now_ns())
    }

    fn count_refusal(&self, principal: &Principal, refused: &Refused) {
        self.states.update(principal, self.now_secs(), State::fresh, |s| {
            let n = &mut s.refusals[refused.limit_type.index()];
            *n = n.saturating_add(1);
        });
        count_metric(refused);
    }

    /// Bills one `limit_type` request of `principal` now. `Unavailable` is not a quota: use
    /// [`Limiter::acquire_handler`].
    pub fn admit(&self, principal: &Principal, limit_type: LimitType) -> Result<(), Refused> {
        let started = Instant::now();
        let result = self.admit_at(principal, limit_type, self.clock.now_ns());
        metrics::histogram!("hearth_admission_seconds").record(started.elapsed().as_secs_f64());
        result
    }

    /// [`Limiter::admit`] at an explicit time (nanoseconds on the limiter's clock).
    pub fn admit_at(&self, principal: &Principal, limit_type: LimitType, now_ns: u64) -> Result<(), Refused> {
        let policy = self.policy();
        if limit_type == LimitType::Unavailable || !policy.config.enabled {
            return Ok(());
        }
        let quota = policy.quota(principal, limit_type);
        let outcome = self.states.update(principal, secs(now_ns), State::fresh, |s| {
            s.last_seen = Timestamp::now();
            let (tat, interval) = s.tat[limit_type.index()];
            match quota.check(quota.rescale(tat, now_ns, interval), now_ns) {
                Ok(tat) => {
                    s.tat[limit_type.index()] = (tat, quota.interval_ns);
                    Ok(())
                }
                Err(wait) => {
                    let n = &mut s.refusals[limit_type.index()];
                    *n = n.saturating_add(1);
                    Err(Refused { limit_type, retry_after: Duration::from_nanos(wait) })
                }
            }
        });
        if let Err(refused) = &outcome {
            count_metric(refused);
        }
        outcome
    }

    /// The refusal `limit_type` would give `principal` now, without billing anything.
    pub fn peek(&self, principal: &Principal, limit_type: LimitType) -> Option<Refused> {
        let policy = self.policy();
        if limit_type == LimitType::Unavailable || !policy.config.enabled {
            return None;
        }
        let quota = policy.quota(principal, limit_type);
        let now = self.clock.now_ns();
        let (tat, interval) = self.states.read(principal, self.now_secs(), |s| s.tat[limit_type.index()])?;
        match quota.wait(quota.rescale(tat, now, interval), now) {
            0 => None,
            wait => Some(Refused { limit_type, retry_after: Duration::from_nanos(wait) }),
        }
    }

    /// Takes one of the global handler permits, waiting at most `handler_wait_ms`.
    pub async fn acquire_handler(&self, principal: &Principal) -> Result<OwnedSemaphorePermit, Refused> {
        match tokio::time::timeout(self.handler_wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => {
                let refused = Refused { limit_type: LimitType::Unavailable, retry_after: Duration::from_secs(1) };
                self.count_refusal(principal, &refused);
                Err(refused)
            }
        }
    }

    /// What the limiter knows of `principal`: exactly the state it decides with (a principal
    /// it holds no state for has a full bucket everywhere and was never seen).
    pub fn usage(&self, principal: &Principal) -> Usage {
        let snapshot = self
            .states
            .read(principal, self.now_secs(), |s| (s.tat, s.refusals, Some(s.first_seen.0), Some(s.last_seen.0)));
        let (tats, refusals, first_seen, last_seen) = snapshot.unwrap_or(([(0, 0); 4], [0; 5], None, None));
        let now = self.clock.now_ns();
        let policy = self.policy();
        let limits = LimitType::QUOTAS
            .iter()
            .map(|lt| {
                let q = policy.quota(principal, *lt);
                let (tat, interval) = tats[lt.index()];
                let tat = q.rescale(tat, now, interval);
                let used = q.used(tat, now);
                let wait = q.wait(tat, now);
                let usage = LimitUsage {
                    used,
                    limit: q.burst,
                    remaining: q.burst - used,
                    window_secs: q.window_ns().div_ceil(NANOS),
                    retry_in_secs: if wait == 0 { 0 } else { gcra::retry_secs(wait) },
                };
                (lt.as_str(), usage)
            })
            .collect();
        let refusals = LimitType::ALL.iter().map(|lt| (lt.as_str(), u64::from(refusals[lt.index()]))).collect();
        Usage {
            principal: principal.to_string(),
            tier: policy.tier(principal),
            limits,
            refusals,
            first_seen,
            last_seen,
        }
    }

    /// Principals with state, for the admin API's busiest list.
    pub fn principals(&self) -> Vec<Principal> {
        self.states.keys(self.now_secs())
    }

    /// How many principals have state.
    pub fn tracked(&self) -> u64 {
        self.principals().len() as u64
    }
}

#[cfg(test)]
mod tests;
