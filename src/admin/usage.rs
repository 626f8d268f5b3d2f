//! `/admin/v1/usage…`: per-principal usage, exactly as the limiter decides with, plus presence
//! (connections, subscriptions) and stored events.

use std::sync::Arc;

use serde_json::{Value, json};
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, ok_json};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx};
use crate::http::{Route, Segment, ctx, with_app};
use crate::limiter::{Principal, Usage};
use crate::protocol::PubKey;
use warp::Filter;
use warp::http::Method;

/// The full report of one principal.
async fn report(app: &AppState, principal: &Principal, usage: Usage) -> Result<Value, ApiError> {
    let (connections, subscriptions) = app.fanout.presence(principal);
    let stored_events = match principal {
        Principal::Pubkey(pk) => app.store.count_by_author_async(*pk).await.map_err(crate::http::internal)?,
        Principal::Ip(_) | Principal::Ceiling(..) => 0,
    };
    let mut value = json!(usage);
    if let Some(obj) = value.as_object_mut() {
        obj.insert("connections".into(), json!(connections));
        obj.insert("subscriptions".into(), json!(subscriptions));
        obj.insert("stored_events".into(), json!(stored_events));
    }
    Ok(value)
}

/// `GET /admin/v1/usage/{pubkey}` (hex or npub)
pub async fn pubkey(app: Arc<AppState>, _: RequestCtx, _: Admin, pubkey: String) -> Result<Response, ApiError> {
    let pk = PubKey::parse(&pubkey)
        .ok_or_else(|| ApiError::BadRequest("pubkey must be 64 hex characters or an npub".into()))?;
    let principal = Principal::Pubkey(pk);
    ok_json(&report(&app, &principal, app.limiter.usage(&principal).await).await?)
}

/// `GET /admin/v1/usage/ip/{addr}`
pub async fn ip(app: Arc<AppState>, _: RequestCtx, _: Admin, addr: String) -> Result<Response, ApiError> {
    let ip = addr.parse().map_err(|_| ApiError::BadRequest(format!("`{addr}` is not an IP address")))?;
    let principal = Principal::Ip(ip);
    let mut value = report(&app, &principal, app.limiter.usage(&principal).await).await?;
    // The IP ceiling over every key from this address (`null` when the address is exempt).
    let ceiling = match app.limiter.ceiling_of(ip) {
        Some(c) => Some(json!(app.limiter.usage(&c).await)),
        None => None,
    };
    if let Some(obj) = value.as_object_mut() {
        obj.insert("ip_ceiling".into(), ceiling.unwrap_or(Value::Null));
    }
    ok_json(&value)
}

/// `GET /admin/v1/usage?sort=refusals|usage&limit=N`: the busiest principals (pubkeys and
/// addresses; IP ceilings are in `usage/ip/{addr}`).
pub async fn busiest(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let sort = ctx.query_param("sort").unwrap_or_else(|| "usage".into());
    if sort != "usage" && sort != "refusals" {
        return Err(ApiError::BadRequest(format!("sort must be usage or refusals, not `{sort}`")));
    }
    let limit = ctx.query_count("limit", 20, 1000)?;
    // IP ceilings carry every key of their address and are reported with it (usage/ip).
    let mut scored: Vec<(u64, Principal, Usage)> = app
        .limiter
        .usages()
        .await
        .into_iter()
        .filter(|(p, _)| !matches!(p, Principal::Ceiling(..)))
        .map(|(p, usage)| {
            let score = if sort == "refusals" {
                usage.refusals.values().sum()
            } else {
                usage.limits.values().map(|l| l.used).sum()
            };
            (score, p, usage)
        })
        .collect();
    scored.sort_by_key(|(score, ..)| std::cmp::Reverse(*score));
    // Only the reported ones have their stored events counted (a read of the index each).
    let mut principals = Vec::with_capacity(limit.min(scored.len()));
    for (_, principal, usage) in scored.into_iter().take(limit) {
        principals.push(report(&app, &principal, usage).await?);
    }
    ok_json(&json!({"sort": sort, "principals": principals}))
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, _limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/usage/ip/{addr}
    let usage_ip = base
        .and(warp::path!("usage" / "ip" / Segment))
        .and(warp::get())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(addr), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| ip(a, c, w, addr)));
    // GET /admin/v1/usage/{pubkey}
    let usage_pubkey =
        base.and(warp::path!("usage" / Segment)).and(warp::get()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(pubkey), app, ctx| {
                run(app, ctx, Accept::TokenOrNip98, move |a, c, w| self::pubkey(a, c, w, pubkey))
            },
        );
    // GET /admin/v1/usage
    let busiest = super::route::at(app, Method::GET, "usage", None, busiest);
    vec![usage_ip.boxed(), usage_pubkey.boxed(), busiest]
}
