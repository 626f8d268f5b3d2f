//! `hearth sync <peer>`: one NIP-77 round between the configured relay and a peer.
//!
//! Owns where the round runs: offline on the configured data directory when no relay holds it,
//! else in the running relay, asked through its admin API (`POST /admin/v1/sync/rounds` at the
//! relay `--local` names, by default the configured relay's own address, with `admin.token`):
//! only the process that holds the store can read its index, so a running relay syncs itself.
//! Either way the round is [`crate::sync::round`], a progress line goes to a terminal's stderr,
//! and the summary is one JSON line on stdout.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use super::dir::{OfflineError, open};
use crate::app::AppState;
use crate::client::nip11::http_base;
use crate::config::{Config, peer_url_problem};
use crate::store::StoreError;
use crate::sync::{Round, Summary, round};

/// How long a running relay's round may take before the request gives up waiting.
const ROUND_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Runs `planned`: offline, or in the relay at `local` (or the configured address when the data
/// directory is held). The summary comes back with a failure too, as far as the round got.
pub async fn sync(
    config: Config,
    planned: Round,
    local: Option<String>,
) -> Result<Summary, (OfflineError, Option<Summary>)> {
    for (what, url) in [("the peer", Some(&planned.url)), ("--local", local.as_ref())] {
        if let Some(problem) = url.and_then(|u| peer_url_problem(u)) {
            return Err((OfflineError::Unusable(format!("{what} {} {problem}", url.map_or("", |u| u.as_str()))), None));
        }
    }
    if let Some(local) = local {
        return remote(&config, &local, &planned).await;
    }
    let app = match open(config.clone(), true) {
        Ok(app) => app,
        Err(OfflineError::Store(StoreError::InUse { .. })) => {
            let mut addr = config.server.bind;
            if addr.port() == 0 {
                let why = "a relay holds the data directory on a port chosen at its start (server.bind port 0): \
                           name it with --local ws://…";
                return Err((OfflineError::Unusable(why.into()), None));
            }
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            return remote(&config, &format!("ws://{addr}"), &planned).await;
        }
        Err(e) => return Err((e, None)),
    };
    let terminal = std::io::stderr().is_terminal();
    let progress = |s: &Summary| {
        if terminal {
            let line = format!(
                "\rhave {} need {} fetched {} stored {} published {} refused {}",
                s.have, s.need, s.fetched, s.stored, s.published, s.refused
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    };
    let done = round(&app, &planned, &progress).await;
    if terminal {
        eprintln!();
    }
    let closed = AppState::close(app).await;
    match (done, closed) {
        (Ok(summary), Ok(())) => Ok(summary),
        (Ok(summary), Err(e)) => Err((e.into(), Some(summary))),
        (Err((e @ crate::sync::SyncError::WouldExpose(_), summary)), _) => {
            Err((OfflineError::Unusable(e.to_string()), Some(summary)))
        }
        (Err((e, summary)), _) => Err((OfflineError::Sync(e.to_string()), Some(summary))),
    }
}

/// Asks the relay at `local` (its WebSocket URL) to run the round.
async fn remote(config: &Config, local: &str, planned: &Round) -> Result<Summary, (OfflineError, Option<Summary>)> {
    let token = &config.admin.token;
    if token.is_empty() {
        let why = format!("a relay runs at {local}: asking it to sync needs admin.token (HEARTH_ADMIN__TOKEN)");
        return Err((OfflineError::Unusable(why), None));
    }
    let url = format!("{}/admin/v1/sync/rounds", http_base(local));
    let failed = |e: String| (OfflineError::Sync(format!("{url}: {e}")), None);
    let http = reqwest::Client::builder().timeout(ROUND_WAIT).build().map_err(|e| failed(e.to_string()))?;
    let response = http.post(&url).bearer_auth(token).json(planned).send().await.map_err(|e| {
        (
            OfflineError::Sync(format!(
                "cannot reach the running relay at {local} ({e}): pass --local ws://HOST:PORT naming where it listens"
            )),
            None,
        )
    })?;
    let status = response.status();
    let body = response.text().await.map_err(|e| failed(e.to_string()))?;
    match (status.as_u16(), serde_json::from_str::<Summary>(&body)) {
        (200, Ok(summary)) => Ok(summary),
        (409, Ok(summary)) => Err((OfflineError::Unusable(summary.error.clone().unwrap_or_default()), Some(summary))),
        (502, Ok(summary)) => Err((OfflineError::Sync(summary.error.clone().unwrap_or_default()), Some(summary))),
        _ => Err(failed(format!("{status}: {body}"))),
    }
}
