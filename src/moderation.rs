//! Operator state set live through the admin API: bans, allow lists, relay info overrides,
//! per-pubkey tiers and limit overrides.
//!
//! Owns the state, the checks the publish path and the transports ask of it, and its persistence
//! as one JSON document in the store's settings (so it survives a restart). It does not decide
//! who may change it: that is the admin module's.
//!
//! With the Redis backend the document is also the nodes' shared one (`cluster::document`): a
//! change is written there first, by compare-and-set on its version, and only then applied here;
//! every node [`Moderation::refresh`]es from it (the relay asks four times a second), so a ban, a
//! tier or a limit set on one node holds on all within a second. A Redis that lost the document
//! (a restart without persistence) is given this node's copy back.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::cluster::LinkError;
use crate::cluster::document::SharedDoc;
use crate::config::{AccessMode, Config, LimitKey, LimitsConfig};
use crate::protocol::private::HeldIds;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, EventId, PubKey};
use crate::store::{Store, StoreError};

/// The settings document name.
const SETTING: &str = "moderation";

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

/// Why a change of the moderation state was not made.
#[derive(Debug, thiserror::Error)]
pub enum ModerationError {
    /// It could not be saved.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The shared Redis could not be reached, so the change would not reach the other nodes.
    #[error("the nodes' shared state (Redis) cannot be reached, so the change was not made: {0}")]
    Shared(#[from] LinkError),
    /// Another node changed the shared state at the same moment.
    #[error("another node changed the shared state at the same moment; try again")]
    Conflict,
}

/// The nodes' shared copy of the state and the version of it this node holds.
struct Replica {
    doc: SharedDoc,
    version: AtomicU64,
    /// One change or refresh at a time on this node, so its own never conflict.
    busy: tokio::sync::Mutex<()>,
}

/// The live moderation state.
pub struct Moderation {
    state: RwLock<State>,
    /// With the Redis backend, the nodes' shared copy.
    shared: Option<Replica>,
    /// `auth.members` from the configuration.
    members: HashSet<PubKey>,
    /// `access.mode`.
    mode: AccessMode,
    /// Where every read path learns which events are held (kept equal to `state.held`).
    held_ids: HeldIds,
}

/// Why moderation refused an event: the text after `blocked: ` / `restricted: `.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accept.
    Allowed,
    /// `blocked: …`
    Blocked(String),
    /// `restricted: …`
    Restricted(String),
}

