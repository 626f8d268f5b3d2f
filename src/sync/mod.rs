//! NIP-77 sync rounds: this relay and a peer find what one has and the other lacks with
//! negentropy, and move only that.
//!
//! Owns one round ([`round`]): the local item set read from the index
//! ([`crate::store::Store::items`], every event: the operator's own view), the exchange with the
//! peer (`reconcile`), then, `down`, the events the peer has and we lack fetched by id in batches
//! (`REQ {"ids": …}` through the client library, which honours the peer's refusals), checked
//! (each one asked for, its id and signature verified) and stored by the publish rules without
//! quotas (`ingest::settle`, as `hearth import` does), and, `up`, the events we have and
//! the peer lacks published through the client library, paced by the peer's NIP-11 and gated on
//! its refusals. Each event is stored whole or not at all, so a round cut off anywhere leaves
//! nothing half stored, and the next round moves what is left. `hearth sync`, the admin API's
//! rounds and the background peers (`peers`) all run this one function.

pub mod peers;
mod reconcile;
pub mod status;

use std::collections::HashSet;
use std::time::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use crate::app::AppState;
use crate::client::nip11::{http_base, nip11};
use crate::client::{PublishError, Session};
use crate::config::Direction;
use crate::ingest::{Settled, settle};
use crate::protocol::verify::verify;
use crate::protocol::{Event, EventId, Filter, Timestamp, Viewer};
pub use status::Summary;

/// Ids asked for in one `REQ` (or fewer, when the peer's `max_limit` is lower).
const FETCH_BATCH: usize = 500;
/// Publishes in flight to the peer at once (the client library paces them).
const PUBLISH_IN_FLIGHT: usize = 64;
/// Times one event is sent before a `rate-limited:` answer counts as a refusal.
const PUBLISH_TRIES: u32 = 8;

/// One round to run.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Round {
    /// The peer's `ws://` or `wss://` URL.
    pub url: String,
    /// The events to reconcile.
    #[serde(default)]
    pub filter: Filter,
    /// Which way events move.
    #[serde(default)]
    pub direction: Direction,
    /// Only count what would move.
    #[serde(default)]
    pub dry_run: bool,
    /// Move events even where the receiving side would serve them to readers the sending side
    /// keeps them from (a members-only relay's events into a relay anyone reads).
    #[serde(default)]
    pub allow_public: bool,
}

/// Why a round could not run or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Our own side: the store failed, or our item set is larger than `sync.max_items`.
    #[error("{0}")]
    Local(String),
    /// The peer could not be reached or broke the protocol.
    #[error("{0}")]
    Peer(String),
    /// The peer refused (`NEG-ERR`, `CLOSED`), with its reason.
    #[error("the peer refused: {0}")]
    Refused(String),
    /// The round would copy events to a relay that serves them to readers the other keeps them
    /// from (the text says which way and what to do).
    #[error("{0}")]
    WouldExpose(String),
}

impl From<reconcile::ExchangeError> for SyncError {
    fn from(e: reconcile::ExchangeError) -> SyncError {
        match e {
            reconcile::ExchangeError::Peer(why) => SyncError::Peer(why),
            reconcile::ExchangeError::Refused(why) => SyncError::Refused(why),
        }
    }
}

/// Runs one round; `progress` is called as the summary changes (a terminal's progress line).
/// On a failure the summary so far comes with it.
pub async fn round(
    app: &AppState,
    round: &Round,
    progress: &(dyn Fn(&Summary) + Sync),
) -> Result<Summary, (SyncError, Summary)> {
    let started = Instant::now();
    let mut summary = Summary::default();
    let result = match round.filter.search_refusal() {
        Some(refusal) => Err(SyncError::Local(refusal.to_string())),
        None => run(app, round, &mut summary, progress).await,
    };
    summary.seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(()) => Ok(summary),
        Err(e) => {
            summary.error = Some(e.to_string());
            Err((e, summary))
        }
    }
}

