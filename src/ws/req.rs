//! REQ and CLOSE: a subscription's stored events, EOSE, then its live events; a REQ for an
//! invite (NIP-43) answered by the relay; a subscription closed.

use std::sync::Arc;

use super::action::{Action, Arrival, Done, check_request, closed, refused_closing};
use crate::app::AppState;
use crate::fanout::ConnId;
use crate::gate;
use crate::limiter::Billed;
use crate::protocol::{Filter, RelayMessage, Viewer};
use crate::query;

/// Handles a REQ.
pub(super) fn req(arrival: Arrival<'_>, sub_id: String, mut filters: Vec<Filter>) -> Action {
    let Arrival { app, session, conn, billed, admitted, needs_auth, .. } = arrival;
    let lim = &app.config.limitation;
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
    Action::Spawn(Box::pin(subscribe_and_read(app.clone(), billed, conn, sub_id, generation, filters, viewer)))
}

/// Handles a CLOSE: never billed or refused, a client can always close.
pub(super) fn close(arrival: Arrival<'_>, sub_id: String) -> Action {
    let Arrival { app, session, conn, .. } = arrival;
    session.close(&sub_id);
    app.fanout.unsubscribe(conn, &sub_id, None);
    Action::Nothing
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

/// A REQ: its live subscription is registered once the permit is held, before the scan, so no
/// event stored meanwhile is missed (the loop drops the results if the id changed meanwhile).
async fn subscribe_and_read(
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
