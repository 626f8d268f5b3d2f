//! The media server inside the relay: Blossom (BUD-01, 02, 04, 05, 06, 09, 11, 12) at the root of
//! its HTTP address, on the relay's members and its one limiter.
//!
//! Owns the media routes and their dispatch: `GET`/`HEAD /<sha256>[.ext]`, `DELETE /<sha256>`,
//! `PUT`/`HEAD /upload`, `PUT`/`HEAD /media` (BUD-05), `PUT /mirror`, `PUT /report` (BUD-09),
//! `GET /list/<pubkey>`, and `OPTIONS` (CORS preflight) on each. It is a [`Front`]: the listener
//! hands it these requests before warp's routes, because blobs stream in and out through hyper's
//! own bodies, and an upload's body is bounded per chunk rather than by the whole-request
//! timeout. Who may do what is `access.rs`'s, reading and listing `download.rs`'s, changing
//! `upload.rs`'s (a picture's metadata taken out `strip.rs`'s), reports of blobs `report.rs`'s,
//! the answers `reply.rs`'s, the headers that keep a blob from acting in the relay's origin
//! `safety.rs`'s; the bytes and their records are [`crate::blobs`]'.

mod access;
pub(crate) mod download;
mod reply;
mod report;
mod safety;
pub(crate) mod strip;
mod upload;

use std::net::SocketAddr;
use std::sync::Arc;

use warp::http::{Method, StatusCode};

use crate::app::AppState;
use crate::http::RequestCtx;
use crate::http::front::{Answer, Front, FrontResponse};
use crate::protocol::blossom::{BlobHash, Verb};
use reply::{MediaError, empty, with_cors};

/// Which media route a path is.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Blob(BlobHash),
    Upload,
    Media,
    Mirror,
    Report,
    List(String),
}

impl Route {
    fn of(path: &str) -> Option<Route> {
        match path {
            "/upload" => Some(Route::Upload),
            "/media" => Some(Route::Media),
            "/report" => Some(Route::Report),
            "/mirror" => Some(Route::Mirror),
            _ => match path.strip_prefix("/list/") {
                Some(pk) if !pk.is_empty() && !pk.contains('/') => Some(Route::List(pk.to_string())),
                Some(_) => None,
                None => path.strip_prefix('/').and_then(BlobHash::from_segment).map(Route::Blob),
            },
        }
    }

    /// The methods the route has (for 405's `Allow`).
    fn allowed(&self) -> &'static str {
        match self {
            Route::Blob(_) => "GET, HEAD, DELETE, OPTIONS",
            Route::Upload | Route::Media => "PUT, HEAD, OPTIONS",
            Route::Report => "PUT, OPTIONS",
            Route::Mirror => "PUT, OPTIONS",
            Route::List(_) => "GET, OPTIONS",
        }
    }
}

/// The media server, when `media.enabled`.
pub fn front(app: &Arc<AppState>) -> Option<Arc<dyn Front>> {
    app.config.media.enabled.then(|| Arc::new(Media { app: app.clone() }) as Arc<dyn Front>)
}

struct Media {
    app: Arc<AppState>,
}

impl Front for Media {
    fn claims(&self, _: &Method, path: &str) -> bool {
        Route::of(path).is_some()
    }

    fn answer(&self, request: hyper::Request<hyper::body::Incoming>, peer: SocketAddr) -> Answer {
        let app = self.app.clone();
        Box::pin(async move { handle(&app, request, peer).await })
    }
}

async fn handle(app: &AppState, request: hyper::Request<hyper::body::Incoming>, peer: SocketAddr) -> FrontResponse {
    let (parts, body) = request.into_parts();
    let ctx = RequestCtx {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        peer: Some(peer),
        body: bytes::Bytes::new(),
    };
    let head = ctx.method == Method::HEAD;
    let result = match Route::of(&ctx.path) {
        None => Err(MediaError::NotFound("not found".into())),
        Some(route) => answer(app, &ctx, route, body).await,
    };
    let error = result.as_ref().err().map(ToString::to_string);
    let mut response = with_cors(result.unwrap_or_else(|e| e.into_response(head)));
    // Refusals too: no answer of the media routes is ever sniffed into something else.
    response
        .headers_mut()
        .insert(warp::http::header::X_CONTENT_TYPE_OPTIONS, warp::http::HeaderValue::from_static("nosniff"));
    if let Some(log) = app.frame_log.get() {
        log.call(&format!("{} {}", ctx.method, ctx.path), response.status().as_u16(), error.as_deref());
    }
    response
}

async fn answer(
    app: &AppState,
    ctx: &RequestCtx,
    route: Route,
    body: hyper::body::Incoming,
) -> Result<FrontResponse, MediaError> {
    if ctx.method == Method::OPTIONS {
        let mut response = empty(StatusCode::NO_CONTENT);
        response.headers_mut().insert("access-control-max-age", warp::http::HeaderValue::from_static("86400"));
        return Ok(response);
    }
    let verb = match (&route, &ctx.method) {
        (Route::Blob(_), &Method::GET | &Method::HEAD) => Verb::Get,
        (Route::Blob(_), &Method::DELETE) => Verb::Delete,
        (Route::Upload, &Method::PUT | &Method::HEAD) | (Route::Mirror, &Method::PUT) => Verb::Upload,
        (Route::Media, &Method::PUT | &Method::HEAD) => Verb::Media,
        (Route::Report, &Method::PUT) => return report::put(app, ctx, body).await,
        (Route::List(_), &Method::GET) => Verb::List,
        _ => return Err(MediaError::MethodNotAllowed(route.allowed())),
    };
    let caller = access::caller(app, ctx, verb).await?;
    let outcome = match route {
        Route::Blob(hash) if verb == Verb::Delete => upload::delete(app, &caller, hash).await,
        Route::Blob(hash) => download::blob(app, ctx, &caller, hash, ctx.method == Method::HEAD).await,
        Route::Upload | Route::Media if ctx.method == Method::HEAD => upload::check(app, ctx, &caller).await,
        Route::Upload => upload::put(app, ctx, &caller, body).await,
        Route::Media => upload::media(app, ctx, &caller, body).await,
        // Answered above, before any authorization is read (the report is signed itself).
        Route::Report => Err(MediaError::MethodNotAllowed(route.allowed())),
        Route::Mirror => upload::mirror(app, ctx, &caller, body).await,
        Route::List(pubkey) => download::list(app, ctx, &caller, &pubkey).await,
    };
    access::unspent_unless_done(app, &caller, outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_media_routes_only_when_they_are_exactly_one() {
        let hex = "0f".repeat(32);
        assert_eq!(Route::of(&format!("/{hex}")), Some(Route::Blob(BlobHash([0x0f; 32]))));
        assert_eq!(Route::of(&format!("/{hex}.jpg")), Some(Route::Blob(BlobHash([0x0f; 32]))));
        assert_eq!(Route::of("/upload"), Some(Route::Upload));
        assert_eq!(Route::of("/list/abc"), Some(Route::List("abc".into())));
        for other in
            ["/", "/metrics", "/admin", "/api/v1/events", "/list/", "/list/a/b", "/uploads", &format!("/{hex}/x")]
        {
            assert_eq!(Route::of(other), None, "{other}");
        }
    }
}
