//! `/admin/v1/invites…`: NIP-43 invite codes, which a join request (kind 28934) claims.
//!
//! Owns minting a code (single-use or N uses, an expiry, a note), listing the codes with their
//! uses, and revoking one. The codes are secrets: the audit log names each by its first eight
//! characters only.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;
use warp::http::StatusCode;
use warp::reply::Response;

use super::auth::{Accept, run};
use super::auth::{Admin, audit, ok_json};
use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, json_response, parse_body, require_json};
use crate::http::{Route, Segment, ctx, with_app};
use crate::moderation::Invite;
use crate::protocol::Timestamp;
use warp::Filter;
use warp::http::Method;

/// An invite lasts this long unless the body says otherwise.
const DEFAULT_EXPIRY_SECS: u64 = 7 * 86_400;

/// `POST /admin/v1/invites`'s body; every field may be left out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewInvite {
    /// Claims it allows (1: single-use).
    #[serde(default = "one")]
    uses: u32,
    /// Seconds from now until it expires; 0: never.
    #[serde(default = "week")]
    expires_in_secs: u64,
    /// When it expires (Unix seconds), instead of `expires_in_secs`.
    #[serde(default)]
    expires_at: Option<u64>,
    #[serde(default)]
    note: String,
}

fn one() -> u32 {
    1
}

fn week() -> u64 {
    DEFAULT_EXPIRY_SECS
}

/// One code as the API shows it.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    code: &'a str,
    #[serde(flatten)]
    invite: &'a Invite,
    /// True while a join request can still claim it.
    usable: bool,
}

fn shown<'a>(code: &'a str, invite: &'a Invite, now: u64) -> Shown<'a> {
    Shown { code, invite, usable: invite.refusal(now).is_none() }
}

/// `POST /admin/v1/invites`: a new code; `201` with it.
pub async fn create(app: Arc<AppState>, ctx: RequestCtx, who: Admin) -> Result<Response, ApiError> {
    require_json(&ctx)?;
    let body: NewInvite = parse_body(&ctx)?;
    if body.uses == 0 {
        return Err(ApiError::BadRequest("uses must be at least 1".into()));
    }
    let now = Timestamp::now().0;
    let expires_at = match (body.expires_at, body.expires_in_secs) {
        (Some(at), _) => at,
        (None, 0) => 0,
        (None, secs) => now.saturating_add(secs),
    };
    let (code, invite) = crate::membership::mint(&app, body.uses, expires_at, body.note).await?;
    audit(&app, &who, "invite.create", &crate::membership::short_code(&code), serde_json::Value::Null, json!(invite))
        .await?;
    Ok(json_response(StatusCode::CREATED, &shown(&code, &invite, now)))
}

/// `GET /admin/v1/invites`: every code, newest first, with its uses.
pub async fn list(app: Arc<AppState>, _: RequestCtx, _: Admin) -> Result<Response, ApiError> {
    let state = app.moderation.snapshot();
    let now = Timestamp::now().0;
    let mut invites: Vec<Shown> = state.invites.iter().map(|(code, i)| shown(code, i, now)).collect();
    invites.sort_by(|a, b| b.invite.created_at.cmp(&a.invite.created_at).then(a.code.cmp(b.code)));
    ok_json(&json!({"invites": invites}))
}

/// `DELETE /admin/v1/invites/{code}`: the code can no longer be claimed; 404 when there is none.
pub async fn revoke(app: Arc<AppState>, _: RequestCtx, who: Admin, code: String) -> Result<Response, ApiError> {
    let old = app.moderation.revoke_invite(&app.store, &code).await?;
    let Some(old) = old else { return Err(ApiError::NotFound("no such invite code".into())) };
    audit(&app, &who, "invite.revoke", &crate::membership::short_code(&code), json!(old), serde_json::Value::Null)
        .await?;
    ok_json(&json!({"code": code, "revoked": true}))
}

/// This resource's routes, in the order they are tried.
pub(super) fn routes(app: &Arc<AppState>, limit: u64) -> Vec<Route> {
    let base = super::route::base();
    // POST /admin/v1/invites
    let invite_create = super::route::at(app, Method::POST, "invites", Some(limit), create);
    // GET /admin/v1/invites
    let invite_list = super::route::at(app, Method::GET, "invites", None, list);
    // DELETE /admin/v1/invites/{code}
    let invite_revoke =
        base.and(warp::path!("invites" / Segment)).and(warp::delete()).and(with_app(app.clone())).and(ctx()).and_then(
            |Segment(code), app, ctx| run(app, ctx, Accept::TokenOrNip98, move |a, c, w| revoke(a, c, w, code)),
        );
    vec![invite_create, invite_list, invite_revoke.boxed()]
}
