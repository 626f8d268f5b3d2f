//! hearth: a self-contained Nostr relay.
//!
//! ```text
//! client ─ws───► ws::conn ──┐
//! client ─HTTP─► server ────┴─► protocol (parse, verify) ─► ingest ─► store (sled) ─► fanout ─► ws subscriptions
//! REQ:   ws::conn ─► store.query ─► EVENT… EOSE ─► then live events from fanout
//! ```
//!
//! [`run`] takes a bound listener and a shutdown future: the caller binds, the library serves.

pub mod app;
pub mod config;
pub mod fanout;
pub mod ingest;
pub mod metrics;
pub mod nip11;
pub mod protocol;
pub mod server;
pub mod store;
pub mod ws;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::AppState;
use crate::config::Config;
use crate::fanout::Fanout;
use crate::protocol::Timestamp;
use crate::store::{Store, StoreError};

/// Why the relay could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The data directory could not be opened or flushed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves the relay on `listener` until `shutdown` resolves; then stops accepting, lets every
/// connection finish its in-flight writes, flushes the store and returns.
pub async fn run(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let addr = listener.local_addr()?;
    std::fs::create_dir_all(&config.storage.data_dir)?;
    let store = Store::open(&config.storage.data_dir, config.storage.cache_capacity_mb)?;
    metrics::install();
    let app = Arc::new(AppState {
        config,
        store,
        fanout: Arc::new(Fanout::default()),
        shutdown: CancellationToken::new(),
        tasks: TaskTracker::new(),
    });
    app.tasks.spawn(sweep_expired(app.clone()));
    tracing::info!("listening on {addr}");
    let token = app.shutdown.clone();
    let signal = async move {
        tokio::select! {
            _ = shutdown => token.cancel(),
            _ = token.cancelled() => {}
        }
    };
    warp::serve(server::routes(app.clone())).incoming(listener).graceful(signal).run().await;
    app.shutdown.cancel();
    app.tasks.close();
    app.tasks.wait().await;
    app.store.shutdown().await?;
    tracing::info!("stopped");
    Ok(())
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