async fn run(
    app: &AppState,
    round: &Round,
    summary: &mut Summary,
    progress: &(dyn Fn(&Summary) + Sync),
) -> Result<(), SyncError> {
    let max = app.config.sync.max_items;
    let items = app
        .store
        .items_async(round.filter.clone(), Timestamp::now(), Viewer::everything(), max)
        .await
        .map_err(|e| SyncError::Local(format!("reading our item set failed: {e}")))?
        .ok_or_else(|| SyncError::Local(format!("more than sync.max_items ({max}) events match here")))?;
    // The peer's limits bound our messages and our batches.
    let http = reqwest::Client::builder().timeout(reconcile::CONNECT_WAIT).build();
    let doc = match http {
        Ok(http) => nip11(&http, &http_base(&round.url)).await.ok().flatten(),
        Err(_) => None,
    };
    let limit = |key: &str| doc.as_ref().and_then(|d| d["limitation"][key].as_u64());
    let frame_size_limit = match (app.config.sync.frame_size_limit, limit("max_message_length")) {
        // Hex doubles a message; the frame's other text takes well under 1 KB.
        (ours, Some(theirs)) => {
            let fits = (theirs.saturating_sub(1024) / 2).max(4096);
            if ours == 0 { fits } else { ours.min(fits) }
        }
        (ours, None) => ours,
    };
    if !round.dry_run && !round.allow_public {
        let peer_members_only = doc.as_ref().is_some_and(|d| d["limitation"]["auth_required"] == true);
        exposure(app, round.direction, peer_members_only)?;
    }
    let found = reconcile::reconcile(&round.url, &round.filter, &items, frame_size_limit, Some(&app.keys))
        .await
        .map_err(|e| with_membership_hint(app, e.into()))?;
    drop(items);
    summary.sync_bytes = found.bytes;
    summary.have = found.have.len() as u64;
    summary.need = found.need.len() as u64;
    progress(summary);
    if round.dry_run {
        return Ok(());
    }
    let moves_down = round.direction.down() && !found.need.is_empty();
    let moves_up = round.direction.up() && !found.have.is_empty();
    if !(moves_down || moves_up) {
        return Ok(());
    }
    let peer =
        Session::connect(&round.url, Some(app.keys.clone()), Default::default()).await.map_err(SyncError::Peer)?;
    if moves_down {
        let batch =
            limit("max_limit").map_or(FETCH_BATCH, |l| usize::try_from(l).unwrap_or(FETCH_BATCH).clamp(1, FETCH_BATCH));
        for ids in found.need.chunks(batch) {
            fetch(app, &peer, ids, summary).await?;
            progress(summary);
        }
    }
    if moves_up {
        publish(app, &peer, &found.have, summary, progress).await?;
    }
    Ok(())
}

/// Refuses a round that would move members-only events to where anyone reads them: down from a
/// peer that serves reads to its members only (its NIP-11 `auth_required`) into this relay when
/// it serves reads to anyone, or up from this `members-only` relay to a peer anyone reads.
fn exposure(app: &AppState, direction: Direction, peer_members_only: bool) -> Result<(), SyncError> {
    let ours_members_only = app.moderation.mode() == crate::config::AccessMode::MembersOnly;
    let mode = app.moderation.mode().name();
    if direction.down() && peer_members_only && !ours_members_only {
        return Err(SyncError::WouldExpose(format!(
            "the peer serves its events to its members only, and this relay (access.mode = \"{mode}\") would serve \
             them to anyone: set access.mode = \"members-only\" here first, or pass --allow-public to copy them anyway"
        )));
    }
    if direction.up() && ours_members_only && !peer_members_only {
        return Err(SyncError::WouldExpose(
            "this relay serves its events to its members only, and the peer does not require AUTH to read: \
             it would serve them to anyone; make the peer members-only first, or pass --allow-public to copy them anyway"
                .into(),
        ));
    }
    Ok(())
}

/// A peer's refusal for want of membership, with what to do: make this relay's key a member there.
fn with_membership_hint(app: &AppState, e: SyncError) -> SyncError {
    match e {
        SyncError::Refused(why) if why.starts_with("restricted:") || why.starts_with("auth-required:") => {
            let key = app.keys.public_key();
            SyncError::Refused(format!(
                "{why} (this relay signs in as {hex} ({npub}): make that key a member of the peer, e.g. \
                 `PUT /admin/v1/members/{hex}` on its admin API, or add it to its auth.members)",
                hex = key.to_hex(),
                npub = crate::protocol::nip19::encode("npub", &key.0),
            ))
        }
        e => e,
    }
}

