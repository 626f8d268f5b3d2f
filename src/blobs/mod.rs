//! The media server's blobs, on disk or in a bucket, and who owns them: one component every
//! path goes through.
//!
//! Owns where the bytes are (`media.store`): the files under `<data_dir>/media/` (each blob at
//! `<aa>/<sha256>`, content-addressed), or one object per blob in an S3-compatible bucket every
//! node shares ([`Bucket`]); and the order of every change to them beside the store's records
//! ([`MediaRecords`]: with a bucket on a shared store, the records every node reads):
//!
//! - an upload streams into `media/tmp/` while it is hashed (never held whole in memory), is
//!   fsynced, then placed (renamed into place, its directory fsynced; or put in the bucket), and
//!   only then recorded in the store, so a recorded blob's bytes are always whole; a kill at any
//!   point leaves at most a temporary file or an unrecorded blob, never served (on disk removed
//!   at the next start; in a bucket listed by `hearth check` and removed by `--repair`, as another
//!   node may be mid-upload);
//! - a blob's bytes are removed when its last owner's record is;
//! - a blob's changes are one at a time on every node that shares the records (the records'
//!   hold), and the put into a bucket happens before the hold, made good under it;
//! - the total of all blobs is bounded (`media.max_total_bytes`).
//!
//! It also keeps which write authorizations (kind 24242) were used, so each is good for one
//! change. It knows nothing of HTTP: the transport (`media`) and the admin API call it.

mod bucket;
mod check;
mod disk;
mod read;
mod receive;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use bucket::Bucket;
pub use check::{Damage, check, repair};
use disk::TMP_DIR;
pub use disk::{BlobError, MEDIA_DIR};
pub use read::ByteStream;
pub use receive::Received;

use crate::config::{MediaConfig, MediaStore};
use crate::protocol::blossom::BlobHash;
use crate::protocol::{EventId, PubKey, Timestamp};
use crate::store::Store;
use crate::store::media::{BlobRecord, MediaRecords, Removed};

/// Where the blobs' bytes are.
enum Place {
    /// Files under the media folder.
    Disk,
    /// Objects in a bucket.
    Bucket(Bucket),
}

/// The blobs of one relay.
pub struct Blobs {
    root: PathBuf,
    place: Place,
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
    /// The blobs of the data directory `data_dir` (a temporary folder without one) as `config`
    /// places them, with unfinished uploads removed, and on disk the blobs no record names.
    pub fn open(data_dir: Option<&Path>, store: &Store, config: &MediaConfig) -> Result<Blobs, BlobError> {
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
        let place = match config.store {
            MediaStore::Disk => Place::Disk,
            MediaStore::S3 => {
                let bucket = Bucket::new(config)?;
                tracing::info!(bucket = bucket.name(), "media: blobs are objects in this bucket");
                Place::Bucket(bucket)
            }
        };
        let records = store.blob_records(matches!(place, Place::Bucket(_))).clone();
        if matches!(place, Place::Disk) {
            let orphans = check::orphans(&root, &records)?;
            for path in &orphans {
                std::fs::remove_file(path)?;
            }
            if !orphans.is_empty() {
                tracing::info!(count = orphans.len(), "removed blobs no upload finished recording");
            }
        }
        let used = moka::sync::Cache::builder().max_capacity(1_000_000).expire_after(UntilExpiration).build();
        let max_total = config.max_total_bytes;
        let changing = tokio::sync::Mutex::new(());
        Ok(Blobs { root, place, records, max_total, changing, used, _temporary: temporary })
    }

    /// `media.store`: where the bytes are.
    pub fn store(&self) -> MediaStore {
        match self.place {
            Place::Disk => MediaStore::Disk,
            Place::Bucket(_) => MediaStore::S3,
        }
    }

    /// The bucket, when the bytes are in one.
    pub fn bucket(&self) -> Option<&Bucket> {
        match &self.place {
            Place::Disk => None,
            Place::Bucket(bucket) => Some(bucket),
        }
    }

    /// Where `hash`'s bytes are on disk (with `media.store = "disk"`).
    pub fn path(&self, hash: &BlobHash) -> PathBuf {
        let hex = hash.to_hex();
        self.root.join(&hex[..2]).join(hex)
    }

    /// The store's records of the blobs.
    pub fn records(&self) -> &MediaRecords {
        &self.records
    }

    /// Bytes of all blobs, each once.
    pub fn used_bytes(&self) -> Result<u64, BlobError> {
        Ok(self.records.total_bytes()?)
    }

