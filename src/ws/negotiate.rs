//! NEG-OPEN, NEG-MSG and NEG-CLOSE (NIP-77): a negentropy session opened through the gate, its
//! messages answered, closed (the sessions themselves are `neg`'s).

use super::action::{AUTH_REQUIRED, Action, Arrival, Done, refused_neg};
use super::neg;
use crate::gate;
use crate::protocol::Filter;

/// Handles a NEG-OPEN.
pub(super) fn open(arrival: Arrival<'_>, sub_id: String, filter: Box<Filter>, message: Vec<u8>) -> Action {
    let Arrival { app, session, billed, admitted, needs_auth, .. } = arrival;
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
    let generation = match session.negs.open(&sub_id, app.config.sync.max_sessions, || app.slots.take(address)) {
        Ok(generation) => generation,
        Err(refused) => return Action::Reply(refused),
    };
    let open = neg::open(app.clone(), billed, sub_id, generation, *filter, message, viewer);
    Action::Spawn(Box::pin(async move { Done::Neg(open.await) }))
}

/// Handles a NEG-MSG.
pub(super) fn message(arrival: Arrival<'_>, sub_id: String, message: Vec<u8>) -> Action {
    let Arrival { session, admitted, .. } = arrival;
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

/// Handles a NEG-CLOSE: never billed or refused.
pub(super) fn close(arrival: Arrival<'_>, sub_id: String) -> Action {
    let Arrival { session, .. } = arrival;
    session.negs.close(&sub_id);
    Action::Nothing
}
