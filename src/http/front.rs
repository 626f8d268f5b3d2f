//! A front that answers some requests before warp's routes: what needs hyper's own bodies (a
//! blob streamed in and out, which warp 0.4 cannot build) and its own time limits.
//!
//! Owns [`Front`] and the one response body type every answer is turned into ([`BoxBody`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use http_body_util::BodyExt;
use warp::http::Method;

/// An error inside a response body (a concrete type: a boxed trait object here trips rustc's
/// higher-ranked checks of the connection future).
pub type BodyError = std::io::Error;
/// The one body type the listener answers with.
pub type BoxBody = http_body_util::combinators::BoxBody<Bytes, BodyError>;
/// A response with that body.
pub type FrontResponse = hyper::Response<BoxBody>;
/// An answer on its way.
pub type Answer = Pin<Box<dyn Future<Output = FrontResponse> + Send>>;

/// Answers the requests it claims, before warp's routes see them. The listener does not apply
/// its whole-request timeout to these: a front bounds its own body reads.
pub trait Front: Send + Sync {
    /// True when this front answers a request of `method` for `path`.
    fn claims(&self, method: &Method, path: &str) -> bool;
    /// The answer to a claimed request from `peer`.
    fn answer(&self, request: hyper::Request<hyper::body::Incoming>, peer: SocketAddr) -> Answer;
}

/// A warp response (or any other) with its body boxed as [`BoxBody`].
pub fn boxed<B>(response: hyper::Response<B>) -> FrontResponse
where
    B: hyper::body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    response.map(|body| body.map_err(std::io::Error::other).boxed())
}

/// A whole body of bytes.
pub fn full(bytes: impl Into<Bytes>) -> BoxBody {
    http_body_util::Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}
