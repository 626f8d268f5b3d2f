//! Limit and tier overrides: the quotas in force, the configuration's with the admin's changes.
//!
//! Owns these methods of [`Moderation`]: [`Moderation::effective_limits`] (what the limiter is
//! given) and the named changes the admin API's `/limits` and `/pubkeys/{pubkey}/tier` make.

use crate::config::{LimitKey, LimitsConfig};
use crate::protocol::PubKey;
use crate::store::Store;

use super::live::{Moderation, ModerationError};
use super::state::State;

impl Moderation {
    /// The limits in force: `config` with the overrides and tiers set live.
    pub fn effective_limits(&self, config: &LimitsConfig) -> LimitsConfig {
        self.read(|s| s.effective_limits(config))
    }

    /// Sets the overrides `changes` in one change, if `admits` lets the state as it stands now
    /// through (an `If-Match` compared with what the caller last read); the values in force
    /// before, one per change, or what `admits` said instead (nothing changes).
    pub async fn override_limits<E>(
        &self,
        store: &Store,
        config: &LimitsConfig,
        changes: &[(LimitKey, u64)],
        admits: impl FnOnce(&State) -> Result<(), E>,
    ) -> Result<Result<Vec<u64>, E>, ModerationError> {
        self.update(store, |s| {
            admits(s)?;
            let effective = s.effective_limits(config);
            let olds: Vec<u64> = changes.iter().map(|(key, _)| effective.get(*key)).collect();
            for (key, value) in changes {
                s.limit_overrides.insert(*key, *value);
            }
            Ok(olds)
        })
        .await
    }

    /// Removes the override of `key`; its value, if it had one.
    pub async fn remove_limit_override(&self, store: &Store, key: LimitKey) -> Result<Option<u64>, ModerationError> {
        self.update(store, |s| s.limit_overrides.remove(&key)).await
    }

    /// Sets `pubkey`'s tier (`agent` or human) over `limits.agent_pubkeys`; the tier it was set
    /// to before, if any.
    pub async fn set_tier(&self, store: &Store, pubkey: PubKey, agent: bool) -> Result<Option<bool>, ModerationError> {
        self.update(store, |s| s.agent_overrides.insert(pubkey, agent)).await
    }
}
