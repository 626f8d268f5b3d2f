//! What the writer thread, a compaction's steps and the merge thread share.
//!
//! Owns [`Shared`]: the database and its event tree, the view readers see, the data directory,
//! the sync that makes a flush durable, and the compaction's [`Control`]. Each part of the write
//! side gets it as a value (a clone of handles), never by importing the part that started it, so
//! the writer, the compaction and the merge thread depend on it and not on each other.

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};

use sled::Tree;

use super::control::Control;
use crate::search::{Feed, Position};
use crate::store::db::flush_durably;
use crate::store::embedded::view::View;
use crate::store::error::StoreError;
use crate::store::format::durable::Durable;
use crate::store::format::log::Log;

/// The handles of one open store that its writing threads share; cheap to clone.
#[derive(Clone)]
pub(crate) struct Shared {
    pub db: sled::Db,
    pub tree: Tree,
    /// The index and the log the records go to.
    pub view: Arc<RwLock<View>>,
    /// Syncs what sled flushed (`None` for a temporary store).
    pub durable: Option<Arc<Durable>>,
    /// The data directory (`None` for a temporary store).
    pub dir: Option<PathBuf>,
    /// When a compaction is due.
    pub compaction: Arc<Control>,
    /// The search index's feed, when `storage.search` is on: each group's changes go to it.
    pub search: Option<Arc<Feed>>,
}

impl Shared {
    /// sled's flush, then the data sync that makes it durable.
    pub(crate) fn flush(&self) -> Result<(), StoreError> {
        flush_durably(&self.db, self.durable.as_deref())
    }

    /// The log the next group's frames go to.
    pub(crate) fn log(&self) -> Arc<Log> {
        self.view.read().unwrap_or_else(PoisonError::into_inner).log.clone()
    }

    /// Where the store is, as the search index records it.
    pub(crate) fn position(&self) -> Position {
        let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
        Position { generation: view.generation, end: view.log.end() }
    }

    /// The view, for the writer's changes; readers wait meanwhile.
    pub(crate) fn view_mut(&self) -> RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(PoisonError::into_inner)
    }
}
