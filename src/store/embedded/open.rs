//! Opening a data directory: the parts of an open store, built once.
//!
//! Owns [`Opened`] (the reader, the write side and the audit tree of one open store), opening it
//! (refusing another layout, converting layouts 3 and 4, replaying the log's tail after a crash,
//! opening the index), the in-memory store of the unit tests, and the checkpoint of a stop.

use std::path::Path;
use std::sync::{Arc, RwLock};

use super::catalogue::meta_u64;
use super::index::Indexes;
use super::migrate;
use super::query::Reader;
use super::search::{self, Searching};
use super::view::View;
use super::write::control::Control;
use super::write::remap;
use super::write::shared::Shared;
use super::write::{Writes, replay};
use crate::store::contract::{Mark, SearchTuning, Tuning};
use crate::store::db::{AUDIT_TREE, EVENTS_TREE, SETTINGS_TREE, flush_durably, open_db};
use crate::store::error::StoreError;
use crate::store::format::durable::Durable;
use crate::store::format::keys::{self, SCHEMA_VERSION};
use crate::store::format::log::{self, Log};
use crate::store::format::moves;
use crate::store::media::MediaRecords;
use crate::store::progress::Progress;

/// The parts of one open store.
pub(crate) struct Opened {
    /// The admin audit log, keyed by a big-endian sequence number.
    pub(crate) audit: sled::Tree,
    /// Reads: the catalogue, the view, the damaged records met.
    pub(crate) reader: Reader,
    /// Writes: the writer's queue, the settings, compactions.
    pub(crate) writes: Writes,
    /// The NIP-50 search index, when `storage.search` is on.
    pub(crate) search: Option<Arc<Searching>>,
    /// The media server's records.
    pub(crate) media: MediaRecords,
}

/// `Store::open` with every setting.
pub(crate) fn open_tuned(dir: &Path, tuning: Tuning) -> Result<Opened, StoreError> {
    if dir.join(migrate::PENDING).exists() {
        return Err(StoreError::Migrating { path: dir.to_path_buf() });
    }
    open_migrating(dir, tuning).map_err(|e| e.opening(dir))
}

/// `Store::open` of a directory whose migration is unfinished: for the import that
/// finishes it.
pub(crate) fn open_migrating(dir: &Path, tuning: Tuning) -> Result<Opened, StoreError> {
    let started = std::time::Instant::now();
    let db = {
        // sled reads back everything written since its last open: seconds after a long run.
        let _progress = Progress::every_few_seconds("opening the catalogue (sled)");
        open_db(dir, tuning.cache_capacity_mb)?
    };
    tracing::info!(ms = started.elapsed().as_millis() as u64, "catalogue open");
    let durable = Durable::open(dir)?;
    let open_log = |name: &str, committed| Log::open(dir, name, committed);
    let at = Some(At { dir, index_memory_events: tuning.index_memory_events, search: tuning.search.as_ref() });
    let opened = from_db(db, Some(Arc::new(durable)), at, open_log)?;
    let generation = opened.reader.view().generation;
    log::remove_other_generations(dir, &log::file_name(generation))?;
    Ok(opened)
}

/// An in-memory store for unit tests.
pub(crate) fn temporary() -> Result<Opened, StoreError> {
    let db = sled::Config::new().temporary(true).flush_every_ms(None).open()?;
    from_db(db, None, None, |_, _| Ok(Log::memory()))
}

/// Where a store on disk is, and what of it is kept beside its events.
pub(crate) struct At<'a> {
    pub(crate) dir: &'a Path,
    /// The in-memory index's size.
    pub(crate) index_memory_events: usize,
    /// The search index, when it is kept.
    pub(crate) search: Option<&'a SearchTuning>,
}

