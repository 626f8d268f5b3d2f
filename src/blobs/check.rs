//! The blobs checked against their records: what `hearth check` reports of the media folder,
//! what `--repair` sets aside, and what a start removes.
//!
//! Owns [`Damage`], [`check`], [`repair`] and finding orphans (files no record names).

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::disk::{MEDIA_DIR, TMP_DIR};
use crate::protocol::blossom::BlobHash;
use crate::store::media::MediaRecords;

/// The folder damaged blobs are moved to by `--repair`, inside the data directory.
pub const DAMAGED_DIR: &str = "media-damaged";

/// One blob that is not what its records say.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// The blob's hash (its records' and its file's name).
    pub sha256: String,
    /// What is wrong: `missing`, `hash mismatch (…)` or `size mismatch (…)`.
    pub problem: String,
}

/// Files under `root` (the media folder) that are blobs no record names.
pub(super) fn orphans(root: &Path, records: &MediaRecords) -> std::io::Result<Vec<PathBuf>> {
    let known: std::collections::HashSet<[u8; 32]> =
        records.hashes().map_err(|e| std::io::Error::other(e.to_string()))?.into_iter().collect();
    let mut out = Vec::new();
    for (hash, path) in files(root)? {
        if hash.is_none_or(|h| !known.contains(&h.0)) {
            out.push(path);
        }
    }
    Ok(out)
}

/// Every file in the media folder's hash folders, with the hash its name is (`None` for a
/// name that is not one).
fn files(root: &Path) -> std::io::Result<Vec<(Option<BlobHash>, PathBuf)>> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(root) else { return Ok(out) };
    for dir in dirs {
        let dir = dir?;
        if dir.file_name() == TMP_DIR || !dir.file_type()?.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(dir.path())? {
            let file = file?;
            let hash = file.file_name().to_str().and_then(BlobHash::from_hex);
            out.push((hash, file.path()));
        }
    }
    Ok(out)
}

/// Reads every recorded blob of the data directory `dir` and compares it with its records.
pub fn check(dir: &Path, records: &MediaRecords) -> std::io::Result<Vec<Damage>> {
    let root = dir.join(MEDIA_DIR);
    let mut damage = Vec::new();
    for hash in records.hashes().map_err(|e| std::io::Error::other(e.to_string()))? {
        let hash = BlobHash(hash);
        let size = records.owners_of(&hash.0).ok().and_then(|r| r.first().map(|r| r.size)).unwrap_or(0);
        let hex = hash.to_hex();
        let path = root.join(&hex[..2]).join(&hex);
        let problem = match std::fs::File::open(&path) {
            Err(_) => Some("missing".to_string()),
            Ok(mut file) => {
                let mut hasher = Sha256::new();
                let read = std::io::copy(&mut file, &mut hasher)?;
                let found = hex::encode(hasher.finalize());
                if found != hex {
                    Some(format!("hash mismatch (the file hashes to {found})"))
                } else if read != size {
                    Some(format!("size mismatch ({read} bytes, {size} recorded)"))
                } else {
                    None
                }
            }
        };
        if let Some(problem) = problem {
            damage.push(Damage { sha256: hex, problem });
        }
    }
    Ok(damage)
}

/// Moves the files of `damage` to `<dir>/media-damaged/` (kept for a look, never served) and
/// returns the hashes whose records the caller should drop.
pub fn repair(dir: &Path, damage: &[Damage]) -> std::io::Result<Vec<BlobHash>> {
    let aside = dir.join(DAMAGED_DIR);
    let mut out = Vec::new();
    for d in damage {
        let Some(hash) = BlobHash::from_hex(&d.sha256) else { continue };
        let path = dir.join(MEDIA_DIR).join(&d.sha256[..2]).join(&d.sha256);
        if path.exists() {
            std::fs::create_dir_all(&aside)?;
            std::fs::rename(&path, aside.join(&d.sha256))?;
        }
        out.push(hash);
    }
    Ok(out)
}
