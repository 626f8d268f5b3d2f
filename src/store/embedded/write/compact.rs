//! Compaction: the live records copied to the event log's next generation, while the relay runs.
//!
//! Owns rewriting the event log without the frames of replaced, deleted and expired events (and
//! the journal frames of removals and sweeps, which sled holds long since), starting one on an
//! operator's request or when the dead bytes pass the [`CompactPolicy`], and recording the last
//! one. It runs in three steps:
//!
//! 1. **Copy**, on a thread of its own while reads and writes go on: every event indexed when it
//!    starts is copied, in log order, to the next generation's file, which is then synced; where
//!    each record went (the moves, [`moves`]) is written to `moves.<generation>` and synced.
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
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use super::remap::{self, Remap};
use super::shared::Shared;
use crate::protocol::Timestamp;
use crate::store::contract::Compacted;
use crate::store::embedded::catalogue::{self, Places};
use crate::store::embedded::index::meta::remove_other_generations;
use crate::store::error::StoreError;
use crate::store::format::log::{self, FRAME_HEADER, Log};
use crate::store::format::moves::{self, Moves, MovesFile};
use crate::store::format::{Serial, keys, record};

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

/// The first step's result, handed to the writer: the new log and where each record went.
pub(crate) struct Prepared {
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
pub(crate) struct Swapped {
    /// Its figures so far (the pauses).
    pub compacted: Compacted,
    started: Instant,
}

impl Swapped {
    /// The compaction's figures once its remap is done.
    pub(crate) fn done(mut self, w: &Shared) -> Result<Compacted, StoreError> {
        self.compacted.at = Timestamp::now().0;
        self.compacted.after_bytes = files_bytes(w.dir.as_deref(), &w.db, &w.log())?;
        self.compacted.seconds = self.started.elapsed().as_secs_f64();
        Ok(self.compacted)
    }
}

/// The first step: every event indexed now copied to the next generation's log, synced.
pub(crate) fn copy_live(w: &Shared, started: Instant, before_bytes: u64) -> Result<Prepared, StoreError> {
    let (old, generation, indexed, places) = {
        let view = w.view.read().unwrap_or_else(PoisonError::into_inner);
        (view.log.clone(), view.generation + 1, view.index.indexed(), view.places.clone())
    };
    let dir = w.dir.as_deref();
    let copied = (|| {
        // The events indexed now: every one of them has its `i` entry, and the later ones
        // (which the swap copies) all lie after them in the log.
        let live = catalogue::live_serials(&w.tree, &places, indexed)?;
        let new = Arc::new(new_log(dir, generation)?);
        let mut moved = Vec::with_capacity(live.len());
        let rate = w.compaction.policy.lock().unwrap_or_else(PoisonError::into_inner).max_bytes_per_sec;
        let stopping = Some(&w.compaction.stopping);
        let mut end = copy_frames(&old, &new, 0, live.into_iter(), &mut moved, rate, stopping)?;
        // Catch up with what was stored meanwhile, a few rounds while it is much, so that the
        // swap, which writes wait for, copies only the last little.
        let mut from = indexed;
        for _ in 0..CATCH_UP_ROUNDS {
            let now = w.view.read().unwrap_or_else(PoisonError::into_inner).index.indexed();
            if now.saturating_sub(from) < CATCH_UP_ENOUGH {
                break;
            }
            let since = stored_since(&w.tree, &places, &old, from, now)?;
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
        remove_other_generations(dir, &[current])?;
        moves::remove_stale(dir, None)
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
pub(crate) fn finish(w: &Shared, mut prepared: Prepared) -> (Option<Remap>, Result<Swapped, StoreError>) {
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
            remove_other_generations(dir, &[prepared.generation - 1, prepared.generation])?;
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
fn swap(w: &Shared, p: &mut Prepared) -> Result<(Duration, Remap), StoreError> {
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

/// What a compaction reports as the store's size: the data directory's bytes (`dir`), or, for a
/// temporary store, sled's and the log's.
pub(crate) fn files_bytes(dir: Option<&Path>, db: &sled::Db, log: &Log) -> Result<u64, StoreError> {
    match dir {
        Some(dir) => Ok(dir_bytes(dir)?),
        None => Ok(db.size_on_disk()? + log.size()?),
    }
}

/// Bytes of the files under `dir`, the search index's left out (it is not the store's, and a
/// compaction leaves it as it is).
fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == crate::search::SEARCH_DIR {
            continue;
        }
        let meta = match entry.metadata() {
            // Removed since it was listed (an index segment a merge replaced).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            meta => meta?,
        };
        total += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
