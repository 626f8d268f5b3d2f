//! `/admin/v1/groups…`: the relay's NIP-29 groups, for its operators.
//!
//! Owns listing the groups, showing one (its metadata, members with their roles and join requests
//! waiting, each with the name and picture of its kind 0 where the store has one, and its invite
//! codes), and the operator's changes: the metadata edited, a group deleted, a waiting request
//! approved or denied. Every change is a moderation event the relay signs with its own key and
//! publishes through the same path as a member's (`groups::publish::as_relay`), so the group's
//! state stays the fold of its stored events; every change is audited.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use super::people::{person, profiles};
use crate::app::AppState;
use crate::groups::publish::as_relay;
use crate::groups::state::Group;
use crate::http::{ApiError, RequestCtx, parse_body, require_json};
use crate::http::{Route, Segment, ctx, ctx_with_body, with_app};
use crate::protocol::nip29::{self, Metadata};
use crate::protocol::refusal::Prefix;
use crate::protocol::{Kind, PubKey};
use warp::Filter;
use warp::http::Method;

/// A page of the list holds at most this many groups.
const MAX_PAGE: usize = 1000;

/// A group as the list shows it.
fn summary(g: &Group) -> Value {
    let m = &g.metadata;
    json!({
        "id": g.id, "name": m.name, "about": m.about, "picture": m.picture, "private": m.private,
        "restricted": m.restricted, "hidden": m.hidden, "closed": m.closed, "parent": m.parent,
        "supported_kinds": m.supported_kinds.as_ref().map(|k| k.iter().map(|k| k.0).collect::<Vec<u16>>()),
        "members": g.members.len(), "pending": g.pending.len(),
    })
}

/// `GET /admin/v1/groups?limit=N&after=<id>`: groups in id order, a page at a time; `next` is
/// the `after` of the next page (`null` on the last).
pub async fn list(app: Arc<AppState>, ctx: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let limit = ctx.query_count("limit", 100, MAX_PAGE)?.max(1);
    let after = ctx.query_param("after");
    let groups = app.groups.read();
    let mut all: Vec<&Group> = groups.iter().collect();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    let total = all.len();
    let mut page: Vec<&Group> =
        all.into_iter().filter(|g| after.as_deref().is_none_or(|a| g.id.as_str() > a)).take(limit + 1).collect();
    let next = if page.len() > limit {
        page.truncate(limit);
        page.last().map(|g| g.id.clone())
    } else {
        None
    };
    let listed: Vec<Value> = page.into_iter().map(summary).collect();
    ok_json(&json!({"groups": listed, "total": total, "next": next}))
}

/// The group `id`, or 404.
fn group(app: &AppState, id: &str) -> Result<Group, ApiError> {
    app.groups.read().get(id).cloned().ok_or_else(|| ApiError::NotFound(format!("no group `{id}`")))
}

/// The whole of one group, as `GET /admin/v1/groups/{id}` shows it.
async fn document(app: &AppState, g: &Group) -> Value {
    let mut doc = summary(g);
    let who: Vec<PubKey> = g.members.keys().chain(g.pending.keys()).copied().collect();
    let profiles = profiles(app, who).await;
    let person = |pk: &PubKey| person(&profiles, pk);
    doc["members"] = g
        .members
        .iter()
        .map(|(pk, roles)| {
            let mut p = person(pk);
            p["roles"] = json!(roles);
            p
        })
        .collect();
    doc["pending"] = g
        .pending
        .iter()
        .map(|(pk, at)| {
            let mut p = person(pk);
            p["asked_at"] = json!(at.0);
            p
        })
        .collect();
    let mut invites: Vec<Value> = g
        .invites
        .iter()
        .map(|(code, i)| json!({"code": code, "uses": i.uses, "used": i.used, "expires_at": i.expires_at}))
        .collect();
    invites.sort_by(|a, b| a["code"].as_str().cmp(&b["code"].as_str()));
    doc["invites"] = json!(invites);
    doc
}

/// `GET /admin/v1/groups/{id}`.
pub async fn get(app: Arc<AppState>, _: RequestCtx, _: Admin, id: String) -> Result<Response, ApiError> {
    let g = group(&app, &id)?;
    ok_json(&document(&app, &g).await)
}

/// `PATCH /admin/v1/groups/{id}`'s body: the fields to change; the rest stay.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetadataPatch {
    name: Option<String>,
    about: Option<String>,
    picture: Option<String>,
    private: Option<bool>,
    restricted: Option<bool>,
    hidden: Option<bool>,
    closed: Option<bool>,
    /// `null` (or absent): unchanged; `[]`: no kind; a list: those kinds.
    supported_kinds: Option<Vec<u16>>,
    /// `""`: a root.
    parent: Option<String>,
}

/// A relay-signed change refused as a member's would be: 400 or 409 with its reason.
fn refused(refusal: crate::protocol::refusal::Refusal) -> ApiError {
    match refusal.prefix() {
        Prefix::Error => ApiError::Unavailable(refusal.to_string()),
        Prefix::Invalid => ApiError::BadRequest(refusal.to_string()),
        _ => ApiError::Conflict(refusal.to_string()),
    }
}

