//! Reading blobs: `GET`/`HEAD /<sha256>[.ext]` (BUD-01) with `Range`, and `GET /list/<pubkey>`
//! (BUD-12).
//!
//! Owns serving a blob's bytes as they are read from its file or object (streamed, never read
//! whole), a byte range of it, and an owner's list; what a blob may do once opened is `safety.rs`'s. A blob is served only while it has an owner who is not
//! banned: a kill mid-upload leaves nothing recorded, and a ban takes a key's uploads down.

use futures_util::TryStreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use warp::http::header::{ACCEPT_RANGES, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG};
use warp::http::{HeaderValue, Response, StatusCode};

use super::access::{self, Caller};
use super::reply::{MediaError, descriptor, json};
use crate::app::AppState;
use crate::gate;
use crate::http::RequestCtx;
use crate::http::front::{FrontResponse, full};
use crate::protocol::PubKey;
use crate::protocol::blossom::{BlobHash, Verb};
use crate::store::media::BlobRecord;

/// Blobs listed at most per page.
const MAX_LIST: usize = 1000;

/// The blob's record, when it is served: an owner who is not banned.
pub fn served(app: &AppState, hash: &BlobHash) -> Result<Option<BlobRecord>, MediaError> {
    let owners =
        app.blobs.records().owners_of(&hash.0).map_err(|e| MediaError::from(crate::blobs::BlobError::Store(e)))?;
    Ok(owners.into_iter().find(|r| gate::serves_blobs_of(app, &r.owner)))
}

/// `Range: bytes=…` against a blob of `size` bytes: `None` for the whole blob (no header, or
/// one this server does not take, such as several ranges), else the inclusive range.
pub(crate) fn range(header: Option<&str>, size: u64) -> Result<Option<(u64, u64)>, MediaError> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else { return Ok(None) };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((start, end)) = spec.split_once('-') else { return Ok(None) };
    let (start, end) = (start.trim(), end.trim());
    let parsed = match (start.parse::<u64>(), end.parse::<u64>()) {
        (Ok(s), Ok(e)) if s <= e => Some((s, e.min(size.saturating_sub(1)))),
        (Ok(s), Err(_)) if end.is_empty() => Some((s, size.saturating_sub(1))),
        // A suffix of no bytes selects nothing (RFC 9110 §14.1.1).
        (Err(_), Ok(0)) if start.is_empty() => None,
        (Err(_), Ok(n)) if start.is_empty() => Some((size.saturating_sub(n), size.saturating_sub(1))),
        _ => return Ok(None),
    };
    match parsed {
        Some((s, e)) if s < size && s <= e => Ok(Some((s, e))),
        _ => Err(MediaError::RangeNotSatisfiable(size)),
    }
}

/// `GET`/`HEAD /<sha256>[.ext]`.
pub async fn blob(
    app: &AppState,
    ctx: &RequestCtx,
    caller: &Caller,
    hash: BlobHash,
    head: bool,
) -> Result<FrontResponse, MediaError> {
    access::may_read(app, caller, Verb::Get, Some(&hash))?;
    let Some(record) = served(app, &hash)? else {
        return Err(MediaError::NotFound("blob not found".into()));
    };
    let size = record.size;
    let wanted = range(ctx.header("range"), size)?;
    let (start, end) = wanted.unwrap_or((0, size.saturating_sub(1)));
    let length = if size == 0 { 0 } else { end - start + 1 };
    // A HEAD reads nothing, but still finds the bytes there, as a GET would.
    let Some(bytes) = app.blobs.read(&hash, start, if head { 0 } else { length }).await? else {
        tracing::error!(blob = %hash, "a recorded blob's bytes cannot be found; run hearth check");
        return Err(MediaError::NotFound("blob not found".into()));
    };
    let body = if head { full(bytes::Bytes::new()) } else { StreamBody::new(bytes.map_ok(Frame::data)).boxed() };
    let mut response = Response::new(body);
    *response.status_mut() = if wanted.is_some() { StatusCode::PARTIAL_CONTENT } else { StatusCode::OK };
    let headers = response.headers_mut();
    let media_type =
        HeaderValue::from_str(&record.media_type).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(CONTENT_TYPE, media_type);
    super::safety::protect(headers, &record.media_type);
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{hash}\"")) {
        headers.insert(ETAG, etag);
    }
    // Content-addressed: the bytes at this URL never change (but a members-only relay's are
    // not for shared caches).
    let cache =
        if gate::media_for_members(app) { "private, max-age=3600" } else { "public, max-age=31536000, immutable" };
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache));
    if wanted.is_some()
        && let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{end}/{size}"))
    {
        headers.insert(CONTENT_RANGE, v);
    }
    Ok(response)
}

