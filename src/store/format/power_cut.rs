//! Fault injection for the power-cut test: the event log's durable length, recorded at every
//! sync when the test asks for it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::OnceLock;

/// The environment variable that names the power-cut test's mark file (see `mark_synced`).
pub const POWER_CUT_MARK: &str = "HEARTH_POWER_CUT_MARK";

/// Fault injection for the power-cut test (`hearth-bench crash --power-cut`): when
/// [`POWER_CUT_MARK`] names a file, every sync of a log writes over that file's first 64 bytes the
/// log's file name and its length, all of it durable now. After a SIGKILL the test cuts the log
/// back to that length, losing exactly what a power cut would lose (what was written and not yet
/// synced), before it starts the relay again. Without the variable (every real run) it is one
/// check of a value read once. The length is taken after the sync returns, from the file itself:
/// a write path that skips the sync never moves the mark, so the test loses its events.
pub(super) fn mark_synced(path: &Path, file: &File) {
    static MARK: OnceLock<Option<File>> = OnceLock::new();
    let mark = MARK.get_or_init(|| {
        let path = std::env::var_os(POWER_CUT_MARK)?;
        OpenOptions::new().create(true).write(true).truncate(false).open(path).ok()
    });
    let (Some(mark), Ok(meta)) = (mark, file.metadata()) else { return };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut record = [b' '; 64];
    let text = format!("{name} {}", meta.len());
    let n = text.len().min(63);
    record[..n].copy_from_slice(&text.as_bytes()[..n]);
    record[63] = b'\n';
    // One write of 64 bytes: a SIGKILL leaves it whole or not at all.
    let _ = mark.write_at(&record, 0);
}

/// `mark_synced` for a media blob: once its bytes are synced, its SHA-256 (hex) and length are
/// appended to `<mark file>.blobs`, a line each (one write: whole or not at all). After a SIGKILL
/// the power-cut test empties every blob file that has no line, as a power cut would leave a file
/// whose bytes never reached the disk; an upload path that skipped the sync loses its blobs.
pub fn mark_blob_synced(sha256: &str, len: u64) {
    static MARK: OnceLock<Option<File>> = OnceLock::new();
    let mark = MARK.get_or_init(|| {
        let mut path = std::env::var_os(POWER_CUT_MARK)?;
        path.push(".blobs");
        OpenOptions::new().create(true).append(true).open(path).ok()
    });
    if let Some(mark) = mark {
        let _ = std::io::Write::write_all(&mut &*mark, format!("{sha256} {len}\n").as_bytes());
    }
}
