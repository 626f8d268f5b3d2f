//! An upload arriving: its bytes streamed into a temporary file while they are hashed, then
//! fsynced; placed under its hash by a rename.
//!
//! Owns [`Received`] and [`receive`]. The body is never held whole: each chunk is hashed
//! and written as it comes, and refused the moment it passes the size allowed.

use std::path::Path;

use bytes::Buf;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::disk::{BlobError, sync_dir};
use crate::protocol::blossom::BlobHash;

/// A blob received whole into a temporary file (removed if it is dropped unplaced).
#[derive(Debug)]
pub struct Received {
    /// What its bytes hash to.
    pub hash: BlobHash,
    /// How many there are.
    pub size: u64,
    file: tempfile::TempPath,
}

impl Received {
    /// Where its bytes wait to be placed.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// Renames the file to `target` (unless a whole copy is already there) and syncs the
    /// folder, so the blob is in place for good.
    pub(super) async fn place(self, target: &Path) -> Result<(), BlobError> {
        let target = target.to_path_buf();
        tokio::task::spawn_blocking(move || {
            if target.exists() {
                return Ok(());
            }
            let dir = target.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir).map_err(BlobError::io)?;
            self.file.persist(&target).map_err(|e| BlobError::io(e.error))?;
            sync_dir(dir).map_err(BlobError::io)?;
            if let Some(parent) = dir.parent() {
                sync_dir(parent).map_err(BlobError::io)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| BlobError::Io(std::io::Error::other(e.to_string())))?
    }
}

/// Streams `body` into a temporary file in `tmp`: at most `limit` bytes, exactly `announced`
/// when the client said how many, hashing to `expected` when it said which. Fsynced before it
/// returns.
pub(super) async fn receive<B: Buf, E: std::fmt::Display>(
    tmp: &Path,
    body: impl Stream<Item = Result<B, E>>,
    (limit, announced, expected): (u64, Option<u64>, Option<BlobHash>),
) -> Result<Received, BlobError> {
    let named = tempfile::Builder::new().prefix("upload-").tempfile_in(tmp).map_err(BlobError::io)?;
    let (std_file, path) = named.into_parts();
    let mut file = tokio::fs::File::from_std(std_file);
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let mut chunk = chunk.map_err(|e| BlobError::Cut(e.to_string()))?;
        size = size.saturating_add(chunk.remaining() as u64);
        if size > limit || announced.is_some_and(|a| size > a) {
            return Err(BlobError::TooLarge(announced.unwrap_or(limit).min(limit)));
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            hasher.update(part);
            file.write_all(part).await.map_err(BlobError::io)?;
            let n = part.len();
            chunk.advance(n);
        }
    }
    if let Some(announced) = announced.filter(|a| *a != size) {
        return Err(BlobError::Short { announced, got: size });
    }
    file.flush().await.map_err(BlobError::io)?;
    let hash = BlobHash(hasher.finalize().into());
    // Durable before the blob is placed and acknowledged.
    file.sync_all().await.map_err(BlobError::io)?;
    if let Some(expected) = expected.filter(|e| *e != hash) {
        return Err(BlobError::HashMismatch { announced: expected.to_hex(), found: hash.to_hex() });
    }
    Ok(Received { hash, size, file: path })
}
