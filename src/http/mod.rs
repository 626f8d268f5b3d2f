//! What the REST API and the admin API share on top of warp: the request context and its
//! extractors, one [`ApiError`] with its one response mapping, the rejection handler, the
//! client's IP and the IP block, NIP-98 caller identification, and the TCP peer the accept loop
//! hands every request.
//!
//! Owns HTTP plumbing only: no route lives here, and nothing here decides what a call does.
//! `rest` and `admin` are thin route modules on top of it; neither imports the other.

pub mod client_ip;
mod error;
pub mod front;
pub mod nip98;
pub mod page;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use warp::http::{HeaderMap, Method};
use warp::reply::Response;
use warp::{Filter, Rejection};

use crate::app::AppState;
pub use error::{ApiError, BodyTooLarge, BodyUnreadable, NotHere, internal, json_response, recover};

/// The TCP peer of a request, as a request extension: the accept loop inserts it (read with
/// [`peer`]).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// A filter extracting the TCP peer of the request.
pub fn peer() -> impl Filter<Extract = (Option<SocketAddr>,), Error = Infallible> + Clone {
    warp::ext::optional::<PeerAddr>().map(|p: Option<PeerAddr>| p.map(|p| p.0))
}

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

    /// The client's IP: the peer, or what a trusted proxy says ([`client_ip::UNKNOWN`] when
    /// there is no peer, which only an in-process caller can cause).
    pub fn client_ip(&self, app: &AppState) -> IpAddr {
        client_ip::of_request(app, self.peer, &self.headers).unwrap_or(client_ip::UNKNOWN)
    }

    /// `?key=value` of the query string.
    pub fn query_param(&self, key: &str) -> Option<String> {
        query_param(&self.query, key)
    }

    /// `?key=N`: a whole number, `default` when absent, at most `max`; anything else is 400
    /// naming the parameter. Every route reads its numbers through this, so `?limit=-5` gets the
    /// same answer everywhere.
    pub fn query_count(&self, key: &str, default: usize, max: usize) -> Result<usize, ApiError> {
        match self.query_param(key) {
            None => Ok(default),
            // A whole number past usize is still a whole number: it is clamped like any other.
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(v.parse::<usize>().unwrap_or(usize::MAX).min(max))
            }
            Some(_) => Err(ApiError::BadRequest(format!("{key} must be a whole number"))),
        }
    }
}

/// `?key=value` of a raw query string, percent-decoded (`+` is a space).
fn query_param(query: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == key).map(|(_, v)| v.into_owned())
}

/// A path segment, percent-decoded: warp hands segments over as they were sent, so `::1` would
/// arrive as `%3A%3A1`. Bytes that do not decode to UTF-8 become U+FFFD, which no parameter
/// takes (400, naming the parameter).
#[derive(Debug)]
pub struct Segment(pub String);

impl std::str::FromStr for Segment {
    type Err = Infallible;
    fn from_str(raw: &str) -> Result<Segment, Infallible> {
        Ok(Segment(percent_encoding::percent_decode_str(raw).decode_utf8_lossy().into_owned()))
    }
}

/// One route of a port, boxed. Each `or` of unboxed filters nests every route's type inside the
/// next, and the composed type (named in full in debug info) made each test binary near a
/// gigabyte; boxing each route keeps the names short at the cost of one indirect call per route
/// tried.
pub type Route = warp::filters::BoxedFilter<(Response,)>;

/// The first of `routes` that matches (in order), else the last route's rejection.
pub fn first_of(routes: impl IntoIterator<Item = Route>) -> Route {
    routes
        .into_iter()
        .reduce(|tried, next| tried.or(next).unify().boxed())
        .unwrap_or_else(|| warp::any().and_then(|| async { Err(warp::reject::not_found()) }).boxed())
}

/// 405 with `Allow` (RFC 9110 §15.5.5) for a request whose path is one of `routes` (method,
/// path pattern with `{name}` segments) under other methods only; every other request passes on
/// to the routes themselves. Tried first, so that warp's own method rejections, which cannot say
/// which methods the path has, are never the answer.
pub fn method_not_allowed(routes: Vec<(&'static str, &'static str)>) -> Route {
    let routes = Arc::new(routes);
    warp::path::full()
        .and(warp::method())
        .and_then(move |path: warp::path::FullPath, method: Method| {
            let routes = routes.clone();
            async move {
                let allowed: Vec<&str> = routes
                    .iter()
                    .filter(|(_, pattern)| path_matches(pattern, path.as_str()))
                    .map(|(m, _)| *m)
                    .collect();
                if allowed.is_empty() || allowed.contains(&method.as_str()) {
                    return Err(warp::reject::not_found());
                }
                let mut response = json_response(
                    warp::http::StatusCode::METHOD_NOT_ALLOWED,
                    &serde_json::json!({"error": "method not allowed"}),
                );
                if let Ok(allow) = warp::http::HeaderValue::from_str(&allowed.join(", ")) {
                    response.headers_mut().insert(warp::http::header::ALLOW, allow);
                }
                Ok(response)
            }
        })
        .boxed()
}

