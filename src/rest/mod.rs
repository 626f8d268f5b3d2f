//! The REST API (`/api/v1/…`): publish, query, count and fetch events over HTTP, billed by the
//! same limiter as WebSocket frames.
//!
//! Owns the routes (warp filters that only route and extract), the handlers (typed arguments in,
//! a response out) and the OpenAPI document of the whole HTTP surface. Publishing goes through
//! [`crate::ingest`] and reads through [`crate::query`], exactly like WebSocket frames; the HTTP
//! plumbing (request context, errors, client IP, NIP-98) is [`crate::http`]'s.

use std::convert::Infallible;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use warp::Filter;
use warp::http::StatusCode;
use warp::http::header::HeaderValue;
use warp::reply::Response;

use crate::app::AppState;
use crate::gate::{self, ReadRefusal};
use crate::http::{
    ApiError, RequestCtx, Route, Segment, client_ip, ctx, ctx_with_body, first_of, internal, json_response, parse_body,
    require_json, respond, with_app,
};
use crate::ingest::{Outcome, Publisher};
use crate::limiter::{Billed, LimitType, Principal, Tier};
use crate::protocol::nip98::AuthError;
use crate::protocol::refusal::{Prefix, Refusal};
use crate::protocol::{Event, EventId, EventJson, Filter as NostrFilter, PubKey, TIER_HEADER, Timestamp, Viewer};
use crate::query::{self, QueryError};

/// The OpenAPI 3 document of every HTTP route hearth answers.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Who is calling, once identified and billed.
#[derive(Debug)]
struct Caller {
    authed: Option<PubKey>,
    billed: Billed,
}

/// Identifies the caller (NIP-98, else IP) and bills one `api_calls`; the tier it is billed at
/// comes back either way. A failed auth is billed to the IP, so bad headers cannot be sent for
/// free.
async fn caller(app: &AppState, ctx: &RequestCtx) -> (Tier, Result<Caller, ApiError>) {
    let ip_addr = ctx.client_ip(app);
    let ip = Billed::ip(ip_addr);
    let ip_tier = app.limiter.tier(&ip.principal);
    if let Err(e) = client_ip::check_blocked(app, Some(ip_addr)) {
        return (ip_tier, Err(e));
    }
    let refused = async |e: ApiError| match app.limiter.admit(&ip, LimitType::ApiCalls).await {
        Ok(()) => e,
        Err(denied) => denied.into(),
    };
    let authed = match ctx.nip98(app).await {
        Ok(authed) => authed,
        Err(e) => return (ip_tier, Err(refused(ApiError::Unauthorized(e)).await)),
    };
    if authed.is_none() && app.config.auth.required {
        return (ip_tier, Err(refused(ApiError::Unauthorized(AuthError::Required)).await));
    }
    let billed = authed.map_or(ip, |pk| Billed::new(Principal::Pubkey(pk), ip_addr));
    let tier = app.limiter.tier(&billed.principal);
    match app.limiter.admit(&billed, LimitType::ApiCalls).await {
        Ok(()) => (tier, Ok(Caller { authed, billed })),
        Err(denied) => (tier, Err(denied.into())),
    }
}

/// The `/api/v1` operations, each answered by [`serve`].
enum Endpoint {
    Publish,
    Get(String),
    Query,
    Count,
    OpenApi,
}

/// Identifies and bills the caller, then answers `endpoint`; every answer names the caller's
/// tier in [`TIER_HEADER`].
async fn serve(app: Arc<AppState>, ctx: RequestCtx, endpoint: Endpoint) -> Result<Response, Infallible> {
    let request = app.frame_log.get().map(|_| format!("{} {}", ctx.method, ctx.path));
    let (tier, caller) = caller(&app, &ctx).await;
    let result = match caller {
        Err(e) => Err(e),
        Ok(caller) => match endpoint {
            Endpoint::OpenApi => openapi(&app),
            // The publish path asks the access rules itself, with the event in hand.
            Endpoint::Publish => publish(&app, ctx, caller).await,
            _ if gate::access(&app, caller.authed).is_some() => Err(members_only(&app, &caller)),
            Endpoint::Get(id) => get_event(&app, &id, caller).await,
            Endpoint::Query => query(&app, ctx, caller).await,
            Endpoint::Count => count(&app, ctx, caller).await,
        },
    };
    let error = match (&result, app.frame_log.get()) {
        (Err(e), Some(_)) => Some(e.to_string()),
        _ => None,
    };
    let mut response = respond(result)?;
    response.headers_mut().insert(TIER_HEADER, HeaderValue::from_static(tier.as_str()));
    if let (Some(log), Some(request)) = (app.frame_log.get(), request) {
        log.call(&request, response.status().as_u16(), error.as_deref());
    }
    Ok(response)
}

