//! The blobs' bytes in an S3-compatible bucket (`media.store = "s3"`): one object per blob,
//! named by its SHA-256, which every node naming the bucket reads and writes.
//!
//! Owns [`Bucket`] over `object_store`'s S3 client: a received blob put from its spooled file
//! (in 8 MiB parts past 8 MiB, the upload aborted when a part fails), a byte range streamed
//! back, a blob's size asked, an object deleted, every object listed. Each call gives up after
//! [`CALL_TIMEOUT`] with one retry: a service that is away is [`BlobError::Unavailable`], which
//! the media server answers 503 with a `Retry-After`, never a half-recorded blob.

use std::path::Path;
use std::time::Duration;

use futures_util::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, PutPayload, RetryConfig};
use tokio::io::AsyncReadExt;

use super::disk::BlobError;
use super::read::ByteStream;
use crate::config::MediaConfig;
use crate::protocol::blossom::BlobHash;

/// How long one call to the service may take before it is given up (and retried once).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Blobs larger than this are put in parts of this size (S3 takes parts of 5 MiB and more).
const PART: usize = 8 << 20;

/// One object of the bucket, as a listing gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// Its name (a blob's SHA-256, for the objects hearth wrote).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// How long ago it was last written.
    pub age: Duration,
}

/// The bucket of `media.s3_*`.
#[derive(Clone, Debug)]
pub struct Bucket {
    s3: AmazonS3,
    /// `<endpoint>/<bucket>`, for the logs (never the credentials).
    name: String,
}

fn unavailable(e: object_store::Error) -> BlobError {
    BlobError::Unavailable(e.to_string())
}

impl Bucket {
    /// The bucket `config` names (path-style requests, so any endpoint works, plain HTTP
    /// included for a service on the LAN). Nothing is asked of the service yet.
    pub fn new(config: &MediaConfig) -> Result<Bucket, BlobError> {
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: 1,
            retry_timeout: CALL_TIMEOUT,
        };
        let client = ClientOptions::new()
            .with_allow_http(true)
            .with_timeout(CALL_TIMEOUT)
            .with_connect_timeout(Duration::from_secs(5));
        let s3 = AmazonS3Builder::new()
            .with_endpoint(config.s3_endpoint.trim().trim_end_matches('/'))
            .with_bucket_name(config.s3_bucket.trim())
            .with_region(config.s3_region.trim())
            .with_access_key_id(config.s3_access_key_id.trim())
            .with_secret_access_key(config.s3_secret_access_key.expose())
            .with_virtual_hosted_style_request(false)
            .with_retry(retry)
            .with_client_options(client)
            .build()
            .map_err(|e| BlobError::Unavailable(format!("media.s3_*: {e}")))?;
        let name = format!("{}/{}", config.s3_endpoint.trim().trim_end_matches('/'), config.s3_bucket.trim());
        Ok(Bucket { s3, name })
    }

    /// `<endpoint>/<bucket>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn path(hash: &BlobHash) -> ObjectPath {
        ObjectPath::from(hash.to_hex())
    }

    /// Puts the `size` bytes of the file at `file` as `hash`'s object: whole when small, in
    /// parts when large (a failed part aborts the upload, so no part is left billed).
    pub async fn put(&self, hash: &BlobHash, file: &Path, size: u64) -> Result<(), BlobError> {
        let mut reader = tokio::fs::File::open(file).await?;
        let path = Bucket::path(hash);
        if size <= PART as u64 {
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            reader.read_to_end(&mut bytes).await?;
            self.s3.put(&path, PutPayload::from(bytes)).await.map_err(unavailable)?;
            return Ok(());
        }
        let upload = self.s3.put_multipart(&path).await.map_err(unavailable)?;
        let mut parts = object_store::WriteMultipart::new_with_chunk_size(upload, PART);
        let mut buf = vec![0u8; 1 << 20];
        let written: Result<(), BlobError> = async {
            loop {
                let n = reader.read(&mut buf).await?;
                if n == 0 {
                    return Ok(());
                }
                parts.wait_for_capacity(2).await.map_err(unavailable)?;
                parts.write(&buf[..n]);
            }
        }
        .await;
        match written {
            Ok(()) => parts.finish().await.map(drop).map_err(unavailable),
            Err(e) => {
                if let Err(abort) = parts.abort().await {
                    tracing::warn!(bucket = %self.name, error = %abort, "an unfinished multipart upload was not aborted");
                }
                Err(e)
            }
        }
    }

    /// The size of `hash`'s object; `None` when there is none.
    pub async fn size(&self, hash: &BlobHash) -> Result<Option<u64>, BlobError> {
        match self.s3.head(&Bucket::path(hash)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// The bytes `start..start + length` of `hash`'s object, streamed; `None` when there is none.
    pub async fn read(&self, hash: &BlobHash, start: u64, length: u64) -> Result<Option<ByteStream>, BlobError> {
        let options = GetOptions { range: Some(GetRange::Bounded(start..start + length)), ..GetOptions::default() };
        match self.s3.get_opts(&Bucket::path(hash), options).await {
            Ok(got) => {
                let bytes = got.into_stream().map_err(std::io::Error::other);
                Ok(Some(Box::pin(sync_wrapper::SyncStream::new(bytes))))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Deletes `hash`'s object (nothing when there is none).
    pub async fn delete(&self, hash: &BlobHash) -> Result<(), BlobError> {
        self.delete_named(&hash.to_hex()).await
    }

    /// Deletes the object `name`.
    pub async fn delete_named(&self, name: &str) -> Result<(), BlobError> {
        match self.s3.delete(&ObjectPath::from(name)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// Copies the object `from` to `to` inside the bucket.
    pub async fn copy(&self, from: &str, to: &str) -> Result<(), BlobError> {
        self.s3.copy(&ObjectPath::from(from), &ObjectPath::from(to)).await.map_err(unavailable)
    }

    /// Every object at the bucket's top (the `damaged/` objects `--repair` set aside left out).
    pub async fn list(&self) -> Result<Vec<Object>, BlobError> {
        let now = chrono_now();
        let listed = self.s3.list_with_delimiter(None).await.map_err(unavailable)?;
        Ok(listed
            .objects
            .into_iter()
            .map(|meta| Object {
                name: meta.location.to_string(),
                size: meta.size,
                age: Duration::from_secs(u64::try_from(now - meta.last_modified.timestamp()).unwrap_or(0)),
            })
            .collect())
    }
}

/// Now in Unix seconds, as the listing's dates are compared with it.
fn chrono_now() -> i64 {
    i64::try_from(crate::protocol::Timestamp::now().0).unwrap_or(i64::MAX)
}