/// Fetches `ids` from the peer and stores each one that was asked for and verifies.
async fn fetch(app: &AppState, peer: &Session, ids: &[EventId], summary: &mut Summary) -> Result<(), SyncError> {
    let filter = Filter { ids: Some(ids.to_vec()), limit: Some(ids.len() as u64), ..Filter::default() };
    let events = match peer.fetch(vec![filter.clone()]).await {
        Ok(events) => events,
        // A refusal with a retry hint is waited out once; the client library keeps the gate.
        Err(why) => match crate::client::core::retry_hint(&why) {
            Some(wait) => {
                tokio::time::sleep(wait).await;
                peer.fetch(vec![filter]).await.map_err(SyncError::Refused)?
            }
            None => return Err(SyncError::Refused(why)),
        },
    };
    let asked: HashSet<&EventId> = ids.iter().collect();
    // Groups are a cache of their stored events: what a round stored of them is folded in.
    let mut group_changes = false;
    for value in events {
        summary.fetched += 1;
        let checked = Event::from_json(&value.to_string())
            .map_err(|e| e.to_string())
            .and_then(|event| if asked.contains(&event.id) { Ok(event) } else { Err("not asked for".into()) })
            .and_then(|event| verify(event).map_err(|e| e.to_string()));
        let verified = match checked {
            Ok(verified) => verified,
            Err(why) => {
                tracing::warn!(%why, "an event the sync peer sent is refused");
                summary.refused += 1;
                continue;
            }
        };
        let changes_groups = crate::groups::is_state_event(&verified);
        match settle(app, verified, Timestamp::now(), None).await {
            Settled::Stored => {
                summary.stored += 1;
                group_changes |= changes_groups;
            }
            Settled::Refused(refusal) => {
                tracing::info!(%refusal, "an event fetched from the sync peer is refused here");
                summary.refused += 1;
            }
            Settled::Live | Settled::Duplicate | Settled::Superseded | Settled::Deleted | Settled::Expired => {}
        }
    }
    if group_changes && let Err(e) = app.groups.reload(&app.store) {
        tracing::error!(error = %e, "folding the groups again after a sync round failed");
    }
    Ok(())
}

/// Publishes the events of `ids` to the peer, many in flight.
///
/// A `rate-limited:` refusal is not the peer's last word: the client library has armed its gate
/// from the hint, so the event goes back in the queue (at most [`PUBLISH_TRIES`] times) and the
/// window halves, growing back by one with each acceptance, so the round settles at the rate the
/// peer admits instead of counting its quota as refusals.
async fn publish(
    app: &AppState,
    peer: &Session,
    ids: &[EventId],
    summary: &mut Summary,
    progress: &(dyn Fn(&Summary) + Sync),
) -> Result<(), SyncError> {
    let mut next = ids.iter();
    let mut again: Vec<(Event, u32)> = Vec::new();
    let mut window = PUBLISH_IN_FLIGHT;
    let mut in_flight = FuturesUnordered::new();
    let send = |event: Event, tries: u32| async move {
        let outcome = peer.publish(event.clone()).await;
        (event, tries + 1, outcome)
    };
    loop {
        while in_flight.len() < window {
            if let Some((event, tries)) = again.pop() {
                in_flight.push(send(event, tries));
                continue;
            }
            let Some(id) = next.next() else { break };
            let stored = app.store.get_async(*id, Timestamp::now(), Viewer::everything()).await;
            let stored = stored.map_err(|e| SyncError::Local(format!("reading an event to publish failed: {e}")))?;
            // Removed since the exchange: nothing to send.
            let Some(json) = stored else { continue };
            let event = Event::from_json(json.as_str()).map_err(|e| SyncError::Local(e.to_string()))?;
            in_flight.push(send(event, 0));
        }
        let Some((event, tries, outcome)) = in_flight.next().await else { return Ok(()) };
        match outcome {
            Ok(_) => {
                summary.published += 1;
                window = (window + 1).min(PUBLISH_IN_FLIGHT);
            }
            Err(PublishError::Refused(why)) if why.starts_with("rate-limited:") && tries < PUBLISH_TRIES => {
                window = (window / 2).max(1);
                again.push((event, tries));
                continue;
            }
            Err(PublishError::Refused(why)) => {
                tracing::info!(%why, "the sync peer refused an event");
                summary.refused += 1;
            }
            Err(e) => return Err(SyncError::Peer(e.to_string())),
        }
        if (summary.published + summary.refused).is_multiple_of(256) {
            progress(summary);
        }
    }
}
