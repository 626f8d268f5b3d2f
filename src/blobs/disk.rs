//! The media folder's names, the one error of blob storage, and the directory sync every
//! rename and removal ends with.
//!
//! Owns [`BlobError`], [`MEDIA_DIR`] and [`sync_dir`]: the leaf every other part of `blobs` uses.

use std::path::Path;

use crate::store::StoreError;

/// The folder of the blobs inside the data directory.
pub const MEDIA_DIR: &str = "media";
/// The folder of uploads still arriving, inside [`MEDIA_DIR`].
pub(super) const TMP_DIR: &str = "tmp";

/// What went wrong with a blob.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The body passed `media.max_blob_bytes` (or the size announced).
    #[error("the blob is larger than {0} bytes")]
    TooLarge(u64),
    /// The body's hash is not the one announced (`X-SHA-256`).
    #[error("the blob's sha256 is {found}, not the {announced} announced")]
    HashMismatch {
        /// What the client said.
        announced: String,
        /// What the bytes hash to.
        found: String,
    },
    /// The body ended before its announced length.
    #[error("the upload ended after {got} of {announced} bytes")]
    Short {
        /// Bytes announced.
        announced: u64,
        /// Bytes received.
        got: u64,
    },
    /// The client's connection failed mid-body.
    #[error("the upload was cut off: {0}")]
    Cut(String),
    /// Storing it would pass `media.max_total_bytes`, or the disk is full.
    #[error("the relay's media storage is full")]
    Full,
    /// A file operation failed.
    #[error("media storage: {0}")]
    Io(#[from] std::io::Error),
    /// The bucket (`media.store = "s3"`) could not be reached or refused the call.
    #[error("media storage: the bucket cannot be reached: {0}")]
    Unavailable(String),
    /// The store's records failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl BlobError {
    /// An I/O error, with a full disk told apart (ENOSPC, and EFBIG: a file past what the
    /// process may write, `ulimit -f`).
    pub(super) fn io(e: std::io::Error) -> BlobError {
        if matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::FileTooLarge)
            || matches!(e.raw_os_error(), Some(27 | 28))
        {
            BlobError::Full
        } else {
            BlobError::Io(e)
        }
    }
}

/// Syncs a directory, so a rename or removal in it survives a power cut.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
