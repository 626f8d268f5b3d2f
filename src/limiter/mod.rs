//! THE shared admission limiter: one component, one API, used by every transport.
//!
//! Owns per-principal quota state (GCRA, `gcra.rs`), the live limits every admission reads, the
//! global handler bound (`unavailable`), refusal counts and the usage report the admin API
//! exposes. WebSocket frames and REST calls of the same principal are billed here against the
//! same buckets. It knows nothing about frames or HTTP: callers say who ([`Principal`]) and what
//! ([`LimitType`]), and get `Ok` or a [`RateLimited`] with an exact, truthful retry time, which
//! each transport maps to its wire through the protocol's refusal vocabulary.
//!
//! State is bounded: a table (`table.rs`) of at most `limits.max_tracked_principals` entries with
//! sampled LRU eviction and an idle time, so floods of fresh keys or IPs cannot grow memory.
//! With `limits.backend = "redis"` the quota buckets are the shared Redis's (`shared.rs`), billed
//! by every node behind the same calls; the table then bills only while Redis is unavailable
//! (`limits.redis_unavailable = "local"`). The handler permits are always this node's own: they
//! bound this process's work.

pub mod clock;
mod gcra;
mod permits;
mod principal;
mod reads;
mod shared;
mod state;
mod table;
mod totals;
mod usage;

use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use clock::{Clock, ManualClock, SystemClock};
use gcra::Quota;
pub use permits::HandlerPermit;
use permits::Permits;
pub use principal::{Billed, Principal};
pub use state::ADMIN_AUTH_FAILURES_PER_MIN;
use state::{Cell, Policy, QUOTAS, State, cells_wait, secs};
pub use state::{UPLOAD_CELL_BYTES, upload_cells};
use totals::Totals;
pub use totals::{ADMISSION_BUCKETS_US, TotalsSnapshot};
pub use usage::{LimitUsage, Usage};

use crate::cluster::{Link, LinkStatus};
pub use crate::config::Tier;
use crate::config::{LimitsConfig, RedisUnavailable};
use crate::protocol::Timestamp;
pub use crate::protocol::refusal::{Denied, LimitType, RateLimited};
use table::Table;

/// Idle principals are forgotten after this many seconds (longer than any quota's refill window).
const IDLE_SECS: u32 = 3600;

/// What [`Limiter::preview`] finds: per quota (in the order of [`Preview::QUOTAS`]),
/// how many tracked principals are refused their next request now and would be under the
/// proposed limits, and how many are refused any of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Preview {
    /// Principals with state.
    pub tracked: u64,
    /// Refused now under the limits in force, per quota.
    pub refused_now: [u64; QUOTAS.len()],
    /// Refused now under the proposed limits, per quota.
    pub would_refuse: [u64; QUOTAS.len()],
    /// Refused at least one quota under the limits in force.
    pub refused_now_any: u64,
    /// Refused at least one quota under the proposed limits.
    pub would_refuse_any: u64,
}

impl Preview {
    /// The quotas, in the order of [`Preview::refused_now`] and [`Preview::would_refuse`].
    pub const QUOTAS: [LimitType; QUOTAS.len()] = QUOTAS;
}

/// The admission limiter.
pub struct Limiter {
    policy: RwLock<Arc<Policy>>,
    states: Table<State>,
    clock: Arc<dyn Clock>,
    permits: Permits,
    totals: Totals,
    /// The shared buckets, with `limits.backend = "redis"`.
    shared: Option<shared::Shared>,
}

/// What one admission bills: the principal's quota and, when it has one, its IP ceiling's.
type Quotas = (Quota, Option<(Principal, Quota)>);

impl Limiter {
    /// A limiter with `config` limits, timing by `clock`.
    pub fn new(config: &LimitsConfig, clock: Arc<dyn Clock>) -> Limiter {
        Limiter {
            states: Table::new(config.max_tracked_principals, IDLE_SECS),
            permits: Permits::new(
                config.handler_permits,
                config.handler_permits_per_principal,
                Duration::from_millis(config.handler_wait_ms),
            ),
            policy: RwLock::new(Arc::new(Policy::of(config.clone()))),
            clock,
            totals: Totals::default(),
            shared: None,
        }
    }

    /// A limiter whose buckets are in the Redis behind `link`, shared with every node that bills
    /// there; its own table bills only while Redis is unavailable and
    /// `limits.redis_unavailable = "local"`.
    pub fn shared(config: &LimitsConfig, clock: Arc<dyn Clock>, link: Arc<Link>) -> Limiter {
        Limiter { shared: Some(shared::Shared::new(link)), ..Limiter::new(config, clock) }
    }

