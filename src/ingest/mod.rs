//! The one publish path for every transport: policy → permit → verify → moderation → dedup →
//! `messages` → store → fan-out → outcome.
//!
//! Owns deciding what happens to a submitted event and the typed [`Outcome`] that each transport
//! maps to its wire (`OK` on WebSocket, a status code over HTTP). The signature check runs on the
//! publishing connection's own task, so the scheduler shares the cores between connections: on a
//! shared first-in first-out blocking pool, a client flooding EVENTs put every other client's
//! events behind its backlog (docs/src/performance.md). It does not parse frames or bill the arrival
//! of frames; it does bill the durable `messages` quota, after verification and the duplicate
//! check, and never for ephemeral kinds (the same `is_ephemeral` that keeps them out of storage).

mod outcome;
mod rules;

pub use outcome::{Outcome, Publisher};

use crate::app::AppState;
use crate::limiter::{Billed, HandlerPermit, LimitType};
use crate::moderation::Verdict;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::verify::verify;
use crate::protocol::{Event, Timestamp, VerifiedEvent};
use crate::store::PutOutcome;
use rules::{Admit, RULES};

/// Cheap checks against the configured limits, before any hashing.
fn policy(app: &AppState, event: &Event, now: Timestamp) -> Result<(), Refusal> {
    let lim = &app.config.limitation;
    if event.content.len() > lim.max_content_length {
        return Err(Refusal::new(
            Prefix::Invalid,
            format!("content is {} bytes, the limit is {}", event.content.len(), lim.max_content_length),
        ));
    }
    if event.tags.len() > lim.max_event_tags {
        return Err(Refusal::new(
            Prefix::Invalid,
            format!("event has {} tags, the limit is {}", event.tags.len(), lim.max_event_tags),
        ));
    }
    // A gift wrap's created_at is randomised into the past by design (NIP-59): never too old.
    if lim.created_at_lower_limit > 0
        && event.kind != crate::protocol::Kind::GIFT_WRAP
        && event.created_at.0 < now.0.saturating_sub(lim.created_at_lower_limit)
    {
        return Err(Refusal::new(
            Prefix::Invalid,
            format!("created_at is more than {} seconds in the past", lim.created_at_lower_limit),
        ));
    }
    if lim.created_at_upper_limit > 0 && event.created_at.0 > now.0.saturating_add(lim.created_at_upper_limit) {
        return Err(Refusal::new(
            Prefix::Invalid,
            format!("created_at is more than {} seconds in the future", lim.created_at_upper_limit),
        ));
    }
    if crate::protocol::private::is_gift_wrap(event.kind)
        && crate::protocol::private::wrap_recipient(&event.tags, event.kind).is_none()
    {
        return Err(Refusal::new(
            Prefix::Invalid,
            "a gift wrap is addressed to exactly one recipient: one p tag (wrap a copy for each)",
        ));
    }
    if event.kind == crate::protocol::Kind::AUTH {
        return Err(Refusal::new(Prefix::Invalid, "kind 22242 is sent with AUTH, not published"));
    }
    Ok(())
}

/// Publishes one event: the same path for WebSocket and REST. The caller has billed the
/// frame's arrival (`ws_events` / `api_calls`); this bills `unavailable` (a handler permit, held
/// for the CPU work, not while the event waits for its flush) and `messages`.
pub async fn publish(app: &AppState, event: Event, publisher: Publisher) -> Outcome {
    let now = Timestamp::now();
    if let Err(refusal) = policy(app, &event, now) {
        metrics::counter!("hearth_events_invalid_total").increment(1);
        return Outcome::Refused(refusal);
    }
    let permit = match app.limiter.acquire_handler(&publisher.billed).await {
        Ok(permit) => permit,
        Err(limited) => return Outcome::Refused(limited.into()),
    };
    // On this connection's own task: see the module doc for why not the blocking pool.
    let verified = match verify(event) {
        Ok(v) => v,
        Err(e) => {
            metrics::counter!("hearth_events_invalid_total").increment(1);
            return Outcome::refused(Prefix::Invalid, e.to_string());
        }
    };
    if verified.is_protected() {
        match publisher.authed {
            None => {
                return Outcome::refused(Prefix::AuthRequired, "this event may only be published by its author");
            }
            Some(pk) if pk != verified.pubkey => {
                return Outcome::refused(Prefix::Blocked, "this event may only be published by its author");
            }
            Some(_) => {}
        }
    }
    // The kind rules, in the table's order (`rules`): each lets the event on, keeps what it does
    // once the event is stored, or answers it here.
    let mut permit = Some(permit);
    let mut after = Vec::new();
    for rule in RULES {
        match rule.admit(app, &verified, &publisher, &mut permit, now).await {
            Admit::Pass => {}
            Admit::After(step) => after.push(step),
            Admit::Answer(outcome) => return outcome,
        }
    }
    let wrap = crate::protocol::private::is_gift_wrap(verified.kind);
    // Only a rule that answers lets the permit go, so a publish that gets here still holds it.
    let bill = permit.map(|permit| (&publisher.billed, permit));
    let settled = settle(app, verified, now, bill).await;
    if settled == Settled::Stored {
        for step in after {
            if let Err(refusal) = step.run(app).await {
                return Outcome::Refused(refusal);
            }
        }
    }
    match settled {
        Settled::Stored | Settled::Live => Outcome::Accepted,
        Settled::Duplicate => Outcome::Duplicate,
        Settled::Superseded => Outcome::refused(Prefix::Duplicate, "a newer version is stored"),
        Settled::Deleted if wrap => Outcome::refused(Prefix::Blocked, "deleted by its recipient"),
        Settled::Deleted => Outcome::refused(Prefix::Blocked, "deleted by its author"),
        Settled::Expired => Outcome::refused(Prefix::Invalid, "event has expired"),
        Settled::Refused(refusal) => Outcome::Refused(refusal),
    }
}

