//! This node's media records in its own sled database: the embedded store's, and a PostgreSQL
//! node's whose blobs are files on its own disk.
//!
//! Owns [`LocalRecords`]. Two sled trees, written together in one transaction and durable
//! before a write returns: `media_v1` keyed by blob hash then owner (the record as JSON),
//! `media_owners_v1` keyed by owner then blob hash (the same record), so both a blob's owners
//! and an owner's blobs are one prefix scan. A blob counts toward the total once, however many
//! keys uploaded it; the total is summed at open and kept as records change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sled::Transactional;
use sled::transaction::ConflictableTransactionError;

use super::record::{BlobRecord, MediaBackend, Removed};
use crate::protocol::PubKey;
use crate::store::db::flush_durably;
use crate::store::error::StoreError;
use crate::store::format::durable::Durable;

/// Blob records: hash (32 bytes) then owner (32 bytes).
pub const MEDIA_TREE: &str = "media_v1";
/// The same records keyed by owner then hash.
pub const MEDIA_OWNERS_TREE: &str = "media_owners_v1";

/// The media records in a sled database.
pub(crate) struct LocalRecords {
    blobs: sled::Tree,
    owners: sled::Tree,
    db: sled::Db,
    durable: Option<Arc<Durable>>,
    total: AtomicU64,
    /// Record changes one at a time, so a blob's first owner and its last are decided once.
    writing: Mutex<()>,
}

fn key(first: &[u8; 32], second: &[u8; 32]) -> [u8; 64] {
    let mut k = [0u8; 64];
    k[..32].copy_from_slice(first);
    k[32..].copy_from_slice(second);
    k
}

fn decode(bytes: &[u8]) -> Result<BlobRecord, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(format!("media record: {e}")))
}

impl LocalRecords {
    /// The records of `db`, the total summed.
    pub(crate) fn open(db: &sled::Db, durable: Option<Arc<Durable>>) -> Result<LocalRecords, StoreError> {
        let blobs = db.open_tree(MEDIA_TREE)?;
        let owners = db.open_tree(MEDIA_OWNERS_TREE)?;
        let mut total = 0u64;
        let mut last: Option<[u8; 32]> = None;
        for item in blobs.iter() {
            let (k, v) = item?;
            let Some(hash) = k.get(..32).and_then(|h| <[u8; 32]>::try_from(h).ok()) else { continue };
            if last != Some(hash) {
                total = total.saturating_add(decode(&v)?.size);
                last = Some(hash);
            }
        }
        Ok(LocalRecords {
            blobs,
            owners,
            db: db.clone(),
            durable,
            total: AtomicU64::new(total),
            writing: Mutex::default(),
        })
    }
}

impl MediaBackend for LocalRecords {
    fn total_bytes(&self) -> Result<u64, StoreError> {
        Ok(self.total.load(Ordering::Relaxed))
    }

    fn add(&self, hash: [u8; 32], record: &BlobRecord) -> Result<bool, StoreError> {
        let added = {
            let _one = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
            let owner = record.owner.0;
            let value = serde_json::to_vec(record).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let first = self.blobs.scan_prefix(hash).next().is_none();
            let previous = (&self.blobs, &self.owners).transaction(|(blobs, owners)| {
                let previous = blobs.insert(key(&hash, &owner).as_slice(), value.as_slice())?;
                owners.insert(key(&owner, &hash).as_slice(), value.as_slice())?;
                Ok::<_, ConflictableTransactionError<()>>(previous)
            });
            let previous = previous.map_err(|e| StoreError::Corrupt(format!("media record: {e:?}")))?;
            if first {
                self.total.fetch_add(record.size, Ordering::Relaxed);
            }
            previous.is_none()
        };
        flush_durably(&self.db, self.durable.as_deref())?;
        Ok(added)
    }

