//! A relay: its data directory opened and its shared state built once ([`Relay::open`]), then
//! served on a bound listener until a shutdown future resolves ([`Relay::serve`], [`run`]); and
//! the background tasks a serving relay keeps (the expiry sweep, compaction when due, the
//! statistics' samples).
//!
//! The caller binds, the library serves: a test binds port 0 and hands the listener in.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use warp::Filter;

use crate::app::AppState;
use crate::app::ReplayCache;
use crate::cluster::Link;
use crate::cluster::document::SharedDoc;
use crate::config::{Config, LimiterBackend};
use crate::fanout::Fanout;
use crate::frame_log::FrameLog;
use crate::limiter::{Clock, Limiter, SystemClock};
use crate::moderation::Moderation;
use crate::protocol::Timestamp;
use crate::store::{Store, StoreError};
use crate::subscription_caps::Slots;
use crate::{admin, http, listener, metrics, server, stats, store};

/// Why the relay could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The data directory could not be opened or flushed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The data directory could not be created.
    #[error("data directory {}: cannot create it: {source}", path.display())]
    DataDir {
        /// The configured `storage.data_dir`.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A setting is out of range.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The relay's own key could not be had.
    #[error(transparent)]
    Identity(#[from] crate::identity::IdentityError),
    /// The media folder could not be opened.
    #[error("media folder: {0}")]
    Media(#[from] crate::blobs::BlobError),
}

/// A relay with its storage open, ready to serve.
pub struct Relay {
    pub(crate) app: Arc<AppState>,
}

impl Relay {
    /// Opens the data directory and builds the shared state; `clock` times the limiter.
    pub fn open(config: Config, clock: Arc<dyn Clock>) -> Result<Relay, RunError> {
        let dir = &config.storage.data_dir;
        std::fs::create_dir_all(dir).map_err(|source| RunError::DataDir { path: dir.clone(), source })?;
        let store = Store::open_tuned(dir, config.storage.tuning())?;
        Relay::with_store(config, clock, store)
    }

    /// The relay over a store already open.
    pub(crate) fn with_store(config: Config, clock: Arc<dyn Clock>, store: Store) -> Result<Relay, RunError> {
        metrics::install();
        let link = match config.limits.backend {
            LimiterBackend::Memory => None,
            LimiterBackend::Redis => {
                let limits = &config.limits;
                let timeout = Duration::from_millis(limits.redis_timeout_ms);
                let link = Link::open(&limits.redis_url, timeout, &limits.redis_prefix).map_err(|e| {
                    crate::config::ConfigError::Invalid { key: "limits.redis_url".into(), problem: e.to_string() }
                })?;
                Some(Arc::new(link))
            }
        };
        let private = config.auth.private().with_reports_sealed_for(&config.admin.pubkeys);
        let shared_doc = link.clone().map(|l| SharedDoc::new(l, "moderation"));
        let moderation = Moderation::load(&store, &config, shared_doc, private.held().clone())?;
        let limiter = match &link {
            None => Limiter::new(&config.limits, clock),
            Some(link) => Limiter::shared(&config.limits, clock, link.clone()),
        };
        limiter.set_limits(moderation.effective_limits(&config.limits));
        let keys = crate::identity::load(&config.relay.secret_key, &config.storage.data_dir)?;
        let groups = Arc::new(crate::groups::Registry::load(&store, &config.groups, keys.public_key())?);
        let config_peers = config.sync.peers.clone();
        let blobs = crate::blobs::Blobs::open(Some(&config.storage.data_dir), &store, &config.media)?;
        let app = Arc::new(AppState {
            blobs: Arc::new(blobs),
            limiter: Arc::new(limiter),
            moderation,
            broadcast: link.clone().map(|l| Arc::new(crate::cluster::broadcast::Broadcast::new(l))),
            delivered: ReplayCache::keeping(100_000, crate::delivery::REMEMBERED),
            link,
            nip98_seen: ReplayCache::new(config.limits.max_tracked_principals),
            slots: Arc::new(Slots::new(config.server.max_subscriptions_per_ip, config.server.max_subscriptions_total)),
            config,
            store,
            fanout: Arc::new(Fanout::new(private.clone(), groups.clone())),
            groups,
            private,
            keys,
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            stats: stats::Stats::default(),
            started: std::time::Instant::now(),
            frame_log: std::sync::OnceLock::new(),
            sync: crate::sync::status::SyncStatus::new(&config_peers),
        });
        Ok(Relay { app })
    }

    /// The shared state, for the offline commands that work on it without serving.
    pub(crate) fn app(self) -> Arc<AppState> {
        self.app
    }

    /// Logs every WebSocket frame in and out on stderr, one line each (`hearth dev`); events of
    /// the private kinds without their content.
    pub fn log_frames(&self, log: FrameLog) {
        let _ = self.app.frame_log.set(log.withholding(self.app.private.clone(), self.app.groups.clone()));
    }

    /// The relay's limiter (tests and embedding programs tune it live).
    pub fn limiter(&self) -> Arc<Limiter> {
        self.app.limiter.clone()
    }

    /// Serves on `listener` (and the admin API on `admin_listener`, bound by the caller to
    /// `admin.bind` when that is set) until `shutdown` resolves; then stops accepting, lets every
    /// connection finish its in-flight writes, flushes the store and returns.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        admin_listener: Option<tokio::net::TcpListener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RunError> {
        let app = self.app;
        let addr = listener.local_addr()?;
        app.tasks.spawn(sweep_expired(app.clone()));
        app.tasks.spawn(compact_when_due(app.clone()));
        app.tasks.spawn(sample_every_interval(app.clone()));
        if let Some(link) = app.link.clone() {
            // Before the first client: the nodes' shared bans, tiers and limits (a Redis that is
            // down leaves this node's saved copy in force until it is back).
            follow_shared_state(&app).await;
            let token = app.shutdown.clone();
            app.tasks.spawn(async move { link.watch(token).await });
            app.tasks.spawn(keep_following_shared_state(app.clone()));
            app.tasks.spawn(crate::delivery::listen(app.clone()));
        }
        crate::sync::peers::spawn(&app);
        // Who may create rooms, as chat clients read it: `groups.create` or the admins may have
        // changed since the last start.
        crate::membership::publish_room_creators(&app).await;
        // Both listeners keep sockets under the same caps and timeouts (each its own count).
        let limits = listener::Limits::of(&app.config);
        tracing::info!("listening on {addr}");
        tracing::info!(
            mode = app.config.access.mode.name(),
            members = app.moderation.member_count(),
            "{}",
            access_line(&app)
        );
        if !app.config.admin.enabled() {
            tracing::info!(
                "admin API is off: set admin.token (HEARTH_ADMIN__TOKEN) or admin.pubkeys (HEARTH_ADMIN__PUBKEYS) to turn it on"
            );
        } else if admin_listener.is_none() {
            tracing::info!("admin API at http://{addr}/admin/v1/, admin page at http://{addr}/admin/");
        }
        if let Some(admin_listener) = admin_listener.filter(|_| app.config.admin.enabled()) {
            let admin_addr = admin_listener.local_addr()?;
            tracing::info!(
                "admin API listening on {admin_addr}: http://{admin_addr}/admin/v1/, admin page at http://{admin_addr}/admin/"
            );
            let token = app.shutdown.clone();
            let served = server::ROUTES.iter().copied().filter(|&(method, path)| server::is_admin(method, path));
            let routes = http::first_of([http::method_not_allowed(served.collect()), admin::routes(app.clone())])
                .recover(http::recover);
            let limits = limits.clone();
            app.tasks.spawn(listener::serve(
                admin_listener,
                (routes, None),
                limits,
                async move { token.cancelled().await },
            ));
        }
        let token = app.shutdown.clone();
        let signal = async move {
            tokio::select! {
                _ = shutdown => token.cancel(),
                _ = token.cancelled() => {}
            }
        };
        let front = crate::media::front(&app);
        listener::serve(listener, (server::routes(app.clone()), front), limits, signal).await;
        app.shutdown.cancel();
        app.tasks.close();
        app.tasks.wait().await;
        AppState::close(app).await?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Serves the relay on `listener` with the real clock until `shutdown` resolves; binds
/// `admin.bind` itself when set.
pub async fn run(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let admin_listener = match config.admin.bind {
        None => None,
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await?),
    };
    Relay::open(config, Arc::new(SystemClock::default()))?.serve(listener, admin_listener, shutdown).await
}

/// Takes the nodes' shared moderation state when another node changed it, and applies its
/// limits and tiers to the limiter.
async fn follow_shared_state(app: &AppState) {
    match app.moderation.refresh(&app.store).await {
        Ok(true) => app.limiter.set_limits(app.moderation.effective_limits(&app.config.limits)),
        Ok(false) => {}
        // The link logs Redis being down (once a minute); a store failure is this node's.
        Err(crate::moderation::ModerationError::Shared(_)) => {}
        Err(e) => tracing::error!(error = %e, "the nodes' shared state could not be taken"),
    }
}

/// [`follow_shared_state`] four times a second until shutdown: a change on any node holds on
/// this one within a second.
async fn keep_following_shared_state(app: Arc<AppState>) {
    loop {
        tokio::select! {
            _ = app.shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(250)) => follow_shared_state(&app).await,
        }
    }
}

/// Compacts the event log whenever its dead share passes `storage.compact_dead_ratio` (and it
/// is `storage.compact_min_mb` long), while serving.
async fn compact_when_due(app: Arc<AppState>) {
    app.store.set_compaction_policy(app.config.storage.compact_policy());
    loop {
        tokio::select! {
            _ = app.shutdown.cancelled() => return,
            _ = app.store.compaction_due() => {}
        }
        // A stop does not wait for the copy: it is abandoned (the store's shutdown stops it), and
        // the next start removes its file.
        let compacted = tokio::select! {
            _ = app.shutdown.cancelled() => return,
            compacted = app.store.compact() => compacted,
        };
        match compacted {
            Ok(_) | Err(store::StoreError::Compacting) => {}
            Err(e) => tracing::error!(error = %e, "automatic compaction failed"),
        }
    }
}

/// Samples `app` now, before anything is served (so the admin API never finds the ring empty),
/// then every [`stats::INTERVAL`] until the relay stops.
fn sample_every_interval(app: Arc<AppState>) -> impl Future<Output = ()> {
    app.stats.sample(&app.fanout, &app.limiter);
    sample_after_first(app)
}

async fn sample_after_first(app: Arc<AppState>) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + stats::INTERVAL, stats::INTERVAL);
    loop {
        tokio::select! {
            _ = ticks.tick() => app.stats.sample(&app.fanout, &app.limiter),
            () = app.shutdown.cancelled() => return,
        }
    }
}

/// Deletes expired (NIP-40) events every `storage.expiration_sweep_secs`.
async fn sweep_expired(app: Arc<AppState>) {
    let period = Duration::from_secs(app.config.storage.expiration_sweep_secs);
    loop {
        tokio::select! {
            _ = app.shutdown.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        match app.store.sweep_expired(Timestamp::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "expired events swept"),
            Err(e) => tracing::error!(error = %e, "expiration sweep failed"),
        }
    }
}

/// The start-up line that says who may publish and read.
fn access_line(app: &AppState) -> String {
    use crate::config::AccessMode;
    let members = app.moderation.member_count();
    match app.config.access.mode {
        AccessMode::Public if app.moderation.restricted_writes() => {
            format!("access.mode = public with a member list: only its {members} members publish, anyone reads")
        }
        AccessMode::Public => "access.mode = public: anyone publishes and reads".into(),
        AccessMode::MembersWrite => format!("access.mode = members-write: {members} members publish, anyone reads"),
        AccessMode::MembersOnly => {
            format!("access.mode = members-only: {members} members publish and read (after NIP-42 AUTH)")
        }
    }
}
