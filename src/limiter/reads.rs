//! What the limiter reports without billing: usage, the busiest principals, a limit change's
//! preview, a peek at the next refusal. Each reads exactly the state admissions decide with:
//! the shared Redis's buckets (at Redis's time) with the Redis backend, this node's table with
//! the memory backend or while Redis is unavailable.

use std::time::Duration;

use super::principal::Principal;
use super::shared::Snapshot;
use super::state::{Policy, QUOTAS, cell_wait, secs};
use super::usage::{self, Usage};
use super::{Limiter, Preview};
use crate::config::LimitsConfig;
use crate::protocol::refusal::{LimitType, RateLimited};

impl Limiter {
    /// The time (ns) and the state of each of `principals` that admissions decide with now.
    async fn snapshots(&self, principals: &[Principal]) -> (u64, Vec<Option<Snapshot>>) {
        if let Some(shared) = &self.shared
            && let Ok((now, mut snapshots)) = shared.snapshots(principals).await
        {
            // The handler bound is this node's own, and so are its refusals.
            let local = self.local(principals, self.clock.now_ns());
            for (shared, local) in snapshots.iter_mut().zip(local) {
                if let (Some((_, refusals, ..)), Some((_, mine, ..))) = (shared.as_mut(), local) {
                    refusals.unavailable = mine.unavailable;
                }
            }
            return (now, snapshots);
        }
        let now = self.clock.now_ns();
        (now, self.local(principals, now))
    }

    /// This node's table's state of each of `principals`.
    fn local(&self, principals: &[Principal], now: u64) -> Vec<Option<Snapshot>> {
        principals
            .iter()
            .map(|p| {
                self.states.read(p, secs(now), |s| (s.cells, s.refusals, Some(s.first_seen.0), Some(s.last_seen.0)))
            })
            .collect()
    }

    /// The principals with state: the shared Redis's, or this node's table's.
    pub async fn principals(&self) -> Vec<Principal> {
        if let Some(shared) = &self.shared
            && let Ok(principals) = shared.principals().await
        {
            return principals;
        }
        self.states.keys(self.now_secs())
    }

    /// What the limiter knows of `principal`: exactly the state it decides with (a principal
    /// it holds no state for has a full bucket everywhere and was never seen).
    pub async fn usage(&self, principal: &Principal) -> Usage {
        let (now, mut snapshots) = self.snapshots(std::slice::from_ref(principal)).await;
        usage::report(principal, &self.policy(), snapshots.pop().flatten(), now)
    }

    /// [`Limiter::usage`] of every principal with state.
    pub async fn usages(&self) -> Vec<(Principal, Usage)> {
        let principals = self.principals().await;
        let (now, snapshots) = self.snapshots(&principals).await;
        let policy = self.policy();
        principals
            .into_iter()
            .zip(snapshots)
            .map(|(p, snapshot)| (p, usage::report(&p, &policy, snapshot, now)))
            .collect()
    }

    /// The refusal `limit_type` would give `principal` now, without billing anything.
    pub async fn peek(&self, principal: &Principal, limit_type: LimitType) -> Option<RateLimited> {
        let policy = self.policy();
        let quota = policy.quota(principal, limit_type).filter(|_| policy.config.enabled)?;
        let (now, mut snapshots) = self.snapshots(std::slice::from_ref(principal)).await;
        let cell = snapshots.pop().flatten().map(|(cells, ..)| cells.get(limit_type))?;
        match cell_wait(quota, cell, now) {
            0 => None,
            wait => Some(RateLimited { limit_type, retry_after: Duration::from_nanos(wait) }),
        }
    }

    /// How many of the tracked principals would have their next request of each quota refused
    /// now under `proposed` limits, and under the limits in force: each principal's buckets as
    /// they stand, carried over to the proposed rates as a live change would carry them. Bills
    /// and changes nothing.
    pub async fn preview(&self, proposed: &LimitsConfig) -> Preview {
        let (current, proposed) = (self.policy(), Policy::of(proposed.clone()));
        let principals = self.principals().await;
        let (now_ns, snapshots) = self.snapshots(&principals).await;
        let mut out = Preview { tracked: principals.len() as u64, ..Preview::default() };
        for (principal, snapshot) in principals.iter().zip(snapshots) {
            let cells = snapshot.map(|(cells, ..)| cells).unwrap_or_default();
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
}
