//! Live delivery across the nodes of one relay: every event a node accepts, stored or ephemeral
//! (presence, typing, NIP-29 or otherwise), reaches the live subscribers of every node.
//!
//! Owns [`deliver`] (the one way an accepted event goes live: this node's subscribers, then the
//! other nodes through Redis, `crate::cluster::broadcast`), [`publish_own`] (the one way an
//! event the relay signs itself is stored and goes live: NIP-43's lists, NIP-29's group state)
//! and [`listen`] (the task that takes the other nodes' events in). An event from another node is verified again (a Redis reachable
//! by strangers cannot forge one), delivered once (the ids delivered lately are remembered),
//! given to the shared store's search index, and, when it changes a NIP-29 group, the groups are
//! folded again from the shared store, so every node judges the next group event alike. Bans,
//! members and live settings already follow the shared document (`relay`'s follower).
//!
//! An event this node could not send waits (in order) and goes out once Redis takes it again. A
//! node that loses Redis catches up when it is back: with a shared store (PostgreSQL) every
//! event stored since a little before the loss is read and delivered (those already delivered
//! left out), so a subscription that stayed open misses no acknowledged event. Ephemeral events
//! sent while Redis was away are gone, as ephemeral events are.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;

use crate::app::AppState;
use crate::protocol::verify::verify;
use crate::protocol::{Event, VerifiedEvent};
use crate::store::{Mark, PutOutcome};

/// How long a delivered id is remembered (longer than any catch-up reaches back).
pub const REMEMBERED: Duration = Duration::from_secs(15 * 60);
/// A catch-up reads from this long before the feed was lost (clocks of nodes differ a little,
/// and an event stored just before the loss may not have been sent).
const CATCH_UP_MARGIN: Duration = Duration::from_secs(30);
/// The most events one catch-up delivers.
const CATCH_UP_MAX: i64 = 100_000;
/// How long the listener waits before trying Redis again.
const RETRY: Duration = Duration::from_millis(250);

/// Delivers an event this node accepted: to this node's subscribers (`mark`: where the store
/// made it visible; None for an ephemeral event), then to the other nodes.
pub fn deliver(app: &AppState, event: &VerifiedEvent, mark: Option<Mark>) {
    // Remembered only where other nodes' events arrive, to deliver each once.
    if app.broadcast.is_some() {
        app.delivered.first_use(event.id);
    }
    app.fanout.publish(event, mark);
    let Some(broadcast) = app.broadcast.clone() else { return };
    let json = match event.to_json() {
        Ok(json) => json,
        Err(e) => return tracing::error!(error = %e, "an event could not be written out for the other nodes"),
    };
    // Queued here, so the other nodes get this node's events in the order it accepted them; the
    // client's OK does not wait for Redis (what waits goes out when Redis is back).
    broadcast.queue(&json);
    tokio::spawn(async move {
        if let Err(e) = broadcast.retry().await {
            tracing::debug!(error = %e, "an event waits for Redis to reach the other nodes");
        }
    });
}

/// Stores an event the relay signed itself and delivers it live once stored: no quota and no
/// moderation (it is the relay's own), the same store rules (a newer version at its address
/// supersedes it). What the store made of it, or why it could not be stored (logged here).
pub async fn publish_own(app: &AppState, event: Event) -> Result<PutOutcome, OwnError> {
    let verified = match verify(event) {
        Ok(v) => Arc::new(v),
        Err(e) => {
            tracing::error!(error = %e, "an event the relay signed did not verify");
            return Err(OwnError::Unverified(e.to_string()));
        }
    };
    match app.store.put(verified.clone()).await {
        Ok(PutOutcome::Stored(mark)) => {
            deliver(app, &verified, Some(mark));
            Ok(PutOutcome::Stored(mark))
        }
        Ok(other) => Ok(other),
        Err(e) => {
            tracing::error!(error = %e, kind = verified.kind.0, "storing an event the relay signed failed");
            Err(OwnError::Store(e.to_string()))
        }
    }
}

/// Why an event of the relay's own was not stored.
#[derive(Debug, thiserror::Error)]
pub enum OwnError {
    /// Its signature did not verify (the relay's key is damaged).
    #[error("the relay's own event did not verify: {0}")]
    Unverified(String),
    /// The store could not write it.
    #[error("the relay's own event could not be stored: {0}")]
    Store(String),
}

/// Takes the other nodes' events in until the relay stops; after a loss of Redis, catches up
/// from a shared store.
pub async fn listen(app: Arc<AppState>) {
    let Some(broadcast) = app.broadcast.clone() else { return };
    let mut lost: Option<SystemTime> = None;
    loop {
        let stream = tokio::select! {
            _ = app.shutdown.cancelled() => return,
            stream = broadcast.listen() => stream,
        };
        match stream {
            Ok(mut stream) => {
                if let Some(since) = lost.take() {
                    catch_up(&app, since).await;
                }
                loop {
                    let json = tokio::select! {
                        _ = app.shutdown.cancelled() => return,
                        json = stream.next() => json,
                        // This node's own events that Redis could not take yet go out now.
                        _ = tokio::time::sleep(RETRY), if broadcast.has_waiting() => {
                            let _ = broadcast.retry().await;
                            continue;
                        }
                    };
                    let Some(json) = json else { break };
                    arrived(&app, &json).await;
                }
                tracing::warn!("the other nodes' live events were cut off (Redis); listening again");
                lost = Some(SystemTime::now());
            }
            Err(e) => {
                if lost.is_none() {
                    tracing::warn!(error = %e, "cannot listen for the other nodes' live events (Redis); trying again");
                    lost = Some(SystemTime::now());
                }
                tokio::select! {
                    _ = app.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    }
}

/// Every event a shared store stored since a little before `since`, delivered (once).
async fn catch_up(app: &AppState, since: SystemTime) {
    let from = since.checked_sub(CATCH_UP_MARGIN).unwrap_or(UNIX_EPOCH);
    let seconds = from.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    match app.store.stored_since(seconds, CATCH_UP_MAX).await {
        Ok(Some(events)) => {
            let n = events.len();
            for event in events {
                arrived(app, event.as_str()).await;
            }
            tracing::info!(events = n, "caught up with the events stored while the live feed was away");
        }
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "catching up from the store failed; some live events were missed"),
    }
}

/// One event from another node (or a catch-up), delivered here once.
async fn arrived(app: &AppState, json: &str) {
    let event =
        match Event::from_json(json).map_err(|e| e.to_string()).and_then(|e| verify(e).map_err(|e| e.to_string())) {
            Ok(event) => event,
            Err(e) => return tracing::warn!(error = %e, "an event from another node was refused"),
        };
    if !app.delivered.first_use(event.id) {
        return;
    }
    let stored = !event.kind.is_ephemeral();
    let mark = if stored { app.store.arrived(&event) } else { None };
    if stored && crate::groups::is_state_event(&event) && app.store.is_shared() {
        let _turn = app.groups.turn().await;
        let (groups, store) = (app.groups.clone(), app.store.clone());
        match tokio::task::spawn_blocking(move || groups.reload(&store)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "the groups could not be folded again"),
            Err(e) => tracing::error!(error = %e, "the groups' fold stopped"),
        }
    }
    app.fanout.publish(&event, mark);
}
