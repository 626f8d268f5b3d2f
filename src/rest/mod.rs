//! The REST API (`/api/v1/…`): publish, query, count and fetch events over HTTP, billed by the
//! same limiter as WebSocket frames.
//!
//! Owns the routes (warp filters that only route and extract), the handlers (typed arguments in,
//! a response out), NIP-98 caller identification and the OpenAPI document of the whole HTTP
//! surface. Publishing goes through [`crate::ingest`], exactly like a WebSocket EVENT.

pub mod error;
pub mod nip98;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use warp::http::{HeaderMap, Method, StatusCode};
use warp::reply::Response;
use warp::{Filter, Rejection};

use crate::app::AppState;
use crate::ingest::{self, Outcome, Prefix, Publisher};
use crate::limiter::principal::client_ip;
use crate::limiter::{LimitType, Principal};
use crate::protocol::{Event, EventId, EventJson, Filter as NostrFilter, PubKey, Timestamp};
use crate::ws::session::prepare_filters;
pub use error::ApiError;
use error::json_response;

/// The OpenAPI 3 document of every HTTP route hearth answers.
pub const OPENAPI: &str = include_str!("openapi.json");

/// What a handler needs to know about the request.
#[derive(Debug)]
pub struct RequestCtx {
    /// HTTP method.
    pub method: Method,
    /// Path, e.g. `/api/v1/events`.
    pub path: String,
    /// Raw query string, without `?` (empty for none).
    pub query: String,
    /// Request headers.
    pub headers: HeaderMap,
    /// TCP peer.
    pub peer: Option<SocketAddr>,
    /// Body bytes (empty for none).
    pub body: Bytes,
}

impl RequestCtx {
    /// A header value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The client's IP: the peer, or what a trusted proxy says.
    pub fn client_ip(&self, app: &AppState) -> Option<std::net::IpAddr> {
        client_ip(
            self.peer.map(|p| p.ip()),
            self.header("x-forwarded-for"),
            self.header("forwarded"),
            &app.trusted_proxies,
        )
    }

    /// The absolute URL the client requested, as NIP-98's `u` tag must name it: from
    /// `server.public_url` when set, else from the `Host` header (and `X-Forwarded-Proto` from a
    /// trusted proxy).
    pub fn url(&self, app: &AppState) -> String {
        let query = if self.query.is_empty() { String::new() } else { format!("?{}", self.query) };
        let public = app.config.server.public_url.trim_end_matches('/');
        if !public.is_empty() {
            let base = public.replacen("wss://", "https://", 1).replacen("ws://", "http://", 1);
            return format!("{base}{}{query}", self.path);
        }
        let trusted = self.peer.is_some_and(|p| app.trusted_proxies.contains(&p.ip()));
        let scheme = match self.header("x-forwarded-proto") {
            Some(proto) if trusted => proto.to_string(),
            _ => "http".to_string(),
        };
        let host = self.header("host").unwrap_or("");
        format!("{scheme}://{host}{}{query}", self.path)
    }

    /// Checks a NIP-98 `Authorization` header, if any: `Ok(None)` without one.
    pub async fn nip98(&self, app: &AppState) -> Result<Option<PubKey>, nip98::AuthError> {
        let Some(header) = self.header("authorization") else {
            return Ok(None);
        };
        let url = self.url(app);
        let request = nip98::Request { url: &url, method: self.method.as_str(), body: &self.body };
        // On the request's own task, like every signature check (see `ingest`).
        let checked = nip98::check(header, &request, Timestamp::now())?;
        // Each auth event is good for one request.
        let fresh = app.nip98_seen.entry(checked.id).or_insert(()).is_fresh();
        if !fresh {
            return Err(nip98::AuthError::Replayed);
        }
        Ok(Some(checked.pubkey))
    }
}

/// Who is calling, once identified and billed.
#[derive(Debug)]
struct Caller {
    authed: Option<PubKey>,
    principal: Principal,
}