/// How a relay for its members only (`access.mode = "members-only"`) answers any other caller:
/// 401 without a NIP-98 signature, 403 `restricted:` for a signer who is not a member.
fn members_only(app: &AppState, caller: &Caller) -> ApiError {
    match gate::access(app, caller.authed) {
        Some(refused) if refused.prefix() == Prefix::Restricted => ApiError::Forbidden(refused.to_string()),
        _ => ApiError::Unauthorized(AuthError::MembersOnly),
    }
}

/// Every `/api/v1` route.
pub fn routes(app: Arc<AppState>) -> Route {
    let limit = app.config.limitation.max_message_length as u64;
    // POST /api/v1/events
    let publish = warp::path!("api" / "v1" / "events")
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| serve(app, ctx, Endpoint::Publish));
    // GET /api/v1/events/{id}
    let get = warp::path!("api" / "v1" / "events" / Segment)
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(id), app, ctx| serve(app, ctx, Endpoint::Get(id)));
    // POST /api/v1/query
    let query = warp::path!("api" / "v1" / "query")
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| serve(app, ctx, Endpoint::Query));
    // POST /api/v1/count
    let count = warp::path!("api" / "v1" / "count")
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| serve(app, ctx, Endpoint::Count));
    // GET /api/v1/openapi.json
    let openapi = warp::path!("api" / "v1" / "openapi.json")
        .and(warp::get())
        .and(with_app(app))
        .and(ctx())
        .and_then(|app, ctx| serve(app, ctx, Endpoint::OpenApi));
    first_of([publish.boxed(), get.boxed(), query.boxed(), count.boxed(), openapi.boxed()])
}

/// The wait a 503 for a write the store could not make suggests: the relay cannot know when
/// space returns, and a writer that tries again every few seconds costs it nothing.
const STORE_RETRY_AFTER_SECS: u32 = 5;

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
        Outcome::Accepted | Outcome::Duplicate | Outcome::AlreadyMember => StatusCode::OK,
        Outcome::Refused(r) => match r.prefix() {
            Prefix::Invalid => StatusCode::BAD_REQUEST,
            Prefix::Duplicate => StatusCode::CONFLICT,
            Prefix::Blocked | Prefix::Restricted => StatusCode::FORBIDDEN,
            Prefix::AuthRequired => StatusCode::UNAUTHORIZED,
            Prefix::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            // The only publish refusal of this prefix is the store failing to write (a full or
            // failing disk): a condition of the relay that passes, so 503 with a Retry-After.
            Prefix::Error => StatusCode::SERVICE_UNAVAILABLE,
        },
    }
}

async fn publish(app: &AppState, ctx: RequestCtx, caller: Caller) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    // An unreadable event is answered in the publish shape, like every other refusal.
    let unreadable = |message: String| {
        let body = PublishBody { accepted: false, id: "", message: &message, error: Some(&message) };
        Ok(json_response(StatusCode::BAD_REQUEST, &body))
    };
    let Ok(text) = std::str::from_utf8(&ctx.body) else {
        return unreadable("invalid: body is not UTF-8".into());
    };
    let event = match Event::from_json(text) {
        Ok(event) => event,
        Err(e) => return unreadable(format!("invalid: malformed event: {e}")),
    };
    if gate::door(app, &event, caller.authed).is_some() {
        return Err(members_only(app, &caller));
    }
    let id = event.id.to_hex();
    let host = ctx.header("host").map(str::to_string);
    let relay = crate::protocol::nip42::RelayMatch::of(&app.config.server.public_url, host);
    let outcome = gate::publish(app, event, Publisher { authed: caller.authed, billed: caller.billed, relay }).await;
    if let Outcome::Refused(Refusal::RateLimited(limited)) = &outcome {
        return Err(ApiError::RateLimited(*limited));
    }
    let message = outcome.message();
    let error = (!outcome.accepted()).then_some(message.as_str());
    let body = PublishBody { accepted: outcome.accepted(), id: &id, message: &message, error };
    let status = status_of(&outcome);
    let mut response = json_response(status, &body);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(warp::http::header::RETRY_AFTER, STORE_RETRY_AFTER_SECS.into());
    }
    Ok(response)
}

