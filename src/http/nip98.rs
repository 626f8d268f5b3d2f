//! NIP-98 on the HTTP side: the URL a request's auth event must name, and the replay cache that
//! makes each auth event good for one request.
//!
//! Owns identifying an HTTP caller by its `Authorization: Nostr …` header. The checks of the
//! event itself (kind, `u`, `method`, `payload`, time, signature) are
//! [`crate::protocol::nip98`]'s, which the client library shares.

use super::RequestCtx;
use crate::app::AppState;
use crate::protocol::nip98::{self, AuthError};
use crate::protocol::{PubKey, Timestamp};

impl RequestCtx {
    /// The absolute URL the client requested, as NIP-98's `u` tag must name it: [`RequestCtx::origin`]
    /// followed by the path and query.
    pub fn url(&self, app: &AppState) -> String {
        let query = if self.query.is_empty() { String::new() } else { format!("?{}", self.query) };
        format!("{}{}{query}", self.origin(app), self.path)
    }

    /// Where the client reached this relay, `scheme://host[:port]` with no path: from
    /// `server.public_url` when set, else from the `Host` header (and `X-Forwarded-Proto` from a
    /// trusted proxy).
    pub fn origin(&self, app: &AppState) -> String {
        let public = app.config.server.public_url.trim_end_matches('/');
        if !public.is_empty() {
            return public.replacen("wss://", "https://", 1).replacen("ws://", "http://", 1);
        }
        let trusted = self.peer.is_some_and(|p| app.config.auth.trusted_proxies.contains(&p.ip()));
        let scheme = match self.header("x-forwarded-proto") {
            Some(proto) if trusted => proto.to_string(),
            _ => "http".to_string(),
        };
        format!("{scheme}://{}", self.header("host").unwrap_or(""))
    }

    /// Checks a NIP-98 `Authorization` header, if any: `Ok(None)` without one.
    pub async fn nip98(&self, app: &AppState) -> Result<Option<PubKey>, AuthError> {
        let Some(header) = self.header("authorization") else {
            return Ok(None);
        };
        let url = self.url(app);
        let request = nip98::Request { url: &url, method: self.method.as_str(), body: &self.body };
        // On the request's own task, like every signature check (see `ingest`).
        let checked = nip98::check(header, &request, Timestamp::now())?;
        if !app.nip98_seen.first_use(checked.id) {
            return Err(AuthError::Replayed);
        }
        Ok(Some(checked.pubkey))
    }
}
