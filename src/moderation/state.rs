//! The operator's stored document: every part of the state an operator changes live, as one
//! JSON document in the store's settings (`moderation`), read and written whole.
//!
//! Owns [`State`] and its parts' record types ([`Invite`], [`Reviewed`]). Its fields and their
//! JSON are what a running relay wrote to disk: a relay upgraded in place reads them as they are
//! (`tests` below reads a document the previous release wrote), so a field is only ever added,
//! with a default.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::config::{LimitKey, LimitsConfig};
use crate::protocol::{EventId, PubKey};

/// Everything an operator can change live.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    /// Banned authors, with the reason.
    pub banned_pubkeys: BTreeMap<PubKey, String>,
    /// Allowed authors (with `auth.members`, a write allow list), with the reason.
    pub allowed_pubkeys: BTreeMap<PubKey, String>,
    /// Banned events, with the reason.
    pub banned_events: BTreeMap<EventId, String>,
    /// When non-empty, only these kinds are accepted.
    pub allowed_kinds: BTreeSet<u16>,
    /// Blocked client addresses, with the reason.
    pub blocked_ips: BTreeMap<IpAddr, String>,
    /// NIP-11 name override.
    pub name: Option<String>,
    /// NIP-11 description override.
    pub description: Option<String>,
    /// NIP-11 icon override.
    pub icon: Option<String>,
    /// Tier set per pubkey (`true` = agent, `false` = human), over `limits.agent_pubkeys`.
    pub agent_overrides: BTreeMap<PubKey, bool>,
    /// Tier limit overrides over the configuration (saved as `"<tier>.<key>"` → value).
    pub limit_overrides: BTreeMap<LimitKey, u64>,
    /// NIP-43 invite codes (the claims a join request names), by code.
    pub invites: BTreeMap<String, Invite>,
    /// Report targets (an event id or a pubkey, hex) an admin decided on: the action and when
    /// (Unix seconds); reports made before then leave the review queue.
    pub reviewed: BTreeMap<String, Reviewed>,
    /// Keys that asked to vanish (NIP-62), with the `created_at` of their request: their events
    /// (and gift wraps to them) dated up to then are refused.
    pub vanished: BTreeMap<PubKey, u64>,
    /// Events held for review (`moderation.hold_after_reports`), with when (Unix seconds):
    /// served only to their author and the admins until an admin decides.
    pub held: BTreeMap<EventId, u64>,
}

/// An admin's decision on a report target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reviewed {
    /// `dismiss`, `delete` or `ban`.
    pub action: String,
    /// When (Unix seconds).
    pub at: u64,
}

/// One invite code: how often it may be claimed, until when, and what it is for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Invite {
    /// Claims it allows in all.
    pub uses: u32,
    /// Claims made so far.
    pub used: u32,
    /// Unix seconds after which it is refused; 0: never.
    pub expires_at: u64,
    /// The operator's note.
    pub note: String,
    /// When it was made (Unix seconds).
    pub created_at: u64,
}

impl Invite {
    /// Why it cannot be claimed at `now`, if it cannot.
    pub fn refusal(&self, now: u64) -> Option<&'static str> {
        if self.expires_at != 0 && now > self.expires_at {
            Some("this invite code has expired")
        } else if self.used >= self.uses {
            Some("this invite code has been used")
        } else {
            None
        }
    }
}

impl State {
    /// The limits in force: the configuration with the admin overrides and tiers applied.
    pub fn effective_limits(&self, config: &LimitsConfig) -> LimitsConfig {
        let mut limits = config.clone();
        for (key, value) in &self.limit_overrides {
            limits.tier_mut(key.tier).set(key.key, *value);
        }
        let mut agents: BTreeSet<PubKey> = limits.agent_pubkeys.iter().copied().collect();
        for (pubkey, agent) in &self.agent_overrides {
            if *agent {
                agents.insert(*pubkey);
            } else {
                agents.remove(pubkey);
            }
        }
        limits.agent_pubkeys = agents.into_iter().collect();
        limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LimitKey;
    use crate::protocol::{Keys, Kind, Timestamp};

    #[test]
    fn overrides_apply_over_the_configuration() {
        let alice = Keys::test(1).public_key();
        let bob = Keys::test(2).public_key();
        let config = LimitsConfig { agent_pubkeys: vec![bob], ..LimitsConfig::default() };
        let mut state = State::default();
        let key = LimitKey { tier: crate::config::Tier::Human, key: crate::config::QuotaKey::WsEventsPerSec };
        state.limit_overrides.insert(key, 20);
        state.agent_overrides.insert(alice, true);
        state.agent_overrides.insert(bob, false);
        let limits = state.effective_limits(&config);
        assert_eq!(limits.human.ws_events_per_sec, 20);
        assert_eq!(limits.agent.ws_events_per_sec, 10);
        assert_eq!(limits.agent_pubkeys, vec![alice]);
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut state = State::default();
        let k = Keys::test(1);
        let e = k.sign(Timestamp(1), Kind(1), vec![], "");
        state.banned_pubkeys.insert(k.public_key(), "spam".into());
        state.banned_events.insert(e.id, "".into());
        state.blocked_ips.insert("10.1.2.3".parse().unwrap(), "flood".into());
        state.allowed_kinds.insert(1);
        let key = LimitKey { tier: crate::config::Tier::Agent, key: crate::config::QuotaKey::MessagesPerMin };
        state.limit_overrides.insert(key, 7);
        let json = serde_json::to_vec(&state).unwrap();
        assert!(String::from_utf8_lossy(&json).contains(r#""limit_overrides":{"agent.messages_per_min":7}"#));
        assert_eq!(serde_json::from_slice::<State>(&json).unwrap(), state);
    }

    /// The document a relay of the release before this layout wrote (commit 69816a5, through its
    /// admin API, NIP-86, a report hold and a request to vanish: every field set), read by this
    /// one whole, and written back the same.
    #[test]
    fn a_document_the_previous_release_wrote_reads_whole_and_writes_back_the_same() {
        let written = include_str!("../../tests/fixtures/moderation/written-by-69816a5.json");
        let value: serde_json::Value = serde_json::from_str(written).unwrap();
        let every_field_set = value.as_object().unwrap().values().all(|v| !v.is_null() && v != &serde_json::json!({}));
        assert!(every_field_set, "the fixture sets every field: {value}");
        let state: State = serde_json::from_value(value.clone()).unwrap();
        let banned = PubKey::from_hex("79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798").unwrap();
        assert_eq!(state.banned_pubkeys.get(&banned).map(String::as_str), Some("spam"));
        assert_eq!(state.agent_overrides.get(&banned), Some(&true));
        assert_eq!(state.blocked_ips.get(&"10.1.2.3".parse().unwrap()).map(String::as_str), Some("flood"));
        assert_eq!(state.name.as_deref(), Some("The Hearth"));
        assert_eq!(state.allowed_kinds.iter().copied().collect::<Vec<_>>(), [1, 62, 1984]);
        assert_eq!(
            state.invites.values().map(|i| (i.uses, i.note.as_str())).collect::<Vec<_>>(),
            [(3, "for the choir")]
        );
        assert_eq!((state.held.len(), state.vanished.len(), state.reviewed.len()), (1, 1, 1));
        let key = LimitKey { tier: crate::config::Tier::Human, key: crate::config::QuotaKey::MessagesPerMin };
        assert_eq!(state.limit_overrides.get(&key), Some(&77));
        assert_eq!(serde_json::to_value(&state).unwrap(), value);
    }
}
