//! Shared application state: built once in [`crate::run`], handed to every transport.
//!
//! Owns nothing but handles: the configuration, the store, the fan-out registry, the
//! subscriptions' places, and the shutdown token and task tracker that every long-lived task
//! obeys. None of what it holds imports it back; the one thing it defines itself is the set of
//! NIP-98 auth ids seen ([`ReplayCache`]), which the HTTP side asks.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::fanout::Fanout;
use crate::limiter::Limiter;
use crate::moderation::Moderation;
use crate::protocol::nip98;
use crate::protocol::{EventId, Keys, PrivateKinds};
use crate::store::Store;
use crate::subscription_caps::Slots;

/// Everything a request handler needs; shared as `Arc<AppState>`.
pub struct AppState {
    /// The loaded, validated configuration.
    pub config: Config,
    /// Durable event storage.
    pub store: Store,
    /// Live subscriptions.
    pub fanout: Arc<Fanout>,
    /// The media server's blobs (Blossom).
    pub blobs: Arc<crate::blobs::Blobs>,
    /// The places open subscriptions hold, per address and relay-wide.
    pub slots: Arc<Slots>,
    /// The NIP-29 groups, a cache of their stored events.
    pub groups: Arc<crate::groups::Registry>,
    /// The kinds served only to their parties (`auth.private_kinds`), as every read path asks.
    pub private: PrivateKinds,
    /// The relay's own key (NIP-11 `self`; it signs the relay's NIP-43 events).
    pub keys: Keys,
    /// The one admission limiter every transport bills.
    pub limiter: Arc<Limiter>,
    /// Bans, allow lists, info overrides, tiers and limit overrides set by operators.
    pub moderation: Moderation,
    /// The Redis the nodes share, with `limits.backend = "redis"`.
    pub link: Option<Arc<crate::cluster::Link>>,
    /// The other nodes' events through Redis (`limits.backend = "redis"`): see `crate::delivery`.
    pub broadcast: Option<Arc<crate::cluster::broadcast::Broadcast>>,
    /// The events delivered live lately, so that one reaching this node twice (from the
    /// broadcast and from a catch-up) is delivered once.
    pub delivered: ReplayCache,
    /// NIP-98 auth event ids seen within their validity window (each is good for one request).
    pub nip98_seen: ReplayCache,
    /// Cancelled when the relay shuts down.
    pub shutdown: CancellationToken,
    /// Every WebSocket connection and background task, awaited at shutdown.
    pub tasks: TaskTracker,
    /// The last 15 minutes, sampled for the admin page.
    pub stats: crate::stats::Stats,
    /// When the relay started (uptime, for the admin page).
    pub started: std::time::Instant,
    /// What the background sync with each configured peer last did (`[[sync.peers]]`).
    pub sync: crate::sync::status::SyncStatus,
    /// Every WebSocket frame in and out on stderr, when set (`hearth dev`).
    pub frame_log: std::sync::OnceLock<crate::frame_log::FrameLog>,
}

impl AppState {
    /// Stops the store and, when `this` was the last handle on the state, checkpoints its
    /// catalogue ([`Store::close`]).
    pub async fn close(this: Arc<AppState>) -> Result<(), crate::store::StoreError> {
        let (store, cache_capacity_mb) = (this.store.clone(), this.config.storage.cache_capacity_mb);
        drop(this);
        store.close(cache_capacity_mb).await
    }
}

/// NIP-98 auth event ids seen within their validity window, bounded in count.
pub struct ReplayCache(moka::sync::Cache<EventId, ()>);

impl ReplayCache {
    /// A cache of at most `capacity` ids, each kept for longer than an auth event is valid.
    pub fn new(capacity: u64) -> ReplayCache {
        ReplayCache::keeping(capacity, Duration::from_secs(2 * nip98::WINDOW_SECS + 10))
    }

    /// A cache of at most `capacity` ids, each kept for `ttl`.
    pub fn keeping(capacity: u64, ttl: Duration) -> ReplayCache {
        ReplayCache(moka::sync::Cache::builder().max_capacity(capacity).time_to_live(ttl).build())
    }

    /// True the first time `id` is seen.
    pub fn first_use(&self, id: EventId) -> bool {
        self.0.entry(id).or_insert(()).is_fresh()
    }
}
