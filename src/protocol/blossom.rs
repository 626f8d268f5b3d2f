//! Blossom (BUD-01/02/04/06/11/12): blob hashes, the blob descriptor, and the kind 24242
//! authorization event's checks.
//!
//! Owns the pure parts of the media server's protocol: parsing `/<sha256>[.ext]`, the
//! descriptor a server answers an upload with, and checking an `Authorization: Nostr <base64>`
//! header (kind 24242, signature, `created_at` not ahead of now, `expiration` still ahead, the
//! `t` verb, `server` naming this host when given). Whether an auth event was used before, and
//! which blob its `x` tags must name, are the caller's (they need the request and shared state).

use base64::Engine;
use serde::Serialize;

use super::event::{Event, EventId, Kind, PubKey, Timestamp};
use super::keys::Keys;
use super::verify::verify;

/// The authorization event's kind.
pub const KIND: Kind = Kind(24242);
/// How far ahead of this relay's clock an auth event's `created_at` may be (clocks differ).
pub const SKEW_SECS: u64 = 60;

/// A blob's SHA-256.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobHash(pub [u8; 32]);

impl BlobHash {
    /// 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Option<BlobHash> {
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(BlobHash(out))
    }

    /// A path segment `<sha256>` or `<sha256>.<ext>`.
    pub fn from_segment(segment: &str) -> Option<BlobHash> {
        let hash = match segment.split_once('.') {
            Some((hash, ext)) if !ext.is_empty() && ext.bytes().all(|b| b.is_ascii_alphanumeric()) => hash,
            Some(_) => return None,
            None => segment,
        };
        BlobHash::from_hex(hash)
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl std::fmt::Display for BlobHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The blob descriptor (BUD-02).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Descriptor {
    /// Where the blob is served, with an extension from its type when one is known.
    pub url: String,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
    /// MIME type.
    #[serde(rename = "type")]
    pub media_type: String,
    /// Unix seconds.
    pub uploaded: u64,
}

/// The file extension a URL for `media_type` carries (none for unknown types).
pub fn extension(media_type: &str) -> Option<&'static str> {
    let t = media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    Some(match t.as_str() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/avif" => "avif",
        "image/svg+xml" => "svg",
        "video/mp4" => "mp4",
        "video/webm" => "webm",
        "video/quicktime" => "mov",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "audio/mp4" => "m4a",
        "audio/wav" | "audio/x-wav" => "wav",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => return None,
    })
}

/// What an authorization event allows (the `t` tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Reading a blob (`GET /<sha256>`), where reads need an authorization.
    Get,
    /// `PUT /upload`, `HEAD /upload`, `PUT /mirror`.
    Upload,
    /// `PUT /media`, `HEAD /media` (BUD-05): a `media` authorization, or an `upload` one.
    Media,
    /// `GET /list/<pubkey>`.
    List,
    /// `DELETE /<sha256>`.
    Delete,
}

impl Verb {
    /// The `t` tag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Upload => "upload",
            Verb::Media => "media",
            Verb::List => "list",
            Verb::Delete => "delete",
        }
    }
}

/// Why an authorization was refused; the text is the response's `X-Reason` (after `401`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// No `Authorization` header where one is needed.
    #[error(
        "auth-required: sign a kind 24242 authorization event (t = {0}) and send it as `Authorization: Nostr <base64>`"
    )]
    Missing(&'static str),
    /// Not `Nostr <base64 of an event>`.
    #[error("invalid: the Authorization header is not `Nostr <base64 of a kind 24242 event>`")]
    Malformed,
    /// Not kind 24242.
    #[error("invalid: the authorization event must be kind 24242")]
    WrongKind,
    /// The id or signature does not verify.
    #[error("invalid: the authorization event's signature does not verify")]
    BadSignature,
    /// `created_at` ahead of now.
    #[error("invalid: the authorization event is dated in the future")]
    Future,
    /// No `expiration` tag, or not a number.
    #[error("invalid: the authorization event needs an [\"expiration\", <unix time>] tag")]
    NoExpiration,
    /// `expiration` has passed.
    #[error("invalid: the authorization event has expired; sign a new one")]
    Expired,
    /// The `t` tag names another action.
    #[error("invalid: the authorization event's t tag must be \"{0}\" for this request")]
    WrongVerb(&'static str),
    /// `x` tags that do not name this blob.
    #[error("invalid: the authorization event's x tags do not name this blob")]
    WrongBlob,
    /// `server` tags that do not name this server.
    #[error("invalid: the authorization event's server tags do not name this server")]
    WrongServer,
    /// This authorization was already used for a change.
    #[error("invalid: this authorization event was already used; sign a new one for each upload or delete")]
    Replayed,
}

/// A checked authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorized {
    /// The event's id (for the replay check).
    pub id: EventId,
    /// Who signed it.
    pub pubkey: PubKey,
    /// Its `x` tags; empty when it names none.
    pub blobs: Vec<BlobHash>,
    /// Its expiration (Unix seconds).
    pub expiration: u64,
}

