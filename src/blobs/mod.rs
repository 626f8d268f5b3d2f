//! The media server's blobs on disk, and who owns them: one component every path goes through.
//!
//! Owns the files under `<data_dir>/media/` (each blob at `<aa>/<sha256>`, content-addressed)
//! and the order of every change to them beside the store's records ([`MediaRecords`]):
//!
//! - an upload streams into `media/tmp/` while it is hashed (never held whole in memory), is
//!   fsynced, renamed into place (its directory fsynced), and only then recorded in the store,
//!   so a recorded blob's bytes are always whole on disk; a kill at any point leaves at most a
//!   temporary file or an unrecorded blob, both removed at the next start and never served;
//! - a blob's bytes are removed when its last owner's record is;
//! - the total of all blobs is bounded (`media.max_total_bytes`).
//!
//! It also keeps which write authorizations (kind 24242) were used, so each is good for one
//! change. It knows nothing of HTTP: the transport (`media`) and the admin API call it.

mod check;
mod disk;
mod receive;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use check::{Damage, check, repair};
use disk::TMP_DIR;
pub use disk::{BlobError, MEDIA_DIR};
pub use receive::Received;

use crate::protocol::blossom::BlobHash;
use crate::protocol::{EventId, PubKey, Timestamp};
use crate::store::Store;
use crate::store::media::{BlobRecord, MediaRecords, Removed};

/// The blobs of one relay.
pub struct Blobs {
    root: PathBuf,
    records: MediaRecords,
    max_total: u64,
    /// Commits and removals one at a time, so a blob's bytes and its records never disagree.
    changing: tokio::sync::Mutex<()>,
    /// Write authorizations used, each kept until its expiration.
    used: moka::sync::Cache<EventId, u64>,
    /// The folder a temporary store's blobs live in, removed with it.
    _temporary: Option<tempfile::TempDir>,
}

/// Keeps a used authorization until it expires.
struct UntilExpiration;

impl moka::Expiry<EventId, u64> for UntilExpiration {
    fn expire_after_create(&self, _: &EventId, expiration: &u64, _: std::time::Instant) -> Option<Duration> {
        Some(Duration::from_secs(expiration.saturating_sub(Timestamp::now().0).clamp(1, 366 * 86_400)))
    }
}

impl Blobs {
    /// The blobs of the data directory `data_dir` (a temporary folder without one), with
    /// unfinished uploads and blobs no record names removed.
    pub fn open(data_dir: Option<&Path>, store: &Store, max_total: u64) -> Result<Blobs, BlobError> {
        let (root, temporary) = match data_dir {
            Some(dir) => (dir.join(MEDIA_DIR), None),
            None => {
                let t = tempfile::tempdir()?;
                (t.path().join(MEDIA_DIR), Some(t))
            }
        };
        let tmp = root.join(TMP_DIR);
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        let records = store.media().clone();
        let orphans = check::orphans(&root, &records)?;
        for path in &orphans {
            std::fs::remove_file(path)?;
        }
        if !orphans.is_empty() {
            tracing::info!(count = orphans.len(), "removed blobs no upload finished recording");
        }
        let used = moka::sync::Cache::builder().max_capacity(1_000_000).expire_after(UntilExpiration).build();
        Ok(Blobs { root, records, max_total, changing: tokio::sync::Mutex::new(()), used, _temporary: temporary })
    }

    /// Where `hash`'s bytes are.
    pub fn path(&self, hash: &BlobHash) -> PathBuf {
        let hex = hash.to_hex();
        self.root.join(&hex[..2]).join(hex)
    }

    /// The store's records of the blobs.
    pub fn records(&self) -> &MediaRecords {
        &self.records
    }

    /// Bytes of all blobs, each once.
    pub fn used_bytes(&self) -> u64 {
        self.records.total_bytes()
    }

    /// Whether `size` more bytes fit under `media.max_total_bytes`.
    pub fn fits(&self, size: u64) -> bool {
        self.used_bytes().saturating_add(size) <= self.max_total
    }

    /// The blob's oldest record, when it has an owner (only recorded blobs are served).
    pub fn record(&self, hash: &BlobHash) -> Result<Option<BlobRecord>, BlobError> {
        Ok(self.records.owners_of(&hash.0)?.into_iter().next())
    }

    /// Takes a write authorization's one use: false when it was used before.
    pub fn first_use(&self, id: EventId, expiration: u64) -> bool {
        let fresh = std::cell::Cell::new(false);
        self.used.get_with(id, || {
            fresh.set(true);
            expiration
        });
        fresh.get()
    }

    /// Moves a received blob into place and records `owner`'s upload of it: `(record, new)`,
    /// `new` when the relay did not hold the blob before. Durable when it returns.
    pub async fn commit(
        &self,
        received: Received,
        owner: PubKey,
        media_type: &str,
        now: Timestamp,
    ) -> Result<(BlobRecord, bool), BlobError> {
        let _one = self.changing.lock().await;
        let hash = received.hash;
        let owners = self.records.owners_of(&hash.0)?;
        let new = owners.is_empty();
        if new && !self.fits(received.size) {
            return Err(BlobError::Full);
        }
        let size = received.size;
        received.place(&self.path(&hash)).await?;
        let record = BlobRecord {
            sha256: hash.to_hex(),
            owner,
            size,
            media_type: owners.first().map_or_else(|| media_type.to_string(), |r| r.media_type.clone()),
            uploaded: now.0,
        };
        match owners.into_iter().find(|r| r.owner == owner) {
            // Uploaded again by the same key: its first record stands.
            Some(first) => Ok((first, false)),
            None => {
                self.records.add(hash.0, record.clone()).await?;
                Ok((record, new))
            }
        }
    }

    /// Removes `owner`'s record of the blob (every owner's with `None`), and its bytes when no
    /// owner is left.
    pub async fn remove(&self, hash: &BlobHash, owner: Option<PubKey>) -> Result<Removed, BlobError> {
        let _one = self.changing.lock().await;
        let removed = self.records.remove(hash.0, owner).await?;
        if removed.was_owner && removed.owners_left == 0 {
            match tokio::fs::remove_file(self.path(hash)).await {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(BlobError::Io(e)),
                _ => {}
            }
        }
        Ok(removed)
    }

    /// Removes every blob `owner` uploaded (a ban): their records, and the bytes no one else owns.
    pub async fn remove_owner(&self, owner: &PubKey) -> Result<usize, BlobError> {
        let mine = self.records.of_owner(owner)?;
        for record in &mine {
            if let Some(hash) = BlobHash::from_hex(&record.sha256) {
                self.remove(&hash, Some(*owner)).await?;
            }
        }
        Ok(mine.len())
    }

    /// Streams `body` into a temporary file: at most `limit` bytes, exactly `announced` when
    /// the client said how many, hashing to `expected` when it said which. Fsynced before it
    /// returns.
    pub async fn receive<B: bytes::Buf, E: std::fmt::Display>(
        &self,
        body: impl futures_util::Stream<Item = Result<B, E>>,
        limit: u64,
        announced: Option<u64>,
        expected: Option<BlobHash>,
    ) -> Result<Received, BlobError> {
        receive::receive(&self.root.join(TMP_DIR), body, (limit, announced, expected)).await
    }
}