/// Identifies the caller (NIP-98, else IP) and bills one `api_calls`. A failed auth is billed to
/// the IP, so bad headers cannot be sent for free.
async fn caller(app: &AppState, ctx: &RequestCtx) -> Result<Caller, ApiError> {
    let ip_addr = ctx.client_ip(app).unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
    if app.moderation.ip_blocked(&ip_addr) {
        return Err(ApiError::Forbidden("blocked: this address is blocked".into()));
    }
    let ip = Principal::Ip(ip_addr);
    let authed = match ctx.nip98(app).await {
        Ok(authed) => authed,
        Err(e) => {
            app.limiter.admit(&ip, LimitType::ApiCalls).map_err(ApiError::RateLimited)?;
            return Err(ApiError::Unauthorized(e));
        }
    };
    if authed.is_none() && app.config.auth.required {
        app.limiter.admit(&ip, LimitType::ApiCalls).map_err(ApiError::RateLimited)?;
        return Err(ApiError::Unauthorized(nip98::AuthError::Required));
    }
    let principal = authed.map_or(ip, Principal::Pubkey);
    app.limiter.admit(&principal, LimitType::ApiCalls).map_err(ApiError::RateLimited)?;
    Ok(Caller { authed, principal })
}

fn with_app(app: Arc<AppState>) -> impl Filter<Extract = (Arc<AppState>,), Error = Infallible> + Clone {
    warp::any().map(move || app.clone())
}

fn raw_query() -> impl Filter<Extract = (String,), Error = Infallible> + Clone {
    warp::query::raw().or(warp::any().map(String::new)).unify()
}

/// Extracts a request without a body.
pub fn ctx() -> impl Filter<Extract = (RequestCtx,), Error = Infallible> + Clone {
    warp::method()
        .and(warp::path::full())
        .and(raw_query())
        .and(warp::header::headers_cloned())
        .and(crate::listener::peer())
        .map(|method, path: warp::path::FullPath, query, headers, peer| RequestCtx {
            method,
            path: path.as_str().to_string(),
            query,
            headers,
            peer,
            body: Bytes::new(),
        })
}

/// Extracts a request with a body of at most `limit` bytes (413 beyond).
pub fn ctx_with_body(limit: u64) -> impl Filter<Extract = (RequestCtx,), Error = Rejection> + Clone {
    ctx().and(warp::body::content_length_limit(limit)).and(warp::body::bytes()).map(|mut ctx: RequestCtx, body| {
        ctx.body = body;
        ctx
    })
}

/// A server fault: logged once here, generic to the client.
fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "request failed");
    ApiError::Internal
}

fn respond(result: Result<Response, ApiError>) -> Result<Response, Infallible> {
    Ok(result.unwrap_or_else(ApiError::into_response))
}

/// Every `/api/v1` route.
pub fn routes(app: Arc<AppState>) -> impl Filter<Extract = (Response,), Error = Rejection> + Clone {
    let limit = app.config.limitation.max_message_length as u64;
    // POST /api/v1/events
    let publish = warp::path!("api" / "v1" / "events")
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app: Arc<AppState>, ctx: RequestCtx| async move { respond(publish(&app, ctx).await) });
    // GET /api/v1/events/{id}
    let get =
        warp::path!("api" / "v1" / "events" / String).and(warp::get()).and(with_app(app.clone())).and(ctx()).and_then(
            |id: String, app: Arc<AppState>, ctx: RequestCtx| async move { respond(get_event(&app, ctx, &id).await) },
        );
    // POST /api/v1/query
    let query = warp::path!("api" / "v1" / "query")
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app: Arc<AppState>, ctx: RequestCtx| async move { respond(query(&app, ctx).await) });
    // POST /api/v1/count
    let count = warp::path!("api" / "v1" / "count")
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app: Arc<AppState>, ctx: RequestCtx| async move { respond(count(&app, ctx).await) });
    // GET /api/v1/openapi.json
    let openapi = warp::path!("api" / "v1" / "openapi.json")
        .and(warp::get())
        .and(with_app(app))
        .and(ctx())
        .and_then(|app: Arc<AppState>, ctx: RequestCtx| async move { respond(openapi(&app, ctx).await) });
    publish.or(get).unify().or(query).unify().or(count).unify().or(openapi).unify()
}

