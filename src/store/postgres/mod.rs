//! The PostgreSQL backend: the same [`crate::store::Store`] contract over a database that several
//! hearth nodes share (`storage.backend = "postgres"`).
//!
//! ```text
//! mod.rs (this: the handle, its runtime and pool, the settings, audit and export)
//!   ├─► batch  (the node's writer: the puts that wait together, one transaction)
//!   ├─► seen   (the node's looker: the duplicate checks that wait together, one query)
//!   ├─► write  (put, remove, sweep: the NIP-01/09/40 rules as transactions)
//!   ├─► upkeep (stats and the vacuum)
//!   ├─► export (an export's snapshot and pages; waiting for the runtime from any thread)
//!   ├─► media  (the media records every node shares, when the blobs are in one bucket)
//!   ├─► search (NIP-50: the node's index of the shared events, and its read path)
//!   ├─► lookup (the handle's reads: each blocking form, and the async ones on its own runtime)
//!   ├─► read   (query, count, get, items: a filter scanned page by page and checked)
//!   ├─► sql    (a filter as SQL; tag keys, address keys, lock keys)
//!   ├─► schema (the migrations, applied at open)
//!   └─► error  (PgError, and what a client is told of it)
//! ```
//!
//! Owns `Pg`: a tokio-postgres connection pool (deadpool) on a runtime of its own, so the
//! store's blocking forms can wait for it from any thread (an async worker, a blocking task, an
//! offline command) and its async forms from any runtime; and [`PgError`]. What stays on the
//! node's own disk is what belongs to the node: the media records beside the node's blob files
//! (a small sled database in `<data_dir>/node`); blobs in a bucket every node shares have their
//! records in the database (`media`).

mod batch;
mod error;
mod export;
mod lookup;
mod media;
mod read;
mod schema;
mod search;
mod seen;
mod sql;
mod upkeep;
mod write;

use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{mpsc, oneshot};

use super::error::StoreError;
use super::format::durable::Durable;
use super::media::MediaRecords;
use crate::protocol::{Event, EventId, EventJson, Filter, PubKey, Timestamp, VerifiedEvent};
use crate::search::Change;
use export::block;

use crate::store::contract::{Export, Mark, PgTuning, PutOutcome, SearchTuning};
pub use error::PgError;
use write::Put;

/// One open PostgreSQL store.
pub(crate) struct Pg {
    _runtime: Background,
    handle: Handle,
    pool: Pool,
    /// The node's writer (`batch`): every put goes through it, in the order they arrive.
    writes: mpsc::Sender<batch::Job>,
    /// The node's looker (`seen`): the duplicate checks that wait are asked in one query.
    asks: mpsc::Sender<seen::Ask>,
    /// The last mark given (see [`Mark`]): counted by this node, after each commit.
    marks: AtomicU64,
    closed: AtomicBool,
    /// True while a vacuum this node started runs.
    vacuuming: AtomicBool,
    /// The node's search index (NIP-50), when `storage.search` is on.
    pub(crate) search: Option<Arc<search::PgSearch>>,
    /// The node's media records (for blobs that are files on its disk).
    pub(crate) media: MediaRecords,
    /// The records every node shares (for blobs in a bucket every node reaches).
    pub(crate) shared_media: MediaRecords,
}

