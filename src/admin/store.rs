//! `GET /admin/v1/store` (what the store holds), `POST /admin/v1/store/compact` (a compaction
//! now) and `GET /admin/v1/export` (the stored events as JSON lines) on a running relay.

use std::sync::Arc;

use bytes::Bytes;
use warp::Reply;
use warp::http::StatusCode;
use warp::http::header::{CONTENT_TYPE, HeaderValue};
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, internal, json_response};
use crate::http::{Route, ctx, with_app};
use crate::protocol::{Filter, Timestamp};
use warp::Filter as _;
use warp::http::Method;

/// Bytes of JSON lines sent at once.
const CHUNK: usize = 64 * 1024;
/// Chunks read ahead of a slow download.
const READ_AHEAD: usize = 4;

/// `GET /admin/v1/export?filter=<NIP-01 filter JSON>`: every stored event matching the filter
/// (all without one), oldest first, one stored JSON per line, the same lines as `hearth export`.
/// Which events is fixed when the request arrives; writes go on meanwhile. A record that cannot
/// be read ends the body early (the download is then visibly incomplete).
pub async fn export(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let filter: Filter = match ctx.query_param("filter") {
        Some(text) => serde_json::from_str(&text).map_err(|e| ApiError::BadRequest(format!("filter: {e}")))?,
        None => Filter::default(),
    };
    if let Some(refusal) = filter.search_refusal() {
        return Err(ApiError::BadRequest(format!("filter: {refusal}")));
    }
    let snapshot = app.store.export_async(filter, Timestamp::now()).await.map_err(internal)?;
    Ok(ndjson("an export", move |send| {
        for event in snapshot {
            let json = event.map_err(|e| e.to_string())?;
            // A client that went away stops the export.
            if !send(json.as_str().as_bytes()) {
                return Ok(());
            }
        }
        Ok(())
    }))
}

/// A JSON-lines response (`application/x-ndjson`) that `produce` writes on a blocking thread:
/// it hands each line to its argument, which answers false once the client went away (then
/// `produce` should stop), and returns an error to end the body early, visibly incomplete
/// (`what` names the stream in the log). Lines go out in chunks of [`CHUNK`] bytes, at most
/// [`READ_AHEAD`] of them ahead of a slow download.
pub(super) fn ndjson<F>(what: &'static str, produce: F) -> Response
where
    F: FnOnce(&mut dyn FnMut(&[u8]) -> bool) -> Result<(), String> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut chunk = Vec::with_capacity(CHUNK);
        let mut gone = false;
        let outcome = produce(&mut |line| {
            chunk.extend_from_slice(line);
            chunk.push(b'\n');
            if chunk.len() >= CHUNK && tx.blocking_send(Ok(Bytes::from(std::mem::take(&mut chunk)))).is_err() {
                gone = true;
            }
            !gone
        });
        match outcome {
            Ok(()) if !gone && !chunk.is_empty() => {
                let _ = tx.blocking_send(Ok(Bytes::from(chunk)));
            }
            Ok(()) => {}
            Err(e) => {
                tracing::error!(error = %e, "{what} stopped before its end");
                let _ = tx.blocking_send(Err(std::io::Error::other(e)));
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    let mut response = warp::reply::stream(body).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    response
}

/// `GET /admin/v1/store`: events stored, the event log's live and dead bytes, the catalogue's
/// bytes, and the last compaction.
pub async fn stats(app: Arc<AppState>, _: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let stats = app.store.stats_async().await.map_err(internal)?;
    Ok(json_response(StatusCode::OK, &stats))
}

/// `POST /admin/v1/store/compact`: starts a compaction of the event log in the background (202);
/// 409 while one runs. Its outcome is `last_compaction` of `GET /admin/v1/store` once
/// `compacting` is false again.
pub async fn compact(app: Arc<AppState>, _: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    if !app.store.start_compaction() {
        return Err(ApiError::Conflict("a compaction is already running".into()));
    }
    audit(&app, &who, "store.compact", "events.log", serde_json::Value::Null, serde_json::json!("started")).await?;
    Ok(json_response(StatusCode::ACCEPTED, &serde_json::json!({"compacting": true})))
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, _limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/store
    let store_stats = super::route::at(app, Method::GET, "store", None, stats);
    // POST /admin/v1/store/compact
    let store_compact = base
        .and(warp::path!("store" / "compact"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, compact));
    // GET /admin/v1/export
    let export_route = super::route::at(app, Method::GET, "export", None, export);
    vec![store_stats, store_compact.boxed(), export_route]
}
