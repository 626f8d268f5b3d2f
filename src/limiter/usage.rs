//! The usage report: what the limiter knows of one principal, exactly as it decides with.
//!
//! Owns [`Usage`] and [`LimitUsage`], which the admin API serves as they are.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::gcra::NANOS;
use super::principal::Principal;
use super::state::{Cells, Policy, QUOTAS, Refusals, UPLOAD_CELL_BYTES};
use crate::config::Tier;
use crate::protocol::refusal::{LimitType, RateLimited};

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
    /// The principal (hex pubkey, IP, or the IP ceiling's network as `addr/len`).
    pub principal: String,
    /// Its tier.
    pub tier: Tier,
    /// Per quota: `ws_events`, `ws_reqs`, `messages`, `api_calls`, `upload_bytes` (in bytes).
    pub limits: BTreeMap<&'static str, LimitUsage>,
    /// Refusals per limit type since start (or since the state was last forgotten).
    pub refusals: BTreeMap<&'static str, u64>,
    /// First admission seen (Unix seconds); `null` when never seen (or forgotten).
    pub first_seen: Option<u64>,
    /// Latest admission seen (Unix seconds).
    pub last_seen: Option<u64>,
}

/// The report of `principal` from the state the limiter holds of it (`snapshot`: its cells, its
/// refusals, when first and last seen; none when it holds none) under `policy`, at `now` (ns).
pub(super) fn report(
    principal: &Principal,
    policy: &Policy,
    snapshot: Option<(Cells, Refusals, Option<u64>, Option<u64>)>,
    now: u64,
) -> Usage {
    let (cells, refusals, first_seen, last_seen) =
        snapshot.unwrap_or((Cells::default(), Refusals::default(), None, None));
    let limits = QUOTAS
        .iter()
        .filter_map(|lt| {
            let q = policy.quota(principal, *lt)?;
            let cell = cells.get(*lt);
            let tat = q.rescale(cell.tat, now, cell.interval);
            let used = q.used(tat, now);
            let wait = q.wait(tat, now);
            // `upload_bytes` is billed in KiB and reported in bytes.
            let unit = if *lt == LimitType::UploadBytes { UPLOAD_CELL_BYTES } else { 1 };
            let usage = LimitUsage {
                used: used.saturating_mul(unit),
                limit: q.burst.saturating_mul(unit),
                remaining: (q.burst - used).saturating_mul(unit),
                window_secs: q.window_ns().div_ceil(NANOS),
                retry_in_secs: if wait == 0 {
                    0
                } else {
                    RateLimited { limit_type: *lt, retry_after: Duration::from_nanos(wait) }.retry_secs()
                },
            };
            Some((lt.as_str(), usage))
        })
        .collect();
    let refusals = LimitType::ALL.iter().map(|lt| (lt.as_str(), u64::from(refusals.get(*lt)))).collect();
    Usage { principal: principal.to_string(), tier: policy.tier(principal), limits, refusals, first_seen, last_seen }
}