    /// Whether the shared Redis is reachable; `None` with the memory backend.
    pub fn shared_status(&self) -> Option<LinkStatus> {
        self.shared.as_ref().map(|s| s.link.status())
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

    /// Replaces the limits; the next admission of every connection uses them. (`handler_permits`,
    /// `handler_permits_per_principal` and `max_tracked_principals` are sized at start-up and
    /// keep their start-up values.)
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

    /// Bills one `limit_type` request now: to its principal and, for the quotas, to the IP
    /// ceiling under it. Admitted only when both admit; a refusal's retry time is the longer of
    /// the two waits, and a refused request is billed to neither. `Unavailable` is not a quota:
    /// use [`Limiter::acquire_handler`].
    ///
    /// With the Redis backend this is one round trip to Redis; while Redis is unavailable it is
    /// this node's own table (`local`) or [`Denied::Unavailable`] (`refuse`).
    pub async fn admit(&self, billed: &Billed, limit_type: LimitType) -> Result<(), Denied> {
        self.admit_n(billed, limit_type, 1).await
    }

    /// [`Limiter::admit`] of `n` cells at once (the `upload_bytes` quota bills an upload's
    /// whole size before its body is read: see [`upload_cells`]). All `n` or none.
    pub async fn admit_n(&self, billed: &Billed, limit_type: LimitType, n: u64) -> Result<(), Denied> {
        let started = Instant::now();
        let result = match &self.shared {
            None => self.admit_at_n(billed, limit_type, n, self.clock.now_ns()).map_err(Denied::Limited),
            Some(shared) => self.admit_shared(shared, billed, limit_type, n, false).await,
        };
        let took = started.elapsed();
        metrics::histogram!("hearth_admission_seconds").record(took.as_secs_f64());
        self.totals.admitted_in(took);
        result
    }

    /// Whether [`Limiter::admit_n`] would admit `n` cells now, without billing or counting
    /// anything: what Blossom's `HEAD /upload` answers before a byte is sent.
    pub async fn would_admit_n(&self, billed: &Billed, limit_type: LimitType, n: u64) -> Result<(), Denied> {
        match &self.shared {
            Some(shared) => self.admit_shared(shared, billed, limit_type, n, true).await,
            None => {
                let policy = self.policy();
                let Some((quota, ceiling)) = Self::quotas(&policy, billed, limit_type) else { return Ok(()) };
                let now = self.clock.now_ns();
                let wait = self.wait(&billed.principal, quota, limit_type, n, now);
                let wait = wait.max(ceiling.map_or(0, |(c, q)| self.wait(&c, q, limit_type, n, now)));
                match wait {
                    0 => Ok(()),
                    wait => Err(Denied::Limited(RateLimited { limit_type, retry_after: Duration::from_nanos(wait) })),
                }
            }
        }
    }

    /// The quotas `limit_type` bills for `billed` under `policy`; `None` when nothing is billed.
    fn quotas(policy: &Policy, billed: &Billed, limit_type: LimitType) -> Option<Quotas> {
        let quota = policy.quota(&billed.principal, limit_type).filter(|_| policy.config.enabled)?;
        let ceiling = if QUOTAS.contains(&limit_type) { policy.ceiling(billed.ip) } else { None };
        Some((quota, ceiling.and_then(|c| Some((c, policy.quota(&c, limit_type)?)))))
    }

    /// [`Limiter::admit`] in the shared buckets, or as `limits.redis_unavailable` says.
    async fn admit_shared(
        &self,
        shared: &shared::Shared,
        billed: &Billed,
        limit_type: LimitType,
        n: u64,
        dry: bool,
    ) -> Result<(), Denied> {
        let policy = self.policy();
        let Some((quota, ceiling)) = Self::quotas(&policy, billed, limit_type) else { return Ok(()) };
        // Kept as long as the memory table keeps a principal, or its longest refill window.
        let window = ceiling.map_or(quota.window_ns(), |(_, c)| c.window_ns().max(quota.window_ns()));
        let ttl = u64::from(IDLE_SECS).max(window.div_ceil(gcra::NANOS));
        match shared.bill(&billed.principal, (quota, ceiling), limit_type, (n, dry), ttl).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(wait)) => {
                let refused = RateLimited { limit_type, retry_after: Duration::from_nanos(wait) };
                if !dry {
                    self.count_refused(&refused);
                }
                Err(Denied::Limited(refused))
            }
            Err(_) => {
                let mode = policy.config.redis_unavailable;
                metrics::counter!("hearth_limiter_redis_fallbacks_total", "mode" => mode.as_str()).increment(1);
                match mode {
                    RedisUnavailable::Local if dry => Ok(()),
                    RedisUnavailable::Local => {
                        self.admit_at_n(billed, limit_type, n, self.clock.now_ns()).map_err(Denied::Limited)
                    }
                    RedisUnavailable::Refuse => Err(Denied::Unavailable),
                }
            }
        }
    }

    /// [`Limiter::admit`] in this node's own table at an explicit time (nanoseconds on the
    /// limiter's clock).
    pub fn admit_at(&self, billed: &Billed, limit_type: LimitType, now_ns: u64) -> Result<(), RateLimited> {
        self.admit_at_n(billed, limit_type, 1, now_ns)
    }

    /// [`Limiter::admit_at`] of `n` cells at once.
    pub fn admit_at_n(&self, billed: &Billed, limit_type: LimitType, n: u64, now_ns: u64) -> Result<(), RateLimited> {
        let policy = self.policy();
        let Some((quota, ceiling)) = Self::quotas(&policy, billed, limit_type) else { return Ok(()) };
        // One wall-clock read for both entries' `last_seen`.
        let seen = Timestamp::now();
        let refused = match self.bill(&billed.principal, (quota, n), limit_type, now_ns, seen) {
            Err(wait) => {
                // Truthful: the ceiling's wait counts too when it is the longer one.
                let ceiling_wait = ceiling.map_or(0, |(c, q)| self.wait(&c, q, limit_type, n, now_ns));
                wait.max(ceiling_wait)
            }
            Ok(()) => match ceiling {
                None => return Ok(()),
                Some((c, q)) => match self.bill(&c, (q, n), limit_type, now_ns, seen) {
                    Ok(()) => return Ok(()),
                    Err(wait) => {
                        self.unbill_refused(&billed.principal, limit_type, n, now_ns);
                        wait
                    }
                },
            },
        };
        let refused = RateLimited { limit_type, retry_after: Duration::from_nanos(refused) };
        self.count_refused(&refused);
        Err(refused)
    }

    /// Takes `n` cells of `principal`'s `limit_type` now, or counts the refusal and says how long
    /// until they are free.
    fn bill(
        &self,
        principal: &Principal,
        (quota, n): (Quota, u64),
        limit_type: LimitType,
        now_ns: u64,
        seen: Timestamp,
    ) -> Result<(), u64> {
        self.states.update(principal, secs(now_ns), State::fresh, |s| {
            s.last_seen = seen;
            let Some(cell) = s.cells.of(limit_type) else { return Ok(()) };
            match quota.check_n(quota.rescale(cell.tat, now_ns, cell.interval), now_ns, n) {
                Ok(tat) => {
                    *cell = Cell { tat, interval: quota.interval_ns };
                    Ok(())
                }
                Err(wait) => {
                    s.refusals.count(limit_type);
                    Err(wait)
                }
            }
        })
    }

    /// Gives back the `n` cells [`Limiter::bill`] just took (GCRA: `n` intervals earlier) from a
    /// request its IP ceiling refused, and counts the refusal, in one update.
    fn unbill_refused(&self, principal: &Principal, limit_type: LimitType, n: u64, now_ns: u64) {
        self.states.update(principal, secs(now_ns), State::fresh, |s| {
            if let Some(cell) = s.cells.of(limit_type) {
                cell.tat = cell.tat.saturating_sub(cell.interval.saturating_mul(n));
            }
            s.refusals.count(limit_type);
        });
    }

    /// How long until `principal` could take `n` cells of `limit_type` (0 = now).
    fn wait(&self, principal: &Principal, quota: Quota, limit_type: LimitType, n: u64, now_ns: u64) -> u64 {
        let cell = self.states.read(principal, secs(now_ns), |s| s.cells.get(limit_type)).unwrap_or_default();
        cells_wait(quota, cell, n, now_ns)
    }

    /// Counts a refusal in `/metrics` and in the running totals the admin page samples.
    fn count_refused(&self, refused: &RateLimited) {
        metrics::counter!(
            "hearth_admission_rejections_total",
            "reason" => refused.reason(),
            "limit_type" => refused.limit_type.as_str()
        )
        .increment(1);
        self.totals.refused(refused.limit_type);
    }

    fn count(&self, principal: &Principal, limit_type: LimitType, now_ns: u64) {
        self.states.update(principal, secs(now_ns), State::fresh, |s| s.refusals.count(limit_type));
    }

    /// Takes one of the handler permits, waiting at most `handler_wait_ms`: within the global
    /// bound and within the principal's and its IP ceiling's shares of it.
    pub async fn acquire_handler(&self, billed: &Billed) -> Result<HandlerPermit, RateLimited> {
        let mut keys = vec![billed.principal];
        keys.extend(self.policy().ceiling(billed.ip));
        match self.permits.acquire(keys).await {
            Some(permit) => Ok(permit),
            None => {
                let refused = RateLimited { limit_type: LimitType::Unavailable, retry_after: Duration::from_secs(1) };
                self.count(&billed.principal, refused.limit_type, self.clock.now_ns());
                self.count_refused(&refused);
                Err(refused)
            }
        }
    }

    /// The IP ceiling `ip` is billed under; `None` when `limits.ip_ceiling_exempt` covers it.
    pub fn ceiling_of(&self, ip: IpAddr) -> Option<Principal> {
        self.policy().ceiling(ip)
    }

    /// The running totals of refusals and admission times.
    pub fn totals(&self) -> TotalsSnapshot {
        self.totals.read()
    }

    /// How many principals this node's own table holds.
    pub fn tracked(&self) -> u64 {
        self.states.keys(self.now_secs()).len() as u64
    }
}

#[cfg(test)]
mod tests;
