//! One handler per client verb: EVENT, REQ, COUNT, CLOSE, AUTH, and NIP-77's NEG-OPEN,
//! NEG-MSG, NEG-CLOSE (whose sessions are `neg`'s).
//!
//! Owns what one text frame asks of the connection: it bills the frame's arrival (`ws_reqs` for
//! a read, `ws_events` for the rest), answers what can be answered at once, and hands slow work
//! (a publish awaiting its durable OK, a query, a signature check) back to the loop in `conn` as
//! a future. Publishing goes through
//! [`crate::ingest`], reads through [`crate::query`]; every refusal is tied to the frame it
//! refuses (`OK` for EVENT/AUTH, `CLOSED` for REQ/COUNT, `NOTICE` only when nothing can be read).

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::neg::{self, NegDone};
use super::session::Session;
use crate::app::AppState;
use crate::fanout::ConnId;
use crate::gate;
use crate::ingest::Publisher;
use crate::limiter::{Billed, Denied, LimitType};
use crate::protocol::nip42::{self, RelayMatch};
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::verify::verify;
use crate::protocol::{ClientMessage, Correlation, Event, Filter, PubKey, RelayMessage, Timestamp, Viewer};
use crate::query::{self, QueryError};
use crate::store::Mark;

/// The result of work that ran concurrently with the read loop.
pub(super) enum Done {
    /// Frames to send as they are.
    Frames(Vec<RelayMessage>),
    /// Stored events + EOSE of a REQ, and the mark of what its query saw; dropped if the
    /// subscription changed meanwhile.
    Query { sub_id: String, generation: u64, mark: Mark, frames: Vec<RelayMessage> },
    /// A REQ refused before it ran: its reserved slot is released, its CLOSED sent.
    SubRefused { sub_id: String, generation: u64, closed: RelayMessage },
    /// A checked AUTH: on success the connection is bound to the pubkey.
    Auth { id: String, result: Result<PubKey, String> },
    /// An answered NEG-OPEN or NEG-MSG.
    Neg(NegDone),
}

/// What handling one frame asks of the loop.
pub(super) enum Action {
    /// Send this frame now.
    Reply(RelayMessage),
    /// Run this and deliver what it returns.
    Spawn(BoxFuture<'static, Done>),
    /// Nothing to answer.
    Nothing,
}

/// A fresh NIP-42 challenge: 16 random bytes as hex.
pub(super) fn challenge() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: fall back to the clock; a challenge only needs to be unpredictable
        // enough that an AUTH event cannot be prepared in advance.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos());
        bytes = nanos.unwrap_or(0).to_le_bytes();
    }
    hex::encode(bytes)
}

/// What a refusal of `text` can be tied to, parsing it as far as it goes.
fn correlate(text: &str) -> Correlation {
    match ClientMessage::parse(text) {
        Ok(msg) => msg.correlation(),
        Err(e) => e.correlation(),
    }
}

const AUTH_REQUIRED: &str = "auth-required: this relay requires authentication; answer the AUTH challenge";

/// The CLOSED that answers a REQ/COUNT whose read ended in `error`.
fn closed(sub_id: String, error: &QueryError) -> RelayMessage {
    let message = match error {
        QueryError::Limits(reason) => format!("error: {reason}"),
        QueryError::Invalid(reason) => format!("invalid: {reason}"),
        QueryError::Unsupported(reason) => format!("unsupported: {reason}"),
        QueryError::Unavailable(reason) => format!("error: {reason}"),
        QueryError::RateLimited(limited) => limited.to_string(),
        QueryError::Store(_) => "error: the query failed".into(),
    };
    RelayMessage::Closed { sub_id, message }
}

