//! The media server's answers: every status it sends, with `X-Reason` and a JSON `message`
//! (Blossom's two ways of saying why), `Retry-After` for limits, and CORS on all of them.
//!
//! Owns [`MediaError`], the response builders of the media routes, and the blob descriptor.

use bytes::Bytes;
use warp::http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use warp::http::{Response, StatusCode};

use crate::app::AppState;
use crate::blobs::BlobError;
use crate::http::RequestCtx;
use crate::http::front::{BoxBody, FrontResponse, full};
use crate::limiter::Denied;
use crate::protocol::blossom::AuthError;
use crate::protocol::blossom::{Descriptor, extension};
use crate::protocol::refusal::RateLimited;
use crate::store::media::BlobRecord;

/// Seconds a 503 says to wait.
const UNAVAILABLE_RETRY_SECS: u64 = 1;

/// Why a media call was refused; the text is its `X-Reason`.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// 400
    #[error("invalid: {0}")]
    BadRequest(String),
    /// 401: no authorization, or one that does not hold.
    #[error(transparent)]
    Unauthorized(#[from] AuthError),
    /// 403: the text carries its prefix (`restricted:`, `blocked:`).
    #[error("{0}")]
    Forbidden(String),
    /// 404
    #[error("{0}")]
    NotFound(String),
    /// 405, with the methods the path has.
    #[error("method not allowed: use {0}")]
    MethodNotAllowed(&'static str),
    /// 409: the bytes are not the blob announced.
    #[error("invalid: {0}")]
    Conflict(String),
    /// 411
    #[error("invalid: send the blob's size in Content-Length (chunked uploads are not taken)")]
    LengthRequired,
    /// 413
    #[error("invalid: {0}")]
    TooLarge(String),
    /// 415
    #[error("invalid: {0}")]
    UnsupportedType(String),
    /// 416, with the blob's size.
    #[error("invalid: the range asked for is outside the blob's {0} bytes")]
    RangeNotSatisfiable(u64),
    /// 429 with `Retry-After`.
    #[error(transparent)]
    Limited(RateLimited),
    /// 503: the relay is busy, or a blob could not be fetched for a mirror.
    #[error("{0}")]
    Unavailable(String),
    /// 502: the mirrored URL did not give a blob.
    #[error("error: {0}")]
    BadGateway(String),
    /// 507: the media storage (or its disk) is full.
    #[error("error: the relay's media storage is full; ask its operator for room")]
    Full,
    /// 500: logged; the client sees only that it failed.
    #[error("error: internal error")]
    Internal,
}

impl From<Denied> for MediaError {
    fn from(denied: Denied) -> MediaError {
        match denied {
            Denied::Limited(refused) => MediaError::Limited(refused),
            Denied::Unavailable => MediaError::Unavailable(format!("error: {}", Denied::UNAVAILABLE)),
        }
    }
}

impl From<BlobError> for MediaError {
    fn from(e: BlobError) -> MediaError {
        match e {
            BlobError::TooLarge(n) => MediaError::TooLarge(format!("the blob is larger than {n} bytes")),
            BlobError::HashMismatch { .. } | BlobError::Short { .. } => MediaError::Conflict(e.to_string()),
            BlobError::Cut(_) => MediaError::BadRequest(e.to_string()),
            BlobError::Full => MediaError::Full,
            // The bucket or the shared records are away (or another node holds the blob): the
            // client may simply try again; nothing was recorded.
            BlobError::Unavailable(_) | BlobError::Store(crate::store::StoreError::Unavailable(_)) => {
                tracing::warn!(error = %e, "media storage cannot be reached");
                MediaError::Unavailable("error: the relay's media storage cannot be reached; try again shortly".into())
            }
            BlobError::Io(_) | BlobError::Store(_) => {
                tracing::error!(error = %e, "media storage failed");
                MediaError::Internal
            }
        }
    }
}

impl MediaError {
    fn status(&self) -> StatusCode {
        match self {
            MediaError::BadRequest(_) => StatusCode::BAD_REQUEST,
            MediaError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            MediaError::Forbidden(_) => StatusCode::FORBIDDEN,
            MediaError::NotFound(_) => StatusCode::NOT_FOUND,
            MediaError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            MediaError::Conflict(_) => StatusCode::CONFLICT,
            MediaError::LengthRequired => StatusCode::LENGTH_REQUIRED,
            MediaError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            MediaError::UnsupportedType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            MediaError::RangeNotSatisfiable(_) => StatusCode::RANGE_NOT_SATISFIABLE,
            MediaError::Limited(_) => StatusCode::TOO_MANY_REQUESTS,
            MediaError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            MediaError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            MediaError::Full => StatusCode::INSUFFICIENT_STORAGE,
            MediaError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response: the status, `X-Reason`, and (but for `HEAD`) `{"message": …}`.
    pub fn into_response(self, head: bool) -> FrontResponse {
        let reason = self.to_string();
        let body = if head { full(Bytes::new()) } else { full(serde_json::json!({ "message": reason }).to_string()) };
        let mut response = Response::new(body);
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        // Header values are visible ASCII: anything else in a reason is replaced.
        let visible: String =
            reason.chars().map(|c| if c.is_ascii() && !c.is_ascii_control() { c } else { '?' }).collect();
        if let Ok(v) = HeaderValue::from_str(&visible) {
            headers.insert(HeaderName::from_static("x-reason"), v);
        }
        headers.insert(warp::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        match &self {
            MediaError::Limited(refused) => {
                headers.insert(RETRY_AFTER, HeaderValue::from(refused.retry_secs()));
            }
            MediaError::Unavailable(_) => {
                headers.insert(RETRY_AFTER, HeaderValue::from(UNAVAILABLE_RETRY_SECS));
            }
            MediaError::RangeNotSatisfiable(size) => {
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    headers.insert(warp::http::header::CONTENT_RANGE, v);
                }
            }
            MediaError::MethodNotAllowed(allowed) => {
                headers.insert(warp::http::header::ALLOW, HeaderValue::from_static(allowed));
            }
            _ => {}
        }
        response
    }
}

/// A JSON answer.
pub fn json(status: StatusCode, value: &impl serde::Serialize) -> FrontResponse {
    let mut response = Response::new(full(serde_json::to_vec(value).unwrap_or_default()));
    *response.status_mut() = status;
    response.headers_mut().insert(warp::http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An answer with no body.
pub fn empty(status: StatusCode) -> FrontResponse {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// Blossom's CORS headers, on every answer: any origin, the methods, `Authorization` and any
/// other header, and every header readable (`X-Reason`, `Retry-After`).
pub fn with_cors(mut response: Response<BoxBody>) -> Response<BoxBody> {
    let headers = response.headers_mut();
    headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    headers.insert("access-control-allow-headers", HeaderValue::from_static("Authorization, *"));
    headers.insert("access-control-allow-methods", HeaderValue::from_static("GET, HEAD, PUT, DELETE"));
    headers.insert("access-control-expose-headers", HeaderValue::from_static("*"));
    response
}

/// The blob descriptor of `record`, its URL on this relay.
pub fn descriptor(app: &AppState, ctx: &RequestCtx, record: &BlobRecord) -> Descriptor {
    let base = ctx.origin(app);
    let file = match extension(&record.media_type) {
        Some(ext) => format!("{}.{ext}", record.sha256),
        None => record.sha256.clone(),
    };
    Descriptor {
        url: format!("{base}/{file}"),
        sha256: record.sha256.clone(),
        size: record.size,
        media_type: record.media_type.clone(),
        uploaded: record.uploaded,
    }
}
