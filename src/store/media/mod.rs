//! The media server's records in the store: which key uploaded which blob, its size, type and
//! date (the blobs' bytes are `crate::blobs`'s: files beside the store, or objects in a bucket).
//!
//! Owns [`MediaRecords`]; its types ([`BlobRecord`], [`Removed`]) and `MediaBackend`, the
//! contract of whoever holds the records, are `record`'s:
//!
//! - a write ([`MediaRecords::add`], [`MediaRecords::remove`]) is durable when it returns; a
//!   key's record written again replaces its old one; a blob counts toward the total once,
//!   however many keys uploaded it;
//! - a blob's owners come oldest upload first, an owner's blobs newest first (ties by hash), a
//!   page by hash then owner;
//! - [`MediaRecords::hold`] keeps every other holder of the same blob waiting until it is
//!   dropped, so a blob's first owner and its last are decided once.
//!
//! Two hold them: this node's own sled database (`local`: the embedded store's, and a
//! PostgreSQL node's whose blobs are on its own disk), and the PostgreSQL database every node
//! shares (`store::postgres::media`, when the blobs are in a bucket every node shares). The
//! shared one's reads wait for the database on the calling thread, as the store's plain reads do.

pub(crate) mod local;
mod record;

use std::sync::Arc;

pub(crate) use record::MediaBackend;
pub use record::{BlobRecord, Removed};

use super::error::StoreError;
use crate::protocol::PubKey;

/// The media records of one store; cheap to clone.
#[derive(Clone)]
pub struct MediaRecords {
    backend: Arc<dyn MediaBackend>,
    /// True when every node reads and writes these same records.
    shared: bool,
}

/// A blob's hold ([`MediaRecords::hold`]): given back when dropped.
pub struct Hold {
    _held: Box<dyn Send>,
}

impl MediaRecords {
    /// Records held by `backend`; `shared` when every node reads the same ones.
    pub(crate) fn new(backend: Arc<dyn MediaBackend>, shared: bool) -> MediaRecords {
        MediaRecords { backend, shared }
    }

    /// The records of the sled database `db` (this node's own).
    pub(crate) fn local(
        db: &sled::Db,
        durable: Option<Arc<super::format::durable::Durable>>,
    ) -> Result<MediaRecords, StoreError> {
        Ok(MediaRecords::new(Arc::new(local::LocalRecords::open(db, durable)?), false))
    }

    /// Whether every node reads and writes these records (the shared database's).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Bytes of all blobs with an owner, each counted once.
    pub fn total_bytes(&self) -> Result<u64, StoreError> {
        self.backend.total_bytes()
    }

    /// Records `record` durably; true when the key did not own the blob before.
    pub async fn add(&self, hash: [u8; 32], record: BlobRecord) -> Result<bool, StoreError> {
        let backend = self.backend.clone();
        off_reactor(move || backend.add(hash, &record)).await
    }

    /// Removes `owner`'s record of the blob durably (every owner's with `None`).
    pub async fn remove(&self, hash: [u8; 32], owner: Option<PubKey>) -> Result<Removed, StoreError> {
        let backend = self.backend.clone();
        off_reactor(move || backend.remove(hash, owner)).await
    }

    /// Waits (off the async workers) until no one else, on this node or another, holds the
    /// blob, and holds it until the [`Hold`] is dropped.
    pub async fn hold(&self, hash: [u8; 32]) -> Result<Hold, StoreError> {
        let backend = self.backend.clone();
        off_reactor(move || backend.hold(hash)).await.map(|held| Hold { _held: held })
    }

    /// Every key's record of the blob, oldest upload first.
    pub fn owners_of(&self, hash: &[u8; 32]) -> Result<Vec<BlobRecord>, StoreError> {
        self.backend.owners_of(hash)
    }

    /// `owner`'s blobs, newest upload first (ties by hash).
    pub fn of_owner(&self, owner: &PubKey) -> Result<Vec<BlobRecord>, StoreError> {
        self.backend.of_owner(owner)
    }

    /// Every record, by blob hash then owner, from just after `after` (a hash), at most `limit`
    /// blobs' worth.
    pub fn page(&self, after: Option<[u8; 32]>, limit: usize) -> Result<Vec<BlobRecord>, StoreError> {
        self.backend.page(after, limit)
    }

    /// Bytes and blobs per owner (a blob two keys uploaded counts for both).
    pub fn per_owner(&self) -> Result<Vec<(PubKey, u64, u64)>, StoreError> {
        self.backend.per_owner()
    }

    /// Every blob hash with a record, each once.
    pub fn hashes(&self) -> Result<Vec<[u8; 32]>, StoreError> {
        self.backend.hashes()
    }
}

/// Runs blocking record work on the blocking pool.
async fn off_reactor<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| StoreError::Task(e.to_string()))?
}
