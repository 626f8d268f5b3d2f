//! Compaction: the live records copied to the event log's next generation, while the relay runs.
//!
//! Owns rewriting the event log without the frames of replaced, deleted and expired events (and
//! the journal frames of removals and sweeps, which sled holds long since), starting one on an
//! operator's request or when the dead bytes pass the [`CompactPolicy`], and recording the last
//! one. It runs in two steps:
//!
//! 1. **Copy**, on a thread of its own while reads and writes go on: every event indexed when it
//!    starts is copied, in log order, to the next generation's file, which is then synced.
//! 2. **Finish**, on the writer thread between two groups (writes wait): the events stored since
//!    are copied too, and the file synced; the index segments are merged into one at the new
//!    serials without the removed events, beside the index readers use, while the sled batch is
//!    put together; that one batch moves every `i` entry to its new serial, drops the `z`
//!    entries and names the new generation and its segment (lookups by id wait from here), and
//!    the view swaps to the new index and log at once; sled is flushed and synced before the
//!    writer takes the next write; then the old generation's files are removed.
//!
//! A crash before the batch is durable leaves the old generation in charge (the next open
//! removes the new file), a crash after it the new one (the next open removes the old file);
//! either way every acknowledged write is there, because none is acknowledged between the batch
//! and its flush. An export or a query that took the old log before the swap goes on reading it:
//! the file stays open, removed, until its last reader lets go.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot};

use super::index::Serial;
use super::indexes;
use super::log::{self, Log};
use super::writer::{WriteOp, Writer};
use super::{Store, StoreError, View, catalogue, keys};
use crate::protocol::Timestamp;

/// The settings document that records the last compaction.
pub const LAST_COMPACTION: &str = "last_compaction";
/// Bytes of frames a compaction writes at once.
const CHUNK: usize = 256 * 1024;
/// The longest a throttled copy sleeps before it looks whether the store is stopping.
const NAP: Duration = Duration::from_millis(50);
/// After a compaction that failed (a full disk, say), no automatic one for this long.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// What a compaction did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Compacted {
    /// When it finished (Unix seconds).
    pub at: u64,
    /// The data directory's bytes before (the store's files, for a temporary store).
    pub before_bytes: u64,
    /// And after.
    pub after_bytes: u64,
    /// How long it took, start to end.
    pub seconds: f64,
    /// How long writes waited for its last step (milliseconds).
    #[serde(default)]
    pub writes_paused_ms: f64,
    /// How long lookups by id waited for its swap (milliseconds); other reads never wait.
    #[serde(default)]
    pub reads_paused_ms: f64,
}

/// How the store compacts: on its own once the log's dead bytes are at least `dead_ratio` of it
/// and it is at least `min_bytes` long (`storage.compact_dead_ratio`, `storage.compact_min_mb`),
/// and how fast the background copy may read and write (`storage.compact_max_mb_per_sec`). The
/// default never compacts on its own and copies at full speed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompactPolicy {
    /// Dead share of the log that makes a compaction due; 0: never on its own.
    pub dead_ratio: f64,
    /// Shorter logs are left alone.
    pub min_bytes: u64,
    /// Bytes per second the copy step writes at most, so that a compaction does not take the
    /// disk from the relay's own reads and writes; 0: no limit. The writer's short last step is
    /// never slowed.
    pub max_bytes_per_sec: u64,
}

impl CompactPolicy {
    /// True when a log of `log_bytes` with `dead_bytes` of them dead is due.
    fn is_due(&self, log_bytes: u64, dead_bytes: u64) -> bool {
        self.dead_ratio > 0.0
            && dead_bytes > 0
            && log_bytes >= self.min_bytes
            && dead_bytes as f64 >= self.dead_ratio * log_bytes as f64
    }
}

/// Whether a compaction runs, and when one is due.
#[derive(Default)]
pub(super) struct Control {
    running: AtomicBool,
    due: Notify,
    policy: Mutex<CompactPolicy>,
    /// No automatic compaction before this (set when one failed).
    quiet_until: Mutex<Option<Instant>>,
    /// Set when the store shuts down: a copy in progress stops, so that a stop does not wait for
    /// a throttled compaction of a large log.
    pub(super) stopping: AtomicBool,
}

