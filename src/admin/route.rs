//! How an admin route is made: `/admin/v1`, a method, the request (with its body when the
//! route takes one) and the handler, run for an admin (a bearer token or NIP-98).
//!
//! Owns [`base`] and [`at`], the one shape most routes share (one path segment, no parameter);
//! a route with parameters is written out beside its resource's handlers.

use std::future::Future;
use std::sync::Arc;

use warp::Filter;
use warp::filters::BoxedFilter;
use warp::http::Method;
use warp::reply::Response;

use super::auth::{Accept, Admin, run};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, Route, ctx, ctx_with_body, with_app};

/// `/admin/v1`: where every route of the admin API but the page and NIP-86's `POST /` lives.
pub(super) fn base() -> impl Filter<Extract = (), Error = warp::Rejection> + Copy {
    warp::path("admin").and(warp::path("v1"))
}

/// `method /admin/v1/{name}`: `handler` for an admin (token or NIP-98); with `body`, the
/// request's body read up to that many bytes.
pub(super) fn at<F, Fut>(
    app: &Arc<AppState>,
    method: Method,
    name: &'static str,
    body: Option<u64>,
    handler: F,
) -> Route
where
    F: Fn(Arc<AppState>, RequestCtx, Admin) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
{
    let request: BoxedFilter<(RequestCtx,)> = match body {
        Some(limit) => ctx_with_body(limit).boxed(),
        None => ctx().boxed(),
    };
    base()
        .and(warp::path(name))
        .and(warp::path::end())
        .and(of(&method))
        .and(with_app(app.clone()))
        .and(request)
        .and_then(move |app, ctx| run(app, ctx, Accept::TokenOrNip98, handler.clone()))
        .boxed()
}

/// warp's filter of `method` (its own, so a wrong method is refused as warp refuses it).
fn of(method: &Method) -> BoxedFilter<()> {
    match *method {
        Method::GET => warp::get().boxed(),
        Method::POST => warp::post().boxed(),
        Method::PATCH => warp::patch().boxed(),
        Method::PUT => warp::put().boxed(),
        _ => warp::delete().boxed(),
    }
}
