//! The background sync: one task per `[[sync.peers]]` entry, keeping this relay in step with it.
//!
//! Owns when rounds run: the first soon after the start, then one `interval_secs` after each
//! round ends, or at once when the admin API starts one. A failed round (the peer down, a
//! refusal) is logged and retried with back-off (5 s, doubling, at most the interval), so a peer
//! that is away costs nothing but a connection attempt now and then, and never holds up the
//! relay: each round runs on its own task, and stops when the relay stops.

use std::sync::Arc;
use std::time::Duration;

use super::status::LastRound;
use super::{Round, round};
use crate::app::AppState;
use crate::protocol::{Filter, Timestamp};

/// The first back-off after a failed round.
const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// How long after the relay starts the first round of each peer begins.
const FIRST_ROUND: Duration = Duration::from_secs(1);

/// Starts one task per configured peer (on the relay's task tracker, so shutdown awaits it).
pub fn spawn(app: &Arc<AppState>) {
    for index in 0..app.sync.peers().len() {
        let app = app.clone();
        app.tasks.clone().spawn(async move { keep_in_step(app, index).await });
    }
}

/// Runs peer `index`'s rounds until the relay stops.
async fn keep_in_step(app: Arc<AppState>, index: usize) {
    let Some(peer) = app.sync.peers().get(index) else { return };
    let config = &peer.config;
    // Checked when the configuration was loaded.
    let filter: Filter = serde_json::from_str(&config.filter).unwrap_or_default();
    let planned = Round {
        url: config.url.clone(),
        filter,
        direction: config.direction,
        dry_run: false,
        allow_public: config.allow_public,
    };
    let mut wait = FIRST_ROUND;
    loop {
        peer.update(|s| s.next_round_at = Some(Timestamp::now().0 + wait.as_secs()));
        tokio::select! {
            _ = app.shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            _ = peer.start.notified() => {}
        }
        peer.update(|s| {
            s.running = true;
            s.next_round_at = None;
        });
        let started_at = Timestamp::now().0;
        let outcome = tokio::select! {
            _ = app.shutdown.cancelled() => return,
            outcome = round(&app, &planned, &|_| {}) => outcome,
        };
        let (ok, summary) = match outcome {
            Ok(summary) => {
                tracing::info!(peer = %config.url, have = summary.have, need = summary.need, stored = summary.stored,
                    published = summary.published, refused = summary.refused, seconds = summary.seconds, "sync round");
                (true, summary)
            }
            Err((e, summary)) => {
                tracing::warn!(peer = %config.url, error = %e, "sync round failed; retried with back-off");
                (false, summary)
            }
        };
        let interval = Duration::from_secs(config.interval_secs);
        peer.update(|s| {
            s.running = false;
            s.rounds += 1;
            s.failures = if ok { 0 } else { s.failures.saturating_add(1) };
            wait = match s.failures {
                0 => interval,
                n => FIRST_BACKOFF.saturating_mul(1 << (n - 1).min(16)).min(interval),
            };
            s.last_round = Some(LastRound { started_at, finished_at: Timestamp::now().0, ok, summary });
        });
    }
}
