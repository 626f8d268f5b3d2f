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
//! sampled LRU eviction and an idle time, so floods of fresh keys or IPs cannot grow memory. A
//! second backend (Redis) would replace that table behind the same calls.

pub mod clock;
mod gcra;
mod permits;
mod principal;
mod table;
mod usage;

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ipnet::IpNet;

pub use clock::{Clock, ManualClock, SystemClock};
use gcra::{NANOS, Quota};
pub use permits::HandlerPermit;
use permits::Permits;
pub use principal::{Billed, Principal};
pub use usage::{LimitUsage, Usage};

pub use crate::config::Tier;
use crate::config::{LimitsConfig, TierLimits};
pub use crate::protocol::refusal::{LimitType, RateLimited};
use crate::protocol::{PubKey, Timestamp};
use table::Table;

/// Idle principals are forgotten after this many seconds (longer than any quota's refill window).
const IDLE_SECS: u32 = 3600;
/// Failed admin credentials allowed per IP: a burst of this many, refilling over a minute.
pub const ADMIN_AUTH_FAILURES_PER_MIN: u64 = 10;

/// The limit types backed by a per-principal quota, in report order; also the ones the IP
/// ceiling bills.
const QUOTAS: [LimitType; 3] = [LimitType::WsEvents, LimitType::Messages, LimitType::ApiCalls];

/// What [`Limiter::preview`] finds: per quota (in the order ws_events, messages, api_calls),
/// how many tracked principals are refused their next request now and would be under the
/// proposed limits, and how many are refused any of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Preview {
    /// Principals with state.
    pub tracked: u64,
    /// Refused now under the limits in force, per quota.
    pub refused_now: [u64; 3],
    /// Refused now under the proposed limits, per quota.
    pub would_refuse: [u64; 3],
    /// Refused at least one quota under the limits in force.
    pub refused_now_any: u64,
    /// Refused at least one quota under the proposed limits.
    pub would_refuse_any: u64,
}

impl Preview {
    /// The quotas, in the order of [`Preview::refused_now`] and [`Preview::would_refuse`].
    pub const QUOTAS: [LimitType; 3] = QUOTAS;
}

/// One tier's quotas as GCRA parameters.
#[derive(Clone, Copy, Debug)]
struct TierQuotas {
    ws_events: Quota,
    messages: Quota,
    api_calls: Quota,
}

impl TierQuotas {
    fn of(t: &TierLimits) -> TierQuotas {
        TierQuotas {
            ws_events: Quota::new(t.ws_events_per_sec, 1, t.ws_events_per_sec.saturating_mul(t.ws_burst_window_secs)),
            messages: Quota::new(t.messages_per_min, 60, t.messages_per_min),
            api_calls: Quota::new(t.api_calls_per_min, 60, t.api_calls_per_min),
        }
    }
}

/// The live limits, swapped whole.
struct Policy {
    config: LimitsConfig,
    human: TierQuotas,
    agent: TierQuotas,
    ip: TierQuotas,
    agents: HashSet<PubKey>,
    exempt: Vec<IpNet>,
}

impl Policy {
    fn of(config: LimitsConfig) -> Policy {
        Policy {
            human: TierQuotas::of(&config.human),
            agent: TierQuotas::of(&config.agent),
            ip: TierQuotas::of(&config.ip),
            agents: config.agent_pubkeys.iter().copied().collect(),
            exempt: config.ip_ceiling_exempt.clone(),
            config,
        }
    }

    fn tier(&self, principal: &Principal) -> Tier {
        match principal {
            Principal::Pubkey(pk) if self.agents.contains(pk) => Tier::Agent,
            Principal::Ceiling(..) => Tier::Ip,
            _ => Tier::Human,
        }
    }

    /// The IP ceiling `ip` is billed under, or `None` when it is exempt.
    fn ceiling(&self, ip: IpAddr) -> Option<Principal> {
        let ip = ip.to_canonical();
        if self.exempt.iter().any(|net| net.contains(&ip)) {
            return None;
        }
        Some(Principal::ceiling_of(ip, self.config.ipv6_prefix_len))
    }

    /// The quota of `limit_type` for `principal`; `None` for `Unavailable`, which is a bound,
    /// not a quota.
    fn quota(&self, principal: &Principal, limit_type: LimitType) -> Option<Quota> {
        let tier = match self.tier(principal) {
            Tier::Human => &self.human,
            Tier::Agent => &self.agent,
            Tier::Ip => &self.ip,
        };
        match limit_type {
            LimitType::WsEvents => Some(tier.ws_events),
            LimitType::Messages => Some(tier.messages),
            LimitType::ApiCalls => Some(tier.api_calls),
            LimitType::AdminAuth => Some(Quota::new(ADMIN_AUTH_FAILURES_PER_MIN, 60, ADMIN_AUTH_FAILURES_PER_MIN)),
            LimitType::Unavailable => None,
        }
    }
}

/// One GCRA cell: the theoretical arrival time, with the interval it was computed under (so a
/// live limit change keeps the cells in use).
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    tat: u64,
    interval: u64,
}

