//! A blob's bytes read back, from either place, as one stream: what the media server serves, a
//! backup copies and `hearth check` hashes.
//!
//! Owns [`ByteStream`], a file's byte range streamed a chunk at a time (never read whole), and
//! any stream as a blocking reader (for a backup or an export); the bucket's streams are
//! `bucket`'s.

use std::io::SeekFrom;
use std::path::Path;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::disk::BlobError;

/// Bytes read from a blob's file at a time.
const CHUNK: usize = 512 * 1024;

/// A blob's bytes as they arrive (`Sync`, as a response body's stream must be).
pub type ByteStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = std::io::Result<Bytes>> + Send + Sync>>;

/// The bytes `start..start + length` of the file at `path`, a chunk at a time; `None` when there
/// is no file.
pub(super) async fn file(path: &Path, start: u64, length: u64) -> Result<Option<ByteStream>, BlobError> {
    let mut file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BlobError::Io(e)),
    };
    if start > 0 {
        file.seek(SeekFrom::Start(start)).await?;
    }
    let stream = futures_util::stream::unfold((file, length), |(mut file, left)| async move {
        if left == 0 {
            return None;
        }
        let mut buf = vec![0u8; CHUNK.min(usize::try_from(left).unwrap_or(CHUNK))];
        match file.read(&mut buf).await {
            Ok(0) => Some((Err(std::io::ErrorKind::UnexpectedEof.into()), (file, 0))),
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), (file, left - n as u64)))
            }
            Err(e) => Some((Err(e), (file, 0))),
        }
    });
    Ok(Some(Box::pin(stream)))
}

/// `bytes` as a blocking reader on `runtime`, for code on one of its blocking threads (a backup,
/// an export).
pub(super) fn blocking(bytes: ByteStream, runtime: tokio::runtime::Handle) -> Box<dyn std::io::Read + Send> {
    Box::new(tokio_util::io::SyncIoBridge::new_with_handle(tokio_util::io::StreamReader::new(bytes), runtime))
}
