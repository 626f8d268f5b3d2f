//! `/admin/v1/members…`: the relay's members, who may publish in a members mode and read in
//! `members-only` (`access.mode`).
//!
//! Owns listing, adding and removing members. The list is the moderation state's allow list, the
//! same one NIP-86 `allowpubkey` / `unallowpubkey` / `listallowedpubkeys` change, so the two
//! surfaces can never disagree; `auth.members` from the configuration are members too, listed as
//! such and changed only there. Every change is audited.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, parse_body, require_json};
use crate::http::{Route, Segment, ctx, ctx_with_body, with_app};
use crate::protocol::PubKey;
use warp::Filter;
use warp::http::Method;

/// A page of the list holds at most this many members.
const MAX_PAGE: usize = 1000;

/// One member as the list shows it.
#[derive(Debug, Serialize)]
struct Member {
    pubkey: String,
    note: String,
    /// `admin` (this API or NIP-86) or `config` (`auth.members`).
    source: &'static str,
}

/// `PUT /admin/v1/members/{pubkey}`'s body: `{}` or `{"note": "…"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberBody {
    #[serde(default)]
    note: String,
}

fn pubkey_of(text: &str) -> Result<PubKey, ApiError> {
    PubKey::parse(text).ok_or_else(|| ApiError::BadRequest("pubkey must be 64 hex characters or an npub".into()))
}

/// `GET /admin/v1/members?limit=N&after=<pubkey>`: members in pubkey order, a page at a time;
/// `next` is the `after` of the next page (`null` on the last).
pub async fn list(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let limit = ctx.query_count("limit", 100, MAX_PAGE)?.max(1);
    let after = ctx.query_param("after").map(|a| pubkey_of(&a)).transpose()?;
    let state = app.moderation.snapshot();
    let mut all: std::collections::BTreeMap<PubKey, Member> = std::collections::BTreeMap::new();
    for pk in &app.config.auth.members {
        all.insert(*pk, Member { pubkey: pk.to_hex(), note: String::new(), source: "config" });
    }
    for (pk, note) in &state.allowed_pubkeys {
        all.entry(*pk).or_insert(Member { pubkey: pk.to_hex(), note: note.clone(), source: "admin" });
    }
    let total = all.len();
    let mut page: Vec<(PubKey, Member)> =
        all.into_iter().filter(|(pk, _)| after.is_none_or(|after| *pk > after)).take(limit + 1).collect();
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|(pk, _)| pk.to_hex())
    } else {
        None
    };
    let members: Vec<Member> = page.into_iter().map(|(_, m)| m).collect();
    ok_json(&json!({"members": members, "total": total, "next": next}))
}

/// `PUT /admin/v1/members/{pubkey}`: adds a member (or changes its note).
pub async fn put(app: Arc<AppState>, ctx: RequestCtx, who: Admin, pubkey: String) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let pk = pubkey_of(&pubkey)?;
    let MemberBody { note } = parse_body(&ctx)?;
    let stored = note.clone();
    let old = app.moderation.add_member(&app.store, pk, stored).await?;
    audit(&app, &who, "member.add", &pk.to_hex(), json!(old), json!(note)).await?;
    if old.is_none() {
        crate::membership::changed(&app, pk, true).await;
    }
    ok_json(&json!({"pubkey": pk.to_hex(), "note": note, "added": old.is_none()}))
}

/// `DELETE /admin/v1/members/{pubkey}`: removes a member; 404 when it is none, 409 for one the
/// configuration names (`auth.members`: removed there).
pub async fn delete(app: Arc<AppState>, _: RequestCtx, who: Admin, pubkey: String) -> Result<Response, ApiError> {
    let pk = pubkey_of(&pubkey)?;
    let old = app.moderation.remove_member(&app.store, pk).await?;
    match old {
        Some(note) => {
            audit(&app, &who, "member.remove", &pk.to_hex(), json!(note), serde_json::Value::Null).await?;
            crate::membership::changed(&app, pk, false).await;
            ok_json(&json!({"pubkey": pk.to_hex(), "removed": true}))
        }
        None if app.config.auth.members.contains(&pk) => {
            Err(ApiError::Conflict("this member is named by the configuration (auth.members): remove it there".into()))
        }
        None => Err(ApiError::NotFound("not a member of this relay".into())),
    }
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/members
    let members_list = super::route::at(app, Method::GET, "members", None, list);
    // PUT /admin/v1/members/{pubkey}
    let member_put = base
        .and(warp::path!("members" / Segment))
        .and(warp::put())
        .and(with_app(app.clone()))
        .and(ctx_with_body(limit))
        .and_then(|Segment(pubkey), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| put(a, c, w, pubkey)));
    // DELETE /admin/v1/members/{pubkey}
    let member_delete =
        base.and(warp::path!("members" / Segment)).and(warp::delete()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(pubkey), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| delete(a, c, w, pubkey)),
        );
    vec![members_list, member_put.boxed(), member_delete.boxed()]
}
