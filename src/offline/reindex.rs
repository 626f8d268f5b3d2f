//! `hearth search-reindex`: the NIP-50 search index rebuilt from every stored event.

use std::time::{Duration, Instant};

use super::dir::{OfflineError, existing, open};
use crate::config::Config;
use crate::search::SearchState;
use crate::store::SEARCH_DIR;

/// What a rebuild did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Reindexed {
    /// Events the index holds afterwards.
    pub events: u64,
    /// How long it took.
    pub seconds: f64,
}

/// Throws the configured data directory's search index away and builds it again from the
/// stored events (the kinds `storage.search_kinds` names), waiting until it is done.
pub async fn search_reindex(config: Config) -> Result<Reindexed, OfflineError> {
    if !config.storage.search {
        return Err(OfflineError::Unusable("storage.search is off: there is no search index to build".into()));
    }
    let dir = existing(&config)?;
    let started = Instant::now();
    let index = dir.join(SEARCH_DIR);
    if index.exists() {
        // Only while no relay holds the directory: the open below refuses otherwise, and the
        // index is only thrown away once the store is known to be ours.
        let probe = open(config.clone(), false)?;
        probe.store.shutdown().await?;
        drop(probe);
        std::fs::remove_dir_all(&index)?;
    }
    let app = open(config, false)?;
    let outcome = loop {
        match app.store.search_state() {
            Some(SearchState::Ready) | None => break Ok(()),
            Some(SearchState::Failed { reason }) => break Err(OfflineError::Unusable(reason)),
            Some(SearchState::Building { .. }) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let events = app.store.search_documents();
    app.store.shutdown().await?;
    outcome?;
    Ok(Reindexed { events, seconds: started.elapsed().as_secs_f64() })
}
