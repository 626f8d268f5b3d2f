//! What every offline command shares: opening the configured data directory (refused while a
//! relay holds it), the commands' one error and their exit codes.

use std::sync::Arc;

use crate::app::AppState;
use crate::config::Config;
use crate::limiter::SystemClock;
use crate::relay::{Relay, RunError};
use crate::store::StoreError;

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
    /// The command cannot run as asked (the text says why).
    #[error("{0}")]
    Unusable(String),
    /// A sync round failed (the peer could not be reached, refused, or broke off).
    #[error("sync: {0}")]
    Sync(String),
}

impl OfflineError {
    /// The exit code that tells this failure apart.
    pub fn exit_code(&self) -> u8 {
        match self {
            OfflineError::Store(StoreError::InUse { .. })
            | OfflineError::Missing(_)
            | OfflineError::Filter(_)
            | OfflineError::Unusable(_) => UNUSABLE,
            _ => FAILED,
        }
    }

    /// What to do instead when `command` met a data directory a running relay holds: the running
    /// relay's way of doing it, or stopping it first. Empty for any other failure.
    pub fn while_running(&self, command: &str) -> &'static str {
        if !matches!(self, OfflineError::Store(StoreError::InUse { .. })) {
            return "";
        }
        match command {
            "export" => {
                ": read it through the running relay instead, `GET /admin/v1/export` (admin.token), or stop it first"
            }
            "compact" => {
                ": ask the running relay instead, `POST /admin/v1/store/compact` (it compacts while serving), or stop it first"
            }
            "import" => {
                ": publish through the running relay instead (`hearth publish --relay ws://… < FILE`), or stop it first"
            }
            "backup" => ": back it up through the running relay with `hearth backup DIR --relay http://HOST:PORT`",
            _ => ": stop the relay first (systemctl stop hearth, or SIGTERM)",
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
            RunError::Identity(e) => OfflineError::Io(std::io::Error::other(e.to_string())),
            RunError::Media(e) => OfflineError::Io(std::io::Error::other(e.to_string())),
        }
    }
}

/// The relay's shared state over the configured data directory, for an offline command: the
/// store, and the moderation state saved in it.
pub(super) fn open(config: Config, create: bool) -> Result<Arc<AppState>, OfflineError> {
    if !create {
        existing(&config)?;
    }
    Ok(Relay::open(config, Arc::new(SystemClock::default()))?.app())
}

/// The configured data directory, which must exist (nothing to read otherwise).
pub(super) fn existing(config: &Config) -> Result<std::path::PathBuf, OfflineError> {
    let dir = &config.storage.data_dir;
    if dir.is_dir() { Ok(dir.clone()) } else { Err(OfflineError::Missing(dir.clone())) }
}