/// 415 unless the body is declared JSON.
pub fn require_json(ctx: &RequestCtx) -> Result<(), ApiError> {
    match ctx.header("content-type") {
        Some(ct) if ct.trim().to_ascii_lowercase().starts_with("application/json") => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

/// Parses a JSON body, naming the problem on failure.
pub fn parse_body<T: for<'de> Deserialize<'de>>(ctx: &RequestCtx) -> Result<T, ApiError> {
    serde_json::from_slice(&ctx.body).map_err(|e| ApiError::BadRequest(format!("malformed JSON body: {e}")))
}

#[derive(Serialize)]
struct PublishBody<'a> {
    accepted: bool,
    id: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

fn status_of(outcome: &Outcome) -> StatusCode {
    match outcome {
        Outcome::Accepted | Outcome::Duplicate => StatusCode::OK,
        Outcome::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        Outcome::Refused(r) => match r.prefix {
            Prefix::Invalid => StatusCode::BAD_REQUEST,
            Prefix::Duplicate => StatusCode::CONFLICT,
            Prefix::Blocked | Prefix::Restricted => StatusCode::FORBIDDEN,
            Prefix::AuthRequired => StatusCode::UNAUTHORIZED,
            Prefix::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Prefix::Error => StatusCode::INTERNAL_SERVER_ERROR,
        },
    }
}

async fn publish(app: &AppState, ctx: RequestCtx) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let caller = caller(app, &ctx).await?;
    let text = std::str::from_utf8(&ctx.body).map_err(|_| ApiError::BadRequest("body is not UTF-8".into()))?;
    let event = match Event::from_json(text) {
        Ok(event) => event,
        Err(e) => {
            let message = format!("invalid: malformed event: {e}");
            let body = PublishBody { accepted: false, id: "", message: &message, error: Some(&message) };
            return Ok(json_response(StatusCode::BAD_REQUEST, &body));
        }
    };
    let id = event.id.to_hex();
    let outcome = ingest::publish(app, event, Publisher { authed: caller.authed, principal: caller.principal }).await;
    if let Outcome::RateLimited(refused) = &outcome {
        return Err(ApiError::RateLimited(*refused));
    }
    let message = outcome.message();
    let error = (!outcome.accepted()).then_some(message.as_str());
    let body = PublishBody { accepted: outcome.accepted(), id: &id, message: &message, error };
    Ok(json_response(status_of(&outcome), &body))
}

async fn get_event(app: &AppState, ctx: RequestCtx, id: &str) -> Result<Response, ApiError> {
    caller(app, &ctx).await?;
    let id = EventId::from_hex(id)
        .ok_or_else(|| ApiError::BadRequest("event id must be 64 lowercase hex characters".into()))?;
    let found = app.store.get_async(id, Timestamp::now()).await.map_err(internal)?;
    match found {
        Some(event) => Ok(json_response(StatusCode::OK, &event)),
        None => Err(ApiError::NotFound("event not found".into())),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FiltersBody {
    filters: Vec<NostrFilter>,
}

/// Parses `{"filters": […]}` and applies the same limits as a REQ.
fn filters_of(app: &AppState, ctx: &RequestCtx) -> Result<Vec<NostrFilter>, ApiError> {
    require_json(ctx)?;
    let FiltersBody { mut filters } = parse_body(ctx)?;
    if filters.is_empty() {
        return Err(ApiError::BadRequest("at least one filter is required".into()));
    }
    prepare_filters(&app.config.limitation, "", &mut filters).map_err(ApiError::BadRequest)?;
    Ok(filters)
}

#[derive(Serialize)]
struct EventsBody {
    events: Vec<EventJson>,
}

async fn query(app: &AppState, ctx: RequestCtx) -> Result<Response, ApiError> {
    let caller = caller(app, &ctx).await?;
    let filters = filters_of(app, &ctx)?;
    let _permit = app.limiter.acquire_handler(&caller.principal).await.map_err(ApiError::RateLimited)?;
    let events = app.store.query_async(filters, Timestamp::now()).await.map_err(internal)?;
    Ok(json_response(StatusCode::OK, &EventsBody { events }))
}

#[derive(Serialize)]
struct CountBody {
    count: u64,
}

async fn count(app: &AppState, ctx: RequestCtx) -> Result<Response, ApiError> {
    let caller = caller(app, &ctx).await?;
    let filters = filters_of(app, &ctx)?;
    let _permit = app.limiter.acquire_handler(&caller.principal).await.map_err(ApiError::RateLimited)?;
    let count = app.store.count_async(filters, Timestamp::now()).await.map_err(internal)?;
    Ok(json_response(StatusCode::OK, &CountBody { count }))
}

async fn openapi(app: &AppState, ctx: RequestCtx) -> Result<Response, ApiError> {
    caller(app, &ctx).await?;
    let doc: serde_json::Value = serde_json::from_str(OPENAPI).map_err(|_| ApiError::Internal)?;
    Ok(json_response(StatusCode::OK, &doc))
}
