//! What the limiter decides with: the live policy (every tier's quotas as GCRA parameters, the
//! agent keys, the exempt networks) and each principal's state (one GCRA cell per quota, its
//! refusals, when it was first and last seen).

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::gcra::{NANOS, Quota};
use super::principal::Principal;
use crate::config::{LimitsConfig, Tier, TierLimits};
use crate::protocol::refusal::LimitType;
use crate::protocol::{PubKey, Timestamp};

/// Failed admin credentials allowed per IP: a burst of this many, refilling over a minute.
pub const ADMIN_AUTH_FAILURES_PER_MIN: u64 = 10;
/// The limit types backed by a per-principal quota, in report order; also the ones the IP
/// ceiling bills.
pub(super) const QUOTAS: [LimitType; 5] =
    [LimitType::WsEvents, LimitType::WsReqs, LimitType::Messages, LimitType::ApiCalls, LimitType::UploadBytes];
/// Bytes per cell of the `upload_bytes` quota: uploads are billed in whole KiB, so a day's
/// budget is a GCRA whose interval stays far above a nanosecond (and a microsecond in Redis).
pub const UPLOAD_CELL_BYTES: u64 = 1024;
/// Seconds in the `upload_bytes` quota's period.
const DAY_SECS: u64 = 86_400;

/// One tier's quotas as GCRA parameters.
#[derive(Clone, Copy, Debug)]
pub(super) struct TierQuotas {
    pub(super) ws_events: Quota,
    pub(super) ws_reqs: Quota,
    pub(super) messages: Quota,
    pub(super) api_calls: Quota,
    pub(super) upload_bytes: Quota,
}

impl TierQuotas {
    pub(super) fn of(t: &TierLimits) -> TierQuotas {
        TierQuotas {
            ws_events: Quota::new(t.ws_events_per_sec, 1, t.ws_events_per_sec.saturating_mul(t.ws_burst_window_secs)),
            ws_reqs: Quota::new(t.ws_reqs_per_sec, 1, t.ws_reqs_per_sec.saturating_mul(t.ws_reqs_burst_window_secs)),
            messages: Quota::new(t.messages_per_min, 60, t.messages_per_min),
            api_calls: Quota::new(t.api_calls_per_min, 60, t.api_calls_per_min),
            upload_bytes: {
                let cells = upload_cells(t.upload_bytes_per_day);
                Quota::new(cells, DAY_SECS, cells)
            },
        }
    }
}

/// The live limits, swapped whole.
pub(super) struct Policy {
    pub(super) config: LimitsConfig,
    pub(super) human: TierQuotas,
    pub(super) agent: TierQuotas,
    pub(super) ip: TierQuotas,
    pub(super) agents: HashSet<PubKey>,
    pub(super) exempt: Vec<IpNet>,
}

impl Policy {
    pub(super) fn of(config: LimitsConfig) -> Policy {
        Policy {
            human: TierQuotas::of(&config.human),
            agent: TierQuotas::of(&config.agent),
            ip: TierQuotas::of(&config.ip),
            agents: config.agent_pubkeys.iter().copied().collect(),
            exempt: config.ip_ceiling_exempt.clone(),
            config,
        }
    }

    pub(super) fn tier(&self, principal: &Principal) -> Tier {
        match principal {
            Principal::Pubkey(pk) if self.agents.contains(pk) => Tier::Agent,
            Principal::Ceiling(..) => Tier::Ip,
            _ => Tier::Human,
        }
    }

    /// The IP ceiling `ip` is billed under, or `None` when it is exempt.
    pub(super) fn ceiling(&self, ip: IpAddr) -> Option<Principal> {
        let ip = ip.to_canonical();
        if self.exempt.iter().any(|net| net.contains(&ip)) {
            return None;
        }
        Some(Principal::ceiling_of(ip, self.config.ipv6_prefix_len))
    }

    /// The quota of `limit_type` for `principal`; `None` for `Unavailable`, which is a bound,
    /// not a quota.
    pub(super) fn quota(&self, principal: &Principal, limit_type: LimitType) -> Option<Quota> {
        let tier = match self.tier(principal) {
            Tier::Human => &self.human,
            Tier::Agent => &self.agent,
            Tier::Ip => &self.ip,
        };
        match limit_type {
            LimitType::WsEvents => Some(tier.ws_events),
            LimitType::WsReqs => Some(tier.ws_reqs),
            LimitType::Messages => Some(tier.messages),
            LimitType::ApiCalls => Some(tier.api_calls),
            LimitType::UploadBytes => Some(tier.upload_bytes),
            LimitType::AdminAuth => Some(Quota::new(ADMIN_AUTH_FAILURES_PER_MIN, 60, ADMIN_AUTH_FAILURES_PER_MIN)),
            LimitType::Unavailable => None,
        }
    }
}

