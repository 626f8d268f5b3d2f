//! One text frame: parsed, its arrival billed, and handed to its verb's handler, one file each
//! (`event`, `req` with CLOSE, `count`, `negotiate` for NIP-77's three, `auth`).
//!
//! Owns what every frame meets before its verb: the size limit, the parse, and the arrival's
//! billing (`ws_reqs` for a read, `ws_events` for the rest; CLOSE and NEG-CLOSE never; AUTH to the
//! IP). The handlers answer what can be answered at once and hand slow work (a publish awaiting
//! its durable OK, a query, a signature check) back to the loop in `conn` as a future; each asks
//! the gate (`crate::gate`) who may publish and read, and every refusal is tied to the frame it
//! refuses (`OK` for EVENT/AUTH, `CLOSED` for REQ/COUNT, `NEG-ERR` for NEG-OPEN/NEG-MSG,
//! `NOTICE` only when nothing can be read).

use std::sync::Arc;

use super::action::{Action, Arrival};
use super::session::Session;
use super::{auth, count, event, negotiate, req};
use crate::app::AppState;
use crate::fanout::ConnId;
use crate::limiter::{Billed, LimitType};
use crate::protocol::nip42::RelayMatch;
use crate::protocol::{ClientMessage, Correlation};

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
    let arrival = Arrival { app, session, conn, billed, admitted, needs_auth, relay_match };
    match msg {
        ClientMessage::Event(e) => event::event(arrival, e),
        ClientMessage::Req { sub_id, filters } => req::req(arrival, sub_id, filters),
        ClientMessage::Count { sub_id, filters } => count::count(arrival, sub_id, filters),
        ClientMessage::Close(sub_id) => req::close(arrival, sub_id),
        ClientMessage::NegOpen { sub_id, filter, message } => negotiate::open(arrival, sub_id, filter, message),
        ClientMessage::NegMsg { sub_id, message } => negotiate::message(arrival, sub_id, message),
        ClientMessage::NegClose(sub_id) => negotiate::close(arrival, sub_id),
        ClientMessage::Auth(e) => auth::auth(arrival, *e),
    }
}