/// `PATCH /admin/v1/groups/{id}`: the relay signs a 9002 with the metadata changed as asked.
pub async fn patch(app: Arc<AppState>, ctx: RequestCtx, who: Admin, id: String) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let change: MetadataPatch = parse_body(&ctx)?;
    let old = group(&app, &id)?.metadata;
    let mut m: Metadata = old.clone();
    m.name = change.name.unwrap_or(m.name);
    m.about = change.about.unwrap_or(m.about);
    m.picture = change.picture.unwrap_or(m.picture);
    m.private = change.private.unwrap_or(m.private);
    m.restricted = change.restricted.unwrap_or(m.restricted);
    m.hidden = change.hidden.unwrap_or(m.hidden);
    m.closed = change.closed.unwrap_or(m.closed);
    if let Some(kinds) = change.supported_kinds {
        m.supported_kinds = Some(kinds.into_iter().map(Kind).collect());
    }
    if let Some(parent) = change.parent {
        m.parent = Some(parent).filter(|p| !p.is_empty());
    }
    as_relay(&app, nip29::EDIT_METADATA, &id, m.to_tags(true)).await.map_err(refused)?;
    audit(&app, &who, "group.edit", &id, summary_of(&old), summary_of(&m)).await?;
    get(app, ctx, who, id).await
}

fn summary_of(m: &Metadata) -> Value {
    json!({"name": m.name, "about": m.about, "picture": m.picture, "private": m.private,
        "restricted": m.restricted, "hidden": m.hidden, "closed": m.closed, "parent": m.parent})
}

/// `DELETE /admin/v1/groups/{id}`: the relay signs a 9008; the group and its events are gone.
pub async fn delete(app: Arc<AppState>, _: RequestCtx, who: Admin, id: String) -> Result<Response, ApiError> {
    let old = group(&app, &id)?;
    as_relay(&app, nip29::DELETE_GROUP, &id, Vec::new()).await.map_err(refused)?;
    audit(&app, &who, "group.delete", &id, summary(&old), Value::Null).await?;
    ok_json(&json!({"id": id, "deleted": true}))
}

/// `POST /admin/v1/groups/{id}/pending/{pubkey}/{approve|deny}`: the relay signs a 9000 (let
/// in) or a 9001 (turned away) for a waiting join request.
pub async fn answer(
    app: Arc<AppState>,
    ctx: RequestCtx,
    who: Admin,
    (id, pubkey, verdict): (String, String, String),
) -> Result<Response, ApiError> {
    let pk = PubKey::parse(&pubkey)
        .ok_or_else(|| ApiError::BadRequest("pubkey must be 64 hex characters or an npub".into()))?;
    let kind = match verdict.as_str() {
        "approve" => nip29::PUT_USER,
        "deny" => nip29::REMOVE_USER,
        _ => return Err(ApiError::NotFound("the answers are approve and deny".into())),
    };
    if !group(&app, &id)?.pending.contains_key(&pk) {
        return Err(ApiError::NotFound(format!("no join request of {} waits in `{id}`", pk.to_hex())));
    }
    as_relay(&app, kind, &id, vec![vec!["p".to_string(), pk.to_hex()]]).await.map_err(refused)?;
    audit(&app, &who, &format!("group.{verdict}"), &format!("{id} {}", pk.to_hex()), Value::Null, json!(verdict))
        .await?;
    get(app, ctx, who, id).await
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // GET /admin/v1/groups
    let groups_list = super::route::at(app, Method::GET, "groups", None, list);
    // GET, PATCH, DELETE /admin/v1/groups/{id}
    let group_one = base.and(warp::path!("groups" / Segment)).and(with_app(app.clone()));
    let group_get = group_one
        .clone()
        .and(warp::get())
        .and(ctx())
        .and_then(|Segment(id), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| get(a, c, w, id)));
    let group_patch = group_one
        .clone()
        .and(warp::patch())
        .and(ctx_with_body(limit))
        .and_then(|Segment(id), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| patch(a, c, w, id)));
    let group_delete = group_one
        .and(warp::delete())
        .and(ctx())
        .and_then(|Segment(id), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| delete(a, c, w, id)));
    // POST /admin/v1/groups/{id}/pending/{pubkey}/{approve|deny}
    let group_answer = base
        .and(warp::path!("groups" / Segment / "pending" / Segment / Segment))
        .and(warp::post())
        .and(with_app(app.clone()))
        .and(ctx())
        .and_then(|Segment(id), Segment(pk), Segment(verdict), app, ctx| {
            run(app, ctx, Accept::TokenOrNip98, move |a, c, w| answer(a, c, w, (id, pk, verdict)))
        });
    vec![groups_list, group_get.boxed(), group_patch.boxed(), group_delete.boxed(), group_answer.boxed()]
}
