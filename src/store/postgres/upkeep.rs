//! The PostgreSQL backend's upkeep: what it reports of itself, and its vacuum.
//!
//! Owns these methods of `Pg` (`Store::stats`, `Store::compact`, `Store::start_compaction`):
//! the tables' and indexes' sizes, and a `VACUUM (ANALYZE)` now or in the background, one at a
//! time, its report saved as the last compaction; and `hearth check` of the database.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use deadpool_postgres::Object;

use super::Pg;
use super::error::PgError;
use crate::protocol::Timestamp;
use crate::store::contract::Flaw;
use crate::store::contract::{CompactPolicy, Compacted, StoreStats};
use crate::store::error::StoreError;
use crate::store::media::MediaRecords;

/// The settings document of the last vacuum (`Store::stats`' last compaction).
const LAST_VACUUM: &str = "postgres_last_vacuum";

/// Bytes of the events and tags tables with their indexes.
async fn total_bytes(c: &Object) -> Result<u64, PgError> {
    let row = c.query_one("SELECT pg_total_relation_size('events') + pg_total_relation_size('tags')", &[]).await?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

impl Pg {
    /// `Store::stats`: the events, the tables' bytes and their indexes'.
    pub(crate) fn stats(&self) -> Result<StoreStats, StoreError> {
        let (events, table_bytes, index_bytes) = self.sizes()?;
        let last_compaction = match self.load_setting(LAST_VACUUM)? {
            Some(bytes) => serde_json::from_slice(&bytes).ok(),
            None => None,
        };
        Ok(StoreStats {
            events,
            live_bytes: table_bytes,
            dead_bytes: 0,
            log_bytes: table_bytes,
            index_bytes,
            index_segments: 0,
            log_generation: 0,
            compacting: self.is_compacting(),
            last_compaction,
            backend: "postgres",
        })
    }

    /// `Store::start_compaction`: a vacuum in the background; false while one runs.
    pub(crate) fn start_compaction(self: &Arc<Self>) -> bool {
        if self.vacuuming.swap(true, Ordering::AcqRel) {
            return false;
        }
        let pg = self.clone();
        tokio::spawn(async move {
            if let Err(e) = pg.vacuum_now().await {
                tracing::error!(error = %e, "the vacuum failed");
            }
            pg.vacuuming.store(false, Ordering::Release);
        });
        true
    }

    /// True while a vacuum this node started runs.
    pub(crate) fn is_compacting(&self) -> bool {
        self.vacuuming.load(Ordering::Acquire)
    }

    /// `Store::compact`: a vacuum now; [`StoreError::Compacting`] while another runs.
    pub(crate) async fn compact(&self) -> Result<Compacted, StoreError> {
        if self.vacuuming.swap(true, Ordering::AcqRel) {
            return Err(StoreError::Compacting);
        }
        let done = self.vacuum_now().await;
        self.vacuuming.store(false, Ordering::Release);
        done
    }

    /// A `VACUUM (ANALYZE)` of the events and their tags: dead rows' space reused, the
    /// planner's statistics fresh (PostgreSQL's autovacuum does the same on its own).
    async fn vacuum_now(&self) -> Result<Compacted, StoreError> {
        let started = std::time::Instant::now();
        let before = self.run(|c| async move { total_bytes(&c).await }).await?;
        self.run(|c| async move { c.batch_execute("VACUUM (ANALYZE) events, tags").await.map_err(PgError::from) })
            .await?;
        let after = self.run(|c| async move { total_bytes(&c).await }).await?;
        let done = Compacted {
            at: Timestamp::now().0,
            before_bytes: before,
            after_bytes: after,
            seconds: started.elapsed().as_secs_f64(),
            writes_paused_ms: 0.0,
            reads_paused_ms: 0.0,
        };
        let json = serde_json::to_vec(&done).map_err(|e| StoreError::Postgres(e.to_string()))?;
        self.save_setting(LAST_VACUUM, json).await?;
        Ok(done)
    }

    /// (events, bytes of the events table and its tags, bytes of their indexes).
    fn sizes(&self) -> Result<(u64, u64, u64), StoreError> {
        self.blocking(move |c| async move {
            let row = c
                .query_one(
                    "SELECT (SELECT count(*) FROM events), \
                     pg_table_size('events') + pg_table_size('tags'), \
                     pg_indexes_size('events') + pg_indexes_size('tags')",
                    &[],
                )
                .await?;
            let n = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
            Ok((n(0), n(1), n(2)))
        })
    }

    /// `hearth check` of the database: every stored event's JSON decoded and verified (its id
    /// and signature) against its row, and every NIP-09 tombstone honoured; what is wrong, by
    /// row. The events read (in pages of `seq`) come back too.
    pub(crate) async fn check_all(&self) -> Result<(u64, Vec<Flaw>), StoreError> {
        let (mut events, mut flaws, mut after) = (0u64, Vec::new(), 0i64);
        loop {
            let page = "SELECT seq, id, json FROM events WHERE seq > $1 ORDER BY seq LIMIT 1000";
            let rows = self.run(move |c| async move { Ok(c.query(page, &[&after]).await?) }).await?;
            let Some(last) = rows.last() else { break };
            after = last.get(0);
            for row in &rows {
                events += 1;
                let (seq, id, json): (i64, Vec<u8>, String) = (row.get(0), row.get(1), row.get(2));
                let id = hex::encode(&id);
                match crate::protocol::Event::from_json(&json).map_err(|e| e.to_string()) {
                    Ok(event) if event.id.to_hex() != id => {
                        flaws.push(Flaw::WrongId { id, seq, found: event.id.to_hex() })
                    }
                    Ok(event) => {
                        if let Err(e) = crate::protocol::verify::verify(event) {
                            flaws.push(Flaw::Unreadable { id, seq, reason: e.to_string() });
                        }
                    }
                    Err(reason) => flaws.push(Flaw::Unreadable { id, seq, reason }),
                }
            }
        }
        let deleted = "SELECT e.id FROM events e JOIN tombstones t ON t.id = e.id \
                       AND (t.deleter = e.pubkey OR t.deleter = e.recipient) \
                       UNION SELECT e.id FROM events e JOIN address_tombstones a ON a.address = e.address \
                       AND e.created_at <= a.deleted_at";
        let rows = self.run(move |c| async move { Ok(c.query(deleted, &[]).await?) }).await?;
        flaws.extend(rows.iter().map(|r| Flaw::Deleted { id: hex::encode(r.get::<_, Vec<u8>>(0)) }));
        Ok((events, flaws))
    }

    /// "postgres".
    pub(crate) fn backend_name(&self) -> &'static str {
        "postgres"
    }

    /// Several nodes may share it.
    pub(crate) fn is_shared(&self) -> bool {
        true
    }

    /// The node's media records (its blobs are files on its disk).
    pub(crate) fn media(&self) -> &MediaRecords {
        &self.media
    }

    /// The media records every node shares.
    pub(crate) fn shared_media(&self) -> Option<&MediaRecords> {
        Some(&self.shared_media)
    }

    /// The search index and its feed, when the store keeps one.
    pub(crate) fn search_parts(&self) -> Option<(&Arc<crate::search::SearchIndex>, &Arc<crate::search::Feed>)> {
        self.search.as_ref().map(|s| (&s.index, &s.feed))
    }

    /// A vacuum never outlives the call that runs it: nothing to wait for.
    pub(crate) async fn until_compaction_ends(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// PostgreSQL vacuums on its own (autovacuum): the policy is the embedded log's.
    pub(crate) fn set_compaction_policy(&self, _policy: CompactPolicy) {}

    /// Never: PostgreSQL vacuums on its own.
    pub(crate) async fn compaction_due(&self) {
        std::future::pending().await
    }

    /// `Store::check_database`: the events read and what is wrong with them.
    pub(crate) async fn check_database(&self) -> Result<Option<(u64, Vec<Flaw>)>, StoreError> {
        Ok(Some(self.check_all().await?))
    }

    /// Nothing to checkpoint: the database holds the events, the node's own sled only media
    /// records, flushed as they are written.
    pub(crate) fn checkpoint(self: Arc<Self>, _cache_capacity_mb: u64) -> Result<(), StoreError> {
        Ok(())
    }
}