impl Authorized {
    /// True when its `x` tags name `hash`, or it names no blob and `x` is optional for the verb.
    pub fn covers(&self, hash: &BlobHash, x_required: bool) -> bool {
        if self.blobs.is_empty() { !x_required } else { self.blobs.contains(hash) }
    }
}

/// Decodes base64 in either alphabet, padded or not (blossom-client-sdk sends URL-safe unpadded).
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let normal: String = text
        .trim()
        .trim_end_matches('=')
        .chars()
        .map(|c| {
            if c == '-' {
                '+'
            } else if c == '_' {
                '/'
            } else {
                c
            }
        })
        .collect();
    base64::engine::general_purpose::STANDARD_NO_PAD.decode(normal).ok()
}

/// The host part of a `server` tag or URL, lowercase, without port or path.
pub fn host_of(server: &str) -> String {
    let rest = server.split_once("://").map_or(server, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.to_ascii_lowercase()
}

/// Checks an `Authorization` header for `verb` at `now`, on a server whose host is `host`.
/// CPU-heavy (signature check).
pub fn check(header: &str, verb: Verb, now: Timestamp, host: &str) -> Result<Authorized, AuthError> {
    let encoded = header.strip_prefix("Nostr ").ok_or(AuthError::Malformed)?;
    let json = decode_base64(encoded).ok_or(AuthError::Malformed)?;
    let text = std::str::from_utf8(&json).map_err(|_| AuthError::Malformed)?;
    let event = Event::from_json(text).map_err(|_| AuthError::Malformed)?;
    if event.kind != KIND {
        return Err(AuthError::WrongKind);
    }
    let event = verify(event).map_err(|_| AuthError::BadSignature)?;
    if event.created_at.0 > now.0.saturating_add(SKEW_SECS) {
        return Err(AuthError::Future);
    }
    let expiration =
        event.tag_values("expiration").next().and_then(|v| v.parse::<u64>().ok()).ok_or(AuthError::NoExpiration)?;
    if expiration <= now.0 {
        return Err(AuthError::Expired);
    }
    let t = event.tag_values("t").next();
    if t != Some(verb.as_str()) && !(verb == Verb::Media && t == Some(Verb::Upload.as_str())) {
        return Err(AuthError::WrongVerb(verb.as_str()));
    }
    let servers: Vec<&str> = event.tag_values("server").collect();
    if !servers.is_empty() && !servers.iter().any(|s| host_of(s) == host) {
        return Err(AuthError::WrongServer);
    }
    let blobs = event.tag_values("x").filter_map(BlobHash::from_hex).collect();
    Ok(Authorized { id: event.id, pubkey: event.pubkey, blobs, expiration })
}

/// Builds a header value (tests and clients): a kind 24242 event for `verb`, naming `blobs`,
/// expiring at `expiration`.
pub fn header(keys: &Keys, verb: Verb, blobs: &[BlobHash], now: Timestamp, expiration: u64) -> String {
    let mut tags =
        vec![vec!["t".to_string(), verb.as_str().to_string()], vec!["expiration".into(), expiration.to_string()]];
    tags.extend(blobs.iter().map(|b| vec!["x".to_string(), b.to_hex()]));
    let event = keys.sign(now, KIND, tags, &format!("{} blob", verb.as_str()));
    let json = event.to_json().unwrap_or_default();
    format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(json))
}

#[cfg(test)]
mod tests;
