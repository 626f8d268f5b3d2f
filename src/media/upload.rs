//! Changing blobs: `PUT /upload` (BUD-02), `HEAD /upload` (BUD-06), `PUT /mirror` (BUD-04) and
//! `DELETE /<sha256>` (BUD-12).
//!
//! Owns the order of an upload's checks, so each refusal comes before the bytes it would waste:
//! authorization and who may upload; the size announced (411 without one, 413 past
//! `media.max_blob_bytes` or a day's quota), the type (415), the room left (507); the
//! authorization's one use; the bytes billed to `upload_bytes` (429 with a true hint); then the
//! body streamed to disk, hashed, checked against `X-SHA-256` and the authorization's `x` tags,
//! and committed. `HEAD /upload` runs the same checks without the body and without billing.

use bytes::Bytes;
use futures_util::Stream;
use http_body_util::BodyExt;
use warp::http::StatusCode;

use super::access::{self, Caller};
use super::reply::{MediaError, descriptor, empty, json};
use super::strip::{self, Picture};
use crate::app::AppState;
use crate::blobs::{BlobError, Received};
use crate::http::RequestCtx;
use crate::http::front::FrontResponse;
use crate::limiter::{LimitType, UPLOAD_CELL_BYTES, upload_cells};
use crate::protocol::Timestamp;
use crate::protocol::blossom::{AuthError, Authorized, BlobHash, Verb};

/// What an upload says of itself before its body: size, type, hash.
struct Announced {
    size: u64,
    media_type: String,
    hash: Option<BlobHash>,
}

/// The announcement of `PUT /upload` (`Content-Length`, `Content-Type`, `X-SHA-256`) or of
/// `HEAD /upload` (`X-Content-Length`, `X-Content-Type`, `X-SHA-256`).
fn announced(ctx: &RequestCtx, check_only: bool) -> Result<Announced, MediaError> {
    let (length, kind) =
        if check_only { ("x-content-length", "x-content-type") } else { ("content-length", "content-type") };
    let size = match ctx.header(length) {
        None => return Err(MediaError::LengthRequired),
        Some(v) => {
            v.trim().parse::<u64>().map_err(|_| MediaError::BadRequest(format!("{length} must be a whole number")))?
        }
    };
    let media_type = ctx.header(kind).map(str::trim).filter(|t| !t.is_empty()).unwrap_or("application/octet-stream");
    let hash = match ctx.header("x-sha-256") {
        None => None,
        Some(v) => Some(
            BlobHash::from_hex(v.trim())
                .ok_or_else(|| MediaError::BadRequest("X-SHA-256 must be 64 hex digits".into()))?,
        ),
    };
    Ok(Announced { size, media_type: media_type.to_string(), hash })
}

/// The checks of an upload before its body: size, type, room, the authorization's `x` tags
/// against the hash announced.
fn judge(app: &AppState, caller: &Caller, auth: &Authorized, a: &Announced) -> Result<(), MediaError> {
    let media = &app.config.media;
    if a.size > media.max_blob_bytes {
        return Err(MediaError::TooLarge(format!("blobs here are at most {} bytes", media.max_blob_bytes)));
    }
    let day = day_budget(app, caller);
    if a.size > day {
        return Err(MediaError::TooLarge(format!("the blob is larger than your daily upload quota of {day} bytes")));
    }
    if !media.allows_type(&a.media_type) {
        return Err(MediaError::UnsupportedType(format!(
            "{} is not taken here; allowed: {}",
            a.media_type,
            media.allowed_types.join(", ")
        )));
    }
    if let Some(hash) = &a.hash {
        if !auth.covers(hash, false) {
            return Err(MediaError::Unauthorized(AuthError::WrongBlob));
        }
        let stored = app.blobs.record(hash).map_err(MediaError::from)?.is_some();
        if !stored && !app.blobs.fits(a.size)? {
            return Err(MediaError::Full);
        }
    } else if !app.blobs.fits(a.size)? {
        return Err(MediaError::Full);
    }
    Ok(())
}

/// The most a single upload can ever be billed: the caller's tier's day, or its IP ceiling's.
fn day_budget(app: &AppState, caller: &Caller) -> u64 {
    let limits = app.limiter.limits();
    let tier = app.limiter.tier(&caller.billed.principal);
    let own = limits.tier(tier).upload_bytes_per_day;
    let ceiling = app.limiter.ceiling_of(caller.billed.ip).map_or(u64::MAX, |_| limits.ip.upload_bytes_per_day);
    // Billed in whole KiB: what fits is the whole KiB of the smaller budget.
    (own.min(ceiling) / UPLOAD_CELL_BYTES) * UPLOAD_CELL_BYTES
}

