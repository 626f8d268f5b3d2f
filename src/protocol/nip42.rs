//! NIP-42 authentication events: the checks on a kind-22242 answer to a challenge, and making one.
//!
//! Owns the pure rules (kind, `challenge` tag, `relay` tag, time window) and [`answer`], the event
//! a client signs. The signature is checked by [`super::verify`] before these.

use super::event::{Event, Kind, Timestamp};
use super::keys::Keys;

/// How far `created_at` may be from now, in seconds.
pub const WINDOW_SECS: u64 = 600;

/// What the `relay` tag must name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayMatch {
    /// Exactly this URL (`server.public_url`), ignoring case and a trailing slash.
    Url(String),
    /// Any ws(s) URL whose `host[:port]` is this (the `Host` the client connected to).
    Host(String),
}

impl RelayMatch {
    /// What names this relay: `public_url` when set (`server.public_url`), else the `host` the
    /// client reached, if it said one.
    pub fn of(public_url: &str, host: Option<String>) -> Option<RelayMatch> {
        match public_url {
            "" => host.map(RelayMatch::Host),
            url => Some(RelayMatch::Url(url.to_string())),
        }
    }

    /// True when the `relay` tag value `tag` names this relay.
    pub fn names(&self, tag: &str) -> bool {
        match self {
            RelayMatch::Url(url) => normalize(tag) == normalize(url),
            RelayMatch::Host(host) => host_of(tag).is_some_and(|h| h == host.to_ascii_lowercase()),
        }
    }
}

/// Why an AUTH event was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// Not kind 22242.
    #[error("invalid: AUTH needs a kind 22242 event")]
    WrongKind,
    /// Missing or different `challenge` tag.
    #[error("auth-required: the challenge tag does not match this connection's challenge")]
    Challenge,
    /// Missing or different `relay` tag.
    #[error("auth-required: the relay tag does not name this relay")]
    Relay,
    /// `created_at` too far from now.
    #[error("auth-required: created_at is more than 10 minutes from now")]
    Stale,
}

fn normalize(url: &str) -> String {
    url.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// The lowercase `host[:port]` of a `ws://` or `wss://` URL.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url.trim().strip_prefix("wss://").or_else(|| url.trim().strip_prefix("ws://"))?;
    Some(rest.split('/').next().unwrap_or("").to_ascii_lowercase())
}

/// The kind-22242 event `keys` answer the relay at `relay_url`'s `challenge` with, signed `now`.
pub fn answer(keys: &Keys, relay_url: &str, challenge: &str, now: Timestamp) -> Event {
    let tags =
        vec![vec!["relay".to_string(), relay_url.to_string()], vec!["challenge".to_string(), challenge.to_string()]];
    keys.sign(now, Kind::AUTH, tags, "")
}

/// Checks an AUTH event (already signature-verified) against the connection's challenge.
pub fn check(event: &Event, challenge: &str, relay: &RelayMatch, now: Timestamp) -> Result<(), AuthError> {
    if event.kind != Kind::AUTH {
        return Err(AuthError::WrongKind);
    }
    if event.tag_values("challenge").next() != Some(challenge) {
        return Err(AuthError::Challenge);
    }
    let tag = event.tag_values("relay").next().ok_or(AuthError::Relay)?;
    if !relay.names(tag) {
        return Err(AuthError::Relay);
    }
    if event.created_at.0.abs_diff(now.0) > WINDOW_SECS {
        return Err(AuthError::Stale);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Keys;

    fn auth(tags: &[(&str, &str)], at: u64, kind: u16) -> Event {
        let tags = tags.iter().map(|(k, v)| vec![k.to_string(), v.to_string()]).collect();
        Keys::test(3).sign(Timestamp(at), Kind(kind), tags, "")
    }

    #[test]
    fn good_auth_passes_by_host_or_url() {
        let e = auth(&[("relay", "ws://127.0.0.1:7777/"), ("challenge", "abc")], 1000, 22242);
        assert_eq!(check(&e, "abc", &RelayMatch::Host("127.0.0.1:7777".into()), Timestamp(1000)), Ok(()));
        assert_eq!(check(&e, "abc", &RelayMatch::Url("WS://127.0.0.1:7777".into()), Timestamp(1000)), Ok(()));
    }

    #[test]
    fn each_defect_is_named() {
        let now = Timestamp(10_000);
        let host = RelayMatch::Host("h:1".into());
        let ok_tags = [("relay", "wss://h:1"), ("challenge", "c")];
        assert_eq!(check(&auth(&ok_tags, 10_000, 1), "c", &host, now), Err(AuthError::WrongKind));
        assert_eq!(check(&auth(&ok_tags, 10_000, 22242), "d", &host, now), Err(AuthError::Challenge));
        let other = [("relay", "wss://other:1"), ("challenge", "c")];
        assert_eq!(check(&auth(&other, 10_000, 22242), "c", &host, now), Err(AuthError::Relay));
        assert_eq!(check(&auth(&ok_tags, 10_000 - 1800, 22242), "c", &host, now), Err(AuthError::Stale));
        assert_eq!(check(&auth(&ok_tags, 10_000 + 601, 22242), "c", &host, now), Err(AuthError::Stale));
    }
}