impl Moderation {
    /// Loads the saved state (empty when none) for `config`; with `shared`, it follows the
    /// nodes' shared copy from the first [`Moderation::refresh`] on.
    pub fn load(
        store: &Store,
        config: &Config,
        shared: Option<SharedDoc>,
        held_ids: HeldIds,
    ) -> Result<Moderation, StoreError> {
        let state = match store.load_setting(SETTING)? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            None => State::default(),
        };
        let members = config.auth.members.iter().copied().collect();
        let shared = shared.map(|doc| Replica { doc, version: AtomicU64::new(0), busy: tokio::sync::Mutex::new(()) });
        held_ids.set(state.held.keys().copied());
        Ok(Moderation { state: RwLock::new(state), shared, members, mode: config.access.mode, held_ids })
    }

    /// A copy of the current state.
    pub fn snapshot(&self) -> State {
        match self.state.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Changes the state with `change` and saves it; returns what `change` returned. With the
    /// Redis backend the change is made on the nodes' latest shared copy and written there
    /// first; [`ModerationError::Shared`] when Redis cannot be reached (nothing changes).
    pub async fn update<T>(&self, store: &Store, change: impl FnOnce(&mut State) -> T) -> Result<T, ModerationError> {
        if let Some(replica) = &self.shared {
            return self.update_shared(replica, store, change).await;
        }
        let (result, bytes) = {
            let mut guard = match self.state.write() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            let result = change(&mut guard);
            self.held_ids.set(guard.held.keys().copied());
            (result, serde_json::to_vec(&*guard).map_err(|e| StoreError::Corrupt(e.to_string()))?)
        };
        store.save_setting(SETTING, bytes).await?;
        Ok(result)
    }

    async fn update_shared<T>(
        &self,
        replica: &Replica,
        store: &Store,
        change: impl FnOnce(&mut State) -> T,
    ) -> Result<T, ModerationError> {
        let _one = replica.busy.lock().await;
        self.refresh_from(replica, store).await?;
        let before = self.snapshot();
        let mut next = before.clone();
        let result = change(&mut next);
        if next == before {
            return Ok(result);
        }
        let bytes = serde_json::to_vec(&next).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let seen = replica.version.load(Ordering::Acquire);
        let version = replica.doc.replace(seen, bytes.clone()).await?.map_err(|_| ModerationError::Conflict)?;
        self.adopt(replica, version, next);
        store.save_setting(SETTING, bytes).await?;
        Ok(result)
    }

    /// Takes the nodes' shared copy when another node changed it; true when it did. Without the
    /// Redis backend, nothing to do.
    pub async fn refresh(&self, store: &Store) -> Result<bool, ModerationError> {
        let Some(replica) = &self.shared else { return Ok(false) };
        let _one = replica.busy.lock().await;
        self.refresh_from(replica, store).await
    }

    async fn refresh_from(&self, replica: &Replica, store: &Store) -> Result<bool, ModerationError> {
        if replica.doc.version().await? == replica.version.load(Ordering::Acquire) {
            return Ok(false);
        }
        let (version, bytes) = replica.doc.fetch().await?;
        let Some(bytes) = bytes else {
            // A Redis without the document (new, or restarted without persistence): this node's
            // copy is the nodes' from now on, unless another node's got there first.
            let ours = serde_json::to_vec(&self.snapshot()).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if let Ok(version) = replica.doc.replace(version, ours).await? {
                replica.version.store(version, Ordering::Release);
            }
            return Ok(false);
        };
        let state: State = serde_json::from_slice(&bytes)
            .map_err(|e| LinkError::Unexpected(format!("the moderation document: {e}")))?;
        self.adopt(replica, version, state);
        store.save_setting(SETTING, bytes).await?;
        Ok(true)
    }

    fn adopt(&self, replica: &Replica, version: u64, state: State) {
        self.held_ids.set(state.held.keys().copied());
        match self.state.write() {
            Ok(mut s) => *s = state,
            Err(poisoned) => *poisoned.into_inner() = state,
        }
        replica.version.store(version, Ordering::Release);
    }

    fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        match self.state.read() {
            Ok(s) => f(&s),
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    /// Whether `event` may be stored or delivered.
    pub fn judge(&self, event: &Event) -> Verdict {
        self.read(|s| {
            if s.banned_pubkeys.contains_key(&event.pubkey) {
                return Verdict::Blocked("this pubkey is banned from this relay".into());
            }
            if s.banned_events.contains_key(&event.id) {
                return Verdict::Blocked("this event is banned from this relay".into());
            }
            if s.held.contains_key(&event.id) {
                return Verdict::Blocked("this event is held for review by the relay's admins".into());
            }
            let wrapped_to = crate::protocol::private::wrap_recipient(&event.tags, event.kind);
            if [Some(event.pubkey), wrapped_to]
                .iter()
                .flatten()
                .any(|pk| s.vanished.get(pk).is_some_and(|at| event.created_at.0 <= *at))
                && event.kind != crate::protocol::Kind(62)
            {
                return Verdict::Blocked(
                    "this key asked to vanish from this relay (NIP-62); its older events are not taken again".into(),
                );
            }
            if !s.allowed_kinds.is_empty() && !s.allowed_kinds.contains(&event.kind.0) {
                return Verdict::Blocked(format!("kind {} is not allowed on this relay", event.kind.0));
            }
            let member = |pk: &PubKey| self.members.contains(pk) || s.allowed_pubkeys.contains_key(pk);
            // A gift wrap's author is a one-time key, a zap receipt's the recipient's zap
            // service: one to a member is a member's mail.
            let to_member =
                crate::protocol::private::mail_recipient(&event.tags, event.kind).is_some_and(|r| member(&r));
            if self.writes_restricted(s) && !member(&event.pubkey) && !to_member {
                return Verdict::Restricted("only members of this relay may publish here".into());
            }
            Verdict::Allowed
        })
    }

    /// True when only listed authors may publish (NIP-11 `restricted_writes`).
    pub fn restricted_writes(&self) -> bool {
        self.read(|s| self.writes_restricted(s))
    }

    /// True when only members publish: in a members mode, or in `public` with a member list.
    fn writes_restricted(&self, s: &State) -> bool {
        self.mode != AccessMode::Public || !self.members.is_empty() || !s.allowed_pubkeys.is_empty()
    }

    /// `access.mode`.
    pub fn mode(&self) -> AccessMode {
        self.mode
    }

    /// How many keys are members (`auth.members` and the list kept live, each once).
    pub fn member_count(&self) -> usize {
        self.read(|s| {
            s.allowed_pubkeys.len() + self.members.iter().filter(|m| !s.allowed_pubkeys.contains_key(m)).count()
        })
    }

    /// True when `pubkey` is a member: in `auth.members` or the member list kept live.
    pub fn is_member(&self, pubkey: &PubKey) -> bool {
        self.members.contains(pubkey) || self.read(|s| s.allowed_pubkeys.contains_key(pubkey))
    }

    /// Why a connection authenticated as `reader` (none: not authenticated) may not read or
    /// publish at all under `access.mode = "members-only"`; `None` when it may (and in every
    /// other mode). The text is the whole message, prefix included.
    pub fn access_refusal(&self, reader: Option<PubKey>) -> Option<Refusal> {
        if self.mode != AccessMode::MembersOnly {
            return None;
        }
        match reader {
            None => {
                Some(Refusal::new(Prefix::AuthRequired, "this relay is for its members; answer the AUTH challenge"))
            }
            Some(pubkey) if !self.is_member(&pubkey) => {
                Some(Refusal::new(Prefix::Restricted, "this relay is for its members only"))
            }
            Some(_) => None,
        }
    }

    /// True when `event` is members' mail from outside: a gift wrap or zap receipt to a member
    /// ([`crate::protocol::private::mail_recipient`]).
    pub fn is_mail_to_member(&self, event: &Event) -> bool {
        crate::protocol::private::mail_recipient(&event.tags, event.kind).is_some_and(|r| self.is_member(&r))
    }

    /// True when `code` is an invite code kept here (good or spent).
    pub fn has_invite(&self, code: &str) -> bool {
        self.read(|s| s.invites.contains_key(code))
    }

    /// True when `pubkey` is banned.
    pub fn is_banned(&self, pubkey: &PubKey) -> bool {
        self.read(|s| s.banned_pubkeys.contains_key(pubkey))
    }

    /// True when `ip` is blocked.
    pub fn ip_blocked(&self, ip: &IpAddr) -> bool {
        self.read(|s| s.blocked_ips.contains_key(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Keys, Kind, Timestamp};

    #[test]
    fn overrides_apply_over_the_configuration() {
        let alice = Keys::from_bytes([1; 32]).unwrap().public_key();
        let bob = Keys::from_bytes([2; 32]).unwrap().public_key();
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
        let k = Keys::from_bytes([1; 32]).unwrap();
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
}
