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
mod store;
mod sync;
pub mod ui;
mod usage;

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use warp::Filter;
use warp::http::StatusCode;
use warp::reply::Response;

use crate::app::AppState;
use crate::http::{
    ApiError, RequestCtx, Route, Segment, ctx, ctx_with_body, first_of, internal, require_media_type, with_app,
};
use crate::protocol::Timestamp;
use auth::{Accept, Admin, ok_json, run};

/// Every `/admin/v1` route, and NIP-86 at `POST /`.
pub fn routes(app: Arc<AppState>) -> Route {
    let limit = app.config.limitation.max_message_length as u64;
    let base = warp::path("admin").and(warp::path("v1"));
    // GET /admin/v1/limits
    let get_limits = base
        .and(warp::path("limits"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, limits::get));
    // PATCH /admin/v1/limits
    let patch_limits = base
        .and(warp::path("limits"))
        .and(warp::path::end())
        .and(warp::patch())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, limits::patch));
    // POST /admin/v1/limits/preview
    let preview_limits = base
        .and(warp::path!("limits" / "preview"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, limits::preview));
    // DELETE /admin/v1/limits/overrides
    let reset_all = base
        .and(warp::path!("limits" / "overrides"))
        .and(warp::delete())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, |a, c, w| limits::reset(a, c, w, None)));
    // DELETE /admin/v1/limits/overrides/{tier}/{key}
    let reset_one = base
        .and(warp::path!("limits" / "overrides" / Segment / Segment))
        .and(warp::delete())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(tier), Segment(key), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| limits::reset(a, c, w, Some((tier, key))))
        });
    // PUT /admin/v1/pubkeys/{pubkey}/tier
    let set_tier = base
        .and(warp::path!("pubkeys" / Segment / "tier"))
        .and(warp::put())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|Segment(pubkey), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| limits::set_tier(a, c, w, pubkey))
        });
    // GET /admin/v1/store
    let store_stats = base
        .and(warp::path("store"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, store::stats));
    // POST /admin/v1/store/compact
    let store_compact = base
        .and(warp::path!("store" / "compact"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, store::compact));
    // GET /admin/v1/backup
    let backup = base
        .and(warp::path("backup"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, backup::backup));
    // GET /admin/v1/export
    let export = base
        .and(warp::path("export"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, store::export));
    // GET /admin/v1/usage/ip/{addr}
    let usage_ip = base
        .and(warp::path!("usage" / "ip" / Segment))
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(addr), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| usage::ip(a, c, w, addr))
        });
    // GET /admin/v1/usage/{pubkey}
    let usage_pubkey =
        base.and(warp::path!("usage" / Segment)).and(warp::get()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(pubkey), app, ctx| {
                run(app, ctx, Accept::TokenOrNip98, move |a, c, w| usage::pubkey(a, c, w, pubkey))
            },
        );
    // GET /admin/v1/usage
    let busiest = base
        .and(warp::path("usage"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, usage::busiest));
    // GET /admin/v1/stats
    let stats = base
        .and(warp::path("stats"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, stats));
    // GET /admin/v1/relay
    let relay = base
        .and(warp::path("relay"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, relay));
    // GET /admin/ and /admin/{file}: the admin page; `/admin` itself redirects to `/admin/`, where
    // the page's relative links resolve. No credential is needed to load it (it holds none).
    let enabled = app.config.admin.enabled();
    let page = warp::path("admin").and(warp::path::tail()).and(warp::path::full()).and(warp::get()).and_then(
        move |tail: warp::path::Tail, full: warp::path::FullPath| async move {
            if !enabled {
                return Err(warp::reject::not_found());
            }
            if full.as_str() == "/admin" {
                let mut response = Response::new(Vec::<u8>::new().into());
                *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
                response
                    .headers_mut()
                    .insert(warp::http::header::LOCATION, warp::http::HeaderValue::from_static("/admin/"));
                return Ok(response);
            }
            // The API's own paths are the routes above; no file of the page has a `/` in its name.
            ui::file(tail.as_str()).ok_or_else(warp::reject::not_found)
        },
    );
    // GET /admin/v1/audit
    let audit_log = base
        .and(warp::path("audit"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, audit_entries));
    // GET /admin/v1/members
    let members_list = base
        .and(warp::path("members"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, members::list));
    // PUT /admin/v1/members/{pubkey}
    let member_put = base
        .and(warp::path!("members" / Segment))
        .and(warp::put())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|Segment(pubkey), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| members::put(a, c, w, pubkey))
        });
    // DELETE /admin/v1/members/{pubkey}
    let member_delete =
        base.and(warp::path!("members" / Segment)).and(warp::delete()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(pubkey), app, ctx| {
                run(app, ctx, Accept::TokenOrNip98, move |a, c, w| members::delete(a, c, w, pubkey))
            },
        );
    // GET /admin/v1/groups
    let groups_list = base
        .and(warp::path("groups"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, groups::list));
    // GET, PATCH, DELETE /admin/v1/groups/{id}
    let group_one = base.and(warp::path!("groups" / Segment)).and(with_app(app.clone()));
    let group_get =
        group_one.clone().and(warp::get()).and(ctx()).and_then(|Segment(id), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| groups::get(a, c, w, id))
        });
    let group_patch =
        group_one.clone().and(warp::patch()).and(ctx_with_body(limit)).and_then(|Segment(id), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| groups::patch(a, c, w, id))
        });
    let group_delete = group_one.and(warp::delete()).and(ctx()).and_then(|Segment(id), app, ctx| {
        run(app, ctx, Accept::TokenOrNip98, move |a, c, w| groups::delete(a, c, w, id))
    });
    // POST /admin/v1/groups/{id}/pending/{pubkey}/{approve|deny}
    let group_answer = base
        .and(warp::path!("groups" / Segment / "pending" / Segment / Segment))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(id), Segment(pk), Segment(verdict), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| groups::answer(a, c, w, (id, pk, verdict)))
        });
    // GET /admin/v1/profiles
    let profiles = base
        .and(warp::path("profiles"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, people::lookup));
    // GET /admin/v1/reports
    let reports_list = base
        .and(warp::path("reports"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, reports::list));
    // POST /admin/v1/reports/{target}/{action}
    let reports_decide = base
        .and(warp::path!("reports" / Segment / Segment))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|Segment(target), Segment(action), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| reports::decide(a, c, w, (target, action)))
        });
    // GET /admin/v1/media
    let media_list = base
        .and(warp::path("media"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, media::list));
    // DELETE /admin/v1/media/{sha256}
    let media_delete =
        base.and(warp::path!("media" / Segment)).and(warp::delete()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(sha), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| media::delete(a, c, w, sha)),
        );
    // POST /admin/v1/invites
    let invite_create = base
        .and(warp::path("invites"))
        .and(warp::path::end())
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, invites::create));
    // GET /admin/v1/invites
    let invite_list = base
        .and(warp::path("invites"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, invites::list));
    // DELETE /admin/v1/invites/{code}
    let invite_revoke =
        base.and(warp::path!("invites" / Segment)).and(warp::delete()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(code), app, ctx| {
                run(app, ctx, Accept::TokenOrNip98, move |a, c, w| invites::revoke(a, c, w, code))
            },
        );
    // GET /admin/v1/sync
    let sync_list = base
        .and(warp::path("sync"))
        .and(warp::path::end())
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, sync::list));
    // POST /admin/v1/sync/peers/{index}/start
    let sync_start = base
        .and(warp::path!("sync" / "peers" / Segment / "start"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(index), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| sync::start(a, c, w, index))
        });
    // POST /admin/v1/sync/rounds
    let sync_round = base
        .and(warp::path!("sync" / "rounds"))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, sync::run_round));
    // POST /admin/v1/rpc (NIP-86 methods for bearer-token callers too)
    let rpc = base
        .and(warp::path("rpc"))
        .and(warp::path::end())
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|app, ctx| run(app, ctx, Accept::TokenOrNip98, nip86::handle));
    // POST / with Content-Type: application/nostr+json+rpc (NIP-86; 415 with another type)
    let nip86_root = warp::path::end().and(warp::post()).and(with_app(app)).and(ctx_with_body(limit)).and_then(
        |app, ctx: RequestCtx| async move {
            match require_media_type(&ctx, nip86::MEDIA_TYPE) {
                Ok(()) => run(app, ctx, Accept::Nip98, nip86::handle).await,
                Err(e) => Ok(e.into_response()),
            }
        },
    );
    first_of([
        get_limits.boxed(),
        patch_limits.boxed(),
        preview_limits.boxed(),
        reset_all.boxed(),
        reset_one.boxed(),
        set_tier.boxed(),
        usage_ip.boxed(),
        usage_pubkey.boxed(),
        busiest.boxed(),
        stats.boxed(),
        relay.boxed(),
        audit_log.boxed(),
        export.boxed(),
        backup.boxed(),
        store_stats.boxed(),
        store_compact.boxed(),
        groups_list.boxed(),
        group_get.boxed(),
        group_patch.boxed(),
        group_delete.boxed(),
        group_answer.boxed(),
        media_list.boxed(),
        reports_list.boxed(),
        profiles.boxed(),
        reports_decide.boxed(),
        media_delete.boxed(),
        members_list.boxed(),
        member_put.boxed(),
        member_delete.boxed(),
        invite_create.boxed(),
        invite_list.boxed(),
        invite_revoke.boxed(),
        sync_list.boxed(),
        sync_start.boxed(),
        sync_round.boxed(),
        rpc.boxed(),
        nip86_root.boxed(),
        page.boxed(),
    ])
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