impl Control {
    /// True while a compaction runs.
    pub(super) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Called by the writer after each group: wakes [`Store::compaction_due`] when the view's log
    /// is due under the policy.
    pub(super) fn check_due(&self, view: &View) {
        if self.running.load(Ordering::Acquire) {
            return;
        }
        let policy = *self.policy.lock().unwrap_or_else(PoisonError::into_inner);
        let log_bytes = view.log.end();
        if !policy.is_due(log_bytes, log_bytes.saturating_sub(view.index.live_bytes())) {
            return;
        }
        let quiet = self.quiet_until.lock().unwrap_or_else(PoisonError::into_inner);
        if quiet.is_none_or(|until| Instant::now() >= until) {
            self.due.notify_one();
        }
    }
}

/// Held while a compaction runs; lets go when it ends, however it ends.
struct Running(Arc<Control>);

impl Running {
    fn claim(control: &Arc<Control>) -> Result<Running, StoreError> {
        match control.running.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(Running(control.clone())),
            Err(_) => Err(StoreError::Compacting),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

/// The first step's result, handed to the writer: the new log and where each record went.
pub(super) struct Prepared {
    log: Arc<Log>,
    generation: u64,
    /// Where the next frame goes in the new log.
    end: u64,
    /// Old serial → new serial, in log order.
    moved: Vec<(Serial, Serial)>,
    started: Instant,
    before_bytes: u64,
}

impl Store {
    /// Compacts the event log now, while reads and writes go on; returns when it is done.
    /// [`StoreError::Compacting`] while another runs.
    pub async fn compact(&self) -> Result<Compacted, StoreError> {
        let running = Running::claim(&self.inner.compaction)?;
        self.compact_claimed(running).await
    }

    async fn compact_claimed(&self, running: Running) -> Result<Compacted, StoreError> {
        let result = self.copy_and_swap().await;
        if result.is_err() {
            let until = Instant::now() + RETRY_AFTER;
            *self.inner.compaction.quiet_until.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
        }
        drop(running);
        result
    }

    async fn copy_and_swap(&self) -> Result<Compacted, StoreError> {
        let started = Instant::now();
        let before_bytes = files_bytes(self.inner.dir.as_deref(), &self.inner.db, &self.view().log)?;
        let prepared = self.off_reactor(move |s| s.copy_live(started, before_bytes)).await?;
        let (reply, rx) = oneshot::channel();
        let op = WriteOp::Compact { prepared: Box::new(prepared), reply };
        self.inner.tx.send(op).await.map_err(|_| StoreError::Closed)?;
        let done = rx.await.map_err(|_| StoreError::Closed)??;
        tracing::info!(
            before_bytes = done.before_bytes,
            after_bytes = done.after_bytes,
            seconds = done.seconds,
            writes_paused_ms = done.writes_paused_ms,
            reads_paused_ms = done.reads_paused_ms,
            "event log compacted"
        );
        // For `GET /admin/v1/store`; the compaction itself is complete without it.
        let record = serde_json::to_vec(&done).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.save_setting(LAST_COMPACTION, record).await?;
        Ok(done)
    }

    /// Starts a compaction in the background; false when one already runs.
    pub fn start_compaction(&self) -> bool {
        let Ok(running) = Running::claim(&self.inner.compaction) else { return false };
        let store = self.clone();
        tokio::spawn(async move {
            if let Err(e) = store.compact_claimed(running).await {
                tracing::error!(error = %e, "compaction failed");
            }
        });
        true
    }

    /// True while a compaction runs.
    pub fn is_compacting(&self) -> bool {
        self.inner.compaction.running.load(Ordering::Acquire)
    }

    /// Sets when the store compacts on its own, and how fast.
    pub fn set_compaction_policy(&self, policy: CompactPolicy) {
        *self.inner.compaction.policy.lock().unwrap_or_else(PoisonError::into_inner) = policy;
        self.inner.compaction.check_due(&self.view());
    }

    /// Resolves when the log is due for a compaction under the policy (checked after each write).
    pub async fn compaction_due(&self) {
        self.inner.compaction.due.notified().await;
    }

    /// The first step: every event indexed now copied to the next generation's log, synced.
    fn copy_live(&self, started: Instant, before_bytes: u64) -> Result<Prepared, StoreError> {
        let (old, generation, indexed) = {
            let view = self.view();
            (view.log.clone(), view.generation + 1, view.index.indexed())
        };
        // The events indexed now: every one of them has its `i` entry, and the later ones (which
        // the last step copies) all lie after them in the log.
        let live = indexes::live_events(&self.inner.tree, indexed)?;
        let new = Arc::new(new_log(self.inner.dir.as_deref(), generation)?);
        let mut moved = Vec::with_capacity(live.len());
        let rate = self.inner.compaction.policy.lock().unwrap_or_else(PoisonError::into_inner).max_bytes_per_sec;
        let stopping = Some(&self.inner.compaction.stopping);
        let serials = live.iter().map(|&(serial, _)| serial);
        let copied =
            copy_frames(&old, &new, 0, serials, &mut moved, rate, stopping).and_then(|end| Ok((end, new.sync()?)));
        match copied {
            Ok((end, ())) => Ok(Prepared { log: new, generation, end, moved, started, before_bytes }),
            Err(e) => {
                discard(self.inner.dir.as_deref(), generation - 1);
                Err(e)
            }
        }
    }
}

/// The next generation's log, empty (a file left by a compaction that failed is cut back).
fn new_log(dir: Option<&Path>, generation: u64) -> Result<Log, StoreError> {
    match dir {
        Some(dir) => {
            let new = Log::open(dir, &log::file_name(generation), 0)?;
            new.truncate(0)?;
            Ok(new)
        }
        None => Ok(Log::memory()),
    }
}

/// Removes a compaction's new files after it failed, keeping generation `current`.
fn discard(dir: Option<&Path>, current: u64) {
    if let Some(dir) = dir
        && let Err(e) = remove_other_generations(dir, current)
    {
        tracing::error!(error = %e, "removing the files of a failed compaction failed");
    }
}

/// Removes the event logs and index segments of other generations than `current`.
fn remove_other_generations(dir: &Path, current: u64) -> std::io::Result<()> {
    log::remove_other_generations(dir, &log::file_name(current))?;
    indexes::remove_other_generations(dir, current)
}

/// Copies the frames at `serials` (ascending) from `old` to `new` from `at` on, noting each move,
/// at most `rate` bytes per second (0: no limit), until `stopping` is set; returns where the next
/// frame goes. Not synced.
fn copy_frames(
    old: &Log,
    new: &Log,
    mut at: u64,
    serials: impl Iterator<Item = Serial>,
    moved: &mut Vec<(Serial, Serial)>,
    rate: u64,
    stopping: Option<&AtomicBool>,
) -> Result<u64, StoreError> {
    let started = (Instant::now(), at);
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut chunk_at = at;
    for serial in serials {
        let len = log::push_frame(&mut chunk, &old.read(serial)?);
        moved.push((serial, at));
        at += len;
        if chunk.len() >= CHUNK {
            new.put(chunk_at, &chunk)?;
            chunk.clear();
            chunk_at = at;
            let due = match rate {
                0 => Duration::ZERO,
                rate => Duration::from_secs_f64((at - started.1) as f64 / rate as f64),
            };
            // Held back in short naps, so that a stop is noticed during a long wait too.
            loop {
                if stopping.is_some_and(|s| s.load(Ordering::Acquire)) {
                    return Err(StoreError::Closed);
                }
                let wait = due.saturating_sub(started.0.elapsed());
                if wait.is_zero() {
                    break;
                }
                std::thread::sleep(wait.min(NAP));
            }
        }
    }
    new.put(chunk_at, &chunk)?;
    Ok(at)
}

/// The second step, on the writer thread between groups: see the module documentation.
pub(super) fn finish(w: &Writer, mut prepared: Prepared) -> Result<Compacted, StoreError> {
    let paused = Instant::now();
    let reads_paused = match swap(w, &mut prepared) {
        Ok(paused) => paused,
        Err(e) => {
            // Nothing points at the new file yet.
            discard(w.dir.as_deref(), prepared.generation - 1);
            return Err(e);
        }
    };
    // The old file goes only once sled says, durably, that the new one is the log; no write is
    // acknowledged before that.
    w.flush()?;
    let writes_paused = paused.elapsed();
    if let Some(dir) = &w.dir {
        remove_other_generations(dir, prepared.generation)?;
    }
    let after_bytes = files_bytes(w.dir.as_deref(), &w.db, &prepared.log)?;
    Ok(Compacted {
        at: Timestamp::now().0,
        before_bytes: prepared.before_bytes,
        after_bytes,
        seconds: prepared.started.elapsed().as_secs_f64(),
        writes_paused_ms: writes_paused.as_secs_f64() * 1e3,
        reads_paused_ms: reads_paused.as_secs_f64() * 1e3,
    })
}

/// Copies what was stored since the first step, then points the catalogue and the index at the
/// new log, in one sled batch and one change of the view. Fails only before the batch is
/// applied. Returns the longest any reader waited: lookups by id, from the batch to the swap
/// (scans by author, kind, tag or time never wait).
fn swap(w: &Writer, p: &mut Prepared) -> Result<Duration, StoreError> {
    // Only this thread changes the log and the catalogue, so what it reads now holds until it
    // changes them.
    let old = w.log();
    let live = indexes::live_events(&w.tree, Serial::MAX)?;
    let copied = |moved: &[(Serial, Serial)], serial: &Serial| moved.binary_search_by_key(serial, |&(old, _)| old).ok();
    let since: Vec<Serial> = live.iter().map(|&(serial, _)| serial).filter(|s| copied(&p.moved, s).is_none()).collect();
    // Events stored since the copy began lie after every copied one in the old log, so they do in
    // the new one too: the order of serials, which the index's lists rely on, is kept.
    p.end = copy_frames(&old, &p.log, p.end, since.into_iter(), &mut p.moved, 0, None)?;
    p.log.sync()?;
    p.log.commit(p.end);
    let (moved, end, generation) = (&p.moved, p.end, p.generation);
    let (index, batch) = std::thread::scope(|scope| {
        // The index at the new serials is built beside the one readers use (only this thread
        // changes that one), on another core while the batch is put together.
        let index = scope.spawn(|| {
            let view = w.view.read().unwrap_or_else(PoisonError::into_inner);
            view.index.remapped(moved, &live, end, generation, &w.compaction.stopping)
        });
        let batch = catalogue_batch(w, moved);
        (index.join(), batch)
    });
    let index = match index {
        Ok(index) => index?,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    let mut batch = batch?;
    batch.insert(keys::meta(keys::LOG_END), &p.end.to_be_bytes());
    batch.insert(keys::meta(keys::LOG_GEN), &p.generation.to_be_bytes());
    batch.insert(keys::meta(keys::INDEX), index.meta().encode());
    // Readers that find an event through its `i` entry wait from here until the swap: an entry
    // may point into the new log before their view does (`Store::read_view`). Set before the
    // batch, so that whoever sees a moved entry sees this too.
    w.catalogue.store(p.generation, Ordering::Release);
    let waiting = Instant::now();
    if let Err(e) = w.tree.apply_batch(batch) {
        w.catalogue.store(p.generation - 1, Ordering::Release);
        return Err(e.into());
    }
    let mut view = w.view_mut();
    view.index = index;
    view.log = p.log.clone();
    view.generation = p.generation;
    drop(view);
    Ok(waiting.elapsed())
}

/// The catalogue's changes of a compaction: every `i` entry at its new serial, and the removals
/// that the old generation's index segments needed dropped.
fn catalogue_batch(w: &Writer, moved: &[(Serial, Serial)]) -> Result<sled::Batch, StoreError> {
    let mut batch = sled::Batch::default();
    let to = |_, serial: Serial| match moved.binary_search_by_key(&serial, |&(old, _)| old) {
        Ok(at) => Ok(Some(moved[at].1)),
        Err(_) => Err(StoreError::Corrupt(format!("compaction lost the record at {serial}"))),
    };
    for bucket in catalogue::buckets(&w.tree) {
        let (key, value) = bucket?;
        batch.insert(key, catalogue::rebuilt(&value, to)?);
    }
    for item in w.tree.scan_prefix([keys::REMOVED]) {
        batch.remove(item?.0);
    }
    Ok(batch)
}

/// Compacts the store in `dir`, which no relay may hold (`hearth compact`): opened as a relay
/// would open it (a crashed tail replayed, a stale generation removed), compacted, closed.
pub async fn compact(dir: &Path, cache_capacity_mb: u64) -> Result<Compacted, StoreError> {
    let store = Store::open(dir, cache_capacity_mb)?;
    let done = store.compact().await;
    store.shutdown().await?;
    done
}

/// What a compaction reports as the store's size: the data directory's bytes (`dir`), or, for a
/// temporary store, sled's and the log's.
fn files_bytes(dir: Option<&Path>, db: &sled::Db, log: &Log) -> Result<u64, StoreError> {
    match dir {
        Some(dir) => Ok(dir_bytes(dir)?),
        None => Ok(db.size_on_disk()? + log.size()?),
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match entry.metadata() {
            // Removed since it was listed (an index segment a merge replaced).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            meta => meta?,
        };
        total += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
