//! AUTH (NIP-42): the answer to the connection's challenge checked (signature, kind, challenge,
//! relay, time) on the connection's own task; the loop binds the connection to its key.

use super::action::{Action, Arrival, Done};
use crate::protocol::nip42::{self, RelayMatch};
use crate::protocol::verify::verify;
use crate::protocol::{Event, RelayMessage, Timestamp};

/// Handles an AUTH.
pub(super) fn auth(arrival: Arrival<'_>, event: Event) -> Action {
    let Arrival { session, admitted, relay_match, .. } = arrival;
    if let Err(limited) = admitted {
        return Action::Reply(RelayMessage::ok(event.id.to_hex(), false, limited.to_string()));
    }
    let challenge = session.challenge.clone();
    let relay_match = relay_match.cloned();
    Action::Spawn(Box::pin(authenticate(event, challenge, relay_match)))
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
