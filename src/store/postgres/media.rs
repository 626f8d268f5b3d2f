//! The media records every node shares, in the `media` table (`media.store = "s3"`: the blobs
//! are objects in one bucket, so who owns them must be one answer for every node).
//!
//! Owns [`SharedRecords`], the `MediaBackend` over the database: each call runs on the
//! backend's runtime and is waited for on the calling thread, like the store's plain reads. A
//! blob's hold is a transaction-scoped advisory lock (its own key space: the two-key form) on
//! a connection of its own, held until the guard drops; a node that dies lets go of it with its
//! connection. A hold waited for longer than [`HOLD_WAIT`] is [`StoreError::Unavailable`]:
//! the client is told to try again.

use deadpool_postgres::{Object, Pool};
use tokio::runtime::Handle;
use tokio_postgres::types::ToSql;

use super::error::PgError;
use super::export::block_on_pool;
use crate::protocol::PubKey;
use crate::store::error::StoreError;
use crate::store::media::{BlobRecord, MediaBackend, Removed};

/// How long a blob's hold is waited for (another node's change of the same blob).
pub(super) const HOLD_WAIT: &str = "30s";
/// The first key of every blob's hold ("medi").
const HOLD_SPACE: i32 = 0x6d65_6469;

/// The shared records: the database's pool and the runtime it runs on.
pub(crate) struct SharedRecords {
    pub(super) pool: Pool,
    pub(super) handle: Handle,
}

fn record(row: &tokio_postgres::Row) -> Result<BlobRecord, StoreError> {
    let sha256: Vec<u8> = row.get(0);
    let owner: Vec<u8> = row.get(1);
    let owner = <[u8; 32]>::try_from(owner.as_slice())
        .map_err(|_| StoreError::Corrupt("media record: an owner that is not 32 bytes".into()))?;
    let size: i64 = row.get(2);
    let uploaded: i64 = row.get(4);
    Ok(BlobRecord {
        sha256: hex::encode(sha256),
        owner: PubKey(owner),
        size: u64::try_from(size).unwrap_or(0),
        media_type: row.get(3),
        uploaded: u64::try_from(uploaded).unwrap_or(0),
    })
}

fn records(rows: &[tokio_postgres::Row]) -> Result<Vec<BlobRecord>, StoreError> {
    rows.iter().map(record).collect()
}

impl SharedRecords {
    /// Runs `work` with a pooled connection, waited for here.
    fn with<T: Send + 'static, F>(&self, work: impl FnOnce(Object) -> F + Send + 'static) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, StoreError>> + Send,
    {
        block_on_pool(&self.handle, &self.pool, work)
    }

    /// The rows `select` gives for `args`.
    fn rows(&self, select: &'static str, args: Vec<Vec<u8>>) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.with(move |c| async move {
            let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
            c.query(select, &params).await.map_err(|e| PgError::from(e).into())
        })
    }
}

/// The blob's hold: a connection in a transaction holding the blob's advisory lock, rolled back
/// (which lets go of the lock) before the connection goes back to the pool.
struct Held {
    client: Option<Object>,
    handle: Handle,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.handle.spawn(async move {
                if client.batch_execute("ROLLBACK").await.is_err() {
                    // A connection that cannot end its transaction must not be handed out again.
                    drop(Object::take(client));
                }
            });
        }
    }
}

/// The hold's two keys: the blob's space and 31 bits of its hash.
fn hold_key(hash: &[u8; 32]) -> i32 {
    i32::from_be_bytes([hash[0] & 0x7f, hash[1], hash[2], hash[3]])
}

