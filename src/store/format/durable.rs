//! What makes a sled flush durable: the one place that syncs sled's files.
//!
//! sled's flush ends in `sync_file_range` on Linux, which neither makes the drive flush its
//! write cache nor persists a grown file's size, and it never syncs the files it writes for
//! nodes too large for a log segment (`blobs/`, over 128 KiB: e.g. a leaf of large settings
//! documents). After a flush [`Durable::sync`] calls `fdatasync` on the log file (`db`) and on each
//! blob file not yet synced, then syncs the blob directory so the new names survive too. Settings
//! and audit writes return only after it; the writer runs it behind the event log, at most once a second,
//! which is what acknowledges events ([`super::log`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// sled's log file in the data directory.
const LOG: &str = "db";
/// sled's directory of large nodes.
const BLOBS: &str = "blobs";

/// The files of one sled data directory that need syncing after a flush.
pub struct Durable {
    log: File,
    blobs: PathBuf,
    /// Blob files already synced (sled never rewrites a blob: each gets a new name).
    synced: Mutex<HashSet<OsString>>,
}

impl Durable {
    /// For the sled database opened in `dir`; syncs the directories once, so the files sled
    /// created at open are durable too.
    pub fn open(dir: &Path) -> io::Result<Durable> {
        let log = File::open(dir.join(LOG))?;
        let blobs = dir.join(BLOBS);
        File::open(dir)?.sync_all()?;
        let durable = Durable { log, blobs, synced: Mutex::new(HashSet::new()) };
        durable.sync()?;
        Ok(durable)
    }

    /// Makes everything sled has flushed durable.
    pub fn sync(&self) -> io::Result<()> {
        self.log.sync_data()?;
        let mut synced = self.synced.lock().unwrap_or_else(PoisonError::into_inner);
        let mut seen = HashSet::new();
        let mut new = false;
        for entry in std::fs::read_dir(&self.blobs)? {
            let entry = entry?;
            let name = entry.file_name();
            if !synced.contains(&name) {
                match File::open(entry.path()) {
                    Ok(f) => f.sync_data()?,
                    // Removed by sled since the listing: nothing left to sync.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                new = true;
            }
            seen.insert(name);
        }
        if new {
            File::open(&self.blobs)?.sync_all()?;
        }
        // Forget blobs sled has deleted, so the set stays as small as the directory.
        *synced = seen;
        Ok(())
    }

    /// The blob files synced so far that existed at the last sync (tests).
    #[cfg(test)]
    pub fn synced_blobs(&self) -> HashSet<OsString> {
        self.synced.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
