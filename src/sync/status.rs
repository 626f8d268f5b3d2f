//! What the background sync with each configured peer (`[[sync.peers]]`) last did, and the
//! button that starts its next round now.
//!
//! Owns [`SyncStatus`], held by the shared state: one [`PeerStatus`] per configured peer, which
//! the peer's task (`sync::peers`) writes after every round and the admin API reads
//! (`GET /admin/v1/sync`) and pokes (`POST /admin/v1/sync/peers/{index}/start`). Also the
//! [`Summary`] a round reports, which it shares with `hearth sync` and the admin API's rounds,
//! and the count of items the relay's open negentropy sessions hold ([`Held`]), so that no number
//! of connections can make it hold more than `sync.max_items_held`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::config::{Direction, SyncPeer};

/// What a round did: the summary line of `hearth sync`, the admin API's answer, a peer's last
/// round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Events we have and the peer lacks.
    pub have: u64,
    /// Events the peer has and we lack.
    pub need: u64,
    /// Events fetched from the peer.
    pub fetched: u64,
    /// Of those, newly stored here.
    pub stored: u64,
    /// Events the peer accepted from us (`OK true`, a duplicate included).
    pub published: u64,
    /// Events refused: by the peer (`OK false`), or fetched and refused here (not asked for, a
    /// bad signature, moderation).
    pub refused: u64,
    /// Seconds the round took.
    pub seconds: f64,
    /// Bytes of the negentropy exchange on the wire (its frames' JSON text).
    pub sync_bytes: u64,
    /// Why the round stopped early, if it did.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// Every configured peer's status, in configuration order.
#[derive(Debug, Default)]
pub struct SyncStatus {
    peers: Vec<PeerStatus>,
    held: Arc<AtomicUsize>,
}

/// Items one open negentropy session holds, counted in the relay's total until it is dropped.
#[derive(Debug)]
pub struct Held {
    count: usize,
    total: Arc<AtomicUsize>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.total.fetch_sub(self.count, Ordering::Relaxed);
    }
}

/// One peer: its configuration, what its rounds did, and the signal that starts one now.
#[derive(Debug)]
pub struct PeerStatus {
    /// The `[[sync.peers]]` entry.
    pub config: SyncPeer,
    state: Mutex<PeerState>,
    /// Wakes the peer's task for a round now.
    pub start: Notify,
}

/// What the admin API shows of one peer.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PeerState {
    /// A round runs now.
    pub running: bool,
    /// Rounds finished since the relay started.
    pub rounds: u64,
    /// Rounds failed in a row (the back-off grows with them).
    pub failures: u32,
    /// When the next round starts (Unix seconds), unless started sooner.
    pub next_round_at: Option<u64>,
    /// The last finished round.
    pub last_round: Option<LastRound>,
}

/// A finished round of a peer.
#[derive(Clone, Debug, Serialize)]
pub struct LastRound {
    /// When it started and ended (Unix seconds).
    pub started_at: u64,
    /// When it ended.
    pub finished_at: u64,
    /// True when it ran to its end (events the peer refused are counted in `refused`).
    pub ok: bool,
    /// What it did.
    #[serde(flatten)]
    pub summary: Summary,
}

/// Why a peer's round could not be started.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// No configured peer has this index.
    #[error("no sync peer {0} is configured")]
    NoSuchPeer(usize),
    /// Its round runs already.
    #[error("a round with this peer is running")]
    Running,
}

/// One peer as the admin API lists it.
#[derive(Clone, Debug, Serialize)]
pub struct PeerView {
    /// Its place in `[[sync.peers]]`, which names it in `…/peers/{index}/start`.
    pub index: usize,
    /// Its URL.
    pub url: String,
    /// Its filter, as configured.
    pub filter: String,
    /// Which way events move.
    pub direction: Direction,
    /// Seconds between rounds.
    pub interval_secs: u64,
    #[serde(flatten)]
    state: PeerState,
}

impl SyncStatus {
    /// The status of `peers`, none of which has run.
    pub fn new(peers: &[SyncPeer]) -> SyncStatus {
        let peers = peers
            .iter()
            .map(|config| PeerStatus { config: config.clone(), state: Mutex::default(), start: Notify::new() })
            .collect();
        SyncStatus { peers, held: Arc::default() }
    }

    /// Counts `count` more items held by a session, unless that would take the relay's total
    /// past `max`.
    pub fn hold(&self, count: usize, max: usize) -> Option<Held> {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| now.checked_add(count).filter(|n| *n <= max))
            .ok()?;
        Some(Held { count, total: self.held.clone() })
    }

    /// Items the open sessions hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The configured peers.
    pub fn peers(&self) -> &[PeerStatus] {
        &self.peers
    }

    /// Every peer as the admin API lists it.
    pub fn list(&self) -> Vec<PeerView> {
        self.peers
            .iter()
            .enumerate()
            .map(|(index, peer)| PeerView {
                index,
                url: peer.config.url.clone(),
                filter: peer.config.filter.clone(),
                direction: peer.config.direction,
                interval_secs: peer.config.interval_secs,
                state: peer.state(),
            })
            .collect()
    }

    /// Starts peer `index`'s next round now.
    pub fn start(&self, index: usize) -> Result<(), StartError> {
        let peer = self.peers.get(index).ok_or(StartError::NoSuchPeer(index))?;
        if peer.state().running {
            return Err(StartError::Running);
        }
        peer.start.notify_one();
        Ok(())
    }
}

impl PeerStatus {
    /// Its state now.
    pub fn state(&self) -> PeerState {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Changes its state.
    pub fn update(&self, change: impl FnOnce(&mut PeerState)) {
        change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
