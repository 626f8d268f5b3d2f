//! The admin API (`/admin/v1/…`) and NIP-86 relay management (`POST /`).
//!
//! Owns the routes; who may administer (a bearer token compared in constant time, or NIP-98 by a
//! pubkey in `admin.pubkeys`) and the audit log of every change are `auth.rs`'s. It is a thin
//! adapter: limits live in the limiter, bans and overrides in [`crate::moderation`]. Admin calls
//! never bill the caller's quotas; failed credentials are throttled per IP.

mod auth;
mod backup;
mod groups;
mod invites;
mod limits;
mod media;
mod members;
mod nip86;
mod people;
mod reports;
mod route;
mod store;
mod sync;
pub mod ui;
mod usage;

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use warp::reply::Response;

use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, Route, first_of, internal};
use crate::protocol::Timestamp;
use auth::{Admin, ok_json};
use warp::http::Method;

/// Every `/admin/v1` route, and NIP-86 at `POST /`.
pub fn routes(app: Arc<AppState>) -> Route {
    let limit = app.config.limitation.max_message_length as u64;
    let _base = route::base();
    // GET /admin/v1/stats
    let stats = route::at(&app, Method::GET, "stats", None, stats);
    // GET /admin/v1/relay
    let relay = route::at(&app, Method::GET, "relay", None, relay);
    // GET /admin/v1/audit
    let audit_log = route::at(&app, Method::GET, "audit", None, audit_entries);
    let own = vec![stats, relay, audit_log];
    // Each resource's routes from its own file; the page last (its `/admin/{file}` would take a
    // path of the API that another route refuses).
    let resources = [
        limits::routes(&app, limit),
        usage::routes(&app, limit),
        own,
        store::routes(&app, limit),
        backup::routes(&app, limit),
        groups::routes(&app, limit),
        media::routes(&app, limit),
        reports::routes(&app, limit),
        people::routes(&app, limit),
        members::routes(&app, limit),
        invites::routes(&app, limit),
        sync::routes(&app, limit),
        nip86::routes(&app, limit),
        ui::routes(&app, limit),
    ];
    first_of(resources.into_iter().flatten())
}

/// `GET /admin/v1/stats`: the samples of the last 15 minutes, oldest first.
async fn stats(app: Arc<AppState>, _: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    ok_json(&serde_json::json!({
        "interval_secs": crate::stats::INTERVAL.as_secs(),
        "samples": app.stats.samples(),
    }))
}

/// `GET /admin/v1/relay`: what the relay is and says of itself (the admin page's header, its
/// overview's uptime and version, and the relay information it edits).
async fn relay(app: Arc<AppState>, _: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    // Name, description and icon exactly as NIP-11 serves them.
    let info = crate::nip11::RelayInfo::new(&app.config, app.limiter.limits(), &app.moderation, &app.keys.public_key());
    let uptime = app.started.elapsed().as_secs();
    ok_json(&serde_json::json!({
        "software": "hearth",
        "version": env!("CARGO_PKG_VERSION"),
        "started_at": Timestamp::now().0.saturating_sub(uptime),
        "uptime_secs": uptime,
        "name": info.name,
        "description": info.description,
        "icon": info.icon,
        "node": app.config.node.name,
        "relay_pubkey": app.keys.public_key().to_hex(),
        "access": access(&app),
        "limiter": {
            "backend": app.config.limits.backend,
            "redis_unavailable": app.config.limits.redis_unavailable,
            "redis": app.limiter.shared_status(),
        },
    }))
}

/// `access` of `GET /admin/v1/relay`: the mode and who may write and read under it now.
fn access(app: &AppState) -> Value {
    let mode = app.moderation.mode();
    let anyone = |members: bool| if members { "members" } else { "anyone" };
    serde_json::json!({
        "mode": mode.name(),
        "members": app.moderation.member_count(),
        "writes": anyone(app.moderation.restricted_writes()),
        "reads": anyone(mode == crate::config::AccessMode::MembersOnly),
        "publish_members": app.config.access.publish_members,
    })
}

#[derive(Serialize)]
struct AuditBody {
    entries: Vec<Value>,
}

/// `GET /admin/v1/audit?limit=N`: newest first.
async fn audit_entries(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let limit = ctx.query_count("limit", 100, 10_000)?;
    let entries = app
        .store
        .audit_log(limit)
        .map_err(internal)?
        .into_iter()
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect();
    ok_json(&AuditBody { entries })
}
