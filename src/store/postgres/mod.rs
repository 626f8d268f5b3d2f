//! The PostgreSQL backend: the same [`crate::store::Store`] contract over a database that several
//! hearth nodes share (`storage.backend = "postgres"`).
//!
//! ```text
//! mod.rs (this: the handle, its runtime and pool, the settings, audit and export)
//!   ├─► write  (put, remove, sweep: the NIP-01/09/40 rules as transactions)
//!   ├─► read   (query, count, get, items: a filter scanned page by page and checked)
//!   ├─► sql    (a filter as SQL; tag keys, address keys, lock keys)
//!   ├─► schema (the migrations, applied at open)
//!   └─► error  (PgError, and what a client is told of it)
//! ```
//!
//! Owns [`Pg`]: a tokio-postgres connection pool (deadpool) on a runtime of its own, so the
//! store's blocking forms can wait for it from any thread (an async worker, a blocking task, an
//! offline command) and its async forms from any runtime; and [`PgError`]. What stays on the
//! node's own disk is what belongs to the node: the media records beside the node's blob files
//! (a small sled database in `<data_dir>/node`).

mod error;
mod read;
mod schema;
mod sql;
mod write;

use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio::runtime::{Handle, Runtime};

use super::error::StoreError;
use super::export::{Export, ExportPages};
use super::format::durable::Durable;
use super::media::MediaRecords;
use super::open::PgTuning;
use super::stats::StoreStats;
use super::view::Mark;
use super::write::apply::PutOutcome;
use super::write::control::Compacted;
use crate::protocol::{EventId, EventJson, Filter, PubKey, Timestamp, VerifiedEvent, Viewer};

pub use error::PgError;
use write::Put;

/// One open PostgreSQL store.
pub(crate) struct Pg {
    runtime: Option<Runtime>,
    handle: Handle,
    pool: Pool,
    /// The last mark given (see [`Mark`]): counted by this node, after each commit.
    marks: AtomicU64,
    closed: AtomicBool,
    /// The node's media records (its blobs are files on its disk).
    pub(crate) media: MediaRecords,
}

impl Drop for Pg {
    fn drop(&mut self) {
        // A runtime cannot be dropped where blocking is refused (a store dropped in an async task).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Pg {
    /// Connects to `tuning.url`, applies the schema's migrations, opens the node's records in
    /// `dir`.
    pub(crate) fn open(dir: &Path, tuning: &PgTuning) -> Result<Pg, PgError> {
        let mut config = tokio_postgres::Config::from_str(&tuning.url).map_err(|e| PgError::Url(e.to_string()))?;
        // OK true only once the commit is on the server's disk, whatever the server's default.
        config.options("-c synchronous_commit=on");
        config.application_name("hearth");
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("hearth-postgres")
            .enable_all()
            .build()
            .map_err(|e| PgError::Pool(e.to_string()))?;
        let handle = runtime.handle().clone();
        let pool = Pool::builder(manager)
            .max_size(tuning.pool.max(2))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(std::time::Duration::from_secs(10)))
            .create_timeout(Some(std::time::Duration::from_secs(10)))
            .build()
            .map_err(|e| PgError::Pool(e.to_string()))?;
        let migrating = pool.clone();
        block(&handle, async move {
            let mut client = migrating.get().await?;
            schema::migrate(&mut client).await
        })??;
        let node = dir.join("node");
        std::fs::create_dir_all(&node).map_err(|e| PgError::Pool(format!("{}: {e}", node.display())))?;
        let media = open_media(&node).map_err(|e| PgError::Pool(e.to_string()))?;
        Ok(Pg { runtime: Some(runtime), handle, pool, marks: AtomicU64::new(0), closed: AtomicBool::new(false), media })
    }