/// One GCRA cell: the theoretical arrival time, with the interval it was computed under (so a
/// live limit change keeps the cells in use).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cell {
    pub(super) tat: u64,
    pub(super) interval: u64,
}

/// A principal's cells, one per quota.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Cells {
    pub(super) ws_events: Cell,
    pub(super) ws_reqs: Cell,
    pub(super) messages: Cell,
    pub(super) api_calls: Cell,
    pub(super) upload_bytes: Cell,
    pub(super) admin_auth: Cell,
}

impl Cells {
    /// The cell of a quota-backed limit type (`None` for `Unavailable`).
    pub(super) fn of(&mut self, limit_type: LimitType) -> Option<&mut Cell> {
        match limit_type {
            LimitType::WsEvents => Some(&mut self.ws_events),
            LimitType::WsReqs => Some(&mut self.ws_reqs),
            LimitType::Messages => Some(&mut self.messages),
            LimitType::ApiCalls => Some(&mut self.api_calls),
            LimitType::UploadBytes => Some(&mut self.upload_bytes),
            LimitType::AdminAuth => Some(&mut self.admin_auth),
            LimitType::Unavailable => None,
        }
    }

    pub(super) fn get(mut self, limit_type: LimitType) -> Cell {
        self.of(limit_type).copied().unwrap_or_default()
    }
}

/// Refusals of a principal per limit type (saturating).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Refusals {
    pub(super) ws_events: u32,
    pub(super) ws_reqs: u32,
    pub(super) messages: u32,
    pub(super) api_calls: u32,
    pub(super) upload_bytes: u32,
    pub(super) admin_auth: u32,
    pub(super) unavailable: u32,
}

impl Refusals {
    pub(super) fn of(&mut self, limit_type: LimitType) -> &mut u32 {
        match limit_type {
            LimitType::WsEvents => &mut self.ws_events,
            LimitType::WsReqs => &mut self.ws_reqs,
            LimitType::Messages => &mut self.messages,
            LimitType::ApiCalls => &mut self.api_calls,
            LimitType::UploadBytes => &mut self.upload_bytes,
            LimitType::AdminAuth => &mut self.admin_auth,
            LimitType::Unavailable => &mut self.unavailable,
        }
    }

    pub(super) fn count(&mut self, limit_type: LimitType) {
        let n = self.of(limit_type);
        *n = n.saturating_add(1);
    }

    pub(super) fn get(mut self, limit_type: LimitType) -> u32 {
        *self.of(limit_type)
    }
}

/// Per-principal state: one GCRA cell per quota, refusal counts, first/last seen.
#[derive(Debug)]
pub(super) struct State {
    pub(super) cells: Cells,
    pub(super) refusals: Refusals,
    pub(super) first_seen: Timestamp,
    pub(super) last_seen: Timestamp,
}

impl State {
    pub(super) fn fresh() -> State {
        let now = Timestamp::now();
        State { cells: Cells::default(), refusals: Refusals::default(), first_seen: now, last_seen: now }
    }
}

/// The cells of the `upload_bytes` quota `bytes` take (whole KiB, rounded up).
pub fn upload_cells(bytes: u64) -> u64 {
    bytes.div_ceil(UPLOAD_CELL_BYTES)
}

impl super::table::Kept for State {
    /// A state is kept while any of its cells is in use: forgetting it would give back a whole
    /// burst (a day's upload quota) early.
    fn kept_until(&self) -> u32 {
        let c = &self.cells;
        let latest =
            [c.ws_events, c.ws_reqs, c.messages, c.api_calls, c.upload_bytes, c.admin_auth].iter().map(|c| c.tat).max();
        secs(latest.unwrap_or(0))
    }
}

/// A time on the limiter's clock in whole seconds, as the table keeps it.
pub(super) fn secs(now_ns: u64) -> u32 {
    u32::try_from(now_ns / NANOS).unwrap_or(u32::MAX)
}

/// How long until `cell`, billed under whatever rate it was, could take one more under `quota`
/// (0 = now).
pub(super) fn cell_wait(quota: Quota, cell: Cell, now_ns: u64) -> u64 {
    cells_wait(quota, cell, 1, now_ns)
}

/// How long until `cell` could take `n` more under `quota` (0 = now).
pub(super) fn cells_wait(quota: Quota, cell: Cell, n: u64, now_ns: u64) -> u64 {
    quota.check_n(quota.rescale(cell.tat, now_ns, cell.interval), now_ns, n).err().unwrap_or(0)
}