/// A principal's cells, one per quota.
#[derive(Clone, Copy, Debug, Default)]
struct Cells {
    ws_events: Cell,
    messages: Cell,
    api_calls: Cell,
    admin_auth: Cell,
}

impl Cells {
    /// The cell of a quota-backed limit type (`None` for `Unavailable`).
    fn of(&mut self, limit_type: LimitType) -> Option<&mut Cell> {
        match limit_type {
            LimitType::WsEvents => Some(&mut self.ws_events),
            LimitType::Messages => Some(&mut self.messages),
            LimitType::ApiCalls => Some(&mut self.api_calls),
            LimitType::AdminAuth => Some(&mut self.admin_auth),
            LimitType::Unavailable => None,
        }
    }

    fn get(mut self, limit_type: LimitType) -> Cell {
        self.of(limit_type).copied().unwrap_or_default()
    }
}

/// Refusals of a principal per limit type (saturating).
#[derive(Clone, Copy, Debug, Default)]
struct Refusals {
    ws_events: u32,
    messages: u32,
    api_calls: u32,
    admin_auth: u32,
    unavailable: u32,
}

impl Refusals {
    fn of(&mut self, limit_type: LimitType) -> &mut u32 {
        match limit_type {
            LimitType::WsEvents => &mut self.ws_events,
            LimitType::Messages => &mut self.messages,
            LimitType::ApiCalls => &mut self.api_calls,
            LimitType::AdminAuth => &mut self.admin_auth,
            LimitType::Unavailable => &mut self.unavailable,
        }
    }

    fn count(&mut self, limit_type: LimitType) {
        let n = self.of(limit_type);
        *n = n.saturating_add(1);
    }

    fn get(mut self, limit_type: LimitType) -> u32 {
        *self.of(limit_type)
    }
}

/// Per-principal state: one GCRA cell per quota, refusal counts, first/last seen.
#[derive(Debug)]
struct State {
    cells: Cells,
    refusals: Refusals,
    first_seen: Timestamp,
    last_seen: Timestamp,
}

impl State {
    fn fresh() -> State {
        let now = Timestamp::now();
        State { cells: Cells::default(), refusals: Refusals::default(), first_seen: now, last_seen: now }
    }
}

/// A time on the limiter's clock in whole seconds, as the table keeps it.
fn secs(now_ns: u64) -> u32 {
    u32::try_from(now_ns / NANOS).unwrap_or(u32::MAX)
}

/// Counts a refusal in the metrics.
/// Upper bounds (µs) of the admission-time buckets the limiter counts for the admin page's
/// p99 (the Prometheus histogram has its own).
pub const ADMISSION_BUCKETS_US: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 10_000, u64::MAX];

/// Running totals since the limiter was made: refusals per limit type and admissions per time
/// bucket, for the admin API's samples (rates are their differences).
#[derive(Default)]
struct Totals {
    refused: [AtomicU64; 5],
    admissions: [AtomicU64; ADMISSION_BUCKETS_US.len()],
}

/// A reading of the limiter's running totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TotalsSnapshot {
    /// Refusals so far, per limit type in the order of [`LimitType::ALL`].
    pub refused: [u64; 5],
    /// Admissions so far, per bucket of [`ADMISSION_BUCKETS_US`].
    pub admissions: [u64; ADMISSION_BUCKETS_US.len()],
}

