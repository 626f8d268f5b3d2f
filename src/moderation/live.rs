//! The one live copy of the operator's state: loaded from the store, changed only through the
//! parts' named methods (`update`), followed across nodes through Redis, and asked by the publish
//! path ([`Moderation::judge`]).
//!
//! Owns [`Moderation`], [`ModerationError`] and [`Verdict`].

use std::collections::HashSet;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cluster::LinkError;
use crate::cluster::document::SharedDoc;
use crate::config::{AccessMode, Config};
use crate::protocol::private::HeldIds;
use crate::protocol::{Event, PubKey};
use crate::store::{Store, StoreError};

use super::state::State;

/// The settings document name.
const SETTING: &str = "moderation";

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
    pub(super) members: HashSet<PubKey>,
    /// `access.mode`.
    pub(super) mode: AccessMode,
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

    /// Changes the state with `change` and saves it; returns what `change` returned (the parts'
    /// named changes call it; nothing else does). With the
    /// Redis backend the change is made on the nodes' latest shared copy and written there
    /// first; [`ModerationError::Shared`] when Redis cannot be reached (nothing changes).
    pub(super) async fn update<T>(
        &self,
        store: &Store,
        change: impl FnOnce(&mut State) -> T,
    ) -> Result<T, ModerationError> {
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

    pub(super) fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
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
}