    fn remove(&self, hash: [u8; 32], owner: Option<PubKey>) -> Result<Removed, StoreError> {
        let removed = {
            let _one = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
            let records = self.owners_of(&hash)?;
            let size = records.first().map_or(0, |r| r.size);
            let gone: Vec<PubKey> =
                records.iter().map(|r| r.owner).filter(|o| owner.is_none_or(|want| want == *o)).collect();
            let result = (&self.blobs, &self.owners).transaction(|(blobs, owners)| {
                for o in &gone {
                    blobs.remove(key(&hash, &o.0).as_slice())?;
                    owners.remove(key(&o.0, &hash).as_slice())?;
                }
                Ok::<_, ConflictableTransactionError<()>>(())
            });
            result.map_err(|e| StoreError::Corrupt(format!("media record: {e:?}")))?;
            let owners_left = records.len() - gone.len();
            if !gone.is_empty() && owners_left == 0 {
                self.total.fetch_sub(size.min(self.total.load(Ordering::Relaxed)), Ordering::Relaxed);
            }
            Removed { was_owner: !gone.is_empty(), owners_left }
        };
        flush_durably(&self.db, self.durable.as_deref())?;
        Ok(removed)
    }

    /// Nothing to take: one node's changes are already one at a time (`crate::blobs`).
    fn hold(&self, _hash: [u8; 32]) -> Result<Box<dyn Send>, StoreError> {
        Ok(Box::new(()))
    }

    /// Every key's record of the blob, oldest upload first.
    fn owners_of(&self, hash: &[u8; 32]) -> Result<Vec<BlobRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.blobs.scan_prefix(hash) {
            out.push(decode(&item?.1)?);
        }
        out.sort_by_key(|r| r.uploaded);
        Ok(out)
    }

    /// `owner`'s blobs, newest upload first (ties by hash).
    fn of_owner(&self, owner: &PubKey) -> Result<Vec<BlobRecord>, StoreError> {
        let mut out = Vec::new();
        for item in self.owners.scan_prefix(owner.0) {
            out.push(decode(&item?.1)?);
        }
        out.sort_by(|a, b| b.uploaded.cmp(&a.uploaded).then_with(|| a.sha256.cmp(&b.sha256)));
        Ok(out)
    }

    /// Every record, by blob hash then owner, from just after `after` (a hash), at most `limit`
    /// blobs' worth.
    fn page(&self, after: Option<[u8; 32]>, limit: usize) -> Result<Vec<BlobRecord>, StoreError> {
        let start = after.map_or([0u8; 64], |h| key(&h, &[0xff; 32]));
        let mut out: Vec<BlobRecord> = Vec::new();
        let mut blobs = 0;
        for item in self.blobs.range(start..) {
            let (k, v) = item?;
            if after.is_some() && k.as_ref() <= start.as_slice() {
                continue;
            }
            let record = decode(&v)?;
            if out.last().is_none_or(|last| last.sha256 != record.sha256) {
                if blobs == limit {
                    break;
                }
                blobs += 1;
            }
            out.push(record);
        }
        Ok(out)
    }

    /// Bytes and blobs per owner (a blob two keys uploaded counts for both).
    fn per_owner(&self) -> Result<Vec<(PubKey, u64, u64)>, StoreError> {
        let mut out: Vec<(PubKey, u64, u64)> = Vec::new();
        for item in self.owners.iter() {
            let record = decode(&item?.1)?;
            match out.last_mut() {
                Some((owner, bytes, blobs)) if *owner == record.owner => {
                    *bytes = bytes.saturating_add(record.size);
                    *blobs += 1;
                }
                _ => out.push((record.owner, record.size, 1)),
            }
        }
        Ok(out)
    }

    /// Every blob hash with a record, each once.
    fn hashes(&self) -> Result<Vec<[u8; 32]>, StoreError> {
        let mut out: Vec<[u8; 32]> = Vec::new();
        for item in self.blobs.iter().keys() {
            let k = item?;
            if let Some(hash) = k.get(..32).and_then(|h| <[u8; 32]>::try_from(h).ok())
                && out.last() != Some(&hash)
            {
                out.push(hash);
            }
        }
        Ok(out)
    }
}
