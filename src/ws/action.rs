//! What handling one frame gives back to the connection's loop, and the replies several verbs
//! share.
//!
//! Owns [`Action`] and [`Done`] (an answer now, or slow work whose result the loop delivers),
//! [`Arrival`] (what every verb's handler is given: the connection, and what `handle::frame`
//! decided on arrival), and the shared replies: the `CLOSED` of a failed read, the answer to a
//! read refused before it runs (with the AUTH challenge again for `auth-required:`), and the
//! checks REQ and COUNT share.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::neg::{self, NegDone};
use super::session::Session;
use crate::app::AppState;
use crate::fanout::ConnId;
use crate::limiter::{Billed, Denied};
use crate::protocol::nip42::RelayMatch;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Filter, PubKey, RelayMessage};
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

/// What every verb's handler is given.
pub(super) struct Arrival<'a> {
    pub(super) app: &'a Arc<AppState>,
    pub(super) session: &'a mut Session,
    pub(super) conn: ConnId,
    /// Who the frame is billed to.
    pub(super) billed: Billed,
    /// Whether the limiter admitted the frame's arrival.
    pub(super) admitted: Result<(), Denied>,
    /// `auth.required` and the connection has not authenticated.
    pub(super) needs_auth: bool,
    /// What names this relay (NIP-42's `relay` tag, NIP-62's).
    pub(super) relay_match: Option<&'a RelayMatch>,
}

pub(super) const AUTH_REQUIRED: &str = "auth-required: this relay requires authentication; answer the AUTH challenge";

/// The CLOSED that answers a REQ/COUNT whose read ended in `error`.
pub(super) fn closed(sub_id: String, error: &QueryError) -> RelayMessage {
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

/// The CLOSED that answers a REQ/COUNT refused before it is read; an `auth-required:` one comes
/// with the connection's AUTH challenge again, so the client authenticates and sends the request
/// once more (NIP-42).
pub(super) fn refused_closing(sub_id: String, refused: Refusal, challenge: &str) -> Action {
    let auth = refused.prefix() == Prefix::AuthRequired;
    let mut frames = vec![RelayMessage::Closed { sub_id, message: refused.to_string() }];
    if auth {
        frames.push(RelayMessage::Auth(challenge.to_string()));
    }
    Action::Spawn(Box::pin(async move { Done::Frames(frames) }))
}

/// The NEG-ERR that answers a NEG-OPEN refused before it is read, with the AUTH challenge again
/// for an `auth-required:` one (as [`refused_closing`]).
pub(super) fn refused_neg(sub_id: &str, refused: &Refusal, challenge: &str) -> Action {
    let mut frames = vec![neg::refused(sub_id, refused)];
    if refused.prefix() == Prefix::AuthRequired {
        frames.push(RelayMessage::Auth(challenge.to_string()));
    }
    Action::Spawn(Box::pin(async move { Done::Frames(frames) }))
}

/// The checks a REQ and a COUNT share, in order: admission, authentication, limits (which also
/// default and clamp each filter's `limit`). `Err` is the CLOSED that answers the frame.
pub(super) fn check_request(
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
