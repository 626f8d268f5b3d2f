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

use crate::app::AppState;
use crate::groups::publish::Admission;
use crate::limiter::{Billed, HandlerPermit, LimitType};
use crate::moderation::Verdict;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::verify::verify;
use crate::protocol::{Event, PubKey, Timestamp, VerifiedEvent};
use crate::store::PutOutcome;

/// What happened to a published event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Stored durably (or, for ephemeral kinds, delivered live).
    Accepted,
    /// Already stored: accepted, never stored twice.
    Duplicate,
    /// A NIP-43 join request from a member: accepted, nothing changed.
    AlreadyMember,
    /// Not accepted: rejected, or rate-limited (`messages` quota or the handler bound) with its
    /// retry time.
    Refused(Refusal),
}

impl Outcome {
    /// True for every outcome but `Refused`.
    pub fn accepted(&self) -> bool {
        matches!(self, Outcome::Accepted | Outcome::Duplicate | Outcome::AlreadyMember)
    }

    /// The `OK` message text: `""`, `"duplicate: …"` or the refusal.
    pub fn message(&self) -> String {
        match self {
            Outcome::Accepted => String::new(),
            Outcome::Duplicate => "duplicate: already have this event".into(),
            Outcome::AlreadyMember => crate::membership::ALREADY_MEMBER.into(),
            Outcome::Refused(r) => r.to_string(),
        }
    }

    fn refused(prefix: Prefix, text: impl Into<String>) -> Outcome {
        Outcome::Refused(Refusal::new(prefix, text))
    }
}

/// Who is publishing.
#[derive(Clone, Debug)]
pub struct Publisher {
    /// The NIP-42 / NIP-98 authenticated pubkey, if any.
    pub authed: Option<PubKey>,
    /// Who is billed: the authenticated pubkey (else the client IP), and the IP's ceiling.
    pub billed: Billed,
    /// What names this relay in a `relay` tag (`server.public_url`, else the `Host` the client
    /// reached): a request to vanish (NIP-62) must name it, or every relay.
    pub relay: Option<crate::protocol::nip42::RelayMatch>,
}

/// Why `event`, sent by a connection authenticated as `authed`, is not taken at all under
/// `access.mode = "members-only"` (every transport asks this before publishing): the mode's
/// refusal, except for a NIP-43 join request (how a stranger becomes a member: the membership
/// rules answer it) and members' mail from outside (a gift wrap or zap receipt to a member,
/// judged by moderation like any event). `None` when the event goes on to [`publish`].
pub fn access_refusal(app: &AppState, event: &Event, authed: Option<PubKey>) -> Option<Refusal> {
    let refused = app.moderation.access_refusal(authed)?;
    match event.kind == crate::membership::JOIN || app.moderation.is_mail_to_member(event) {
        true => None,
        false => Some(refused),
    }
}

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
    // A gift wrap from outside to a member (its author a one-time key) is taken from an
    // authenticated connection only, so that an open relay is not an anonymous mail drop.
    if crate::protocol::private::is_gift_wrap(verified.kind)
        && publisher.authed.is_none()
        && app.moderation.restricted_writes()
        && !app.moderation.is_member(&verified.pubkey)
    {
        return Outcome::refused(
            Prefix::AuthRequired,
            "authenticate (NIP-42) to send a gift wrap to a member of this relay",
        );
    }
    // NIP-62: a request to vanish must name this relay (or every relay) to be taken.
    if verified.kind == crate::vanish::KIND
        && let Err(refusal) = crate::vanish::names_this_relay(&verified, publisher.relay.as_ref())
    {
        return Outcome::Refused(refusal);
    }
    // NIP-43 join and leave requests are answered by the relay, never stored or delivered.
    if crate::membership::is_request(verified.kind) {
        drop(permit);
        return match crate::membership::request(app, &verified, publisher.authed).await {
            Ok(crate::membership::Answer::Done) => Outcome::Accepted,
            Ok(crate::membership::Answer::AlreadyMember) => Outcome::AlreadyMember,
            Err(refusal) => Outcome::Refused(refusal),
        };
    }
    // NIP-29: a group event meets its group's rules first; a change is done once it is stored.
    let group = match crate::groups::publish::admit(app, &verified, now).await {
        Ok(admission) => admission,
        Err(refusal) => return Outcome::Refused(refusal),
    };
    let wrap = crate::protocol::private::is_gift_wrap(verified.kind);
    let vanish_request = (verified.kind == crate::vanish::KIND).then(|| (*verified).clone());
    let report = (verified.kind == crate::protocol::private::REPORT).then(|| (*verified).clone());
    let settled = settle(app, verified, now, Some((&publisher.billed, permit))).await;
    if let (Settled::Stored, Admission::Change(change)) = (&settled, group)
        && let Err(refusal) = crate::groups::publish::done(app, change).await
    {
        return Outcome::Refused(refusal);
    }
    if settled == Settled::Stored
        && let Some(request) = vanish_request
        && let Err(refusal) = crate::vanish::vanish(app, &request).await
    {
        return Outcome::Refused(refusal);
    }
    if settled == Settled::Stored
        && let Some(report) = report
    {
        crate::hold::after_report(app, &report).await;
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
        crate::nodes::deliver(app, &verified, None);
        return Settled::Live;
    }
    // A duplicate is never billed: a client retrying after a lost OK pays nothing twice. With
    // nothing to bill (an import), the writer's own duplicate check is enough.
    match if bill.is_some() { app.store.contains(&verified.id) } else { Ok(false) } {
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
    if let Some((billed, permit)) = bill {
        // The permit bounds CPU work, which is done: it is not held over the admission (a round
        // trip with the Redis backend), so a principal's eight permits stay busy verifying.
        drop(permit);
        if let Err(limited) = app.limiter.admit(billed, LimitType::Messages).await {
            return Settled::Refused(limited.into());
        }
    }
    // Shared with the writer thread rather than copied: fan-out needs the event after the flush.
    let verified = std::sync::Arc::new(verified);
    match app.store.put(verified.clone()).await {
        Ok(PutOutcome::Stored(mark)) => {
            metrics::counter!("hearth_events_stored_total").increment(1);
            app.stats.stored();
            crate::nodes::deliver(app, &verified, Some(mark));
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
