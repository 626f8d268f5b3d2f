//! Operations on a data directory while no relay runs: `hearth export`, `hearth import`,
//! `hearth compact`, `hearth check` and `hearth migrate`.
//!
//! Owns opening the data directory the relay's configuration names (refusing, exit 2, while a
//! running relay holds it, without waiting for ever) and each command's output and exit code.
//! The work itself is the store's ([`crate::store::Store::export`]) and the publish path's
//! rules (`ingest::settle`), so an import decides what the relay would have decided.

mod export;
mod import;
mod migrate;

pub use export::export;
pub(crate) use import::import_into;
pub use import::{ImportSummary, import};
pub use migrate::{Migrated, migrate};

use std::sync::Arc;

use crate::app::AppState;
use crate::config::Config;
use crate::limiter::SystemClock;
use crate::store::StoreError;
use crate::{Relay, RunError};

/// Exit code: done.
pub const OK: u8 = 0;
/// Exit code: the data directory is in use by a relay or missing, or an argument, the input or
/// the configuration is unusable.
pub const UNUSABLE: u8 = 2;
/// Exit code: some input lines were invalid (the rest was imported).
pub const INVALID: u8 = 4;
/// Exit code: the operation failed.
pub const FAILED: u8 = 1;

/// Why an offline operation stopped.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The data directory does not exist (nothing to export).
    #[error("data directory {} does not exist", .0.display())]
    Missing(std::path::PathBuf),
    /// Opening or using the store failed (including: in use by a running relay).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the input or writing the output failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The `--filter` argument is not a NIP-01 filter.
    #[error("--filter: {0}")]
    Filter(String),
}

impl OfflineError {
    /// The exit code that tells this failure apart.
    pub fn exit_code(&self) -> u8 {
        match self {
            OfflineError::Store(StoreError::InUse { .. }) | OfflineError::Missing(_) | OfflineError::Filter(_) => {
                UNUSABLE
            }
            _ => FAILED,
        }
    }
}

impl From<RunError> for OfflineError {
    fn from(e: RunError) -> OfflineError {
        match e {
            RunError::Store(e) => OfflineError::Store(e),
            RunError::Io(e) => OfflineError::Io(e),
            RunError::DataDir { path, source } => OfflineError::Store(StoreError::Open { path, source }),
            RunError::Config(e) => OfflineError::Io(std::io::Error::other(e.to_string())),
        }
    }
}

/// Rewrites the configured data directory's event log without the space of replaced, deleted
/// and expired events ([`crate::store::compact`]).
pub async fn compact(config: Config) -> Result<crate::store::Compacted, OfflineError> {
    let dir = existing(&config)?;
    Ok(crate::store::compact(&dir, config.storage.cache_capacity_mb).await?)
}

/// Audits the configured data directory ([`crate::store::check::check`]); with `repair`, mends what it
/// found and checks again ([`crate::store::check::repair`]).
pub async fn check(config: Config, repair: bool) -> Result<crate::store::check::Repaired, OfflineError> {
    let dir = existing(&config)?;
    let cache = config.storage.cache_capacity_mb;
    if repair {
        return Ok(crate::store::check::repair(&dir, cache).await?);
    }
    let found = tokio::task::spawn_blocking(move || crate::store::check::check(&dir, cache))
        .await
        .map_err(|e| OfflineError::Store(StoreError::Task(e.to_string())))??;
    Ok(crate::store::check::Repaired { after: found.clone(), found })
}

/// The relay's shared state over the configured data directory, for an offline command: the
/// store, and the moderation state saved in it.
fn open(config: Config, create: bool) -> Result<Arc<AppState>, OfflineError> {
    if !create {
        existing(&config)?;
    }
    Ok(Relay::open(config, Arc::new(SystemClock::default()))?.app())
}

/// The configured data directory, which must exist (nothing to read otherwise).
fn existing(config: &Config) -> Result<std::path::PathBuf, OfflineError> {
    let dir = &config.storage.data_dir;
    if dir.is_dir() { Ok(dir.clone()) } else { Err(OfflineError::Missing(dir.clone())) }
}