impl MediaBackend for SharedRecords {
    fn total_bytes(&self) -> Result<u64, StoreError> {
        let total = "SELECT coalesce(sum(size), 0)::BIGINT FROM \
                     (SELECT DISTINCT ON (sha256) size FROM media ORDER BY sha256, uploaded) blobs";
        let rows = self.rows(total, Vec::new())?;
        Ok(rows.first().map_or(0, |r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
    }

    fn add(&self, hash: [u8; 32], record: &BlobRecord) -> Result<bool, StoreError> {
        let upsert = "INSERT INTO media (sha256, owner, size, media_type, uploaded) VALUES ($1, $2, $3, $4, $5) \
                      ON CONFLICT (sha256, owner) DO UPDATE SET size = EXCLUDED.size, \
                      media_type = EXCLUDED.media_type, uploaded = EXCLUDED.uploaded \
                      RETURNING (xmax = 0)";
        let (owner, media_type) = (record.owner.0.to_vec(), record.media_type.clone());
        let size = i64::try_from(record.size).unwrap_or(i64::MAX);
        let uploaded = i64::try_from(record.uploaded).unwrap_or(i64::MAX);
        self.with(move |c| async move {
            let row = c.query_one(upsert, &[&hash.as_slice(), &owner, &size, &media_type, &uploaded]).await;
            Ok(row.map_err(PgError::from)?.get(0))
        })
    }

    fn remove(&self, hash: [u8; 32], owner: Option<PubKey>) -> Result<Removed, StoreError> {
        let owner = owner.map(|o| o.0.to_vec());
        self.with(move |mut c| async move {
            let tx = c.transaction().await.map_err(PgError::from)?;
            let gone = tx
                .execute(
                    "DELETE FROM media WHERE sha256 = $1 AND ($2::BYTEA IS NULL OR owner = $2)",
                    &[&hash.as_slice(), &owner],
                )
                .await
                .map_err(PgError::from)?;
            let left: i64 = tx
                .query_one("SELECT count(*) FROM media WHERE sha256 = $1", &[&hash.as_slice()])
                .await
                .map_err(PgError::from)?
                .get(0);
            tx.commit().await.map_err(PgError::from)?;
            Ok(Removed { was_owner: gone > 0, owners_left: usize::try_from(left).unwrap_or(0) })
        })
    }

    fn hold(&self, hash: [u8; 32]) -> Result<Box<dyn Send>, StoreError> {
        let handle = self.handle.clone();
        let key = hold_key(&hash);
        let client = self.with(move |c| async move {
            let begin = format!("BEGIN; SET LOCAL lock_timeout = '{HOLD_WAIT}'");
            c.batch_execute(&begin).await.map_err(PgError::from)?;
            match c.execute("SELECT pg_advisory_xact_lock($1, $2)", &[&HOLD_SPACE, &key]).await {
                Ok(_) => Ok(c),
                Err(e) => {
                    let _ = c.batch_execute("ROLLBACK").await;
                    if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
                        Err(StoreError::Unavailable("another node is changing this blob; try again".into()))
                    } else {
                        Err(PgError::from(e).into())
                    }
                }
            }
        })?;
        Ok(Box::new(Held { client: Some(client), handle }))
    }

    fn owners_of(&self, hash: &[u8; 32]) -> Result<Vec<BlobRecord>, StoreError> {
        let select = "SELECT sha256, owner, size, media_type, uploaded FROM media WHERE sha256 = $1 \
                      ORDER BY uploaded, owner";
        records(&self.rows(select, vec![hash.to_vec()])?)
    }

    fn of_owner(&self, owner: &PubKey) -> Result<Vec<BlobRecord>, StoreError> {
        let select = "SELECT sha256, owner, size, media_type, uploaded FROM media WHERE owner = $1 \
                      ORDER BY uploaded DESC, sha256";
        records(&self.rows(select, vec![owner.0.to_vec()])?)
    }

    fn page(&self, after: Option<[u8; 32]>, limit: usize) -> Result<Vec<BlobRecord>, StoreError> {
        let select = "SELECT sha256, owner, size, media_type, uploaded FROM media WHERE sha256 IN \
                      (SELECT DISTINCT sha256 FROM media WHERE sha256 > $1 ORDER BY sha256 LIMIT $2) \
                      ORDER BY sha256, owner";
        let after = after.map_or_else(Vec::new, |h| h.to_vec());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.with(move |c| async move {
            c.query(select, &[&after, &limit]).await.map_err(|e| PgError::from(e).into())
        })?;
        records(&rows)
    }

    fn per_owner(&self) -> Result<Vec<(PubKey, u64, u64)>, StoreError> {
        let select = "SELECT owner, sum(size)::BIGINT, count(*) FROM media GROUP BY owner ORDER BY owner";
        let rows = self.rows(select, Vec::new())?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let owner: Vec<u8> = row.get(0);
            let Ok(owner) = <[u8; 32]>::try_from(owner.as_slice()) else { continue };
            let (bytes, blobs): (i64, i64) = (row.get(1), row.get(2));
            out.push((PubKey(owner), u64::try_from(bytes).unwrap_or(0), u64::try_from(blobs).unwrap_or(0)));
        }
        Ok(out)
    }

    fn hashes(&self) -> Result<Vec<[u8; 32]>, StoreError> {
        let rows = self.rows("SELECT DISTINCT sha256 FROM media ORDER BY sha256", Vec::new())?;
        Ok(rows.iter().filter_map(|r| <[u8; 32]>::try_from(r.get::<_, Vec<u8>>(0).as_slice()).ok()).collect())
    }
}