/// `GET /list/<pubkey>`: the key's blobs, newest first; `since`/`until` bound the upload date,
/// `cursor` (a hash) starts after that blob, `limit` caps the page.
pub async fn list(
    app: &AppState,
    ctx: &RequestCtx,
    caller: &Caller,
    pubkey: &str,
) -> Result<FrontResponse, MediaError> {
    access::may_read(app, caller, Verb::List, None)?;
    let owner = PubKey::from_hex(&pubkey.to_ascii_lowercase())
        .ok_or_else(|| MediaError::BadRequest("the pubkey in /list/<pubkey> must be 64 hex digits".into()))?;
    // A whole number past u64 is still a whole number: clamped, like every other count.
    let number = |key: &str| -> Result<Option<u64>, MediaError> {
        match ctx.query_param(key) {
            None => Ok(None),
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(Some(v.parse().unwrap_or(u64::MAX)))
            }
            Some(_) => Err(MediaError::BadRequest(format!("{key} must be a whole number"))),
        }
    };
    let (since, until, limit) = (number("since")?, number("until")?, number("limit")?);
    let limit = limit.map_or(MAX_LIST, |l| usize::try_from(l).unwrap_or(MAX_LIST).min(MAX_LIST));
    let records = if !gate::serves_blobs_of(app, &owner) {
        Vec::new()
    } else {
        app.blobs.records().of_owner(&owner).map_err(|e| MediaError::from(crate::blobs::BlobError::Store(e)))?
    };
    let cursor = ctx.query_param("cursor");
    let mut after_cursor = cursor.is_none();
    let mut out = Vec::new();
    for record in records {
        if !after_cursor {
            after_cursor = cursor.as_deref() == Some(record.sha256.as_str());
            continue;
        }
        if since.is_some_and(|s| record.uploaded < s) || until.is_some_and(|u| record.uploaded > u) {
            continue;
        }
        if out.len() == limit {
            break;
        }
        out.push(descriptor(app, ctx, &record));
    }
    Ok(json(StatusCode::OK, &out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_rfc_9110_says() {
        assert_eq!(range(None, 100).unwrap(), None);
        assert_eq!(range(Some("bytes=0-9"), 100).unwrap(), Some((0, 9)));
        assert_eq!(range(Some("bytes=90-"), 100).unwrap(), Some((90, 99)));
        assert_eq!(range(Some("bytes=-10"), 100).unwrap(), Some((90, 99)));
        assert_eq!(range(Some("bytes=50-500"), 100).unwrap(), Some((50, 99)));
        assert_eq!(range(Some("bytes=0-1,5-6"), 100).unwrap(), None);
        assert_eq!(range(Some("items=0-1"), 100).unwrap(), None);
        assert!(matches!(range(Some("bytes=100-"), 100), Err(MediaError::RangeNotSatisfiable(100))));
        assert!(matches!(range(Some("bytes=200-300"), 100), Err(MediaError::RangeNotSatisfiable(100))));
        assert!(matches!(range(Some("bytes=-0"), 100), Err(MediaError::RangeNotSatisfiable(100))));
        assert_eq!(range(Some("bytes=-500"), 100).unwrap(), Some((0, 99)));
        assert!(matches!(range(Some("bytes=0-"), 0), Err(MediaError::RangeNotSatisfiable(0))));
        assert_eq!(range(Some("bytes=9-3"), 100).unwrap(), None);
    }
}