/// Handles one text frame.
pub(super) async fn frame(
    app: &Arc<AppState>,
    session: &mut Session,
    conn: ConnId,
    text: &str,
    relay_match: Option<&RelayMatch>,
) -> Action {
    let lim = &app.config.limitation;
    let billed = session.billed();
    if text.len() > lim.max_message_length {
        // Oversized and unparseable frames are billed like any frame, so they are never free.
        let message = match app.limiter.admit(&billed, LimitType::WsEvents).await {
            Ok(()) => format!("invalid: message is {} bytes, the limit is {}", text.len(), lim.max_message_length),
            Err(limited) => limited.to_string(),
        };
        return Action::Reply(correlate(text).refuse(message));
    }
    let msg = match ClientMessage::parse(text) {
        Ok(msg) => msg,
        Err(e) => {
            tracing::debug!(error = %e, "unparseable frame");
            return Action::Reply(match app.limiter.admit(&billed, LimitType::WsEvents).await {
                Ok(()) => e.reply(),
                Err(limited) => e.correlation().refuse(limited.to_string()),
            });
        }
    };
    metrics::counter!("hearth_frames_total").increment(1);
    // CLOSE is never billed or refused: a client can always close. AUTH bills the IP (and its
    // ceiling), whatever key it names, so fresh keys are not free; everything else bills the key
    // the frame acts for: reads (REQ, COUNT, NEG-OPEN) on `ws_reqs`, the rest on `ws_events`, so
    // a client's subscriptions never hold up its writes nor its writes its subscriptions. All on
    // arrival, before any costly work.
    let admitted = match &msg {
        ClientMessage::Close(_) | ClientMessage::NegClose(_) => Ok(()),
        ClientMessage::Auth(_) => app.limiter.admit(&Billed::ip(session.client_ip), LimitType::WsEvents).await,
        ClientMessage::Req { .. } | ClientMessage::Count { .. } | ClientMessage::NegOpen { .. } => {
            app.limiter.admit(&billed, LimitType::WsReqs).await
        }
        _ => app.limiter.admit(&billed, LimitType::WsEvents).await,
    };
    let needs_auth = app.config.auth.required && session.authed.is_none();
    match msg {
        ClientMessage::Event(event) => {
            metrics::counter!("hearth_events_received_total").increment(1);
            let id = event.id.to_hex();
            if let Err(limited) = admitted {
                return Action::Reply(Correlation::Event(id).refuse(limited.to_string()));
            }
            if needs_auth {
                return Action::Reply(RelayMessage::ok(id, false, AUTH_REQUIRED));
            }
            if let Some(refused) = gate::door(app, &event, session.authed) {
                return Action::Reply(RelayMessage::ok(id, false, refused.to_string()));
            }
            let app = app.clone();
            let publisher = Publisher { authed: session.authed, billed, relay: relay_match.cloned() };
            // A connection's changes to groups are judged in the order it sent them (a client
            // creates a group and edits it without waiting for the first OK).
            let turn = crate::groups::is_state_event(&event).then(|| session.group_turn());
            Action::Spawn(Box::pin(async move {
                let (before, done) = turn.unzip();
                if let Some(Some(before)) = before {
                    let _ = before.await;
                }
                let outcome = gate::publish(&app, *event, publisher).await;
                drop(done);
                Done::Frames(vec![RelayMessage::ok(id, outcome.accepted(), outcome.message())])
            }))
        }
        ClientMessage::Req { sub_id, mut filters } => {
            if let Err(closed) =
                check_request(admitted, needs_auth, (lim, query::SearchRules::of(&app.config)), &sub_id, &mut filters)
            {
                return Action::Reply(closed);
            }
            match gate::invite_request(app, session.authed, &filters) {
                Some(Ok(())) => return invite(app, sub_id),
                Some(Err(refused)) => return refused_closing(sub_id, refused, &session.challenge),
                None => {}
            }
            let viewer = match gate::read(app, session.authed, &filters) {
                Ok(viewer) => viewer,
                Err(refused) => return refused_closing(sub_id, refused.refusal(), &session.challenge),
            };
            let address = app.limiter.ceiling_of(session.client_ip);
            let generation = match session.open(&sub_id, lim.max_subscriptions, || app.slots.take(address)) {
                Ok(g) => g,
                Err(message) => return Action::Reply(RelayMessage::Closed { sub_id, message }),
            };
            Action::Spawn(Box::pin(req(app.clone(), billed, conn, sub_id, generation, filters, viewer)))
        }
        ClientMessage::Count { sub_id, mut filters } => {
            if let Err(closed) =
                check_request(admitted, needs_auth, (lim, query::SearchRules::of(&app.config)), &sub_id, &mut filters)
            {
                return Action::Reply(closed);
            }
            let viewer = match gate::read(app, session.authed, &filters) {
                Ok(viewer) => viewer,
                Err(refused) => return refused_closing(sub_id, refused.refusal(), &session.challenge),
            };
            Action::Spawn(Box::pin(count(app.clone(), billed, sub_id, filters, viewer)))
        }
        ClientMessage::Close(sub_id) => {
            session.close(&sub_id);
            app.fanout.unsubscribe(conn, &sub_id, None);
            Action::Nothing
        }
        ClientMessage::NegOpen { sub_id, filter, message } => {
            // A NEG-ERR ends the session of its id (NIP-77), so a refused NEG-OPEN ends the one
            // it would have replaced; likewise a refused NEG-MSG below.
            if let Err(limited) = admitted {
                session.negs.close(&sub_id);
                return Action::Reply(neg::neg_err(&sub_id, limited.to_string()));
            }
            if needs_auth {
                session.negs.close(&sub_id);
                return Action::Reply(neg::neg_err(&sub_id, AUTH_REQUIRED.into()));
            }
            let viewer = match gate::read(app, session.authed, std::slice::from_ref(&filter)) {
                Ok(viewer) => viewer,
                Err(refused) => {
                    session.negs.close(&sub_id);
                    return refused_neg(&sub_id, &refused.refusal(), &session.challenge);
                }
            };
            let address = app.limiter.ceiling_of(session.client_ip);
            let generation = match session.negs.open(&sub_id, app.config.sync.max_sessions, || app.slots.take(address))
            {
                Ok(generation) => generation,
                Err(refused) => return Action::Reply(refused),
            };
            let open = neg::open(app.clone(), billed, sub_id, generation, *filter, message, viewer);
            Action::Spawn(Box::pin(async move { Done::Neg(open.await) }))
        }
        ClientMessage::NegMsg { sub_id, message } => {
            if let Err(limited) = admitted {
                session.negs.close(&sub_id);
                return Action::Reply(neg::neg_err(&sub_id, limited.to_string()));
            }
            match session.negs.take(&sub_id) {
                Ok((generation, negotiation)) => {
                    let answer = neg::message(sub_id, generation, negotiation, message);
                    Action::Spawn(Box::pin(async move { Done::Neg(answer.await) }))
                }
                Err(refused) => Action::Reply(refused),
            }
        }
        ClientMessage::NegClose(sub_id) => {
            session.negs.close(&sub_id);
            Action::Nothing
        }
        ClientMessage::Auth(event) => {
            if let Err(limited) = admitted {
                return Action::Reply(RelayMessage::ok(event.id.to_hex(), false, limited.to_string()));
            }
            let challenge = session.challenge.clone();
            let relay_match = relay_match.cloned();
            Action::Spawn(Box::pin(authenticate(*event, challenge, relay_match)))
        }
    }
}

