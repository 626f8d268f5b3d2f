//! NIP-62 request to vanish: a key asks this relay (or every relay) to forget it.
//!
//! Owns what a kind 62 does once stored: every other event of its author and every gift wrap
//! addressed to it leave the store (every read path at once, the disk at the next compaction),
//! the key's events dated up to the request are refused from then on (the moderation document
//! every node shares), the request itself is kept, and the whole is audited. A request that
//! names neither this relay nor `ALL_RELAYS` in a `relay` tag is refused.

use serde_json::json;

use crate::app::AppState;
use crate::protocol::nip42::RelayMatch;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, EventId, Filter, Kind, PubKey, Timestamp, Viewer};

/// The request to vanish.
pub const KIND: Kind = Kind(62);
/// The `relay` tag value that names every relay.
pub const ALL_RELAYS: &str = "ALL_RELAYS";
/// Events removed per read of the store.
const BATCH: u64 = 1000;

/// Whether `request` names this relay (`relay`: what names it) or every relay.
pub fn names_this_relay(request: &Event, relay: Option<&RelayMatch>) -> Result<(), Refusal> {
    let mut tags = request.tag_values("relay").peekable();
    if tags.peek().is_none() {
        return Err(Refusal::new(
            Prefix::Invalid,
            "a request to vanish names the relay: [\"relay\", <this relay's URL>] or [\"relay\", \"ALL_RELAYS\"]",
        ));
    }
    if tags.any(|t| t == ALL_RELAYS || relay.is_some_and(|r| r.names(t))) {
        return Ok(());
    }
    Err(Refusal::new(Prefix::Invalid, "this request to vanish names other relays, not this one"))
}

/// Removes every stored event `filter` matches but `keep` (a page at a time, until none is
/// left); how many. The one way a key's events leave the store wholesale: a request to vanish,
/// and an admin's ban of every event of a reported key.
pub async fn remove_matching(
    app: &AppState,
    filter: Filter,
    keep: Option<EventId>,
) -> Result<u64, crate::store::StoreError> {
    let mut removed = 0;
    loop {
        let page = Filter { limit: Some(BATCH), ..filter.clone() };
        let (events, _) = app.store.query_async(vec![page], Timestamp::now(), Viewer::everything()).await?;
        let mut progressed = false;
        for json in events {
            let Ok(event) = serde_json::from_str::<Event>(json.as_str()) else { continue };
            if Some(event.id) == keep {
                continue;
            }
            if app.store.remove(event.id).await? {
                removed += 1;
                progressed = true;
            }
        }
        if !progressed {
            return Ok(removed);
        }
    }
}

/// Carries out a stored request to vanish.
pub async fn vanish(app: &AppState, request: &Event) -> Result<(), Refusal> {
    let pk: PubKey = request.pubkey;
    let at = request.created_at.0;
    app.moderation.vanish_key(&app.store, pk, at).await.map_err(|e| {
        tracing::error!(error = %e, "a request to vanish could not be recorded");
        Refusal::new(Prefix::Error, "the request could not be recorded; send it again")
    })?;
    let failed = |e: crate::store::StoreError| {
        tracing::error!(error = %e, "a request to vanish could not remove events");
        Refusal::new(Prefix::Error, "the request is stored but not every event is removed yet; send it again")
    };
    let own = remove_matching(app, Filter { authors: Some(vec![pk]), ..Filter::default() }, Some(request.id))
        .await
        .map_err(failed)?;
    let mut to_them = Filter { kinds: Some(vec![Kind::GIFT_WRAP]), ..Filter::default() };
    to_them.tags.insert('p', vec![pk.to_hex()]);
    let wraps = remove_matching(app, to_them, Some(request.id)).await.map_err(failed)?;
    let detail = json!({"request": request.id.to_hex(), "events": own, "gift_wraps": wraps});
    if let Err(e) = crate::audit::record(
        &app.store,
        &app.config.node.name,
        &pk.to_hex(),
        "vanish",
        &pk.to_hex(),
        serde_json::Value::Null,
        detail,
    )
    .await
    {
        tracing::error!(error = %e, "a request to vanish could not be audited");
    }
    Ok(())
}
