//! NIP-29 relay-based groups: a community's channels.
//!
//! Owns the [`Registry`], the relay's groups as a cache of the store: at open the groups' own
//! stored events (kinds 9000–9022) are folded in their canonical order ([`state`]), and after
//! that every change is judged, stored, then committed, one at a time, so the cache never holds
//! a change the store may not keep, and a restart, an import or a second backend arrive at the
//! same state by the same fold. It answers who may read what for every read path
//! ([`Registry::viewer`]; for live events [`Registry::concerns`] and
//! [`state::Groups::may_deliver`]); what the relay says of a group in its signed state events is
//! [`render`]'s, what a group event does on its way in is [`publish`]'s.

pub mod group;
pub mod publish;
pub mod render;
pub mod state;

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use crate::config::GroupsConfig;
use crate::protocol::nip29::group_of;
use crate::protocol::{Event, Filter, GroupScreen, Kind, PrivateKinds, PubKey, Timestamp, Viewer};
use crate::store::{Store, StoreError};
use state::{Groups, Update};

/// The kinds a group's state is folded from: moderation (9000–9020) and requests (9021, 9022).
pub fn state_kinds() -> Vec<Kind> {
    (9000..=9022).map(Kind).collect()
}

/// True for an event a group's state is folded from: of [`state_kinds`], addressed to a group.
pub fn is_state_event(event: &Event) -> bool {
    (9000..=9022).contains(&event.kind.0) && group_of(event).is_some()
}

/// The relay's groups.
pub struct Registry {
    config: GroupsConfig,
    state: RwLock<Groups>,
    /// Held while a change is judged, stored and committed: one change at a time.
    changing: tokio::sync::Mutex<()>,
    /// When this node last signed each group's state events (the latest of the four).
    signed: std::sync::Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("enabled", &self.enabled()).field("groups", &self.read().len()).finish()
    }
}

impl Registry {
    /// The groups the events in `store` make; `relay` is the relay's own key.
    pub fn load(store: &Store, config: &GroupsConfig, relay: PubKey) -> Result<Registry, StoreError> {
        let (groups, signed) = if config.enabled {
            (fold(store, relay)?, signed(store, relay)?)
        } else {
            (Groups::new(relay), HashMap::new())
        };
        Ok(Registry {
            config: config.clone(),
            state: RwLock::new(groups),
            changing: tokio::sync::Mutex::new(()),
            signed: std::sync::Mutex::new(signed),
        })
    }

    /// `[groups]` as configured.
    pub fn config(&self) -> &GroupsConfig {
        &self.config
    }

    /// True when groups are served.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The groups now. A panic while they were held cannot have left them half-changed (a
    /// commit is one insert or remove), so a poisoned lock is used as it is.
    pub fn read(&self) -> RwLockReadGuard<'_, Groups> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the turn to change the groups (see [`publish`]).
    pub async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.changing.lock().await
    }

    /// When `id`'s current state events are dated (the latest of them), if it has any.
    pub fn signed_at(&self, id: &str) -> Option<u64> {
        self.signed.lock().unwrap_or_else(PoisonError::into_inner).get(id).copied()
    }

    /// Notes that `id`'s state events were signed dated `at`.
    pub fn signed(&self, id: &str, at: u64) {
        let mut signed = self.signed.lock().unwrap_or_else(PoisonError::into_inner);
        let latest = signed.entry(id.to_string()).or_default();
        *latest = (*latest).max(at);
    }

    /// Makes a change, once its event is stored.
    pub fn commit(&self, update: Update) {
        self.state.write().unwrap_or_else(PoisonError::into_inner).commit(update);
    }

    /// Folds the store's events again: after a write whose outcome is not known.
    pub fn reload(&self, store: &Store) -> Result<(), StoreError> {
        let groups = fold(store, self.read().relay())?;
        *self.state.write().unwrap_or_else(PoisonError::into_inner) = groups;
        Ok(())
    }

    /// What `reader` may read, under the `private` kinds and the groups: the events of private
    /// groups it is not a member of, and the state events of hidden ones, are withheld.
    pub fn viewer(&self, private: &PrivateKinds, reader: Option<PubKey>) -> Viewer {
        let viewer = private.viewer(reader);
        if !self.enabled() {
            return viewer;
        }
        let groups = self.read();
        let mut screen = GroupScreen::default();
        for group in groups.iter() {
            if !group.may_read(reader.as_ref()) {
                screen.unreadable.insert(group.id.clone());
            }
            if !group.may_see(reader.as_ref()) {
                screen.unseen.insert(group.id.clone());
            }
        }
        viewer.screened(screen)
    }

    /// True when who may be sent `event` can depend on the groups: it names one (`h`), or it is
    /// a group's state event.
    pub fn concerns(&self, event: &Event) -> bool {
        self.enabled() && (event.tag_values("h").next().is_some() || crate::protocol::nip29::is_relay_state(event.kind))
    }

    /// True when `id` is a private group (only its members read it).
    pub fn is_private(&self, id: &str) -> bool {
        self.enabled() && self.read().get(id).is_some_and(|g| g.metadata.private)
    }

    /// True when every event `filter` can match is of one private group `reader` is not a member
    /// of (it names that group alone in `#h`): asked before AUTH, it is refused `auth-required:`
    /// rather than answered with nothing.
    pub fn only_unreadable(&self, filter: &Filter, reader: Option<&PubKey>) -> bool {
        let Some(hs) = filter.tags.get(&'h') else { return false };
        let groups = self.read();
        self.enabled() && !hs.is_empty() && hs.iter().all(|h| groups.get(h).is_some_and(|g| !g.may_read(reader)))
    }
}

/// When each group's stored state events, signed by `relay`, are dated (the latest of them).
fn signed(store: &Store, relay: PubKey) -> Result<HashMap<String, u64>, StoreError> {
    let filter =
        Filter { kinds: Some((39000..=39005).map(Kind).collect()), authors: Some(vec![relay]), ..Filter::default() };
    let mut out: HashMap<String, u64> = HashMap::new();
    for json in store.export(&filter, Timestamp::now())? {
        if let Ok(event) = serde_json::from_str::<Event>(json?.as_str()) {
            let latest = out.entry(event.d_tag().to_string()).or_default();
            *latest = (*latest).max(event.created_at.0);
        }
    }
    Ok(out)
}

/// The groups the stored events of [`state_kinds`] make.
fn fold(store: &Store, relay: PubKey) -> Result<Groups, StoreError> {
    let filter = Filter { kinds: Some(state_kinds()), ..Filter::default() };
    let mut events = Vec::new();
    for json in store.export(&filter, Timestamp::now())? {
        let json = json?;
        match serde_json::from_str::<Event>(json.as_str()) {
            Ok(event) if is_state_event(&event) => events.push(event),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "a stored group event did not parse; left out of the groups"),
        }
    }
    let count = events.len();
    let groups = Groups::replay(relay, events, Timestamp::now().0);
    tracing::info!(groups = groups.len(), events = count, "groups folded from the store");
    Ok(groups)
}
