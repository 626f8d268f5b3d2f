//! `hearth migrate`: a data directory of an older layout carried over to today's.
//!
//! Owns the order of the steps, each durable before the next, so that a migration cut off at any
//! point is finished by running it again: the old layout's events are written out as JSON lines
//! (`migration.jsonl` in the data directory) and the old tree removed
//! ([`crate::store::embedded::migrate::carry_out`]); the lines are imported under today's rules (verified,
//! deduplicated, replaceable and deletion rules, moderation), exactly as `hearth import` would;
//! then the file is removed. While it exists, a relay refuses the directory. Layout 3 needs none
//! of this: its catalogue is converted where it is ([`crate::store::embedded::migrate::convert_in_place`]),
//! as a relay's start would convert it.

use std::sync::Arc;

use serde::Serialize;

use super::dir::{OfflineError, existing};
use super::import::{ImportSummary, import_into};
use crate::config::Config;
use crate::limiter::SystemClock;
use crate::store::format::keys::SCHEMA_VERSION;
use crate::store::{Store, StoreError, migrate};

/// What `hearth migrate` prints.
#[derive(Debug, Serialize)]
pub struct Migrated {
    /// The layout the directory had (null when it had today's already).
    pub from: Option<u8>,
    /// Today's layout.
    pub to: u8,
    /// Events read out of the old layout, or, from layout 3, ids converted in place (null when
    /// this run found them written out already).
    pub carried: Option<u64>,
    /// The import of those events, when there was one.
    pub import: Option<ImportSummary>,
}

/// Migrates the configured data directory to today's layout.
pub async fn migrate(config: Config) -> Result<Migrated, OfflineError> {
    let dir = existing(&config)?;
    let cache = config.storage.cache_capacity_mb;
    let owned = dir.clone();
    let carried = tokio::task::spawn_blocking(move || migrate::carry_out(&owned, cache))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))??;
    let pending = dir.join(migrate::PENDING);
    if !pending.exists() {
        // Layout 3 needs no import: its catalogue is converted where it is.
        let owned = dir.clone();
        let converted = tokio::task::spawn_blocking(move || migrate::convert_in_place(&owned, cache))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))??;
        return Ok(Migrated {
            from: converted.map(|(layout, _)| layout),
            to: SCHEMA_VERSION,
            carried: converted.map(|(_, ids)| ids),
            import: None,
        });
    }
    let input = std::io::BufReader::new(std::fs::File::open(&pending)?);
    let store = Store::open_migrating(
        &dir,
        crate::store::Tuning {
            cache_capacity_mb: cache,
            index_memory_events: crate::store::INDEX_MEMORY_EVENTS,
            search: None,
            postgres: None,
        },
    )?;
    let app = crate::relay::Relay::with_store(config, Arc::new(SystemClock::default()), store)?.app();
    let import = import_into(app.clone(), Box::new(input)).await;
    crate::app::AppState::close(app).await?;
    let import = import?;
    std::fs::remove_file(&pending)?;
    std::fs::File::open(&dir)?.sync_all()?;
    Ok(Migrated {
        from: carried.map(|(layout, _)| layout),
        to: SCHEMA_VERSION,
        carried: carried.map(|(_, events)| events),
        import: Some(import),
    })
}
