//! sled's database as the store uses it: its trees, opening it, and a flush that is durable.
//!
//! Owns the names of the trees (the catalogue's, the settings', the older layouts'), opening a
//! data directory's database (waiting a moment for a just-closed one's lock, refusing one in
//! use, removing a snapshot a kill cut off), and the flush that every write path ends with.

use std::path::Path;
use std::time::Duration;

use super::error::StoreError;
use super::format::durable::Durable;

/// The tree of this layout (and of layout 3, converted in place); older layouts lived in other
/// trees.
pub const EVENTS_TREE: &str = "events_v3";
/// Small named JSON documents (admin overrides, moderation state, the last compaction).
pub const SETTINGS_TREE: &str = "settings_v1";
/// The admin audit log, keyed by a big-endian sequence number.
pub const AUDIT_TREE: &str = "audit_v1";
/// The trees of older layouts, with their versions.
pub const OLD_TREES: [(&str, u8); 2] = [("events_v1", 1), ("events_v2", 2)];
/// How long [`open_db`] waits for a just-closed database's file lock. The unit tests reopen
/// directories they have just closed, in one process, beside other tests busy with the same
/// disk, where sled's last write of a closed database can take seconds to finish: they wait for
/// the lock as for any condition, up to a deadline that only tells a held lock from a slow one.
const LOCK_WAIT: Duration = if cfg!(test) { Duration::from_secs(60) } else { Duration::from_secs(2) };
/// How often it tries meanwhile.
const LOCK_RETRY: Duration = Duration::from_millis(20);

/// Opens the sled database of `dir`. sled's I/O threads can hold a closed database's file lock
/// for a moment after its last handle is dropped (seen when the same process reopens the
/// directory at once); another process holding it is [`StoreError::InUse`], after this wait.
pub fn open_db(dir: &Path, cache_capacity_mb: u64) -> Result<sled::Db, StoreError> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(cache_capacity_mb.saturating_mul(1024 * 1024))
        // Writes dominate a relay's storage work; LowSpace compacts more eagerly.
        .mode(sled::Mode::HighThroughput)
        // Every write is flushed by the writer before it is acknowledged.
        .flush_every_ms(None);
    let mut waited = Duration::ZERO;
    loop {
        match config.open() {
            Err(e) if lock_busy(&e) && waited < LOCK_WAIT => {
                if waited.is_zero() {
                    // Debug only: the wait is short, and an offline command refused for a
                    // directory in use says that in one line.
                    tracing::debug!(path = %dir.display(), "waiting for the data directory's lock");
                }
                std::thread::sleep(LOCK_RETRY);
                waited += LOCK_RETRY;
            }
            Err(e) if lock_busy(&e) => return Err(StoreError::InUse { path: dir.to_path_buf() }),
            Err(sled::Error::Corruption { .. }) if remove_unfinished_snapshots(dir)? => {
                tracing::warn!(path = %dir.display(), "removed a snapshot of sled's that a kill cut off; opening again");
            }
            other => return Ok(other?),
        }
    }
}

/// Removes the snapshot files that sled was still writing when it was killed; true when there
/// were any. sled 0.34 writes `snap.<lsn>.generating` and renames it when complete, but reads the
/// highest-named `snap.` file at open, unfinished ones included, and then refuses to open as
/// corrupt. Only called after sled, holding the directory's lock, refused the open: no other
/// process's sled was writing one then.
fn remove_unfinished_snapshots(dir: &Path) -> Result<bool, StoreError> {
    let mut removed = false;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            std::fs::remove_file(entry.path())?;
            removed = true;
        }
    }
    Ok(removed)
}

/// sled's error for a data directory whose file lock is held (it has no error kind of its own).
fn lock_busy(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock"))
}

/// sled's flush, then the data sync that makes it durable (see [`Durable`]; a temporary store
/// has nothing to sync). The writer and the settings/audit paths both end their writes here.
pub fn flush_durably(db: &sled::Db, durable: Option<&Durable>) -> Result<(), StoreError> {
    db.flush()?;
    Ok(durable.map_or(Ok(()), Durable::sync)?)
}