    /// Runs `work` with a pooled connection on the backend's runtime, and waits for it here.
    fn blocking<T: Send + 'static, F>(&self, work: impl FnOnce(Object) -> F + Send + 'static) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, PgError>> + Send,
    {
        let pool = self.pool.clone();
        block(&self.handle, async move { work(pool.get().await?).await })?.map_err(StoreError::from)
    }

    /// Runs `work` with a pooled connection on the backend's runtime, awaited from any runtime.
    async fn run<T: Send + 'static, F>(&self, work: impl FnOnce(Object) -> F + Send + 'static) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, PgError>> + Send,
    {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        let pool = self.pool.clone();
        let task = self.handle.spawn(async move { work(pool.get().await?).await });
        task.await.map_err(|e| StoreError::Task(e.to_string()))?.map_err(StoreError::from)
    }

    /// The mark of the next write made visible.
    fn next_mark(&self) -> Mark {
        Mark::at(self.marks.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// The mark a query that starts now returns: every write this node acknowledged before it.
    pub(crate) fn mark(&self) -> Mark {
        Mark::at(self.marks.load(Ordering::Acquire))
    }

    /// A mark for an event another node stored, as it reaches this one (live delivery).
    pub(crate) fn arrived(&self) -> Mark {
        self.next_mark()
    }

    pub(crate) async fn put(&self, event: Arc<VerifiedEvent>) -> Result<PutOutcome, StoreError> {
        let (put, _changes) = self.run(move |mut c| async move { write::put(&mut c, &event).await }).await?;
        Ok(match put {
            Put::Stored => PutOutcome::Stored(self.next_mark()),
            Put::Duplicate => PutOutcome::Duplicate,
            Put::Superseded => PutOutcome::Superseded,
            Put::Deleted => PutOutcome::Deleted,
        })
    }

    pub(crate) async fn remove(&self, id: EventId) -> Result<bool, StoreError> {
        self.run(move |mut c| async move { write::remove(&mut c, &id).await }).await
    }

    pub(crate) async fn sweep(&self, now: Timestamp) -> Result<usize, StoreError> {
        Ok(self.run(move |mut c| async move { write::sweep(&mut c, now).await }).await?.len())
    }

    pub(crate) fn query(
        &self,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        let mark = self.mark();
        let (filters, viewer) = (filters.to_vec(), viewer.clone());
        let events = self.blocking(move |c| async move { read::query(&**c, &filters, now, &viewer).await })?;
        Ok((events, mark))
    }

    pub(crate) fn count(&self, filters: &[Filter], now: Timestamp, viewer: &Viewer) -> Result<u64, StoreError> {
        let (filters, viewer) = (filters.to_vec(), viewer.clone());
        self.blocking(move |c| async move { read::count(&**c, &filters, now, &viewer).await })
    }

    pub(crate) fn get(&self, id: &EventId, now: Timestamp, viewer: &Viewer) -> Result<Option<EventJson>, StoreError> {
        let (id, viewer) = (*id, viewer.clone());
        self.blocking(move |c| async move { read::get(&**c, &id, now, &viewer).await })
    }

    pub(crate) fn items(
        &self,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Option<Vec<(Timestamp, EventId)>>, StoreError> {
        let (filter, viewer) = (filter.clone(), viewer.clone());
        self.blocking(move |c| async move { read::items(&**c, &filter, now, &viewer, max).await })
    }

    pub(crate) fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        let id = id.0.to_vec();
        self.blocking(
            move |c| async move { Ok(c.query_opt("SELECT 1 FROM events WHERE id = $1", &[&id]).await?.is_some()) },
        )
    }

    pub(crate) fn count_by_author(&self, author: &PubKey) -> Result<usize, StoreError> {
        let author = author.0.to_vec();
        self.count_where("SELECT count(*) FROM events WHERE pubkey = $1", vec![author])
    }

    pub(crate) fn len(&self) -> Result<usize, StoreError> {
        self.count_where("SELECT count(*) FROM events", Vec::new())
    }

    fn count_where(&self, text: &'static str, args: Vec<Vec<u8>>) -> Result<usize, StoreError> {
        self.blocking(move |c| async move {
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                args.iter().map(|a| a as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
            let n: i64 = c.query_one(text, &params).await?.get(0);
            Ok(usize::try_from(n).unwrap_or(0))
        })
    }

    pub(crate) fn load_setting(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let name = name.to_string();
        self.blocking(move |c| async move {
            Ok(c.query_opt("SELECT value FROM settings WHERE name = $1", &[&name]).await?.map(|r| r.get(0)))
        })
    }

    pub(crate) async fn save_setting(&self, name: &str, value: Vec<u8>) -> Result<(), StoreError> {
        let name = name.to_string();
        let upsert = "INSERT INTO settings (name, value) VALUES ($1, $2) \
                      ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value";
        self.run(move |c| async move { c.execute(upsert, &[&name, &value]).await.map(drop).map_err(PgError::from) })
            .await
    }

    pub(crate) async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        let insert = "INSERT INTO audit (entry) VALUES ($1)";
        self.run(move |c| async move { c.execute(insert, &[&entry]).await.map(drop).map_err(PgError::from) }).await
    }

    pub(crate) fn audit_log(&self, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.blocking(move |c| async move {
            let rows = c.query("SELECT entry FROM audit ORDER BY seq DESC LIMIT $1", &[&limit]).await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

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
            compacting: false,
            last_compaction,
            backend: "postgres",
        })
    }

    /// `Store::compact`: a `VACUUM (ANALYZE)` of the events and their tags.
    pub(crate) async fn vacuum(&self) -> Result<Compacted, StoreError> {
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

    /// Every event `filter` matches (its `limit` keeps the newest), oldest first, ties in the
    /// order stored, read in pages from one repeatable-read snapshot.
    pub(crate) fn export(&self, filter: &Filter, now: Timestamp) -> Result<Export, StoreError> {
        let filter = filter.clone();
        let (client, refs) = self.blocking(move |c| async move {
            c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?;
            let everything = Viewer::everything();
            let hits = read::scan(&**c, &filter, now, &everything, read::limit_of(&filter), usize::MAX);
            let mut refs: Vec<(Timestamp, i64)> = match hits.await {
                Ok(hits) => hits.into_iter().map(|h| (h.created_at, h.seq)).collect(),
                Err(e) => {
                    let _ = c.batch_execute("ROLLBACK").await;
                    return Err(e);
                }
            };
            refs.sort_unstable();
            Ok((c, refs))
        })?;
        let pages =
            Pages { handle: self.handle.clone(), client: Some(client), refs: refs.into_iter(), page: Vec::new() };
        Ok(Export::paged(Box::new(pages)))
    }

    /// Stops taking writes; what runs finishes.
    pub(crate) fn shutdown(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// The settings document of the last vacuum (`Store::stats`' last compaction).
const LAST_VACUUM: &str = "postgres_last_vacuum";

/// Bytes of the events and tags tables with their indexes.
async fn total_bytes(c: &Object) -> Result<u64, PgError> {
    let row = c.query_one("SELECT pg_total_relation_size('events') + pg_total_relation_size('tags')", &[]).await?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

/// The node's media records: a sled database of its own in `node`.
fn open_media(node: &Path) -> Result<MediaRecords, StoreError> {
    let db = super::db::open_db(node, 8)?;
    let durable = Durable::open(node)?;
    MediaRecords::open(&db, Some(Arc::new(durable)))
}

/// Runs `future` on `handle`'s runtime and waits for it on this thread (which may be an async
/// worker of another runtime: the wait blocks it as a sled read would, never the backend's).
fn block<T: Send + 'static>(handle: &Handle, future: impl Future<Output = T> + Send + 'static) -> Result<T, PgError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().map_err(|_| PgError::Stopped)
}

/// An export's pages: the rows' JSON fetched in order, a page at a time, in the snapshot's
/// transaction, which ends when the export is dropped.
struct Pages {
    handle: Handle,
    client: Option<Object>,
    refs: std::vec::IntoIter<(Timestamp, i64)>,
    page: Vec<String>,
}

/// Events an export page fetches at once.
const EXPORT_PAGE: usize = 512;

impl ExportPages for Pages {
    fn remaining(&self) -> usize {
        self.refs.len() + self.page.len()
    }

    fn next_event(&mut self) -> Option<Result<EventJson, StoreError>> {
        loop {
            if let Some(json) = self.page.pop() {
                return Some(Ok(EventJson::written_by_hearth(json)));
            }
            let seqs: Vec<i64> = self.refs.by_ref().take(EXPORT_PAGE).map(|(_, seq)| seq).collect();
            if seqs.is_empty() {
                return None;
            }
            let client = self.client.take()?;
            let fetched = block(&self.handle, async move {
                let rows = client.query("SELECT seq, json FROM events WHERE seq = ANY($1)", &[&seqs]).await;
                let rows = rows.map(|rows| {
                    let mut by_seq: std::collections::HashMap<i64, String> =
                        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
                    // Newest last, so that pop gives the oldest first.
                    seqs.iter().rev().filter_map(|s| by_seq.remove(s)).collect::<Vec<String>>()
                });
                (client, rows)
            });
            match fetched {
                Ok((client, Ok(page))) => {
                    self.client = Some(client);
                    self.page = page;
                }
                Ok((_, Err(e))) => return Some(Err(StoreError::from(PgError::from(e)))),
                Err(e) => return Some(Err(e.into())),
            }
        }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // The snapshot's transaction ends before the connection goes back to the pool.
        if let Some(client) = self.client.take() {
            self.handle.spawn(async move {
                let _ = client.batch_execute("ROLLBACK").await;
            });
        }
    }
}
