//! Offline compaction: the live records copied to the event log's next generation.
//!
//! Owns rewriting `events.log` without the frames of replaced, deleted and expired events (and
//! the journal frames of removals, which are applied long since). Crash safety comes from the
//! order of three steps, each durable before the next: the new file is written and synced under
//! its own name; one sled batch moves every `i` entry to its new serial and sets `log_gen` and
//! `log_end`, flushed and synced; then the old file is removed. A crash before the batch is
//! durable leaves the old generation in charge (the next open removes the partial new file), a
//! crash after it the new one (the next open removes the old file): nothing acknowledged is
//! lost either way. It runs with no relay on the directory; an online compaction would need the
//! writer's cooperation and is not built.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::durable::Durable;
use super::index::Serial;
use super::log;
use super::{EVENTS_TREE, Store, StoreError, decode_serial, flush_durably, keys, open_db, open_log};

/// The settings document that records the last compaction.
pub const LAST_COMPACTION: &str = "last_compaction";

/// What a compaction did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Compacted {
    /// When it finished (Unix seconds).
    pub at: u64,
    /// The data directory's bytes before.
    pub before_bytes: u64,
    /// And after.
    pub after_bytes: u64,
    /// How long it took.
    pub seconds: f64,
}

/// Compacts the store in `dir`, which no relay may hold.
pub async fn compact(dir: &Path, cache_capacity_mb: u64) -> Result<Compacted, StoreError> {
    let started = Instant::now();
    // Opened once as the relay would: a crashed tail is replayed, a stale generation removed.
    let store = Store::open(dir, cache_capacity_mb)?;
    store.shutdown().await?;
    drop(store);
    let owned = dir.to_path_buf();
    tokio::task::spawn_blocking(move || rewrite(&owned, cache_capacity_mb, started))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

fn rewrite(dir: &Path, cache_capacity_mb: u64, started: Instant) -> Result<Compacted, StoreError> {
    let before_bytes = dir_bytes(dir)?;
    let db = open_db(dir, cache_capacity_mb)?;
    let tree = db.open_tree(EVENTS_TREE)?;
    let (old, generation) = open_log(dir, &tree)?;
    let mut live: Vec<(Serial, sled::IVec)> = Vec::new();
    for item in tree.scan_prefix([keys::ID]) {
        let (key, value) = item?;
        live.push((decode_serial(&value)?, key));
    }
    // In log order: the new file keeps the order the events were stored in.
    live.sort_unstable_by_key(|(serial, _)| *serial);
    let next = log::file_name(generation + 1);
    let path = dir.join(&next);
    let file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&path)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut batch = sled::Batch::default();
    let (mut at, mut frame) = (0u64, Vec::new());
    for (serial, key) in &live {
        frame.clear();
        let len = log::push_frame(&mut frame, &old.read(*serial)?);
        out.write_all(&frame)?;
        batch.insert(key, &at.to_be_bytes());
        at += len;
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    std::fs::File::open(dir)?.sync_all()?;
    batch.insert(keys::meta(keys::LOG_END), &at.to_be_bytes());
    batch.insert(keys::meta(keys::LOG_GEN), &(generation + 1).to_be_bytes());
    tree.apply_batch(batch)?;
    flush_durably(&db, Some(&Durable::open(dir)?))?;
    drop(old);
    log::remove_other_generations(dir, &next)?;
    let done = Compacted {
        at: crate::protocol::Timestamp::now().0,
        before_bytes,
        after_bytes: dir_bytes(dir)?,
        seconds: started.elapsed().as_secs_f64(),
    };
    // For `GET /admin/v1/store`; the compaction itself is complete without it.
    let record = serde_json::to_vec(&done).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    db.open_tree(super::SETTINGS_TREE)?.insert(LAST_COMPACTION, record)?;
    flush_durably(&db, Some(&Durable::open(dir)?))?;
    Ok(done)
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
