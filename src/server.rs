//! The HTTP surface on the relay's port: WebSocket upgrade, NIP-11, metrics, and the JSON
//! fallback for unknown routes.
//!
//! Owns routing only (warp filters); each route hands typed values to its module. Rejections are
//! mapped to JSON error bodies in one place ([`crate::http::recover`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use warp::http::{HeaderMap, HeaderValue, StatusCode};
use warp::path::FullPath;
use warp::{Filter, Reply};

use crate::app::AppState;
use crate::http::{NotHere, client_ip, first_of, recover, with_app};
use crate::nip11::RelayInfo;
use crate::ws::conn::{self, ConnInfo};

/// Largest frame tungstenite accepts at all; frames between `max_message_length` and this are
/// answered with a correlated refusal instead of a dropped connection.
fn hard_frame_cap(max_message_length: usize) -> usize {
    max_message_length.saturating_mul(2).max(max_message_length.saturating_add(64 * 1024))
}

/// The CORS headers of every answer at `/`: NIP-11, its preflight, and NIP-86 (`POST /`, which a
/// chat client calls from its own origin with a NIP-98 `Authorization` to learn whether its user
/// is an admin) — its 200 and its 401 alike, or the browser hides the answer from the page.
/// `Authorization` is named: a preflight's `*` does not cover it.
fn cors(headers: &mut HeaderMap) {
    headers.insert("Access-Control-Allow-Origin", HeaderValue::from_static("*"));
    headers.insert("Access-Control-Allow-Headers", HeaderValue::from_static("Authorization, Content-Type, *"));
    headers.insert("Access-Control-Allow-Methods", HeaderValue::from_static("GET, POST, OPTIONS"));
}

/// Every route of the relay's port.
pub fn routes(app: Arc<AppState>) -> impl Filter<Extract = (impl Reply,), Error = Infallible> + Clone {
    // GET / (WebSocket upgrade)
    let ws = warp::path::end()
        .and(crate::ws::upgrade::ws())
        .and(with_app(app.clone()))
        .and(crate::http::peer())
        .and(warp::header::headers_cloned())
        .and(crate::listener::held())
        .map(|ws: crate::ws::upgrade::Ws, app: Arc<AppState>, peer: Option<SocketAddr>, headers: HeaderMap, held| {
            let client_ip = client_ip::of_request(&app, peer, &headers);
            if let Err(blocked) = client_ip::check_blocked(&app, client_ip) {
                return blocked.into_response();
            }
            let host = headers.get("host").and_then(|v| v.to_str().ok()).map(str::to_string);
            let info = ConnInfo { peer, client_ip, host };
            let cap = hard_frame_cap(app.config.limitation.max_message_length);
            ws.on_upgrade(cap, move |socket| {
                let tasks = app.tasks.clone();
                tasks.track_future(async move {
                    // The socket keeps its place under the connection caps until it closes.
                    let _held: Option<crate::listener::Held> = held;
                    conn::serve(app, socket, info).await
                })
            })
        });
    // GET / with Accept: application/nostr+json (NIP-11)
    let nip11 = warp::path::end()
        .and(warp::get())
        .and(warp::header::optional::<String>("accept"))
        .and_then(|accept: Option<String>| async move {
            match accept {
                Some(a) if a.contains("application/nostr+json") => Ok(()),
                _ => Err(warp::reject::custom(NotHere)),
            }
        })
        .untuple_one()
        .and(with_app(app.clone()))
        .map(|app: Arc<AppState>| {
            let reply = warp::reply::json(&RelayInfo::new(
                &app.config,
                app.limiter.limits(),
                &app.moderation,
                &app.keys.public_key(),
            ));
            warp::reply::with_header(reply, "Content-Type", "application/nostr+json").into_response()
        });
    // OPTIONS / (CORS preflight for NIP-11 and NIP-86)
    let preflight = warp::path::end()
        .and(warp::options())
        .map(|| warp::reply::with_status(warp::reply(), StatusCode::NO_CONTENT).into_response());
    // GET / (anything else: a human-readable pointer)
    let home = warp::path::end().and(warp::get()).and(with_app(app.clone())).map(|app: Arc<AppState>| {
        let media = if app.config.media.enabled {
            "Media (Blossom): PUT /upload, GET /<sha256>, GET /list/<pubkey> at this address.\n"
        } else {
            ""
        };
        format!("hearth: a Nostr relay. Connect a Nostr client to this address over WebSocket.\n{media}")
            .into_response()
    });
    // GET /metrics
    let metrics = warp::path("metrics").and(warp::path::end()).and(warp::get()).map(|| {
        warp::reply::with_header(crate::metrics::render(), "Content-Type", "text/plain; version=0.0.4").into_response()
    });
    // The admin surface (and NIP-86) moves off this port when `admin.bind` is set.
    let on_this_port = app.config.admin.bind.is_none();
    let admin = warp::any()
        .and_then(move || async move { if on_this_port { Ok(()) } else { Err(warp::reject::not_found()) } })
        .untuple_one()
        .and(crate::admin::routes(app.clone()));
    // What this port serves: without the admin routes (NIP-86 at `POST /` among them) when they
    // moved to `admin.bind`.
    let served = ROUTES.iter().copied().filter(|&(method, path)| on_this_port || !is_admin(method, path)).collect();
    let all = first_of([
        crate::http::method_not_allowed(served),
        ws.boxed(),
        nip11.boxed(),
        preflight.boxed(),
        home.boxed(),
        metrics.boxed(),
        admin.boxed(),
        crate::rest::routes(app),
    ])
    .recover(recover);
    warp::path::full().and(all).map(|path: FullPath, reply| {
        let mut response = warp::Reply::into_response(reply);
        if path.as_str() == "/" {
            cors(response.headers_mut());
        }
        response
    })
}