    /// Whether `size` more bytes fit under `media.max_total_bytes`.
    pub fn fits(&self, size: u64) -> Result<bool, BlobError> {
        Ok(self.used_bytes()?.saturating_add(size) <= self.max_total)
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

    /// Gives a write authorization's use back (a call that changed nothing and was told to try
    /// again).
    pub fn give_back(&self, id: EventId) {
        self.used.invalidate(&id);
    }

    /// Places a received blob (renamed into place, or put in the bucket) and records `owner`'s
    /// upload of it: `(record, new)`, `new` when the relay did not hold the blob before.
    /// Durable when it returns.
    pub async fn commit(
        &self,
        received: Received,
        owner: PubKey,
        media_type: &str,
        now: Timestamp,
    ) -> Result<(BlobRecord, bool), BlobError> {
        let hash = received.hash;
        let size = received.size;
        if let Place::Bucket(bucket) = &self.place
            && self.records.owners_of(&hash.0)?.is_empty()
        {
            // The slow put before this node's turn and the blob's hold, so that other uploads
            // and other nodes' changes of the blob need not wait for it; made good below.
            if !self.fits(size)? {
                return Err(BlobError::Full);
            }
            bucket.put(&hash, received.path(), size).await?;
        }
        let _one = self.changing.lock().await;
        let _held = self.records.hold(hash.0).await?;
        let owners = self.records.owners_of(&hash.0)?;
        let new = owners.is_empty();
        if new && !self.fits(size)? {
            // Filled up since the put: the object no record names goes again (the blob is held).
            if let Place::Bucket(bucket) = &self.place
                && let Err(e) = bucket.delete(&hash).await
            {
                tracing::warn!(blob = %hash, error = %e, "an object no record names is left; hearth check --repair removes it");
            }
            return Err(BlobError::Full);
        }
        match &self.place {
            Place::Disk => received.place(&self.path(&hash)).await?,
            // Another node may have removed the blob's last record, and its object, since the
            // put: put it again. A blob with an owner is in the bucket already.
            Place::Bucket(bucket) if new && bucket.size(&hash).await? != Some(size) => {
                bucket.put(&hash, received.path(), size).await?;
            }
            Place::Bucket(_) => {}
        }
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
    /// owner is left. A bucket that cannot delete the object then leaves it for `hearth check
    /// --repair` (logged): the records, which every read goes by, are gone either way.
    pub async fn remove(&self, hash: &BlobHash, owner: Option<PubKey>) -> Result<Removed, BlobError> {
        let _one = self.changing.lock().await;
        let _held = self.records.hold(hash.0).await?;
        let removed = self.records.remove(hash.0, owner).await?;
        if removed.was_owner && removed.owners_left == 0 {
            match &self.place {
                Place::Disk => match tokio::fs::remove_file(self.path(hash)).await {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(BlobError::Io(e)),
                    _ => {}
                },
                Place::Bucket(bucket) => {
                    if let Err(e) = bucket.delete(hash).await {
                        tracing::warn!(blob = %hash, error = %e, "a deleted blob's object is left in the bucket; hearth check --repair removes it");
                    }
                }
            }
        }
        Ok(removed)
    }

    /// The bytes `start..start + length` of `hash`'s blob, streamed; `None` when its file or
    /// object is missing (a recorded blob's never is, unless something outside hearth removed
    /// it).
    pub async fn read(&self, hash: &BlobHash, start: u64, length: u64) -> Result<Option<ByteStream>, BlobError> {
        match &self.place {
            Place::Disk => read::file(&self.path(hash), start, length).await,
            // An empty range is not a request S3 takes: the object's presence answers.
            Place::Bucket(bucket) if length == 0 => {
                Ok(bucket.size(hash).await?.map(|_| Box::pin(futures_util::stream::empty()) as ByteStream))
            }
            Place::Bucket(bucket) => bucket.read(hash, start, length).await,
        }
    }

    /// The `size` bytes of `hash`'s blob as a blocking reader, for code on a blocking thread of
    /// the relay's runtime (a backup, an export).
    pub fn reader(&self, hash: &BlobHash, size: u64) -> Result<Box<dyn std::io::Read + Send>, BlobError> {
        match &self.place {
            Place::Disk => Ok(Box::new(std::fs::File::open(self.path(hash))?)),
            Place::Bucket(bucket) => {
                let runtime = tokio::runtime::Handle::try_current()
                    .map_err(|e| BlobError::Io(std::io::Error::other(e.to_string())))?;
                let bytes = runtime.block_on(bucket.read(hash, 0, size))?;
                let bytes = bytes.ok_or_else(|| BlobError::Io(std::io::ErrorKind::NotFound.into()))?;
                Ok(read::blocking(bytes, runtime))
            }
        }
    }

    /// Reads every recorded blob's object back and lists the unrecorded objects an hour old
    /// (`hearth check` with `media.store = "s3"`; nothing on disk): `(damage, unrecorded)`.
    pub async fn check_bucket(&self) -> Result<(Vec<Damage>, Vec<String>), BlobError> {
        match &self.place {
            Place::Disk => Ok((Vec::new(), Vec::new())),
            Place::Bucket(bucket) => check::bucket(bucket, &self.records).await,
        }
    }

    /// Moves the damaged objects to `damaged/<sha256>` and deletes the unrecorded ones; the
    /// hashes whose records the caller should drop.
    pub async fn repair_bucket(&self, damage: &[Damage], unrecorded: &[String]) -> Result<Vec<BlobHash>, BlobError> {
        match &self.place {
            Place::Disk => Ok(Vec::new()),
            Place::Bucket(bucket) => check::repair_bucket(bucket, damage, unrecorded).await,
        }
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
