//! Who is calling the media server, and what they may do: the kind 24242 authorization
//! checked, the call billed to its principal, and the access rules of reads, uploads and
//! deletions.
//!
//! Owns [`Caller`] and the rules: a blocked IP is refused everything; every call bills
//! `api_calls` (a failed authorization to the IP, so bad headers are not free); reads are open
//! but in `members-only`, where they need a `get` (or `list`) authorization of a member;
//! uploads always need an `upload` authorization, of a member or admin unless `media.upload =
//! "anyone"`, and never of a banned key; deletions need a `delete` authorization naming the blob.

use crate::app::AppState;
use crate::gate;
use crate::http::RequestCtx;
use crate::http::client_ip;
use crate::limiter::{Billed, LimitType, Principal};
use crate::protocol::Timestamp;
use crate::protocol::blossom::{self, AuthError, Authorized, BlobHash, Verb};

use super::reply::MediaError;

/// A caller identified and billed one `api_calls`.
#[derive(Debug)]
pub struct Caller {
    /// Its authorization, when it sent one that holds.
    pub auth: Option<Authorized>,
    /// What it is billed as.
    pub billed: Billed,
    /// This call took its authorization's one use ([`spend`]).
    spent: std::sync::atomic::AtomicBool,
}

impl Caller {
    /// Its authorization, which this call needs.
    pub fn required(&self, verb: Verb) -> Result<&Authorized, MediaError> {
        self.auth.as_ref().ok_or(MediaError::Unauthorized(AuthError::Missing(verb.as_str())))
    }
}

/// The host the `server` tags of an authorization must name.
pub fn host(app: &AppState, ctx: &RequestCtx) -> String {
    blossom::host_of(&ctx.origin(app))
}

/// Identifies the caller (an authorization for `verb`, else its IP) and bills one `api_calls`.
pub async fn caller(app: &AppState, ctx: &RequestCtx, verb: Verb) -> Result<Caller, MediaError> {
    let ip_addr = ctx.client_ip(app);
    if client_ip::check_blocked(app, Some(ip_addr)).is_err() {
        return Err(MediaError::Forbidden("blocked: this address is blocked from this relay".into()));
    }
    let ip = Billed::ip(ip_addr);
    let auth = match ctx.header("authorization") {
        None => None,
        Some(header) => match blossom::check(header, verb, Timestamp::now(), &host(app, ctx)) {
            Ok(auth) => Some(auth),
            Err(e) => {
                app.limiter.admit(&ip, LimitType::ApiCalls).await?;
                return Err(MediaError::Unauthorized(e));
            }
        },
    };
    let billed = auth.as_ref().map_or(ip, |a| Billed::new(Principal::Pubkey(a.pubkey), ip_addr));
    app.limiter.admit(&billed, LimitType::ApiCalls).await?;
    Ok(Caller { auth, billed, spent: Default::default() })
}

/// A caller known only by its address (a report carries its own signature): refused when the
/// address is blocked, billed one `api_calls`.
pub async fn by_address(app: &AppState, ctx: &RequestCtx) -> Result<Billed, MediaError> {
    let ip_addr = ctx.client_ip(app);
    if client_ip::check_blocked(app, Some(ip_addr)).is_err() {
        return Err(MediaError::Forbidden("blocked: this address is blocked from this relay".into()));
    }
    let billed = Billed::ip(ip_addr);
    app.limiter.admit(&billed, LimitType::ApiCalls).await?;
    Ok(billed)
}

/// May `caller` read (`verb` get or list)? Open but in `members-only`.
pub fn may_read(app: &AppState, caller: &Caller, verb: Verb, hash: Option<&BlobHash>) -> Result<(), MediaError> {
    if !gate::media_for_members(app) {
        return Ok(());
    }
    let auth = caller.required(verb)?;
    if let Some(hash) = hash
        && !auth.covers(hash, false)
    {
        return Err(MediaError::Unauthorized(AuthError::WrongBlob));
    }
    if !gate::belongs(app, &auth.pubkey) {
        return Err(MediaError::Forbidden("restricted: this relay's media is for its members only".into()));
    }
    Ok(())
}

/// May `caller` upload? Returns the uploader.
pub fn may_upload<'a>(app: &AppState, caller: &'a Caller) -> Result<&'a Authorized, MediaError> {
    let auth = caller.required(Verb::Upload)?;
    match gate::upload_refusal(app, &auth.pubkey) {
        Some(refused) => Err(MediaError::Forbidden(refused.to_string())),
        None => Ok(auth),
    }
}

/// Takes a write authorization's one use (upload, mirror, delete).
pub fn spend(app: &AppState, caller: &Caller, auth: &Authorized) -> Result<(), MediaError> {
    if app.blobs.first_use(auth.id, auth.expiration) {
        caller.spent.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    } else {
        Err(MediaError::Unauthorized(AuthError::Replayed))
    }
}

/// Gives the authorization this call took back when the call is answered "try again" (503:
/// the media storage away): an authorization is good for one change, this call made none, and
/// the client is told to send the same request again.
pub fn unspent_unless_done<T>(
    app: &AppState,
    caller: &Caller,
    outcome: Result<T, MediaError>,
) -> Result<T, MediaError> {
    if let (Err(MediaError::Unavailable(_)), Some(auth)) = (&outcome, &caller.auth)
        && caller.spent.load(std::sync::atomic::Ordering::Relaxed)
    {
        app.blobs.give_back(auth.id);
    }
    outcome
}
