//! Compaction: the live records copied to the event log's next generation, while the relay runs.
//!
//! Owns rewriting the event log without the frames of replaced, deleted and expired events (and
//! the journal frames of removals and sweeps, which sled holds long since), starting one on an
//! operator's request or when the dead bytes pass the [`CompactPolicy`], and recording the last
//! one. It runs in three steps:
//!
//! 1. **Copy**, on a thread of its own while reads and writes go on: every event indexed when it
//!    starts is copied, in log order, to the next generation's file, which is then synced; where
//!    each record went (the moves, [`super::remap`]) is written to `moves.<generation>` and synced.
//! 2. **Swap**, on the writer thread between two groups (writes wait): the events stored since
//!    are found (the log after where the copy began, each frame's `i` entry looked up), copied
//!    too, and their moves appended; one small sled batch names the new generation, flips the
//!    catalogue's parity, records the unfinished remap and the removals at their new serials;
//!    the view swaps to the new log, the index (the same segments, read through the moves; the
//!    in-memory events moved) and the new places at once; sled is flushed and synced before the
//!    writer takes the next write; the old log is removed. Nothing in it grows with the store:
//!    only with what was written during the copy, the in-memory index and the removed set.
//! 3. **Remap**, in the background: the writer rewrites the catalogue's buckets a step at a time
//!    between its groups, and the merge thread writes the old segments out again at the new
//!    serials; then the remap's record goes, then the moves file. Until then lookups and scans
//!    read old places through the moves, and another compaction is refused.
//!
//! A crash before the swap's batch is durable leaves the old generation in charge (the next open
//! removes the new files), a crash after it the new one (the next open removes the old log and
//! goes on with the remap where it was); either way every acknowledged write is there, because
//! none is acknowledged between the batch and its flush. An export or a query that took the old
//! log before the swap goes on reading it: the file stays open, removed, until its last reader
//! lets go.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot};

use super::index::Serial;
use super::indexes;
use super::log::{self, FRAME_HEADER, Log};
use super::remap::{self, Moves, MovesFile, Places, Remap};
use super::writer::{WriteOp, Writer};
use super::{Store, StoreError, View, catalogue, keys, record};
use crate::protocol::Timestamp;

/// The settings document that records the last compaction.
pub const LAST_COMPACTION: &str = "last_compaction";
/// Bytes of frames a compaction writes at once.
const CHUNK: usize = 256 * 1024;
/// The longest a throttled copy sleeps before it looks whether the store is stopping.
const NAP: Duration = Duration::from_millis(50);
/// Rounds of catching up with the writes made during the copy, at most.
const CATCH_UP_ROUNDS: usize = 4;
/// Fewer new log bytes than this are left to the swap.
const CATCH_UP_ENOUGH: u64 = 1 << 20;
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
    /// How long writes waited for its swap (milliseconds).
    #[serde(default)]
    pub writes_paused_ms: f64,
    /// How long reads waited for its swap (milliseconds): the moment the view changes.
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
    /// Set while a compaction's remap is unfinished (after its swap, or found at open): no other
    /// compaction starts until it is done.
    remapping: AtomicBool,
    /// Why the remap's last step failed, until a step succeeds.
    remap_failing: Mutex<Option<String>>,
    due: Notify,
    policy: Mutex<CompactPolicy>,
    /// No automatic compaction before this (set when one failed).
    quiet_until: Mutex<Option<Instant>>,
    /// Set when the store shuts down: a copy in progress stops, so that a stop does not wait for
    /// a throttled compaction of a large log.
    pub(super) stopping: AtomicBool,
    /// Tests hold the writer's part of a remap, to look at a store in the middle of one.
    #[cfg(test)]
    pub(super) hold_remap: AtomicBool,
    /// Tests make the steps of a remap fail, as a full disk would.
    #[cfg(test)]
    pub(super) fail_remap: AtomicBool,
    /// Tests hold a compaction between its copy (`copied` is set then) and its swap.
    #[cfg(test)]
    pub(super) hold_swap: AtomicBool,
    #[cfg(test)]
    pub(super) copied: AtomicBool,
}

