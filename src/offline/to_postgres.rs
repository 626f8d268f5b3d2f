//! `hearth migrate --to postgres`: the embedded store of the data directory carried into the
//! PostgreSQL database `storage.postgres_url` names, so that a community that grows a second node
//! keeps all it has.
//!
//! Owns the move: every stored event (oldest first, in the order stored, so deletions,
//! replacements and the NIP-29 groups fold the same way again), every settings document (bans,
//! members, invites, tiers, limit overrides, the NIP-11 overrides, the groups' signing state),
//! the audit log (oldest first), and the media records (into the node's own records beside the
//! blob files, which stay where they are; with `media.store = "s3"`, into the records every node
//! shares, the objects staying in their bucket). The database must hold no event yet: a second run
//! after a failed one starts on an empty database again (drop and create it). The embedded store
//! is left as it was; `storage.backend = "postgres"` is the operator's to set afterwards.

use serde::Serialize;

use super::dir::{OfflineError, existing};
use crate::config::Config;
use crate::protocol::verify::verify;
use crate::protocol::{Event, Filter, Timestamp};
use crate::store::{PgTuning, Store, StoreError, Tuning};

/// What `hearth migrate --to postgres` prints.
#[derive(Debug, Serialize)]
pub struct MovedToPostgres {
    /// Events read from the embedded store.
    pub events: u64,
    /// Of those, stored in PostgreSQL (the rest were refused by its rules: never, unless the
    /// embedded store held a damaged record).
    pub stored: u64,
    /// Settings documents copied.
    pub settings: u64,
    /// Audit entries copied.
    pub audit: u64,
    /// Media records copied.
    pub media: u64,
}

/// Moves the configured data directory's embedded store into the configured PostgreSQL.
pub async fn to_postgres(config: Config) -> Result<MovedToPostgres, OfflineError> {
    let dir = existing(&config)?;
    if config.storage.postgres_url.is_empty() {
        return Err(OfflineError::Unusable(
            "set storage.postgres_url (HEARTH_STORAGE__POSTGRES_URL) to the database to move the events into".into(),
        ));
    }
    let tuning = Tuning { search: None, postgres: None, ..config.storage.tuning() };
    let pg = PgTuning {
        url: config.storage.postgres_url.clone(),
        pool: usize::try_from(config.storage.postgres_pool).unwrap_or(usize::MAX),
    };
    let target_tuning = Tuning { postgres: Some(pg), ..tuning.clone() };
    let (source_dir, target_dir) = (dir.clone(), dir.clone());
    let (source, target) = tokio::task::spawn_blocking(move || {
        Ok::<_, StoreError>((Store::open_tuned(&source_dir, tuning)?, Store::open_tuned(&target_dir, target_tuning)?))
    })
    .await
    .map_err(|e| StoreError::Task(e.to_string()))??;
    let held = target.len();
    if held > 0 {
        return Err(OfflineError::Unusable(format!(
            "the PostgreSQL database already holds {held} events: move into an empty database (drop and create it)"
        )));
    }
    let mut moved = MovedToPostgres { events: 0, stored: 0, settings: 0, audit: 0, media: 0 };
    let export = source.export_async(Filter::default(), Timestamp::now()).await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    // The export reads blocking; the puts await.
    let reading = tokio::task::spawn_blocking(move || {
        for event in export {
            if tx.blocking_send(event).is_err() {
                break;
            }
        }
    });
    while let Some(event) = rx.recv().await {
        let json = event?;
        moved.events += 1;
        let event = Event::from_json(json.as_str()).map_err(|e| OfflineError::Unusable(e.to_string()))?;
        let Ok(verified) = verify(event) else { continue };
        if matches!(target.put(verified).await?, crate::store::PutOutcome::Stored(_)) {
            moved.stored += 1;
        }
    }
    reading.await.map_err(|e| StoreError::Task(e.to_string()))?;
    for (name, value) in source.settings()? {
        target.save_setting(&name, value).await?;
        moved.settings += 1;
    }
    for entry in source.audit_log(usize::MAX)?.into_iter().rev() {
        target.append_audit(entry).await?;
        moved.audit += 1;
    }
    // Blobs in a bucket every node reaches get the records every node reads.
    let bytes_shared = config.media.store == crate::config::MediaStore::S3;
    let mut after = None;
    loop {
        let page = source.media().page(after, 1000)?;
        let Some(last) = page.last() else { break };
        after = hex::decode(&last.sha256).ok().and_then(|h| <[u8; 32]>::try_from(h).ok());
        for record in page.iter().cloned() {
            let Some(hash) = hex::decode(&record.sha256).ok().and_then(|h| <[u8; 32]>::try_from(h).ok()) else {
                continue;
            };
            target.blob_records(bytes_shared).add(hash, record).await?;
            moved.media += 1;
        }
        if after.is_none() {
            break;
        }
    }
    target.shutdown().await?;
    source.close(config.storage.cache_capacity_mb).await?;
    Ok(moved)
}
