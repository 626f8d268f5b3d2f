//! `/admin/v1/media…`: the relay's media server, for its operators.
//!
//! Owns listing the blobs (a page at a time, or one key's), each with its size, type and the
//! keys that uploaded it (with their kind 0 names and pictures), the bytes each key holds, and
//! deleting a blob for every owner at once (its bytes gone from disk; audited).

use std::sync::Arc;

use serde_json::{Value, json};
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use super::people::{person, profiles};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, internal};
use crate::http::{Route, Segment, ctx, with_app};
use crate::protocol::PubKey;
use crate::protocol::blossom::{BlobHash, extension};
use crate::store::media::BlobRecord;
use warp::Filter;
use warp::http::Method;

/// A page of the list holds at most this many blobs.
const MAX_PAGE: usize = 500;

/// The records of a page, grouped by blob (in the order given).
fn by_blob(records: Vec<BlobRecord>) -> Vec<Vec<BlobRecord>> {
    let mut out: Vec<Vec<BlobRecord>> = Vec::new();
    for r in records {
        match out.iter_mut().find(|g| g[0].sha256 == r.sha256) {
            Some(group) => group.push(r),
            None => out.push(vec![r]),
        }
    }
    out
}

/// `GET /admin/v1/media?limit=N&after=<sha256>` (every blob, by hash) or `?pubkey=<hex>` (one
/// key's, newest first): the blobs with their owners, the bytes per key, the total and its bound.
pub async fn list(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let limit = ctx.query_count("limit", 100, MAX_PAGE)?.max(1);
    let records = app.blobs.records();
    // Checked whichever list is asked for: a malformed query is refused, never ignored.
    let after = match ctx.query_param("after") {
        None => None,
        Some(a) => {
            Some(BlobHash::from_hex(&a).ok_or_else(|| ApiError::BadRequest("after must be a blob's sha256".into()))?.0)
        }
    };
    let (groups, next) = match ctx.query_param("pubkey") {
        Some(pk) => {
            let pk = PubKey::from_hex(&pk)
                .ok_or_else(|| ApiError::BadRequest("pubkey must be 64 lowercase hex digits".into()))?;
            let mine = records.of_owner(&pk).map_err(internal)?;
            let mut groups = Vec::new();
            for r in mine.into_iter().take(limit) {
                let hash = BlobHash::from_hex(&r.sha256).ok_or_else(|| internal("a media record without a hash"))?;
                groups.push(records.owners_of(&hash.0).map_err(internal)?);
            }
            (groups, None)
        }
        None => {
            let groups = by_blob(records.page(after, limit + 1).map_err(internal)?);
            let more = groups.len() > limit;
            let groups: Vec<Vec<BlobRecord>> = groups.into_iter().take(limit).collect();
            let next = if more { groups.last().map(|g| g[0].sha256.clone()) } else { None };
            (groups, next)
        }
    };
    let per_owner = records.per_owner().map_err(internal)?;
    let who: Vec<PubKey> =
        per_owner.iter().map(|(pk, _, _)| *pk).chain(groups.iter().flatten().map(|r| r.owner)).collect();
    let people = profiles(&app, who).await;
    let person = |pk: &PubKey| person(&people, pk);
    let blobs: Vec<Value> = groups
        .iter()
        .map(|g| {
            let first = &g[0];
            let path = match extension(&first.media_type) {
                Some(ext) => format!("/{}.{ext}", first.sha256),
                None => format!("/{}", first.sha256),
            };
            let owners: Vec<Value> = g
                .iter()
                .map(|r| {
                    let mut p = person(&r.owner);
                    p["uploaded"] = json!(r.uploaded);
                    p["banned"] = json!(app.moderation.is_banned(&r.owner));
                    p
                })
                .collect();
            json!({"sha256": first.sha256, "size": first.size, "type": first.media_type, "uploaded": first.uploaded,
                   "path": path, "owners": owners})
        })
        .collect();
    let mut usage: Vec<(PubKey, u64, u64)> = per_owner;
    usage.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let by_key: Vec<Value> = usage
        .iter()
        .map(|(pk, bytes, count)| {
            let mut p = person(pk);
            p["bytes"] = json!(bytes);
            p["blobs"] = json!(count);
            p
        })
        .collect();
    ok_json(&json!({
        "enabled": app.config.media.enabled,
        "used_bytes": app.blobs.used_bytes().map_err(internal)?,
        "store": app.blobs.store().as_str(),
        "max_total_bytes": app.config.media.max_total_bytes,
        "blobs": blobs,
        "next": next,
        "by_pubkey": by_key,
    }))
}

/// `DELETE /admin/v1/media/{sha256}`: the blob for every owner, its bytes gone from disk.
pub async fn delete(app: Arc<AppState>, _: RequestCtx, who: Admin, sha: String) -> Result<Response, ApiError> {
    let hash = BlobHash::from_segment(&sha)
        .ok_or_else(|| ApiError::BadRequest("the path must name a blob's sha256".into()))?;
    let owners = app.blobs.records().owners_of(&hash.0).map_err(internal)?;
    let Some(first) = owners.first() else {
        return Err(ApiError::NotFound("blob not found".into()));
    };
    let old = json!({"size": first.size, "type": first.media_type,
                     "owners": owners.iter().map(|r| r.owner.to_hex()).collect::<Vec<_>>()});
    app.blobs.remove(&hash, None).await.map_err(internal)?;
    audit(&app, &who, "media.delete", &hash.to_hex(), old, Value::Null).await?;
    ok_json(&json!({"deleted": hash.to_hex()}))
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, _limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/media
    let media_list = super::route::at(app, Method::GET, "media", None, list);
    // DELETE /admin/v1/media/{sha256}
    let media_delete =
        base.and(warp::path!("media" / Segment)).and(warp::delete()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(sha), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| delete(a, c, w, sha)),
        );
    vec![media_list, media_delete.boxed()]
}
