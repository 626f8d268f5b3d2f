//! The blobs checked against their records: what `hearth check` reports of the media folder,
//! what `--repair` sets aside, and what a start removes.
//!
//! Owns [`Damage`], [`check`], [`repair`] and finding orphans (files no record names).

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use futures_util::StreamExt;

use super::bucket::Bucket;
use super::disk::{BlobError, MEDIA_DIR, TMP_DIR};
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

/// An object no record names is left alone until it is this old: another node may be between
/// its put and its record.
pub const UNRECORDED_AGE: std::time::Duration = std::time::Duration::from_secs(3600);
/// The prefix `--repair` moves a damaged object under, inside the bucket.
pub const DAMAGED_PREFIX: &str = "damaged/";

/// Reads every recorded blob's object back (its size asked, its bytes hashed) and lists the
/// objects no record names that are [`UNRECORDED_AGE`] old: `(damage, unrecorded)`.
pub(super) async fn bucket(bucket: &Bucket, records: &MediaRecords) -> Result<(Vec<Damage>, Vec<String>), BlobError> {
    let hashes = records.hashes()?;
    let mut damage = Vec::new();
    for hash in &hashes {
        let hash = BlobHash(*hash);
        let size = records.owners_of(&hash.0)?.first().map_or(0, |r| r.size);
        let problem = match bucket.size(&hash).await? {
            None => Some("missing".to_string()),
            Some(found) if found != size => Some(format!("size mismatch ({found} bytes, {size} recorded)")),
            Some(_) => {
                let mut hasher = Sha256::new();
                if size > 0 {
                    let gone = || BlobError::Unavailable("an object asked for a moment ago cannot be read".into());
                    let mut bytes = bucket.read(&hash, 0, size).await?.ok_or_else(gone)?;
                    while let Some(chunk) = bytes.next().await {
                        hasher.update(chunk.map_err(|e| BlobError::Unavailable(e.to_string()))?);
                    }
                }
                let found = hex::encode(hasher.finalize());
                (found != hash.to_hex()).then(|| format!("hash mismatch (the object hashes to {found})"))
            }
        };
        if let Some(problem) = problem {
            damage.push(Damage { sha256: hash.to_hex(), problem });
        }
    }
    let known: std::collections::HashSet<String> = hashes.iter().map(hex::encode).collect();
    let unrecorded = bucket
        .list()
        .await?
        .into_iter()
        .filter(|o| !known.contains(&o.name) && o.age >= UNRECORDED_AGE)
        .map(|o| o.name)
        .collect();
    Ok((damage, unrecorded))
}

/// Moves the objects of `damage` to `damaged/<sha256>` in the bucket (kept for a look, never
/// served) and deletes the `unrecorded` objects; returns the hashes whose records the caller
/// should drop.
pub(super) async fn repair_bucket(
    bucket: &Bucket,
    damage: &[Damage],
    unrecorded: &[String],
) -> Result<Vec<BlobHash>, BlobError> {
    let mut out = Vec::new();
    for d in damage {
        let Some(hash) = BlobHash::from_hex(&d.sha256) else { continue };
        if bucket.size(&hash).await?.is_some() {
            bucket.copy(&d.sha256, &format!("{DAMAGED_PREFIX}{}", d.sha256)).await?;
            bucket.delete(&hash).await?;
        }
        out.push(hash);
    }
    for name in unrecorded {
        bucket.delete_named(name).await?;
    }
    Ok(out)
}