/// What the store's rules made of a verified event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Stored durably and delivered live.
    Stored,
    /// An ephemeral event, delivered live and never stored.
    Live,
    /// Already stored.
    Duplicate,
    /// A newer version of its replaceable or addressable event is stored.
    Superseded,
    /// Its author deleted it (NIP-09).
    Deleted,
    /// Its NIP-40 expiration has passed.
    Expired,
    /// Moderation refused it, or storing it failed.
    Refused(Refusal),
}

/// The rules every verified event meets on its way into the store, for every path that stores
/// (publishing and `hearth import`): moderation, NIP-40 expiry, the duplicate check, then the
/// store's own NIP-01/09 rules. `bill` is the publisher's `messages` quota and its handler
/// permit (released before the event waits for its sync); an import bills no quota.
pub(crate) async fn settle(
    app: &AppState,
    verified: VerifiedEvent,
    now: Timestamp,
    bill: Option<(&Billed, HandlerPermit)>,
) -> Settled {
    // Who may create rooms is this relay's to say, whoever else signed one (another relay's,
    // copied by a sync round, included): a client offers "Create room" to whoever a kind 19004
    // event names, without asking who signed it.
    if verified.kind == crate::membership::ROOM_CREATORS && verified.pubkey != app.keys.public_key() {
        return Settled::Refused(Refusal::new(
            Prefix::Restricted,
            "kind 19004 (who may create rooms) is signed by this relay's own key only; groups.create decides it",
        ));
    }
    match app.moderation.judge(&verified) {
        Verdict::Allowed => {}
        Verdict::Blocked(text) => return Settled::Refused(Refusal::new(Prefix::Blocked, text)),
        Verdict::Restricted(text) => return Settled::Refused(Refusal::new(Prefix::Restricted, text)),
    }
    if verified.expiration().is_some_and(|t| t <= now) && !verified.kind.is_ephemeral() {
        metrics::counter!("hearth_events_invalid_total").increment(1);
        return Settled::Expired;
    }
    if verified.kind.is_ephemeral() {
        crate::delivery::deliver(app, &verified, None);
        return Settled::Live;
    }
    // The permit bounds CPU work, which is done: it is held neither over the duplicate check (a
    // round trip on PostgreSQL) nor over the admission (one with the Redis backend), so a
    // principal's eight permits stay busy verifying.
    let billed = bill.map(|(billed, permit)| {
        drop(permit);
        billed
    });
    // A duplicate is never billed: a client retrying after a lost OK pays nothing twice. With
    // nothing to bill (an import), the writer's own duplicate check is enough.
    match if billed.is_some() { app.store.contains(&verified.id).await } else { Ok(false) } {
        Ok(true) => {
            metrics::counter!("hearth_events_duplicate_total").increment(1);
            return Settled::Duplicate;
        }
        Ok(false) => {}
        Err(e) => {
            tracing::error!(error = %e, "duplicate check failed");
            return Settled::Refused(Refusal::new(Prefix::Error, "could not store the event"));
        }
    }
    if let Some(billed) = billed
        && let Err(limited) = app.limiter.admit(billed, LimitType::Messages).await
    {
        return Settled::Refused(limited.into());
    }
    // Shared with the writer thread rather than copied: fan-out needs the event after the flush.
    let verified = std::sync::Arc::new(verified);
    match app.store.put(verified.clone()).await {
        Ok(PutOutcome::Stored(mark)) => {
            metrics::counter!("hearth_events_stored_total").increment(1);
            app.stats.stored();
            crate::delivery::deliver(app, &verified, Some(mark));
            Settled::Stored
        }
        Ok(PutOutcome::Duplicate) => {
            metrics::counter!("hearth_events_duplicate_total").increment(1);
            Settled::Duplicate
        }
        Ok(PutOutcome::Superseded) => Settled::Superseded,
        Ok(PutOutcome::Deleted) => Settled::Deleted,
        Err(e) => {
            // The writer logged the failure of the group once; its events need not repeat it.
            tracing::debug!(error = %e, "store failed");
            Settled::Refused(Refusal::new(Prefix::Error, "could not store the event"))
        }
    }
}
