//! EVENT: an event handed to the gate and the one publish path; its `OK` once the outcome is
//! durable (a connection's changes to groups judged in the order it sent them).

use super::action::{AUTH_REQUIRED, Action, Arrival, Done};
use crate::gate;
use crate::ingest::Publisher;
use crate::protocol::{Correlation, Event, RelayMessage};

/// Handles an EVENT.
pub(super) fn event(arrival: Arrival<'_>, event: Box<Event>) -> Action {
    let Arrival { app, session, billed, admitted, needs_auth, relay_match, .. } = arrival;
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
