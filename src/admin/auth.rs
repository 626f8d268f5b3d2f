//! Who may administer, and what their calls leave behind.
//!
//! Owns authenticating an admin call (a bearer token compared in constant time, or NIP-98 by a
//! pubkey in `admin.pubkeys`; failed credentials throttled per IP), running a handler as the
//! caller it found, and the audit log entry of every change; and the JSON answer every handler
//! gives.

use std::convert::Infallible;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use warp::http::StatusCode;
use warp::reply::Response;

use crate::app::AppState;
use crate::http::{ApiError, RequestCtx, internal, json_response};
use crate::limiter::{Billed, LimitType};

/// Compares two secrets in time independent of where they differ: both are hashed to equal
/// length first, then every byte is compared.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (da, db) = (Sha256::digest(a), Sha256::digest(b));
    da.iter().zip(db.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Who made an admin call, as the audit log records it.
#[derive(Clone, Debug)]
pub struct Admin(pub(super) String);

/// How a route may be authenticated.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Accept {
    /// Bearer token or NIP-98.
    TokenOrNip98,
    /// NIP-98 only (NIP-86 at the relay URL).
    Nip98,
}

/// Authenticates an admin call. Off (404) when no credential is configured; 401 without a hint
/// for a missing or wrong one; 429 once an IP has failed too often.
pub(super) async fn authenticate(app: &AppState, ctx: &RequestCtx, accept: Accept) -> Result<Admin, ApiError> {
    let admin = &app.config.admin;
    if !admin.enabled() {
        return Err(ApiError::NotFound("not found".into()));
    }
    let ip = Billed::ip(ctx.client_ip(app));
    if let Some(limited) = app.limiter.peek(&ip.principal, LimitType::AdminAuth).await {
        return Err(ApiError::RateLimited(limited));
    }
    let who = match ctx.header("authorization") {
        Some(h) if accept == Accept::TokenOrNip98 && h.starts_with("Bearer ") => {
            let token = h["Bearer ".len()..].trim();
            (!admin.token.is_empty() && constant_time_eq(token.as_bytes(), admin.token.as_bytes()))
                .then(|| "token".to_string())
        }
        Some(h) if h.starts_with("Nostr ") => match ctx.nip98(app).await {
            Ok(Some(pk)) if admin.pubkeys.contains(&pk) => Some(pk.to_hex()),
            _ => None,
        },
        _ => None,
    };
    match who {
        Some(who) => Ok(Admin(who)),
        None => {
            tracing::info!(ip = %ip.ip, "admin authentication failed");
            app.limiter.admit(&ip, LimitType::AdminAuth).await?;
            Err(ApiError::AdminUnauthorized)
        }
    }
}

/// Records a change in the audit log (sled) and as a tracing event.
pub(super) async fn audit(
    app: &AppState,
    who: &Admin,
    action: &str,
    target: &str,
    old: Value,
    new: Value,
) -> Result<(), ApiError> {
    crate::audit::record(&app.store, &app.config.node.name, &who.0, action, target, old, new).await.map_err(internal)
}

/// Runs an authenticated handler and turns its result into a response.
pub(super) async fn run<F, Fut>(
    app: Arc<AppState>,
    ctx: RequestCtx,
    accept: Accept,
    handler: F,
) -> Result<Response, Infallible>
where
    F: FnOnce(Arc<AppState>, RequestCtx, Admin) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ApiError>>,
{
    let result = match authenticate(&app, &ctx, accept).await {
        Ok(admin) => handler(app, ctx, admin).await,
        Err(e) => Err(e),
    };
    Ok(result.unwrap_or_else(ApiError::into_response))
}

/// A `200` with `body` as JSON.
pub(super) fn ok_json(body: &impl Serialize) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_secrets() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
