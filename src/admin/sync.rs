//! `/admin/v1/sync…`: the background sync with the configured peers, and a round run on request.
//!
//! Owns listing each `[[sync.peers]]` entry with its last round (`GET /admin/v1/sync`), starting
//! a peer's next round now (`POST /admin/v1/sync/peers/{index}/start`, what the admin page's
//! button does) and running one round with any peer and filter (`POST /admin/v1/sync/rounds`,
//! what `hearth sync --local` asks of a running relay). Both starts are audited.

use std::sync::Arc;

use serde_json::json;
use warp::http::StatusCode;
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use crate::app::AppState;
use crate::config::peer_url_problem;
use crate::http::{ApiError, RequestCtx, json_response, parse_body, require_json};
use crate::http::{Route, Segment, ctx, ctx_with_body, with_app};
use crate::sync::status::StartError;
use crate::sync::{Round, round};
use warp::Filter;
use warp::http::Method;

/// `GET /admin/v1/sync`: every configured peer with its last round.
pub async fn list(app: Arc<AppState>, _: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    ok_json(&json!({"peers": app.sync.list()}))
}

/// `POST /admin/v1/sync/peers/{index}/start`: `202` once the round is started; `404` for no
/// such peer, `409` while its round runs.
pub async fn start(app: Arc<AppState>, _: RequestCtx, who: Admin, index: String) -> Result<Response, ApiError> {
    let index: usize =
        index.parse().map_err(|_| ApiError::NotFound(format!("no sync peer {index:?} is configured")))?;
    match app.sync.start(index) {
        Ok(()) => {}
        Err(e @ StartError::NoSuchPeer(_)) => return Err(ApiError::NotFound(e.to_string())),
        Err(e @ StartError::Running) => return Err(ApiError::Conflict(e.to_string())),
    }
    let url = app.sync.peers().get(index).map(|p| p.config.url.clone()).unwrap_or_default();
    audit(&app, &who, "sync.start", &url, serde_json::Value::Null, json!({"index": index})).await?;
    Ok(json_response(StatusCode::ACCEPTED, &json!({"index": index, "started": true})))
}

/// `POST /admin/v1/sync/rounds`: runs one round (`url`, `filter`, `direction`, `dry_run`) and
/// answers its summary when it ends: `200`, or `502` with the summary so far and `error` when the
/// peer could not be reached, refused, or broke off; `409` with `error` when the round would copy
/// members-only events to where anyone reads them (`allow_public` overrides).
pub async fn run_round(app: Arc<AppState>, ctx: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let planned: Round = parse_body(&ctx)?;
    if let Some(problem) = peer_url_problem(&planned.url) {
        return Err(ApiError::BadRequest(format!("url {problem}")));
    }
    if let Some(refusal) = planned.filter.search_refusal() {
        return Err(ApiError::BadRequest(format!("filter: {refusal}")));
    }
    audit(&app, &who, "sync.round", &planned.url, serde_json::Value::Null, json!(planned)).await?;
    Ok(match round(&app, &planned, &|_| {}).await {
        Ok(summary) => json_response(StatusCode::OK, &summary),
        Err((crate::sync::SyncError::WouldExpose(_), summary)) => json_response(StatusCode::CONFLICT, &summary),
        Err((_, summary)) => json_response(StatusCode::BAD_GATEWAY, &summary),
    })
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/sync
    let sync_list = super::route::at(app, Method::GET, "sync", None, list);
    // POST /admin/v1/sync/peers/{index}/start
    let sync_start = base
        .and(warp::path!("sync" / "peers" / Segment / "start"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(index), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| start(a, c, w, index)));
    // POST /admin/v1/sync/rounds
    let sync_round = base
        .and(warp::path!("sync" / "rounds"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, run_round));
    vec![sync_list, sync_start.boxed(), sync_round.boxed()]
}
