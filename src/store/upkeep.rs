//! The Store API's upkeep half: settings and audit documents, the media records, what the store
//! holds (stats), compaction, and the stop — each sent to the backend the store runs on.
//!
//! Owns nothing but these methods of [`Store`] (the contract is `mod.rs`'s doc comment).

use super::{Backend, CompactPolicy, Compacted, Store, StoreError, StoreStats, dispatch, media};

impl Store {
    /// A named settings document, if saved.
    pub fn load_setting(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        dispatch!(&self.backend, b => b.load_setting(name))
    }

    /// Every settings document, by name (`hearth migrate --to postgres`).
    pub fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        dispatch!(&self.backend, b => b.settings())
    }

    /// Saves a named settings document durably.
    pub async fn save_setting(&self, name: &str, value: Vec<u8>) -> Result<(), StoreError> {
        dispatch!(&self.backend, b => b.save_setting(name, value).await)
    }

    /// Appends one entry to the audit log durably.
    pub async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        dispatch!(&self.backend, b => b.append_audit(entry).await)
    }

    /// The media server's records of blobs on this node's disk.
    pub fn media(&self) -> &media::MediaRecords {
        dispatch!(&self.backend, b => b.media())
    }

    /// The records of blobs whose bytes every node reaches (`shared_bytes`: one bucket) or only
    /// this one (its disk): on a store several nodes share, the shared records for the former;
    /// else this node's own ([`Store::media`]).
    pub fn blob_records(&self, shared_bytes: bool) -> &media::MediaRecords {
        let shared = if shared_bytes { dispatch!(&self.backend, b => b.shared_media()) } else { None };
        shared.unwrap_or_else(|| self.media())
    }

    /// The newest `limit` audit entries, newest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        dispatch!(&self.backend, b => b.audit_log(limit))
    }

    /// What the store holds and how much of its log is dead space.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        dispatch!(&self.backend, b => b.stats())
    }

    /// [`Store::stats`] off the async reactor.
    pub async fn stats_async(&self) -> Result<StoreStats, StoreError> {
        self.off_reactor(|s| s.stats()).await
    }

    /// Compacts the event log now, while reads and writes go on; returns when it is done.
    /// [`StoreError::Compacting`] while another runs. PostgreSQL: a `VACUUM (ANALYZE)`.
    pub async fn compact(&self) -> Result<Compacted, StoreError> {
        dispatch!(&self.backend, b => b.compact().await)
    }

    /// Starts a compaction in the background (PostgreSQL: a vacuum); false when one already
    /// runs.
    pub fn start_compaction(&self) -> bool {
        dispatch!(&self.backend, b => b.start_compaction())
    }

    /// True while a compaction runs (its background remap included).
    pub fn is_compacting(&self) -> bool {
        dispatch!(&self.backend, b => b.is_compacting())
    }

    /// Resolves once no compaction runs, a remap resumed at open included;
    /// [`StoreError::Remap`] once a step of that remap fails (a full disk).
    pub(crate) async fn until_compaction_ends(&self) -> Result<(), StoreError> {
        dispatch!(&self.backend, b => b.until_compaction_ends().await)
    }

    /// Sets when the store compacts on its own, and how fast.
    pub fn set_compaction_policy(&self, policy: CompactPolicy) {
        dispatch!(&self.backend, b => b.set_compaction_policy(policy))
    }

    /// Resolves when the log is due for a compaction under the policy (checked after each
    /// write); never on a backend that compacts on its own.
    pub async fn compaction_due(&self) {
        dispatch!(&self.backend, b => b.compaction_due().await)
    }

    /// Finishes queued writes, flushes and stops the writer. Later `put`s fail with `Closed`.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        dispatch!(&self.backend, b => b.shutdown().await)
    }

    /// [`Store::shutdown`], then, off the async reactor, a checkpoint of the catalogue: once this
    /// is the last handle on the store, sled is opened once more so that the next start reads
    /// nothing back (see `open::checkpoint`).
    pub async fn close(self, cache_capacity_mb: u64) -> Result<(), StoreError> {
        self.shutdown().await?;
        let backend = self.backend;
        tokio::task::spawn_blocking(move || dispatch!(backend, b => b.checkpoint(cache_capacity_mb)))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// `hearth check` of a PostgreSQL store: the events read and what is wrong with them; None
    /// for the embedded store (its check reads its files: `check::check`).
    pub async fn check_database(&self) -> Result<Option<(u64, Vec<super::Flaw>)>, StoreError> {
        dispatch!(&self.backend, b => b.check_database().await)
    }
}
