//! The automatic hold (`moderation.hold_after_reports`): an event enough keys reported is taken
//! off every read path until an admin decides on it.
//!
//! Owns holding and releasing. Holding names the event in the moderation document every node
//! shares (`held`); every read path then serves it only to its author and the admins (the
//! viewer's rule, `Viewer::withholds`), until an admin decides: a dismissal releases it, a
//! deletion or a ban removes it. Reporters are counted once each, only reports made after the
//! last decision on the event count, and on a relay with a member list only members' reports
//! (and the admins') count.

use serde_json::json;

use crate::app::AppState;
use crate::protocol::private::REPORT;
use crate::protocol::{Event, EventId, Filter, Timestamp, Viewer};

/// After `report` is stored: holds the event it names if enough keys have reported it now.
pub async fn after_report(app: &AppState, report: &Event) {
    let needed = app.config.moderation.hold_after_reports as usize;
    if needed == 0 || report.kind != REPORT {
        return;
    }
    let Some(id) = report.tag_values("e").next().and_then(EventId::from_hex) else { return };
    if let Err(e) = hold_if_due(app, id, needed).await {
        tracing::error!(error = %e, event = %id, "a reported event could not be held");
    }
}

async fn hold_if_due(app: &AppState, id: EventId, needed: usize) -> Result<(), String> {
    let state = app.moderation.snapshot();
    if state.held.contains_key(&id) || state.banned_events.contains_key(&id) {
        return Ok(());
    }
    let since = state.reviewed.get(&id.to_hex()).map_or(0, |r| r.at);
    let mut filter = Filter { kinds: Some(vec![REPORT]), ..Filter::default() };
    filter.tags.insert('e', vec![id.to_hex()]);
    let now = Timestamp::now();
    let (reports, _) =
        app.store.query_async(vec![filter], now, Viewer::everything()).await.map_err(|e| e.to_string())?;
    let members_only = app.moderation.restricted_writes();
    let mut reporters = std::collections::HashSet::new();
    for json in reports {
        let Ok(r) = serde_json::from_str::<Event>(json.as_str()) else { continue };
        let counts =
            !members_only || app.moderation.is_member(&r.pubkey) || app.config.admin.pubkeys.contains(&r.pubkey);
        if r.created_at.0 > since && counts {
            reporters.insert(r.pubkey);
        }
    }
    if reporters.len() < needed {
        return Ok(());
    }
    if app.store.get(&id, now).map_err(|e| e.to_string())?.is_none() {
        return Ok(());
    }
    app.moderation.hold(&app.store, id, now.0).await.map_err(|e| e.to_string())?;
    let detail = json!({"reporters": reporters.len()});
    crate::audit::record(
        &app.store,
        &app.config.node.name,
        "relay",
        "report.hold",
        &id.to_hex(),
        serde_json::Value::Null,
        detail,
    )
    .await
    .map_err(|e| e.to_string())
}

/// Releases a held event (an admin decided on it).
pub async fn release(app: &AppState, id: EventId) -> Result<(), String> {
    if !app.moderation.is_held(&id) {
        return Ok(());
    }
    app.moderation.release(&app.store, id).await.map_err(|e| e.to_string())?;
    Ok(())
}
