//! NIP-98 HTTP authentication: `Authorization: Nostr <base64 of a signed kind-27235 event>`.
//!
//! Owns decoding the header and the pure checks (kind, `u` = the exact request URL, `method`,
//! `payload` = sha256 of the body, `created_at` within 60 s). Signature verification uses
//! [`crate::protocol::verify`]; replay protection (each auth event id used once) is the caller's,
//! since it needs shared state.

use base64::Engine;
use sha2::{Digest, Sha256};

use super::event::{Event, Kind, Timestamp};
use super::keys::Keys;
use super::verify::{VerifiedEvent, verify};

/// How far `created_at` may be from now, in seconds.
pub const WINDOW_SECS: u64 = 60;
/// The NIP-98 event kind.
pub const KIND: Kind = Kind(27235);

/// Why an `Authorization` header was refused; the text is the 401 body's `error`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// Not `Nostr <base64>`, or the base64 does not hold an event.
    #[error("auth: malformed header")]
    Malformed,
    /// Not kind 27235.
    #[error("auth: wrong kind")]
    WrongKind,
    /// The id or signature does not verify.
    #[error("auth: bad signature")]
    BadSignature,
    /// `u` is not the exact request URL.
    #[error("auth: url mismatch")]
    UrlMismatch,
    /// `method` is not the request method.
    #[error("auth: method mismatch")]
    MethodMismatch,
    /// `payload` is missing for a body or does not match its sha256.
    #[error("auth: payload mismatch")]
    PayloadMismatch,
    /// `created_at` more than 60 s from now.
    #[error("auth: expired")]
    Expired,
    /// This auth event was already used.
    #[error("auth: replayed")]
    Replayed,
    /// The relay requires authentication and none was given.
    #[error("auth: required")]
    Required,
    /// The relay is for its members only (`access.mode = "members-only"`) and the request names
    /// no caller.
    #[error("auth-required: this relay is for its members; sign the request (NIP-98)")]
    MembersOnly,
    /// The request asks for private kinds only (NIP-42 read restrictions) and names no caller.
    #[error("auth-required: these kinds are served only to their author and recipients; sign the request (NIP-98)")]
    PrivateKinds,
}

/// What the request was.
#[derive(Debug)]
pub struct Request<'a> {
    /// The full URL the client requested, query included.
    pub url: &'a str,
    /// The HTTP method, e.g. `POST`.
    pub method: &'a str,
    /// The request body (empty for none).
    pub body: &'a [u8],
}

/// Checks an `Authorization` header value against the request. CPU-heavy (signature check).
pub fn check(header: &str, req: &Request<'_>, now: Timestamp) -> Result<VerifiedEvent, AuthError> {
    let encoded = header.strip_prefix("Nostr ").ok_or(AuthError::Malformed)?.trim();
    let json = base64::engine::general_purpose::STANDARD.decode(encoded).map_err(|_| AuthError::Malformed)?;
    let text = std::str::from_utf8(&json).map_err(|_| AuthError::Malformed)?;
    let event = Event::from_json(text).map_err(|_| AuthError::Malformed)?;
    if event.kind != KIND {
        return Err(AuthError::WrongKind);
    }
    let event = verify(event).map_err(|_| AuthError::BadSignature)?;
    if event.tag_values("u").next() != Some(req.url) {
        return Err(AuthError::UrlMismatch);
    }
    if !event.tag_values("method").next().is_some_and(|m| m.eq_ignore_ascii_case(req.method)) {
        return Err(AuthError::MethodMismatch);
    }
    let payload = event.tag_values("payload").next();
    if !req.body.is_empty() || payload.is_some() {
        let digest = hex::encode(Sha256::digest(req.body));
        if payload != Some(digest.as_str()) {
            return Err(AuthError::PayloadMismatch);
        }
    }
    if event.created_at.0.abs_diff(now.0) > WINDOW_SECS {
        return Err(AuthError::Expired);
    }
    Ok(event)
}

/// Builds a header value (client side and tests): signs a kind-27235 event for the request.
pub fn header(keys: &Keys, req: &Request<'_>, now: Timestamp) -> Result<String, serde_json::Error> {
    let mut tags = vec![vec!["u".to_string(), req.url.to_string()], vec!["method".to_string(), req.method.to_string()]];
    if !req.body.is_empty() {
        tags.push(vec!["payload".to_string(), hex::encode(Sha256::digest(req.body))]);
    }
    let event = keys.sign(now, KIND, tags, "");
    Ok(format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(event.to_json()?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Keys;

    fn req<'a>(url: &'a str, method: &'a str, body: &'a [u8]) -> Request<'a> {
        Request { url, method, body }
    }

    #[test]
    fn a_good_header_names_its_signer() {
        let keys = Keys::test(4);
        let r = req("http://h/api/v1/events", "POST", b"{}");
        let h = header(&keys, &r, Timestamp(1000)).unwrap();
        assert_eq!(check(&h, &r, Timestamp(1030)).unwrap().pubkey, keys.public_key());
    }

    #[test]
    fn each_failure_has_its_reason() {
        let keys = Keys::test(4);
        let r = req("http://h/x?a=1", "POST", b"body");
        let h = header(&keys, &r, Timestamp(1000)).unwrap();
        assert_eq!(check(&h, &req("http://h/x", "POST", b"body"), Timestamp(1000)), Err(AuthError::UrlMismatch));
        assert_eq!(check(&h, &req("http://h/x?a=1", "GET", b"body"), Timestamp(1000)), Err(AuthError::MethodMismatch));
        assert_eq!(
            check(&h, &req("http://h/x?a=1", "POST", b"other"), Timestamp(1000)),
            Err(AuthError::PayloadMismatch)
        );
        assert_eq!(check(&h, &r, Timestamp(1061)), Err(AuthError::Expired));
        assert_eq!(check("Bearer x", &r, Timestamp(1000)), Err(AuthError::Malformed));
        assert_eq!(check("Nostr !!!", &r, Timestamp(1000)), Err(AuthError::Malformed));
        let other_kind = keys.sign(Timestamp(1000), Kind(1), vec![], "");
        let h2 = format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(other_kind.to_json().unwrap()));
        assert_eq!(check(&h2, &r, Timestamp(1000)), Err(AuthError::WrongKind));
        let mut forged = keys.sign(Timestamp(1000), KIND, vec![vec!["u".into(), "http://h/x?a=1".into()]], "");
        forged.sig.0[0] ^= 1;
        let h3 = format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(forged.to_json().unwrap()));
        assert_eq!(check(&h3, &r, Timestamp(1000)), Err(AuthError::BadSignature));
    }
}