/// The store over an open database; `open_log` opens the event log file of its generation
/// at its committed end. `at` is where it is on disk (none for a temporary store).
pub(crate) fn from_db(
    db: sled::Db,
    durable: Option<Arc<Durable>>,
    at: Option<At>,
    open_log: impl FnOnce(&str, u64) -> Result<Log, log::LogError>,
) -> Result<Opened, StoreError> {
    let search = at.as_ref().and_then(|at| at.search);
    let dir = at.as_ref().map(|at| (at.dir, at.index_memory_events));
    if let Some((_, found)) = migrate::found(&db) {
        return Err(StoreError::Schema { found });
    }
    let tree = db.open_tree(EVENTS_TREE)?;
    match tree.get(keys::meta("schema"))? {
        None => {
            tree.insert(keys::meta("schema"), &[SCHEMA_VERSION])?;
            db.flush()?;
        }
        Some(v) if v.as_ref() == [SCHEMA_VERSION] => {}
        Some(v) if v.as_ref() == [3] || v.as_ref() == [4] => {
            let started = std::time::Instant::now();
            tracing::info!(layout = v[0], "converting the data directory to layout {SCHEMA_VERSION}");
            let ids = migrate::convert(&tree, v[0])?;
            flush_durably(&db, durable.as_deref())?;
            tracing::info!(
                ids,
                ms = started.elapsed().as_millis() as u64,
                "the data directory has layout {SCHEMA_VERSION} now"
            );
        }
        Some(v) => return Err(StoreError::Schema { found: v.first().copied().unwrap_or(0) }),
    }
    let (places, remap) = remap::load(&tree, dir.map(|(dir, _)| dir))?;
    if let Some((dir, _)) = dir {
        // Moves files no remap names: a compaction's that failed, or one's that finished.
        moves::remove_stale(dir, remap.map(|r| r.generation))?;
    }
    let committed = meta_u64(&tree, keys::LOG_END)?;
    let log_generation = meta_u64(&tree, keys::LOG_GEN)?;
    let log = Arc::new(open_log(&log::file_name(log_generation), committed)?);
    let tail = log.recover_tail()?;
    if !tail.is_empty() {
        tracing::info!(frames = tail.len(), "replaying the event log after a crash");
        let started = std::time::Instant::now();
        let _progress = Progress::every_few_seconds("replaying the event log");
        let frames = replay(&tree, &log, &tail, &places)?;
        flush_durably(&db, durable.as_deref())?;
        tracing::info!(frames, ms = started.elapsed().as_millis() as u64, "replayed the event log after a crash");
    }
    let (index, changed) = Indexes::open(&tree, &log, dir, log_generation, &places)?;
    let dir = dir.map(|(dir, _)| dir);
    let searching = match (dir, search) {
        (Some(dir), Some(tuning)) => Some(Arc::new(search::open(dir, tuning, &tree, &log, log_generation)?)),
        _ => None,
    };
    if changed {
        flush_durably(&db, durable.as_deref())?;
    }
    if let Some(remap) = &remap {
        tracing::info!(
            buckets_done = remap.cursor,
            old_segments = index.old_segments(),
            "a compaction's rewrite of the catalogue and the index is unfinished; it goes on in the background"
        );
    }
    let view = Arc::new(RwLock::new(View { index, log, generation: log_generation, places, mark: Mark::default() }));
    let settings = db.open_tree(SETTINGS_TREE)?;
    let audit = db.open_tree(AUDIT_TREE)?;
    let media = MediaRecords::local(&db, durable.clone())?;
    let dir = dir.map(Path::to_path_buf);
    let feed = searching.as_ref().map(|s| s.feed.clone());
    let reader = Reader { tree: tree.clone(), view: view.clone(), damaged: Arc::default() };
    let compaction = Arc::new(Control::default());
    let shared = Shared { db, tree, view, durable, dir, compaction, search: feed };
    let writes = Writes::start(shared, settings, remap)?;
    Ok(Opened { audit, reader, writes, search: searching, media })
}

/// Once `opened` is the last handle on the store (after its shutdown), closes it and
/// opens its sled database once more. sled 0.34 writes the snapshot of its page table only
/// when it opens, and an open reads back everything written since the previous one (seconds
/// after a long ingest; docs/src/performance.md, Store size), so a stop that does this leaves the next start
/// nothing to read back: the wait moves from the start, when clients are refused, to the
/// stop. Returns without it (logged) while another handle is held, for a temporary store,
/// or when the open fails (the next start then reads back as before).
pub(crate) fn checkpoint(opened: Arc<Opened>, cache_capacity_mb: u64) {
    let Some(inner) = Arc::into_inner(opened) else {
        tracing::debug!("the store is still in use: no checkpoint of the catalogue at this stop");
        return;
    };
    let Some(dir) = inner.writes.shared.dir.clone() else { return };
    drop(inner);
    let started = std::time::Instant::now();
    let opened = {
        let _progress = Progress::every_few_seconds("checkpointing the catalogue (sled)");
        open_db(&dir, cache_capacity_mb)
    };
    match opened {
        Ok(db) => {
            drop(db);
            tracing::info!(ms = started.elapsed().as_millis() as u64, "catalogue checkpointed");
        }
        Err(e) => tracing::warn!(error = %e, "the catalogue's checkpoint failed; the next start reads it back"),
    }
}

/// The event log of an open catalogue: the file of its generation, at its committed end. Also
/// returns the generation.
pub(crate) fn open_log(dir: &Path, tree: &sled::Tree) -> Result<(Log, u64), StoreError> {
    let generation = meta_u64(tree, keys::LOG_GEN)?;
    Ok((Log::open(dir, &log::file_name(generation), meta_u64(tree, keys::LOG_END)?)?, generation))
}
