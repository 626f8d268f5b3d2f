//! The media server's blobs in the offline commands: `hearth export --media DIR` writes them
//! out beside the events, `hearth import --media DIR` takes them back (each file's hash checked
//! against its name), and `hearth check` reads every blob against its records (`--repair` sets
//! damaged ones aside).
//!
//! Owns the folder an export writes: one file per blob named by its SHA-256, and
//! `records.jsonl`, one line per key's upload (`{"sha256","owner","size","type","uploaded"}`).

use std::io::{BufRead, Write};
use std::path::Path;

use serde::Serialize;

use super::dir::OfflineError;
use crate::app::AppState;
use crate::blobs::{self, Damage};
use crate::protocol::Timestamp;
use crate::protocol::blossom::BlobHash;
use crate::store::media::BlobRecord;

/// The records file of an export's media folder: the backup folder's `media/` is the same folder.
pub use crate::backup::folder::RECORDS;

/// What an import of a media folder did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MediaImported {
    /// Uploads (records) taken.
    pub uploads: u64,
    /// Records refused: a missing file, a file that is not its name's blob, an unreadable line,
    /// or no room (`media.max_total_bytes`); each named on stderr.
    pub invalid: u64,
}

/// What `hearth check` found of the blobs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MediaChecked {
    /// Blobs with a record.
    pub blobs: u64,
    /// Those whose file is missing or not what the records say.
    pub damaged: Vec<Damage>,
    /// Damaged blobs still there after a repair (0 without `--repair`: see `damaged`).
    pub remaining: u64,
    /// With `media.store = "s3"`: objects in the bucket no record names, an hour old or more
    /// (an upload that never finished recording); `--repair` deletes them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unrecorded: Vec<String>,
}

fn io(e: impl std::fmt::Display) -> OfflineError {
    OfflineError::Io(std::io::Error::other(e.to_string()))
}

/// Copies every recorded blob of `app` into `dir` (created), with its records; returns how many
/// blobs.
pub fn export(app: &AppState, dir: &Path) -> Result<u64, OfflineError> {
    std::fs::create_dir_all(dir)?;
    let records = app.blobs.records();
    let mut lines = std::io::BufWriter::new(std::fs::File::create(dir.join(RECORDS))?);
    let mut blobs = 0;
    for hash in records.hashes()? {
        let hash = BlobHash(hash);
        let owners = records.owners_of(&hash.0)?;
        let size = owners.first().map_or(0, |r| r.size);
        let mut bytes = app.blobs.reader(&hash, size).map_err(io)?;
        let mut copy = std::fs::File::create(dir.join(hash.to_hex()))?;
        std::io::copy(&mut bytes, &mut copy)?;
        copy.sync_all()?;
        for record in owners {
            serde_json::to_writer(&mut lines, &record).map_err(io)?;
            lines.write_all(b"\n")?;
        }
        blobs += 1;
    }
    lines.flush()?;
    lines.into_inner().map_err(io)?.sync_all()?;
    Ok(blobs)
}

/// Takes the blobs of an exported media folder `dir` into `app`: each file streamed in, hashed
/// and checked against its name, committed for each of its owners.
pub async fn import(app: &AppState, dir: &Path) -> Result<MediaImported, OfflineError> {
    let file = std::fs::File::open(dir.join(RECORDS)).map_err(|e| {
        OfflineError::Unusable(format!(
            "--media {}: no {RECORDS} in it ({e}); give the folder `hearth export --media` wrote",
            dir.display()
        ))
    })?;
    let mut done = MediaImported::default();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let refused = |why: String| eprintln!("{RECORDS} line {}: {why}", n + 1);
        let record: BlobRecord = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                refused(format!("not a blob record: {e}"));
                done.invalid += 1;
                continue;
            }
        };
        let Some(hash) = BlobHash::from_hex(&record.sha256) else {
            refused(format!("{} is not a sha256", record.sha256));
            done.invalid += 1;
            continue;
        };
        let source = match tokio::fs::File::open(dir.join(hash.to_hex())).await {
            Ok(f) => f,
            Err(e) => {
                refused(format!("{hash}: {e}"));
                done.invalid += 1;
                continue;
            }
        };
        let stream = tokio_util::io::ReaderStream::new(source);
        let received = app.blobs.receive(stream, u64::MAX, Some(record.size), Some(hash)).await;
        let committed = match received {
            Ok(received) => {
                app.blobs.commit(received, record.owner, &record.media_type, Timestamp(record.uploaded)).await
            }
            Err(e) => Err(e),
        };
        match committed {
            Ok(_) => done.uploads += 1,
            Err(e) => {
                refused(format!("{hash}: {e}"));
                done.invalid += 1;
            }
        }
    }
    Ok(done)
}

/// Reads every blob of the data directory `dir` against its records; with `repair`, moves the
/// damaged ones to `media-damaged/` and drops their records.
pub async fn check(app: &AppState, dir: &Path, repair: bool) -> Result<MediaChecked, OfflineError> {
    let records = app.blobs.records().clone();
    let blobs = records.hashes()?.len() as u64;
    if app.blobs.bucket().is_some() {
        return check_bucket(app, blobs, repair).await;
    }
    let (root, recs) = (dir.to_path_buf(), records.clone());
    let damaged = tokio::task::spawn_blocking(move || blobs::check(&root, &recs)).await.map_err(io)??;
    if !repair || damaged.is_empty() {
        let remaining = damaged.len() as u64;
        return Ok(MediaChecked {
            blobs,
            damaged,
            remaining: if repair { remaining } else { 0 },
            unrecorded: Vec::new(),
        });
    }
    for hash in blobs::repair(dir, &damaged)? {
        records.remove(hash.0, None).await?;
    }
    let (root, recs) = (dir.to_path_buf(), records.clone());
    let after = tokio::task::spawn_blocking(move || blobs::check(&root, &recs)).await.map_err(io)??;
    Ok(MediaChecked { blobs, damaged, remaining: after.len() as u64, unrecorded: Vec::new() })
}

/// [`check`] of blobs in a bucket: every recorded object read back, the unrecorded ones listed;
/// with `repair`, the damaged ones moved to `damaged/` (their records dropped) and the unrecorded
/// deleted.
async fn check_bucket(app: &AppState, blobs: u64, repair: bool) -> Result<MediaChecked, OfflineError> {
    let (damaged, unrecorded) = app.blobs.check_bucket().await.map_err(io)?;
    if !repair || (damaged.is_empty() && unrecorded.is_empty()) {
        let remaining = if repair { damaged.len() as u64 } else { 0 };
        return Ok(MediaChecked { blobs, damaged, remaining, unrecorded });
    }
    for hash in app.blobs.repair_bucket(&damaged, &unrecorded).await.map_err(io)? {
        app.blobs.records().remove(hash.0, None).await?;
    }
    let (after, _) = app.blobs.check_bucket().await.map_err(io)?;
    Ok(MediaChecked { blobs, damaged, remaining: after.len() as u64, unrecorded })
}