/// One event by id; one the caller may not read (a private kind of others) is not found, as if
/// it were not stored.
async fn get_event(app: &AppState, id: &str, caller: Caller) -> Result<Response, ApiError> {
    let id = EventId::from_hex(id)
        .ok_or_else(|| ApiError::BadRequest("event id must be 64 lowercase hex characters".into()))?;
    let viewer = gate::viewer(app, caller.authed);
    let found = app.store.get_async(id, Timestamp::now(), viewer).await.map_err(internal)?;
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

/// Parses `{"filters": […]}` and applies the same limits as a REQ; filters for private kinds only
/// need a caller (NIP-98), as a REQ needs AUTH. The filters, and what the caller may read.
fn filters_of(app: &AppState, ctx: &RequestCtx, caller: &Caller) -> Result<(Vec<NostrFilter>, Viewer), ApiError> {
    require_json(ctx)?;
    let FiltersBody { mut filters } = parse_body(ctx)?;
    if filters.is_empty() {
        return Err(ApiError::BadRequest("at least one filter is required".into()));
    }
    query::prepare(&app.config.limitation, query::SearchRules::of(&app.config), "", &mut filters).map_err(api_error)?;
    match gate::read(app, caller.authed, &filters) {
        Ok(viewer) => Ok((filters, viewer)),
        Err(ReadRefusal::Access(_)) => Err(members_only(app, caller)),
        Err(ReadRefusal::PrivateNeedsAuth) => Err(ApiError::Unauthorized(AuthError::PrivateKinds)),
    }
}

/// How a read's failure is answered over HTTP (the store's fault was logged by `query`).
fn api_error(e: QueryError) -> ApiError {
    match e {
        QueryError::Limits(reason) | QueryError::Invalid(reason) | QueryError::Unsupported(reason) => {
            ApiError::BadRequest(reason)
        }
        QueryError::Unavailable(reason) => ApiError::Unavailable(reason),
        QueryError::RateLimited(limited) => ApiError::RateLimited(limited),
        QueryError::Store(_) => ApiError::Internal,
    }
}

#[derive(Serialize)]
struct EventsBody {
    events: Vec<EventJson>,
}

async fn query(app: &AppState, ctx: RequestCtx, caller: Caller) -> Result<Response, ApiError> {
    let (filters, viewer) = filters_of(app, &ctx, &caller)?;
    let (events, _) = query::events(app, &caller.billed, filters, viewer, |_| {}).await.map_err(api_error)?;
    Ok(json_response(StatusCode::OK, &EventsBody { events }))
}

#[derive(Serialize)]
struct CountBody {
    count: u64,
}

async fn count(app: &AppState, ctx: RequestCtx, caller: Caller) -> Result<Response, ApiError> {
    let (filters, viewer) = filters_of(app, &ctx, &caller)?;
    let count = query::count(app, &caller.billed, filters, viewer).await.map_err(api_error)?;
    Ok(json_response(StatusCode::OK, &CountBody { count }))
}

fn openapi(app: &AppState) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &openapi_document(app.config.limitation.max_filters)?))
}

/// The OpenAPI document as served: with this relay's `limitation.max_filters`, so that a
/// request the document allows is one the relay takes, and the admin page's files.
fn openapi_document(max_filters: usize) -> Result<serde_json::Value, ApiError> {
    let mut doc: serde_json::Value = serde_json::from_str(OPENAPI).map_err(internal)?;
    let filters = doc
        .pointer_mut("/components/schemas/Filters/properties/filters/maxItems")
        .ok_or_else(|| internal("the OpenAPI document has no Filters.filters.maxItems"))?;
    *filters = max_filters.into();
    let files = doc
        .pointer_mut("/paths/~1admin~1{file}/get/parameters/0/schema/enum")
        .ok_or_else(|| internal("the OpenAPI document has no /admin/{file} parameter"))?;
    *files = crate::http::page::FILES.iter().map(|(name, ..)| serde_json::Value::from(*name)).collect();
    Ok(doc)
}
