//! COUNT (NIP-45): how many stored events the filters match, as the reader may see them.

use std::sync::Arc;

use super::action::{Action, Arrival, Done, check_request, closed, refused_closing};
use crate::app::AppState;
use crate::gate;
use crate::limiter::Billed;
use crate::protocol::{Filter, RelayMessage, Viewer};
use crate::query::{self, QueryError};

/// Handles a COUNT.
pub(super) fn count(arrival: Arrival<'_>, sub_id: String, mut filters: Vec<Filter>) -> Action {
    let Arrival { app, session, billed, admitted, needs_auth, .. } = arrival;
    let lim = &app.config.limitation;
    if let Err(closed) =
        check_request(admitted, needs_auth, (lim, query::SearchRules::of(&app.config)), &sub_id, &mut filters)
    {
        return Action::Reply(closed);
    }
    let viewer = match gate::read(app, session.authed, &filters) {
        Ok(viewer) => viewer,
        Err(refused) => return refused_closing(sub_id, refused.refusal(), &session.challenge),
    };
    Action::Spawn(Box::pin(answer(app.clone(), billed, sub_id, filters, viewer)))
}

async fn answer(app: Arc<AppState>, billed: Billed, sub_id: String, filters: Vec<Filter>, viewer: Viewer) -> Done {
    let frame = match query::count(&app, &billed, filters, viewer).await {
        Ok(count) => RelayMessage::Count { sub_id, count },
        Err(QueryError::Store(_)) => RelayMessage::Closed { sub_id, message: "error: the count failed".into() },
        Err(e) => closed(sub_id, &e),
    };
    Done::Frames(vec![frame])
}