impl Control {
    /// True while a compaction runs, its remap included.
    pub(super) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire) || self.remapping.load(Ordering::Acquire)
    }

    /// A remap is unfinished (found at open, or after a swap).
    pub(super) fn resume(&self) {
        self.remapping.store(true, Ordering::Release);
    }

    /// True while a test holds the writer's part of a remap.
    pub(super) fn remap_held(&self) -> bool {
        #[cfg(test)]
        return self.hold_remap.load(Ordering::Acquire);
        #[cfg(not(test))]
        false
    }

    /// An error while a test makes the remap's steps fail.
    pub(super) fn remap_step_failure(&self) -> Result<(), StoreError> {
        #[cfg(test)]
        if self.fail_remap.load(Ordering::Acquire) {
            return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device").into());
        }
        Ok(())
    }

    /// How the remap's last step went.
    pub(super) fn remap_stepped(&self, failed: Option<String>) {
        *self.remap_failing.lock().unwrap_or_else(PoisonError::into_inner) = failed;
    }

    /// The remap is done.
    pub(super) fn remapped(&self) {
        self.remapping.store(false, Ordering::Release);
    }

    /// Called by the writer after each group: wakes [`Store::compaction_due`] when the view's log
    /// is due under the policy.
    pub(super) fn check_due(&self, view: &View) {
        if self.is_running() {
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
        if control.remapping.load(Ordering::Acquire) {
            return Err(StoreError::Compacting);
        }
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
    /// Where the copy began in the old log: the events stored since lie after it.
    from: Serial,
    /// Old serial → new serial, in log order.
    moved: Vec<(Serial, Serial)>,
    /// The moves file (none for a temporary store).
    file: Option<MovesFile>,
    started: Instant,
    before_bytes: u64,
}

/// What the writer keeps of a compaction from its swap until its remap is done, to answer it then.
pub(super) struct Swapped {
    /// Its figures so far (the pauses).
    pub compacted: Compacted,
    started: Instant,
}

impl Swapped {
    /// The compaction's figures once its remap is done.
    pub(super) fn done(mut self, w: &Writer) -> Result<Compacted, StoreError> {
        self.compacted.at = Timestamp::now().0;
        self.compacted.after_bytes = files_bytes(w.dir.as_deref(), &w.db, &w.log())?;
        self.compacted.seconds = self.started.elapsed().as_secs_f64();
        Ok(self.compacted)
    }
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
        #[cfg(test)]
        {
            self.inner.compaction.copied.store(true, Ordering::Release);
            while self.inner.compaction.hold_swap.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let (reply, rx) = oneshot::channel();
        let op = WriteOp::Compact { prepared: Box::new(prepared), reply };
        self.inner.tx.send(op).await.map_err(|_| StoreError::Closed)?;
        // Answered once the remap is done too (a stop before then leaves it to the next start).
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
            match store.compact_claimed(running).await {
                Err(StoreError::Closed) if store.inner.compaction.stopping.load(Ordering::Acquire) => {
                    tracing::info!("the store stopped during a compaction; the next start finishes or drops it");
                }
                Err(e) => tracing::error!(error = %e, "compaction failed"),
                Ok(_) => {}
            }
        });
        true
    }

    /// True while a compaction runs (its background remap included).
    pub fn is_compacting(&self) -> bool {
        self.inner.compaction.is_running()
    }

    /// Resolves once no compaction runs, a remap resumed at open included (the writer finishes
    /// one while idle); [`StoreError::Remap`] once a step of that remap fails (the writer would
    /// retry it for ever: a full disk).
    pub(super) async fn until_compaction_ends(&self) -> Result<(), StoreError> {
        while self.is_compacting() {
            let failing = self.inner.compaction.remap_failing.lock().unwrap_or_else(PoisonError::into_inner).clone();
            if let Some(error) = failing {
                return Err(StoreError::Remap(error));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Sets when the store compacts on its own, and how fast.
    pub fn set_compaction_policy(&self, policy: CompactPolicy) {
        *self.inner.compaction.policy.lock().unwrap_or_else(PoisonError::into_inner) = policy;
        self.inner.compaction.check_due(&self.view());
    }

    /// Starts a compaction and returns once its swap is done, with the writer's part of its remap
    /// held until [`Store::release_remap`] (or a reopen).
    #[cfg(test)]
    pub(super) async fn compact_until_swapped(&self) {
        self.until_compaction_ends().await.unwrap();
        self.inner.compaction.hold_remap.store(true, Ordering::Release);
        assert!(self.start_compaction());
        while self.view().places.moved().is_none() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Lets a held remap go on, and waits until it is done.
    #[cfg(test)]
    pub(super) async fn release_remap(&self) {
        self.inner.compaction.hold_remap.store(false, Ordering::Release);
        self.until_compaction_ends().await.unwrap();
    }

    /// Waits until no task holds another handle of this store (a held compaction's task lets go
    /// once the store has shut down), so that the directory can be opened again.
    #[cfg(test)]
    pub(super) async fn until_alone(&self) {
        while Arc::strong_count(&self.inner) > 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// True while a compaction's remap is unfinished (its moves are still read).
    #[cfg(test)]
    pub(super) fn remapping(&self) -> bool {
        self.view().places.moved().is_some()
    }

    /// Resolves when the log is due for a compaction under the policy (checked after each write).
    pub async fn compaction_due(&self) {
        self.inner.compaction.due.notified().await;
    }

    /// The first step: every event indexed now copied to the next generation's log, synced.
    fn copy_live(&self, started: Instant, before_bytes: u64) -> Result<Prepared, StoreError> {
        let (old, generation, indexed, places) = {
            let view = self.view();
            (view.log.clone(), view.generation + 1, view.index.indexed(), view.places.clone())
        };
        let dir = self.inner.dir.as_deref();
        let copied = (|| {
            // The events indexed now: every one of them has its `i` entry, and the later ones
            // (which the swap copies) all lie after them in the log.
            let live = indexes::live_serials(&self.inner.tree, &places, indexed)?;
            let new = Arc::new(new_log(dir, generation)?);
            let mut moved = Vec::with_capacity(live.len());
            let rate = self.inner.compaction.policy.lock().unwrap_or_else(PoisonError::into_inner).max_bytes_per_sec;
            let stopping = Some(&self.inner.compaction.stopping);
            let mut end = copy_frames(&old, &new, 0, live.into_iter(), &mut moved, rate, stopping)?;
            // Catch up with what was stored meanwhile, a few rounds while it is much, so that the
            // swap, which writes wait for, copies only the last little.
            let mut from = indexed;
            for _ in 0..CATCH_UP_ROUNDS {
                let now = self.view().index.indexed();
                if now.saturating_sub(from) < CATCH_UP_ENOUGH {
                    break;
                }
                let since = stored_since(&self.inner.tree, &places, &old, from, now)?;
                end = copy_frames(&old, &new, end, since.into_iter(), &mut moved, rate, stopping)?;
                from = now;
            }
            new.sync()?;
            let file = match dir {
                Some(dir) => {
                    let mut file = MovesFile::create(dir, generation)?;
                    file.append(&moved)?;
                    file.sync()?;
                    Some(file)
                }
                None => None,
            };
            Ok(Prepared { log: new, generation, end, from, moved, file, started, before_bytes })
        })();
        if copied.is_err() {
            discard(dir, generation - 1);
        }
        copied
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

/// Removes a compaction's new files after it failed, keeping generation `current` (which has no
/// remap: a compaction does not start while one is unfinished).
fn discard(dir: Option<&Path>, current: u64) {
    let removed = |dir: &Path| {
        log::remove_other_generations(dir, &log::file_name(current))?;
        indexes::remove_other_generations(dir, &[current])?;
        remap::remove_stale(dir, None)
    };
    if let Some(dir) = dir
        && let Err(e) = removed(dir)
    {
        tracing::error!(error = %e, "removing the files of a failed compaction failed");
    }
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

/// The second step, on the writer thread between groups: see the module documentation. Returns
/// the remap the writer goes on with (once the swap happened, whatever else failed after it) and
/// the compaction so far.
pub(super) fn finish(w: &Writer, mut prepared: Prepared) -> (Option<Remap>, Result<Swapped, StoreError>) {
    let paused = Instant::now();
    let (reads_paused, remap) = match swap(w, &mut prepared) {
        Ok(swapped) => swapped,
        Err(e) => {
            // Nothing points at the new files yet.
            discard(w.dir.as_deref(), prepared.generation - 1);
            return (None, Err(e));
        }
    };
    // The old file goes only once sled says, durably, that the new one is the log; no write is
    // acknowledged before that.
    let outcome = w.flush().and_then(|()| {
        let writes_paused = paused.elapsed();
        if let Some(dir) = &w.dir {
            // The previous generation's segments stay until the merge thread has rewritten them.
            log::remove_other_generations(dir, &log::file_name(prepared.generation))?;
            indexes::remove_other_generations(dir, &[prepared.generation - 1, prepared.generation])?;
        }
        let compacted = Compacted {
            at: 0,
            before_bytes: prepared.before_bytes,
            after_bytes: 0,
            seconds: 0.0,
            writes_paused_ms: writes_paused.as_secs_f64() * 1e3,
            reads_paused_ms: reads_paused.as_secs_f64() * 1e3,
        };
        Ok(Swapped { compacted, started: prepared.started })
    });
    (Some(remap), outcome)
}

/// Copies what was stored since the first step, then points the store at the new log: one small
/// sled batch and one change of the view. Fails only before the batch is applied. Returns how
/// long readers waited (the view's change) and the remap it leaves.
fn swap(w: &Writer, p: &mut Prepared) -> Result<(Duration, Remap), StoreError> {
    // Only this thread changes the log and the catalogue, so what it reads now holds until it
    // changes them.
    let (old, places) = {
        let view = w.view.read().unwrap_or_else(PoisonError::into_inner);
        (view.log.clone(), view.places.clone())
    };
    // Events stored since the copy began lie after every copied one in the old log, so they do in
    // the new one too: the order of serials, which the index's lists rely on, is kept.
    let since = stored_since(&w.tree, &places, &old, p.from, old.end())?;
    let first_since = p.moved.len();
    p.end = copy_frames(&old, &p.log, p.end, since.into_iter(), &mut p.moved, 0, None)?;
    p.log.sync()?;
    p.log.commit(p.end);
    let (pairs, crc) = match &mut p.file {
        Some(file) => {
            file.append(&p.moved[first_since..])?;
            file.sync()?
        }
        None => (p.moved.len() as u64, 0),
    };
    let moved = Arc::new(Moves::new(std::mem::take(&mut p.moved)));
    let (index, tail_removed) = {
        let view = w.view.read().unwrap_or_else(PoisonError::into_inner);
        (view.index.compacted(&moved, p.end, p.generation), view.index.tail_removed(&moved, p.end))
    };
    let places = places.flipped(moved);
    let remap = Remap { generation: p.generation, pairs, crc, cursor: 0 };
    let mut batch = sled::Batch::default();
    // The removals the old segments needed, at their new serials (the ones dropped are gone).
    for item in w.tree.scan_prefix([keys::REMOVED]) {
        batch.remove(item?.0);
    }
    for (serial, bytes) in index.removed_entries().chain(tail_removed) {
        batch.insert(keys::removed(serial), &bytes.to_be_bytes());
    }
    // Every removal in the new log is recorded from its start.
    batch.insert(keys::meta(keys::TAIL_RECORDED), &0u64.to_be_bytes());
    batch.insert(keys::meta(keys::LOG_END), &p.end.to_be_bytes());
    batch.insert(keys::meta(keys::LOG_GEN), &p.generation.to_be_bytes());
    batch.insert(keys::meta(keys::INDEX), index.meta().encode());
    batch.insert(keys::meta(remap::PARITY_META), &[places.parity_byte()]);
    remap.put_into(&mut batch);
    w.tree.apply_batch(batch)?;
    let waiting = Instant::now();
    let mut view = w.view_mut();
    view.index = index;
    view.log = p.log.clone();
    view.generation = p.generation;
    view.places = places;
    drop(view);
    Ok((waiting.elapsed(), remap))
}

/// The serials of the events stored in `log` from `from` to `to` (frame boundaries of indexed
/// groups) that are still stored (their `i` entries point at them): what a compaction's copy did
/// not see yet.
fn stored_since(
    tree: &sled::Tree,
    places: &Places,
    log: &Log,
    from: Serial,
    to: Serial,
) -> Result<Vec<Serial>, StoreError> {
    let (mut out, mut at) = (Vec::new(), from);
    while at < to {
        let frame = log.read(at)?;
        let serial = at;
        at += FRAME_HEADER + frame.len() as u64;
        if frame.first() != Some(&record::FORMAT) {
            continue;
        }
        let header = record::header(&frame)?;
        if catalogue::get(tree, places, &header.id)? == Some(serial) {
            out.push(serial);
        }
    }
    Ok(out)
}

/// Compacts the store in `dir`, which no relay may hold (`hearth compact`): opened as a relay
/// would open it (a crashed tail replayed, a stale generation removed), compacted, closed.
pub async fn compact(dir: &Path, cache_capacity_mb: u64) -> Result<Compacted, StoreError> {
    let store = Store::open(dir, cache_capacity_mb)?;
    // A compaction cut off after its swap left its remap to this open, which finishes it first
    // (`compact` would refuse while it runs).
    if let Err(e) = store.until_compaction_ends().await {
        store.close(cache_capacity_mb).await?;
        return Err(e);
    }
    let done = store.compact().await;
    store.close(cache_capacity_mb).await?;
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
