//! The media records' types and the contract of whoever holds them: the leaf of `store::media`.
//!
//! Owns [`BlobRecord`], [`Removed`] and [`MediaBackend`].

use serde::{Deserialize, Serialize};

use crate::protocol::PubKey;
use crate::store::error::StoreError;

/// One key's upload of one blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRecord {
    /// The blob's SHA-256, lowercase hex.
    pub sha256: String,
    /// Who uploaded it.
    pub owner: PubKey,
    /// Its size in bytes.
    pub size: u64,
    /// Its MIME type as uploaded.
    #[serde(rename = "type")]
    pub media_type: String,
    /// When it was uploaded (Unix seconds).
    pub uploaded: u64,
}

/// What [`super::MediaRecords::remove`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The key owned the blob (its record is gone now).
    pub was_owner: bool,
    /// Keys that still own it; 0 = its bytes may go.
    pub owners_left: usize,
}

/// Whoever holds the records: each method blocks until it is answered (and, for a write, until
/// it is durable).
pub(crate) trait MediaBackend: Send + Sync {
    /// Bytes of all blobs with an owner, each counted once.
    fn total_bytes(&self) -> Result<u64, StoreError>;
    /// Records `record`; true when the key did not own the blob before.
    fn add(&self, hash: [u8; 32], record: &BlobRecord) -> Result<bool, StoreError>;
    /// Removes `owner`'s record of the blob (every owner's with `None`).
    fn remove(&self, hash: [u8; 32], owner: Option<PubKey>) -> Result<Removed, StoreError>;
    /// Takes the blob's hold: what the guard's drop gives back.
    fn hold(&self, hash: [u8; 32]) -> Result<Box<dyn Send>, StoreError>;
    /// Every key's record of the blob, oldest upload first.
    fn owners_of(&self, hash: &[u8; 32]) -> Result<Vec<BlobRecord>, StoreError>;
    /// `owner`'s blobs, newest upload first (ties by hash).
    fn of_owner(&self, owner: &PubKey) -> Result<Vec<BlobRecord>, StoreError>;
    /// Every record, by blob hash then owner, from just after `after`, at most `limit` blobs'.
    fn page(&self, after: Option<[u8; 32]>, limit: usize) -> Result<Vec<BlobRecord>, StoreError>;
    /// Bytes and blobs per owner (a blob two keys uploaded counts for both), by owner.
    fn per_owner(&self) -> Result<Vec<(PubKey, u64, u64)>, StoreError>;
    /// Every blob hash with a record, each once, in order.
    fn hashes(&self) -> Result<Vec<[u8; 32]>, StoreError>;
}