/// `HEAD /upload`: whether an upload would be taken, before a byte is sent.
pub async fn check(app: &AppState, ctx: &RequestCtx, caller: &Caller) -> Result<FrontResponse, MediaError> {
    let auth = access::may_upload(app, caller)?;
    let a = announced(ctx, true)?;
    judge(app, caller, auth, &a)?;
    app.limiter.would_admit_n(&caller.billed, LimitType::UploadBytes, upload_cells(a.size)).await?;
    Ok(empty(StatusCode::OK))
}

/// Bills an upload's bytes.
async fn bill(app: &AppState, caller: &Caller, size: u64) -> Result<(), MediaError> {
    Ok(app.limiter.admit_n(&caller.billed, LimitType::UploadBytes, upload_cells(size)).await?)
}

/// A request body as chunks, each awaited at most `server.body_timeout_secs` (a body trickled
/// in forever is cut off, a large one arriving steadily is not).
fn chunks(app: &AppState, body: hyper::body::Incoming) -> impl Stream<Item = Result<Bytes, String>> {
    let idle = std::time::Duration::from_secs(app.config.server.body_timeout_secs.max(1));
    futures_util::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        loop {
            return match tokio::time::timeout(idle, body.frame()).await {
                Err(_) => Some((Err(format!("no bytes arrived for {} s", idle.as_secs())), None)),
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((Err(e.to_string()), None)),
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => Some((Ok(data), Some(body))),
                    Err(_) => continue,
                },
            };
        }
    })
}

/// The authorization's `x` tags, when it has any, name `hash`.
fn covers(auth: &Authorized, hash: &BlobHash) -> Result<(), MediaError> {
    match auth.covers(hash, false) {
        true => Ok(()),
        false => Err(MediaError::Unauthorized(AuthError::WrongBlob)),
    }
}

/// Commits a received blob for the authorization's key: 201 new, 200 already held, with the
/// descriptor.
async fn commit(
    app: &AppState,
    ctx: &RequestCtx,
    auth: &Authorized,
    received: Received,
    media_type: &str,
) -> Result<FrontResponse, MediaError> {
    let (record, new) = app.blobs.commit(received, auth.pubkey, media_type, Timestamp::now()).await?;
    let status = if new { StatusCode::CREATED } else { StatusCode::OK };
    Ok(json(status, &descriptor(app, ctx, &record)))
}

/// What `PUT /upload` and `PUT /media` share: the checks before the body, the authorization's
/// one use, the bytes billed, the body received, and the authorization's `x` tags against what
/// arrived.
async fn take<'a>(
    app: &AppState,
    ctx: &RequestCtx,
    caller: &'a Caller,
    body: hyper::body::Incoming,
) -> Result<(&'a Authorized, Announced, Received), MediaError> {
    let auth = access::may_upload(app, caller)?;
    let a = announced(ctx, false)?;
    judge(app, caller, auth, &a)?;
    access::spend(app, caller, auth)?;
    bill(app, caller, a.size).await?;
    let limit = app.config.media.max_blob_bytes;
    let received = app.blobs.receive(chunks(app, body), limit, Some(a.size), a.hash).await?;
    covers(auth, &received.hash)?;
    Ok((auth, a, received))
}

/// `PUT /upload`.
pub async fn put(
    app: &AppState,
    ctx: &RequestCtx,
    caller: &Caller,
    body: hyper::body::Incoming,
) -> Result<FrontResponse, MediaError> {
    let (auth, a, received) = take(app, ctx, caller, body).await?;
    commit(app, ctx, auth, received, &a.media_type).await
}

/// `PUT /media` (BUD-05): an upload the relay may transform before it is stored. With
/// `media.strip_metadata` a JPEG, PNG, WebP or HEIC picture loses its metadata (`strip.rs`), and
/// the descriptor names the hash of what is served; the authorization's `x` tags name the bytes
/// sent. Anything else is stored as `/upload` stores it.
pub async fn media(
    app: &AppState,
    ctx: &RequestCtx,
    caller: &Caller,
    body: hyper::body::Incoming,
) -> Result<FrontResponse, MediaError> {
    let (auth, a, received) = take(app, ctx, caller, body).await?;
    let picture = Picture::of(&a.media_type).filter(|_| app.config.media.strip_metadata);
    let Some(picture) = picture else { return commit(app, ctx, auth, received, &a.media_type).await };
    let original = tokio::fs::read(received.path()).await.map_err(|e| MediaError::from(BlobError::Io(e)))?;
    drop(received);
    let stripped = tokio::task::spawn_blocking(move || strip::strip(picture, original))
        .await
        .map_err(|_| MediaError::UnsupportedType(format!("the {} picture could not be read", a.media_type)))?
        .map_err(|e| MediaError::UnsupportedType(e.to_string()))?;
    let once = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(Bytes::from(stripped)) });
    let received = app.blobs.receive(once, app.config.media.max_blob_bytes, None, None).await?;
    commit(app, ctx, auth, received, &a.media_type).await
}