/// The backend's runtime, shut down without waiting when it is dropped: a store may be dropped
/// (or fail to open) inside an async task, where a runtime's blocking drop is refused.
struct Background(Option<Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// How long a connection to PostgreSQL may go unanswered (a new one unaccepted, data sent
/// unacknowledged, an idle one silent) before it is given up.
const NETWORK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Pg {
    /// Connects to `tuning.url`, applies the schema's migrations, opens the node's records in
    /// `dir`.
    pub(crate) fn open(dir: &Path, tuning: &PgTuning, searching: Option<&SearchTuning>) -> Result<Pg, StoreError> {
        let mut config = tokio_postgres::Config::from_str(&tuning.url).map_err(|e| PgError::Url(e.to_string()))?;
        // OK true only once the commit is on the server's disk, whatever the server's default.
        config.options("-c synchronous_commit=on");
        config.application_name("hearth");
        // A server cut off by the network (no reset, nothing answered) fails a call within
        // NETWORK_TIMEOUT rather than the kernel's quarter of an hour: the writer answers
        // `error: …` and the pool drops the dead connection. A connect or user timeout the URL
        // gives wins.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(NETWORK_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(NETWORK_TIMEOUT);
        }
        config.keepalives_idle(NETWORK_TIMEOUT);
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
        let runtime = Background(Some(runtime));
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
        std::fs::create_dir_all(&node).map_err(|source| StoreError::Open { path: node.clone(), source })?;
        let media = open_media(&node)?;
        let search = match searching {
            Some(tuning) => Some(Arc::new(search::PgSearch::open(dir, tuning, pool.clone(), handle.clone())?)),
            None => None,
        };
        let closed = AtomicBool::new(false);
        let vacuuming = AtomicBool::new(false);
        let (writes, jobs) = mpsc::channel(batch::MAX_BATCH * 4);
        handle.spawn(batch::writer(pool.clone(), jobs));
        let (asks, asked) = mpsc::channel(seen::MAX_ASKED * 4);
        handle.spawn(seen::looker(pool.clone(), asked));
        let marks = AtomicU64::new(0);
        let shared = media::SharedRecords { pool: pool.clone(), handle: handle.clone() };
        let shared_media = MediaRecords::new(Arc::new(shared), true);
        Ok(Pg { _runtime: runtime, handle, pool, writes, asks, marks, closed, vacuuming, search, media, shared_media })
    }

    /// Runs `work` with a pooled connection on the backend's runtime, and waits for it here.
    pub(super) fn blocking<T: Send + 'static, F>(
        &self,
        work: impl FnOnce(Object) -> F + Send + 'static,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, PgError>> + Send,
    {
        self.blocking_with(work)
    }

    /// [`Pg::blocking`] of work that fails with any error the store's callers can be given.
    pub(super) fn blocking_with<T: Send + 'static, E, F>(
        &self,
        work: impl FnOnce(Object) -> F + Send + 'static,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, E>> + Send,
        E: From<PgError> + Into<StoreError> + Send + 'static,
    {
        export::block_on_pool(&self.handle, &self.pool, work)
    }

    /// Runs `work` with a pooled connection on the backend's runtime, awaited from any runtime.
    pub(super) async fn run<T: Send + 'static, F>(
        &self,
        work: impl FnOnce(Object) -> F + Send + 'static,
    ) -> Result<T, StoreError>
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

    /// Stores `event` through the node's writer, which commits the puts that wait together in
    /// one transaction (`batch`); answered once the commit that holds it is on the server's disk.
    pub(crate) async fn put(&self, event: Arc<VerifiedEvent>) -> Result<PutOutcome, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        let (answer, answered) = oneshot::channel();
        self.writes.send(batch::Job { event, answer }).await.map_err(|_| StoreError::Closed)?;
        let (put, changes) = answered.await.map_err(|_| StoreError::Closed)??;
        self.index(changes);
        Ok(match put {
            Put::Stored => PutOutcome::Stored(self.next_mark()),
            Put::Duplicate => PutOutcome::Duplicate,
            Put::Superseded => PutOutcome::Superseded,
            Put::Deleted => PutOutcome::Deleted,
        })
    }

    pub(crate) async fn remove(&self, id: EventId) -> Result<bool, StoreError> {
        let removed = self.run(move |mut c| async move { write::remove(&mut c, &id).await }).await?;
        self.index(vec![Change::Remove(id)]);
        Ok(removed)
    }

    pub(crate) async fn sweep_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        let ids = self.run(move |mut c| async move { write::sweep(&mut c, now).await }).await?;
        let n = ids.len();
        self.index(ids.into_iter().map(Change::Remove).collect());
        Ok(n)
    }

    /// An event another node stored, as it reaches this one: into this node's search index (a
    /// deletion's targets out of it), and the mark it is delivered with.
    pub(crate) fn arrived(&self, event: &Event) -> Option<Mark> {
        let mut changes = vec![Change::Add(event.clone())];
        if event.kind == crate::protocol::Kind::DELETION {
            changes.extend(event.tag_values("e").filter_map(EventId::from_hex).map(Change::Remove));
        }
        self.index(changes);
        Some(self.next_mark())
    }

    /// Queues changes of the search index, when there is one.
    fn index(&self, changes: Vec<Change>) {
        if let Some(search) = &self.search
            && !changes.is_empty()
        {
            search.send(changes);
        }
    }

    /// The events this database stored at or after `since` (Unix seconds, its own clock), in
    /// the order stored, at most `max`: a node's catch-up after it lost the live feed.
    pub(crate) async fn stored_since(&self, since: f64, max: i64) -> Result<Option<Vec<EventJson>>, StoreError> {
        let select = "SELECT json FROM events WHERE stored_at >= to_timestamp($1) ORDER BY seq LIMIT $2";
        let rows: Vec<String> = self
            .run(move |c| async move { Ok(c.query(select, &[&since, &max]).await?.iter().map(|r| r.get(0)).collect()) })
            .await?;
        Ok(Some(rows.into_iter().map(EventJson::written_by_hearth).collect()))
    }

    /// Asked through the node's looker, with every other id that waits (`seen`).
    pub(crate) async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        let (answer, answered) = oneshot::channel();
        self.asks.send(seen::Ask { id: *id, answer }).await.map_err(|_| StoreError::Closed)?;
        answered.await.map_err(|_| StoreError::Closed)?
    }

    pub(crate) fn count_by_author(&self, author: &PubKey) -> Result<usize, StoreError> {
        let author = author.0.to_vec();
        self.count_where("SELECT count(*) FROM events WHERE pubkey = $1", vec![author])
    }

    /// How many events are stored (0, logged, when the server cannot be asked).
    pub(crate) fn len(&self) -> usize {
        self.count_where("SELECT count(*) FROM events", Vec::new()).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot count the stored events");
            0
        })
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

    pub(crate) fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.blocking(move |c| async move {
            let rows = c.query("SELECT name, value FROM settings ORDER BY name", &[]).await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
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

    /// Every event `filter` matches (its `limit` keeps the newest), oldest first, ties in the
    /// order stored, read in pages from one repeatable-read snapshot.
    pub(crate) fn export(&self, filter: &Filter, now: Timestamp) -> Result<Export, StoreError> {
        let filter = filter.clone();
        let (client, refs) = self.blocking(move |c| async move { export::snapshot(c, &filter, now).await })?;
        Ok(export::pages(self.handle.clone(), client, refs))
    }

    /// Stops taking writes (what runs finishes) and stops the search index's feed, which commits
    /// what it holds and lets the index go (a restart in this process opens it again).
    pub(crate) async fn shutdown(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        if let Some(search) = self.search.clone() {
            tokio::task::spawn_blocking(move || search.feed.stop())
                .await
                .map_err(|e| StoreError::Task(e.to_string()))?;
        }
        Ok(())
    }
}

/// The node's media records: a sled database of its own in `node`.
fn open_media(node: &Path) -> Result<MediaRecords, StoreError> {
    let db = super::db::open_db(node, 8)?;
    let durable = Durable::open(node)?;
    MediaRecords::local(&db, Some(Arc::new(durable)))
}

#[cfg(test)]
mod tests;
