//! `hearth export`: every stored event (or those matching a filter) as JSON lines, oldest first.

use std::io::Write;

use super::dir::{OfflineError, open};
use crate::config::Config;
use crate::protocol::{Filter, Timestamp};

/// Writes every stored event matching `filter` (all, for `None`) to `out`, one stored JSON per
/// line, oldest first; with `media`, every blob and its records into that folder
/// ([`super::media::export`]). Returns how many events and blobs.
pub async fn export(
    config: Config,
    filter: Option<&str>,
    media: Option<&std::path::Path>,
    out: &mut impl Write,
) -> Result<(u64, u64), OfflineError> {
    let filter: Filter = match filter {
        Some(text) => serde_json::from_str(text).map_err(|e| OfflineError::Filter(e.to_string()))?,
        None => Filter::default(),
    };
    if let Some(refusal) = filter.search_refusal() {
        return Err(OfflineError::Filter(refusal.into()));
    }
    let app = open(config, false)?;
    let outcome = write_all(&app.store, &filter, out);
    let blobs = match (&outcome, media) {
        (Ok(_), Some(dir)) => super::media::export(&app, dir),
        _ => Ok(0),
    };
    app.store.shutdown().await?;
    Ok((outcome?, blobs?))
}

fn write_all(store: &crate::store::Store, filter: &Filter, out: &mut impl Write) -> Result<u64, OfflineError> {
    let mut written = 0;
    for event in store.export(filter, Timestamp::now())? {
        out.write_all(event?.as_str().as_bytes())?;
        out.write_all(b"\n")?;
        written += 1;
    }
    out.flush()?;
    Ok(written)
}