impl Totals {
    fn refused(&self, limit_type: LimitType) {
        if let Some(i) = LimitType::ALL.iter().position(|t| *t == limit_type) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn admitted_in(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket =
            ADMISSION_BUCKETS_US.iter().position(|&bound| us <= bound).unwrap_or(ADMISSION_BUCKETS_US.len() - 1);
        self.admissions[bucket].fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> TotalsSnapshot {
        TotalsSnapshot {
            refused: std::array::from_fn(|i| self.refused[i].load(Ordering::Relaxed)),
            admissions: std::array::from_fn(|i| self.admissions[i].load(Ordering::Relaxed)),
        }
    }
}

/// How long until `cell`, billed under whatever rate it was, could take one more under `quota`
/// (0 = now).
fn cell_wait(quota: Quota, cell: Cell, now_ns: u64) -> u64 {
    quota.wait(quota.rescale(cell.tat, now_ns, cell.interval), now_ns)
}

/// The admission limiter.
pub struct Limiter {
    policy: RwLock<Arc<Policy>>,
    states: Table<State>,
    clock: Arc<dyn Clock>,
    permits: Permits,
    totals: Totals,
}

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
    pub fn admit(&self, billed: &Billed, limit_type: LimitType) -> Result<(), RateLimited> {
        let started = Instant::now();
        let result = self.admit_at(billed, limit_type, self.clock.now_ns());
        let took = started.elapsed();
        metrics::histogram!("hearth_admission_seconds").record(took.as_secs_f64());
        self.totals.admitted_in(took);
        result
    }

    /// [`Limiter::admit`] at an explicit time (nanoseconds on the limiter's clock).
    pub fn admit_at(&self, billed: &Billed, limit_type: LimitType, now_ns: u64) -> Result<(), RateLimited> {
        let policy = self.policy();
        let Some(quota) = policy.quota(&billed.principal, limit_type).filter(|_| policy.config.enabled) else {
            return Ok(());
        };
        let ceiling = if QUOTAS.contains(&limit_type) { policy.ceiling(billed.ip) } else { None };
        let ceiling = ceiling.and_then(|c| Some((c, policy.quota(&c, limit_type)?)));
        // One wall-clock read for both entries' `last_seen`.
        let seen = Timestamp::now();
        let refused = match self.bill(&billed.principal, quota, limit_type, now_ns, seen) {
            Err(wait) => {
                // Truthful: the ceiling's wait counts too when it is the longer one.
                let ceiling_wait = ceiling.map_or(0, |(c, q)| self.wait(&c, q, limit_type, now_ns));
                wait.max(ceiling_wait)
            }
            Ok(()) => match ceiling {
                None => return Ok(()),
                Some((c, q)) => match self.bill(&c, q, limit_type, now_ns, seen) {
                    Ok(()) => return Ok(()),
                    Err(wait) => {
                        self.unbill_refused(&billed.principal, limit_type, now_ns);
                        wait
                    }
                },
            },
        };
        let refused = RateLimited { limit_type, retry_after: Duration::from_nanos(refused) };
        self.count_refused(&refused);
        Err(refused)
    }

    /// Takes one cell of `principal`'s `limit_type` now, or counts the refusal and says how long
    /// until one is free.
    fn bill(
        &self,
        principal: &Principal,
        quota: Quota,
        limit_type: LimitType,
        now_ns: u64,
        seen: Timestamp,
    ) -> Result<(), u64> {
        self.states.update(principal, secs(now_ns), State::fresh, |s| {
            s.last_seen = seen;
            let Some(cell) = s.cells.of(limit_type) else { return Ok(()) };
            match quota.check(quota.rescale(cell.tat, now_ns, cell.interval), now_ns) {
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

    /// Gives back the cell [`Limiter::bill`] just took (GCRA: one interval earlier) from a
    /// request its IP ceiling refused, and counts the refusal, in one update.
    fn unbill_refused(&self, principal: &Principal, limit_type: LimitType, now_ns: u64) {
        self.states.update(principal, secs(now_ns), State::fresh, |s| {
            if let Some(cell) = s.cells.of(limit_type) {
                cell.tat = cell.tat.saturating_sub(cell.interval);
            }
            s.refusals.count(limit_type);
        });
    }

    /// How many of the tracked principals would have their next request of each quota refused
    /// now under `proposed` limits, and under the limits in force: each principal's buckets as
    /// they stand, carried over to the proposed rates as a live change would carry them. Bills
    /// and changes nothing.
    pub fn preview(&self, proposed: &LimitsConfig) -> Preview {
        let now_ns = self.clock.now_ns();
        let (current, proposed) = (self.policy(), Policy::of(proposed.clone()));
        let principals = self.principals();
        let mut out = Preview { tracked: principals.len() as u64, ..Preview::default() };
        for principal in &principals {
            let cells = self.states.read(principal, secs(now_ns), |s| s.cells).unwrap_or_default();
            let (mut now_any, mut then_any) = (false, false);
            for (i, limit_type) in QUOTAS.into_iter().enumerate() {
                let refused = |policy: &Policy| {
                    policy
                        .quota(principal, limit_type)
                        .filter(|_| policy.config.enabled)
                        .is_some_and(|quota| cell_wait(quota, cells.get(limit_type), now_ns) > 0)
                };
                if refused(&current) {
                    out.refused_now[i] += 1;
                    now_any = true;
                }
                if refused(&proposed) {
                    out.would_refuse[i] += 1;
                    then_any = true;
                }
            }
            out.refused_now_any += u64::from(now_any);
            out.would_refuse_any += u64::from(then_any);
        }
        out
    }

    /// How long until `principal` could take a cell of `limit_type` (0 = now).
    fn wait(&self, principal: &Principal, quota: Quota, limit_type: LimitType, now_ns: u64) -> u64 {
        let cell = self.states.read(principal, secs(now_ns), |s| s.cells.get(limit_type));
        cell.map_or(0, |cell| cell_wait(quota, cell, now_ns))
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

    /// The refusal `limit_type` would give `principal` now, without billing anything.
    pub fn peek(&self, principal: &Principal, limit_type: LimitType) -> Option<RateLimited> {
        let policy = self.policy();
        let quota = policy.quota(principal, limit_type).filter(|_| policy.config.enabled)?;
        match self.wait(principal, quota, limit_type, self.clock.now_ns()) {
            0 => None,
            wait => Some(RateLimited { limit_type, retry_after: Duration::from_nanos(wait) }),
        }
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

    /// Principals with state, for the admin API's busiest list.
    pub fn principals(&self) -> Vec<Principal> {
        self.states.keys(self.now_secs())
    }

    /// The running totals of refusals and admission times.
    pub fn totals(&self) -> TotalsSnapshot {
        self.totals.read()
    }

    /// How many principals have state.
    pub fn tracked(&self) -> u64 {
        self.principals().len() as u64
    }
}

#[cfg(test)]
mod tests;
