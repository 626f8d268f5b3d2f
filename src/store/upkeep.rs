//! The Store API's upkeep half: settings and audit documents, the media records, what the store
//! holds (stats), compaction, and the stop — each sent to the backend the store runs on.
//!
//! Owns nothing but these methods of [`Store`] (the contract is `mod.rs`'s doc comment).

use super::{Backend, CompactPolicy, Compacted, Store, StoreError, StoreStats, media, open};

impl Store {
    /// A named settings document, if saved.
    pub fn load_setting(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.writes.load_setting(name),
            Backend::Postgres(pg) => pg.load_setting(name),
        }
    }

    /// Every settings document, by name (`hearth migrate --to postgres`).
    pub fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.writes.settings(),
            Backend::Postgres(pg) => pg.settings(),
        }
    }

    /// Saves a named settings document durably.
    pub async fn save_setting(&self, name: &str, value: Vec<u8>) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.writes.save_setting(name, value).await,
            Backend::Postgres(pg) => pg.save_setting(name, value).await,
        }
    }

    /// Appends one entry to the audit log durably.
    pub async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.append_audit(entry).await,
            Backend::Postgres(pg) => pg.append_audit(entry).await,
        }
    }

    /// The media server's records.
    pub fn media(&self) -> &media::MediaRecords {
        match &self.backend {
            Backend::Embedded(s) => &s.media,
            Backend::Postgres(pg) => &pg.media,
        }
    }

    /// The newest `limit` audit entries, newest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.audit.iter().rev().take(limit).map(|item| Ok(item?.1.to_vec())).collect(),
            Backend::Postgres(pg) => pg.audit_log(limit),
        }
    }

    /// What the store holds and how much of its log is dead space.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.stats(),
            Backend::Postgres(pg) => pg.stats(),
        }
    }

    /// [`Store::stats`] off the async reactor.
    pub async fn stats_async(&self) -> Result<StoreStats, StoreError> {
        self.off_reactor(|s| s.stats()).await
    }

    /// Compacts the event log now, while reads and writes go on; returns when it is done.
    /// [`StoreError::Compacting`] while another runs. PostgreSQL: a `VACUUM (ANALYZE)`.
    pub async fn compact(&self) -> Result<Compacted, StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.writes.compact().await,
            Backend::Postgres(pg) => pg.vacuum().await,
        }
    }

    /// Starts a compaction in the background (PostgreSQL: a vacuum); false when one already
    /// runs.
    pub fn start_compaction(&self) -> bool {
        match &self.backend {
            Backend::Embedded(s) => s.start_compaction(),
            Backend::Postgres(pg) => pg.start_vacuum(),
        }
    }

    /// True while a compaction runs (its background remap included).
    pub fn is_compacting(&self) -> bool {
        match &self.backend {
            Backend::Embedded(s) => s.writes.is_compacting(),
            Backend::Postgres(pg) => pg.is_vacuuming(),
        }
    }

    /// Resolves once no compaction runs, a remap resumed at open included;
    /// [`StoreError::Remap`] once a step of that remap fails (a full disk).
    pub(crate) async fn until_compaction_ends(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.writes.until_compaction_ends().await,
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// Sets when the store compacts on its own, and how fast.
    pub fn set_compaction_policy(&self, policy: CompactPolicy) {
        if let Backend::Embedded(s) = &self.backend {
            s.writes.set_compaction_policy(policy)
        }
    }

    /// Resolves when the log is due for a compaction under the policy (checked after each
    /// write); never on a backend that compacts on its own.
    pub async fn compaction_due(&self) {
        match &self.backend {
            Backend::Embedded(s) => s.writes.compaction_due().await,
            Backend::Postgres(_) => std::future::pending().await,
        }
    }

    /// Finishes queued writes, flushes and stops the writer. Later `put`s fail with `Closed`.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(s) => s.writes.shutdown().await,
            Backend::Postgres(pg) => pg.shutdown().await,
        }
    }

    /// [`Store::shutdown`], then, off the async reactor, a checkpoint of the catalogue: once this
    /// is the last handle on the store, sled is opened once more so that the next start reads
    /// nothing back (see `open::checkpoint`).
    pub async fn close(self, cache_capacity_mb: u64) -> Result<(), StoreError> {
        self.shutdown().await?;
        let Backend::Embedded(inner) = self.backend else { return Ok(()) };
        tokio::task::spawn_blocking(move || open::checkpoint(inner, cache_capacity_mb))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))
    }

    /// `hearth check` of a PostgreSQL store: the events read and what is wrong with them; None
    /// for the embedded store (its check reads its files: `check::check`).
    pub async fn check_database(&self) -> Result<Option<(u64, Vec<super::postgres::Flaw>)>, StoreError> {
        match &self.backend {
            Backend::Embedded(_) => Ok(None),
            Backend::Postgres(pg) => Ok(Some(pg.check().await?)),
        }
    }
}