/// `PUT /mirror` with `{"url": …}`: the blob fetched from that URL and taken as if uploaded.
pub async fn mirror(
    app: &AppState,
    ctx: &RequestCtx,
    caller: &Caller,
    body: hyper::body::Incoming,
) -> Result<FrontResponse, MediaError> {
    #[derive(serde::Deserialize)]
    struct Mirror {
        url: String,
    }
    let auth = access::may_upload(app, caller)?;
    let bytes = http_body_util::Limited::new(body, 64 * 1024)
        .collect()
        .await
        .map_err(|_| MediaError::BadRequest("the body must be {\"url\": …}, at most 64 KiB".into()))?
        .to_bytes();
    let Mirror { url } = serde_json::from_slice(&bytes)
        .map_err(|e| MediaError::BadRequest(format!("the body must be {{\"url\": \"https://…\"}}: {e}")))?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(MediaError::BadRequest("the url must be http:// or https://".into()));
    }
    // The hash the blob must have: announced, else the last 64 hex digits of the URL's path.
    let expected = match ctx.header("x-sha-256") {
        Some(v) => BlobHash::from_hex(v.trim()),
        None => url.split(['?', '#']).next().unwrap_or("").rsplit('/').next().and_then(BlobHash::from_segment),
    };
    let fetched = reqwest::Client::new()
        .get(&url)
        .timeout(std::time::Duration::from_secs(app.config.server.body_timeout_secs.max(1) * 10))
        .send()
        .await
        .map_err(|e| MediaError::BadGateway(format!("could not fetch {url}: {e}")))?;
    if !fetched.status().is_success() {
        return Err(MediaError::BadGateway(format!("{url} answered {}", fetched.status())));
    }
    let media_type = ctx
        .header("x-content-type")
        .or_else(|| fetched.headers().get("content-type").and_then(|v| v.to_str().ok()))
        .unwrap_or("application/octet-stream")
        .to_string();
    let size = fetched.content_length();
    let a = Announced { size: size.unwrap_or(0), media_type: media_type.clone(), hash: expected };
    judge(app, caller, auth, &a)?;
    access::spend(app, caller, auth)?;
    if let Some(size) = size {
        bill(app, caller, size).await?;
    }
    let limit = app.config.media.max_blob_bytes;
    let stream = futures_util::stream::unfold(Some(fetched), |fetched| async move {
        let mut fetched = fetched?;
        match fetched.chunk().await {
            Ok(Some(bytes)) => Some((Ok(bytes), Some(fetched))),
            Ok(None) => None,
            Err(e) => Some((Err(e.to_string()), None)),
        }
    });
    let received = app.blobs.receive(stream, limit, size, expected).await?;
    if size.is_none() {
        bill(app, caller, received.size).await?;
    }
    covers(auth, &received.hash)?;
    commit(app, ctx, auth, received, &media_type).await
}

/// `DELETE /<sha256>`: the caller's upload of the blob is forgotten, and its bytes when no
/// one else uploaded it.
pub async fn delete(app: &AppState, caller: &Caller, hash: BlobHash) -> Result<FrontResponse, MediaError> {
    let auth = caller.required(Verb::Delete)?;
    if !auth.covers(&hash, true) {
        return Err(MediaError::Unauthorized(AuthError::WrongBlob));
    }
    let owners =
        app.blobs.records().owners_of(&hash.0).map_err(|e| MediaError::from(crate::blobs::BlobError::Store(e)))?;
    if owners.is_empty() {
        return Err(MediaError::NotFound("blob not found".into()));
    }
    if !owners.iter().any(|r| r.owner == auth.pubkey) {
        return Err(MediaError::Forbidden("restricted: only a key that uploaded this blob may delete it".into()));
    }
    access::spend(app, caller, auth)?;
    app.blobs.remove(&hash, Some(auth.pubkey)).await?;
    Ok(json(StatusCode::OK, &serde_json::json!({ "message": "deleted" })))
}