/// True for the routes of the admin surface, which `admin.bind` moves to a port of its own.
pub fn is_admin(method: &str, path: &str) -> bool {
    path == "/admin" || path.starts_with("/admin/") || (method, path) == ("POST", "/")
}

/// Every (method, path) the relay's port answers; the OpenAPI document must describe exactly
/// these (checked by a test).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("OPTIONS", "/"),
    ("GET", "/metrics"),
    ("POST", "/api/v1/events"),
    ("GET", "/api/v1/events/{id}"),
    ("POST", "/api/v1/query"),
    ("POST", "/api/v1/count"),
    ("GET", "/api/v1/openapi.json"),
    ("POST", "/"),
    ("GET", "/admin/v1/limits"),
    ("PATCH", "/admin/v1/limits"),
    ("POST", "/admin/v1/limits/preview"),
    ("DELETE", "/admin/v1/limits/overrides"),
    ("DELETE", "/admin/v1/limits/overrides/{tier}/{key}"),
    ("PUT", "/admin/v1/pubkeys/{pubkey}/tier"),
    ("GET", "/admin/v1/usage"),
    ("GET", "/admin/v1/usage/{pubkey}"),
    ("GET", "/admin/v1/usage/ip/{addr}"),
    ("GET", "/admin/v1/stats"),
    ("GET", "/admin/v1/relay"),
    ("GET", "/admin/v1/audit"),
    ("GET", "/admin/v1/export"),
    ("GET", "/admin/v1/backup"),
    ("GET", "/admin/v1/store"),
    ("POST", "/admin/v1/store/compact"),
    ("GET", "/admin/v1/members"),
    ("GET", "/admin/v1/groups"),
    ("GET", "/admin/v1/groups/{id}"),
    ("PATCH", "/admin/v1/groups/{id}"),
    ("DELETE", "/admin/v1/groups/{id}"),
    ("POST", "/admin/v1/groups/{id}/pending/{pubkey}/{verdict}"),
    ("GET", "/admin/v1/profiles"),
    ("GET", "/admin/v1/reports"),
    ("POST", "/admin/v1/reports/{target}/{action}"),
    ("GET", "/admin/v1/media"),
    ("DELETE", "/admin/v1/media/{sha256}"),
    ("PUT", "/admin/v1/members/{pubkey}"),
    ("DELETE", "/admin/v1/members/{pubkey}"),
    ("POST", "/admin/v1/invites"),
    ("GET", "/admin/v1/invites"),
    ("DELETE", "/admin/v1/invites/{code}"),
    ("GET", "/admin/v1/sync"),
    ("POST", "/admin/v1/sync/peers/{index}/start"),
    ("POST", "/admin/v1/sync/rounds"),
    ("POST", "/admin/v1/rpc"),
    ("GET", "/admin"),
    ("GET", "/admin/"),
    ("GET", "/admin/{file}"),
    // The media server (Blossom), answered by `media` ahead of these routes.
    ("GET", "/{sha256}"),
    ("HEAD", "/{sha256}"),
    ("DELETE", "/{sha256}"),
    ("PUT", "/upload"),
    ("HEAD", "/upload"),
    ("PUT", "/media"),
    ("HEAD", "/media"),
    ("PUT", "/mirror"),
    ("PUT", "/report"),
    ("GET", "/list/{pubkey}"),
];