/// Answers a REQ for an invite the gate let through: a fresh single-use claim in a kind 28935
/// event signed by the relay, then EOSE.
fn invite(app: &Arc<AppState>, sub_id: String) -> Action {
    let app = app.clone();
    Action::Spawn(Box::pin(async move {
        Done::Frames(match gate::invite(&app).await {
            Ok(event) => vec![RelayMessage::Event { sub_id: sub_id.clone(), event }, RelayMessage::Eose(sub_id)],
            Err(e) => {
                tracing::error!(error = %e, "making an invite failed");
                vec![RelayMessage::Closed { sub_id, message: "error: the invite could not be made".into() }]
            }
        })
    }))
}

/// The CLOSED that answers a REQ/COUNT refused before it is read; an `auth-required:` one comes
/// with the connection's AUTH challenge again, so the client authenticates and sends the request
/// once more (NIP-42).
fn refused_closing(sub_id: String, refused: Refusal, challenge: &str) -> Action {
    let auth = refused.prefix() == Prefix::AuthRequired;
    let mut frames = vec![RelayMessage::Closed { sub_id, message: refused.to_string() }];
    if auth {
        frames.push(RelayMessage::Auth(challenge.to_string()));
    }
    Action::Spawn(Box::pin(async move { Done::Frames(frames) }))
}

