//! Operations on a data directory while no relay runs: `hearth backup`, `hearth restore`, `hearth export`, `hearth import`,
//! `hearth compact`, `hearth check`, `hearth migrate` and `hearth search-reindex`; and `hearth sync`, which runs here, or
//! in the relay that holds the directory.
//!
//! Owns opening the data directory the relay's configuration names (refusing, exit 2, while a
//! running relay holds it, without waiting for ever) and each command's output and exit code.
//! The work itself is the store's ([`crate::store::Store::export`]) and the publish path's
//! rules (`ingest::settle`), so an import decides what the relay would have decided.

mod backup;
mod dir;
mod export;
mod import;
pub mod media;
mod migrate;
mod reindex;
mod sync;
mod to_postgres;

pub use backup::{Restored, backup, restore};
pub use export::export;
pub use import::{ImportSummary, import};
pub use migrate::{Migrated, migrate};
pub use reindex::{Reindexed, search_reindex};
pub use sync::sync;
pub use to_postgres::{MovedToPostgres, to_postgres};

use crate::config::Config;
use crate::store::StoreError;
use dir::existing;
pub use dir::{FAILED, INVALID, OK, OfflineError, UNUSABLE};

/// Rewrites the configured data directory's event log without the space of replaced, deleted
/// and expired events ([`crate::store::check::compact`]).
pub async fn compact(config: Config) -> Result<crate::store::Compacted, OfflineError> {
    embedded_only(&config, "compact", "VACUUM (PostgreSQL's own; POST /admin/v1/store/compact runs one)")?;
    let dir = existing(&config)?;
    Ok(crate::store::check::compact(&dir, config.storage.cache_capacity_mb).await?)
}

/// Audits the configured data directory ([`crate::store::check::check`]); with `repair`, mends what it
/// found and checks again ([`crate::store::check::repair`]), and rebuilds the search index
/// ([`search_reindex`]) when it is kept.
/// The blobs are read against their records too ([`media::check`]).
pub async fn check(
    config: Config,
    repair: bool,
) -> Result<(crate::store::check::Repaired, media::MediaChecked), OfflineError> {
    let dir = existing(&config)?;
    if config.storage.backend == crate::config::StorageBackend::Postgres {
        return check_database(config, &dir, repair).await;
    }
    let cache = config.storage.cache_capacity_mb;
    let events = if repair {
        let repaired = crate::store::check::repair(&dir, cache).await?;
        if config.storage.search {
            search_reindex(config.clone()).await?;
        }
        repaired
    } else {
        let store_dir = dir.clone();
        let found = tokio::task::spawn_blocking(move || crate::store::check::check(&store_dir, cache))
            .await
            .map_err(|e| OfflineError::Store(StoreError::Task(e.to_string())))??;
        crate::store::check::Repaired { after: found.clone(), found }
    };
    let app = dir::open(config, false)?;
    let blobs = media::check(&app, &dir, repair).await;
    crate::app::AppState::close(app).await?;
    Ok((events, blobs?))
}

/// What `hearth check` prints of `checked` (one JSON line per problem, then the summary) and its
/// exit code: 0 when clean (after a repair, when it mended everything), 1 otherwise.
pub fn check_report(
    (events, media): &(crate::store::check::Repaired, media::MediaChecked),
    repair: bool,
) -> (Vec<String>, u8) {
    let mut lines: Vec<String> =
        events.found.problems.iter().map(|p| serde_json::to_string(p).unwrap_or_default()).collect();
    lines.extend(media.damaged.iter().map(|d| serde_json::json!({"blob": d.sha256, "problem": d.problem}).to_string()));
    let found = &events.found;
    let mut summary = serde_json::json!({"events": found.events, "frames": found.frames,
        "problems": found.problems.len() + media.damaged.len(), "blobs": media.blobs});
    if repair {
        summary["remaining"] = (events.after.problems.len() as u64 + media.remaining).into();
    }
    lines.push(summary.to_string());
    let clean = if repair { media.remaining == 0 } else { media.damaged.is_empty() };
    (lines, if events.after.problems.is_empty() && clean { OK } else { FAILED })
}

/// Says on stderr how many blobs `hearth export --media` wrote, and where; the exit code.
pub fn exported_media(blobs: u64, media: Option<&std::path::Path>) -> u8 {
    if let Some(dir) = media {
        eprintln!("hearth export: {blobs} blobs and their records written to {}", dir.display());
    }
    OK
}

/// `hearth check` of a PostgreSQL store: its events (`check::check_database`; with `repair`,
/// the bad ones removed and checked again), and the node's blobs against their records.
async fn check_database(
    config: Config,
    dir: &std::path::Path,
    repair: bool,
) -> Result<(crate::store::check::Repaired, media::MediaChecked), OfflineError> {
    let app = dir::open(config, false)?;
    let events = match repair {
        true => crate::store::check::repair_database(&app.store).await,
        false => crate::store::check::check_database(&app.store)
            .await
            .map(|found| found.map(|found| crate::store::check::Repaired { after: found.clone(), found })),
    };
    let blobs = media::check(&app, dir, repair).await;
    crate::app::AppState::close(app).await?;
    let events = events?.ok_or_else(|| OfflineError::Unusable("the store is not PostgreSQL's".into()))?;
    Ok((events, blobs?))
}

/// Refuses a command that reads the embedded store's own files when the events live in
/// PostgreSQL, naming what to use there.
fn embedded_only(config: &Config, command: &str, instead: &str) -> Result<(), OfflineError> {
    match config.storage.backend {
        crate::config::StorageBackend::Sled => Ok(()),
        crate::config::StorageBackend::Postgres => Err(OfflineError::Unusable(format!(
            "hearth {command} reads the embedded store's files, and storage.backend is \"postgres\": use {instead}"
        ))),
    }
}
