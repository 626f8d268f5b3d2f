//! The store's one error: every failure of a read, a write or an open, as its callers see it.
//!
//! Owns [`StoreError`] and the mapping of each format's own error into it. Clients only ever see
//! a generic `error:` for these; operators see the message in the log and from the offline
//! commands.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::FormatError;
use super::format::keys::SCHEMA_VERSION;
use super::format::log::LogError;
use super::format::record::RecordError;
use super::format::segment::SegmentError;

/// Store failures. Clients only ever see a generic `error:` for these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled reported an I/O or corruption error.
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    /// Another process (a running relay) holds the data directory.
    #[error("data directory {} is in use by a running hearth", path.display())]
    InUse {
        /// The data directory.
        path: std::path::PathBuf,
    },
    /// The data directory holds another layout version.
    #[error(
        "storage: data directory has schema version {found}, this hearth reads {SCHEMA_VERSION}: run `hearth migrate` to carry its events over"
    )]
    Schema {
        /// The version found on disk.
        found: u8,
    },
    /// A stored record could not be decoded.
    #[error("storage: corrupt record: {0}")]
    Corrupt(String),
    /// A stored event record could not be decoded.
    #[error("storage: corrupt {0}")]
    Record(#[from] RecordError),
    /// The event log failed or holds a damaged frame.
    #[error("storage: {0}")]
    Log(#[from] LogError),
    /// A file of the data directory could not be opened or synced.
    #[error("storage: {0}")]
    Io(#[from] std::io::Error),
    /// The write group this write belonged to did not reach the disk (shared by its writes).
    #[error(transparent)]
    Group(Arc<StoreError>),
    /// The writer has stopped (shutdown or a fatal error).
    #[error("storage: writer is not running")]
    Closed,
    /// A blocking read task panicked or was cancelled.
    #[error("storage: read task failed: {0}")]
    Task(String),
    /// The data directory's files could not be opened or created.
    #[error("storage: data directory {}: cannot open it: {source}", path.display())]
    Open {
        /// The data directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A migration wrote the old layout's events out and has not imported them yet.
    #[error("storage: a migration of {} is unfinished: run `hearth migrate` again", path.display())]
    Migrating {
        /// The data directory.
        path: PathBuf,
    },
    /// An index segment could not be written, or is damaged.
    #[error("storage: {0}")]
    Segment(#[from] SegmentError),
    /// The event log has reached the largest size the index can address (256 TiB).
    #[error("storage: the event log is full")]
    LogFull,
    /// A compaction was asked for while one runs.
    #[error("storage: a compaction is already running")]
    Compacting,
    /// The remap that a cut-off compaction left could not go on (the relay retries it while it
    /// serves; an offline command stops).
    #[error("storage: the rewrite of the catalogue that a cut-off compaction left failed: {0}")]
    Remap(String),
    /// A filter with `search` on a store opened without its search index (`storage.search`
    /// off).
    #[error("search is off on this relay (NIP-50)")]
    SearchOff,
    /// A filter with `search` while the index is rebuilt or caught up.
    #[error("the search index is being rebuilt ({events} events so far); try again shortly")]
    SearchBuilding {
        /// Events indexed so far.
        events: u64,
    },
    /// The search index failed.
    #[error("the search index failed: {0}")]
    Search(String),
    /// The PostgreSQL backend failed (`storage.backend = "postgres"`).
    #[error("storage: {0}")]
    Postgres(String),
    /// The PostgreSQL server cannot be reached now; the store reconnects by itself.
    #[error("storage: the database is unreachable ({0}); try again shortly")]
    Unavailable(String),
}

impl StoreError {
    /// An I/O failure while opening `dir`, named with the directory (a bare `Permission denied`
    /// says nothing of where).
    pub(crate) fn opening(self, dir: &Path) -> StoreError {
        let path = dir.to_path_buf();
        match self {
            StoreError::Io(source)
            | StoreError::Sled(sled::Error::Io(source))
            | StoreError::Log(LogError::Io(source)) => StoreError::Open { path, source },
            other => other,
        }
    }
}

impl From<FormatError> for StoreError {
    fn from(e: FormatError) -> StoreError {
        match e {
            FormatError::Damaged(what) => StoreError::Corrupt(what),
            FormatError::Io(e) => StoreError::Io(e),
        }
    }
}