/// True when `path` is an instance of `pattern` (`{name}` stands for one non-empty segment;
/// `{sha256}` for a blob's hash, with an extension or without).
fn path_matches(pattern: &str, path: &str) -> bool {
    let (mut want, mut got) = (pattern.split('/'), path.split('/'));
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some("{sha256}"), Some(g)) if crate::protocol::blossom::BlobHash::from_segment(g).is_none() => {
                return false;
            }
            (Some(w), Some(g)) if w == g || (w.starts_with('{') && !g.is_empty()) => {}
            _ => return false,
        }
    }
}

/// Hands the shared state to a route.
pub fn with_app(app: Arc<AppState>) -> impl Filter<Extract = (Arc<AppState>,), Error = Infallible> + Clone {
    warp::any().map(move || app.clone())
}

fn raw_query() -> impl Filter<Extract = (String,), Error = Infallible> + Clone {
    warp::query::raw().or(warp::any().map(String::new)).unify()
}

/// Extracts a request without a body.
pub fn ctx() -> impl Filter<Extract = (RequestCtx,), Error = Infallible> + Clone {
    warp::method().and(warp::path::full()).and(raw_query()).and(warp::header::headers_cloned()).and(peer()).map(
        |method, path: warp::path::FullPath, query, headers, peer| RequestCtx {
            method,
            path: path.as_str().to_string(),
            query,
            headers,
            peer,
            body: Bytes::new(),
        },
    )
}

/// Extracts a request with a body of at most `limit` bytes (413 beyond): sized by its
/// `Content-Length` (refused before it is read when that is too large) or chunked (read up to
/// the limit, refused past it).
pub fn ctx_with_body(limit: u64) -> impl Filter<Extract = (RequestCtx,), Error = Rejection> + Clone {
    ctx().and(warp::header::optional::<u64>("content-length")).and(warp::body::stream()).and_then(
        move |mut ctx: RequestCtx, declared: Option<u64>, body| async move {
            if declared.is_some_and(|len| len > limit) {
                return Err(warp::reject::custom(BodyTooLarge));
            }
            ctx.body = read_bounded(body, limit).await?;
            Ok::<_, Rejection>(ctx)
        },
    )
}

/// The whole body, refused as soon as it passes `limit` bytes.
async fn read_bounded(
    body: impl futures_util::Stream<Item = Result<impl bytes::Buf, warp::Error>>,
    limit: u64,
) -> Result<Bytes, Rejection> {
    use bytes::BufMut;
    use futures_util::StreamExt;
    let mut body = std::pin::pin!(body);
    let mut out = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|_| warp::reject::custom(BodyUnreadable))?;
        if (out.len() + chunk.remaining()) as u64 > limit {
            return Err(warp::reject::custom(BodyTooLarge));
        }
        out.put(chunk);
    }
    Ok(out.freeze())
}

/// Turns a handler's result into the response.
pub fn respond(result: Result<Response, ApiError>) -> Result<Response, Infallible> {
    Ok(result.unwrap_or_else(ApiError::into_response))
}

/// 415 unless the body is declared JSON.
pub fn require_json(ctx: &RequestCtx) -> Result<(), ApiError> {
    require_media_type(ctx, "application/json")
}

/// 415 unless the body is declared `wanted`: the media type itself, exactly, in any case;
/// parameters (`; charset=utf-8`) may follow it.
pub fn require_media_type(ctx: &RequestCtx, wanted: &'static str) -> Result<(), ApiError> {
    let media_type = ctx.header("content-type").and_then(|ct| ct.split(';').next()).map(str::trim);
    match media_type {
        Some(t) if t.eq_ignore_ascii_case(wanted) => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType(wanted)),
    }
}

/// Parses a JSON body (an object: every body of this API is one), naming the problem on failure.
pub fn parse_body<T: for<'de> Deserialize<'de>>(ctx: &RequestCtx) -> Result<T, ApiError> {
    // serde would also read a struct from an array.
    if ctx.body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::BadRequest("malformed JSON body: it must be a JSON object".into()));
    }
    serde_json::from_slice(&ctx.body).map_err(|e| ApiError::BadRequest(format!("malformed JSON body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_found_by_name() {
        assert_eq!(query_param("sort=usage&limit=5", "limit").as_deref(), Some("5"));
        assert_eq!(query_param("sort=usage", "limit"), None);
        assert_eq!(query_param("filter=%7B%22kinds%22%3A%5B1%5D%7D", "filter").as_deref(), Some(r#"{"kinds":[1]}"#));
    }

    #[test]
    fn route_patterns_match_whole_segments() {
        assert!(path_matches("/api/v1/events/{id}", "/api/v1/events/ab12"));
        assert!(!path_matches("/api/v1/events/{id}", "/api/v1/events/"));
        assert!(!path_matches("/api/v1/events/{id}", "/api/v1/events/ab/cd"));
        assert!(path_matches("/", "/"));
        assert!(!path_matches("/", "/x"));
        assert!(!path_matches("/admin/v1/usage/{pubkey}", "/admin/v1/usage"));
        assert!(path_matches("/{sha256}", &format!("/{}.png", "ab".repeat(32))));
        assert!(!path_matches("/{sha256}", "/metrics"));
    }
}