/// The NEG-ERR that answers a NEG-OPEN refused before it is read, with the AUTH challenge again
/// for an `auth-required:` one (as [`refused_closing`]).
fn refused_neg(sub_id: &str, refused: &Refusal, challenge: &str) -> Action {
    let mut frames = vec![neg::refused(sub_id, refused)];
    if refused.prefix() == Prefix::AuthRequired {
        frames.push(RelayMessage::Auth(challenge.to_string()));
    }
    Action::Spawn(Box::pin(async move { Done::Frames(frames) }))
}

/// The checks a REQ and a COUNT share, in order: admission, authentication, limits (which also
/// default and clamp each filter's `limit`). `Err` is the CLOSED that answers the frame.
fn check_request(
    admitted: Result<(), Denied>,
    needs_auth: bool,
    (lim, search): (&crate::config::Limitation, query::SearchRules),
    sub_id: &str,
    filters: &mut [Filter],
) -> Result<(), RelayMessage> {
    admitted.map_err(|denied| RelayMessage::Closed { sub_id: sub_id.to_string(), message: denied.to_string() })?;
    if needs_auth {
        return Err(RelayMessage::Closed { sub_id: sub_id.to_string(), message: AUTH_REQUIRED.into() });
    }
    query::prepare(lim, search, sub_id, filters).map_err(|e| closed(sub_id.to_string(), &e))
}

/// Checks a NIP-42 answer: signature, kind, challenge, relay, time.
async fn authenticate(event: Event, challenge: String, relay_match: Option<RelayMatch>) -> Done {
    let id = event.id.to_hex();
    // On the connection's own task, like every signature check (see `ingest`).
    let result = match verify(event) {
        Err(e) => Err(format!("invalid: {e}")),
        Ok(verified) => {
            // Without a public_url or a Host header there is nothing to compare the relay tag to.
            let relay_match = relay_match.unwrap_or_else(|| {
                RelayMatch::Host(verified.tag_values("relay").next().and_then(nip42::host_of).unwrap_or_default())
            });
            nip42::check(&verified, &challenge, &relay_match, Timestamp::now())
                .map(|()| verified.pubkey)
                .map_err(|e| e.to_string())
        }
    };
    Done::Auth { id, result }
}

/// A REQ: its live subscription is registered once the permit is held, before the scan, so no
/// event stored meanwhile is missed (the loop drops the results if the id changed meanwhile).
async fn req(
    app: Arc<AppState>,
    billed: Billed,
    conn: ConnId,
    sub_id: String,
    generation: u64,
    filters: Vec<Filter>,
    viewer: Viewer,
) -> Done {
    let subscribe = |filters: &[Filter]| app.fanout.subscribe(conn, &sub_id, generation, filters.to_vec());
    match query::events(&app, &billed, filters, viewer, subscribe).await {
        Ok((events, mark)) => {
            let mut frames: Vec<RelayMessage> =
                events.into_iter().map(|event| RelayMessage::Event { sub_id: sub_id.clone(), event }).collect();
            frames.push(RelayMessage::Eose(sub_id.clone()));
            Done::Query { sub_id, generation, mark, frames }
        }
        Err(e) => {
            app.fanout.unsubscribe(conn, &sub_id, Some(generation));
            Done::SubRefused { closed: closed(sub_id.clone(), &e), sub_id, generation }
        }
    }
}

async fn count(app: Arc<AppState>, billed: Billed, sub_id: String, filters: Vec<Filter>, viewer: Viewer) -> Done {
    let frame = match query::count(&app, &billed, filters, viewer).await {
        Ok(count) => RelayMessage::Count { sub_id, count },
        Err(QueryError::Store(_)) => RelayMessage::Closed { sub_id, message: "error: the count failed".into() },
        Err(e) => closed(sub_id, &e),
    };
    Done::Frames(vec![frame])
}
