//! HTTP errors and their one mapping to the wire: status, a JSON body with an `error` field,
//! `Retry-After` for rate limits; and the one rejection handler ([`recover`]) for what warp's
//! filters refuse before a handler runs.
//!
//! Owns every error response the relay's HTTP side sends, REST and admin alike. Client mistakes
//! are named in the body; server faults are logged once ([`internal`]) and sent as a generic
//! `internal error`. A rejection's debug text never reaches the client.

use std::convert::Infallible;

use serde::Serialize;
use warp::http::StatusCode;
use warp::http::header::{HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use warp::reply::Response;
use warp::{Rejection, Reply};

use crate::protocol::nip98::AuthError;
use crate::protocol::refusal::{LimitType, RateLimited};

/// Everything an HTTP call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is malformed; the text names the problem.
    #[error("{0}")]
    BadRequest(String),
    /// 401: NIP-98 failed (or is required and missing).
    #[error(transparent)]
    Unauthorized(#[from] AuthError),
    /// 401 from the admin API: deliberately no hint of which part was wrong.
    #[error("unauthorized")]
    AdminUnauthorized,
    /// 403: not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// 404
    #[error("{0}")]
    NotFound(String),
    /// 409: the request conflicts with what is in progress; the text says what.
    #[error("{0}")]
    Conflict(String),
    /// 415: the body is not of the media type the route takes (named).
    #[error("content type must be {0}")]
    UnsupportedMediaType(&'static str),
    /// 429 (quota) or 503 (handler bound), with `Retry-After`.
    #[error("{0}")]
    RateLimited(#[from] RateLimited),
    /// 503: the relay cannot answer this now (its search index is being rebuilt); the text
    /// says why, `Retry-After` when to ask again.
    #[error("{0}")]
    Unavailable(String),
    /// 500: a server fault; details are logged, not sent.
    #[error("internal error")]
    Internal,
}

impl From<crate::limiter::Denied> for ApiError {
    fn from(denied: crate::limiter::Denied) -> ApiError {
        match denied {
            crate::limiter::Denied::Limited(limited) => ApiError::RateLimited(limited),
            crate::limiter::Denied::Unavailable => ApiError::Unavailable(crate::limiter::Denied::UNAVAILABLE.into()),
        }
    }
}

impl From<crate::moderation::ModerationError> for ApiError {
    /// A change the nodes' shared state could not take is 503 (Redis unreachable) or 409 (another
    /// node's change came first); a store failure is a server fault.
    fn from(e: crate::moderation::ModerationError) -> ApiError {
        match e {
            crate::moderation::ModerationError::Store(e) => internal(e),
            crate::moderation::ModerationError::Conflict => ApiError::Conflict(e.to_string()),
            crate::moderation::ModerationError::Shared(_) => ApiError::Unavailable(e.to_string()),
        }
    }
}

/// `Retry-After` of a 503 [`ApiError::Unavailable`].
const UNAVAILABLE_RETRY_SECS: u64 = 5;

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

/// A server fault: logged once here, generic to the client.
pub fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "request failed");
    ApiError::Internal
}

/// A rejection that means "this route is not here" (e.g. NIP-11 without its `Accept`), so the
/// next route is tried and, when none matches, the answer is 404.
#[derive(Debug)]
pub struct NotHere;
impl warp::reject::Reject for NotHere {}

#[derive(Serialize)]
struct RateLimitBody<'a> {
    error: &'a str,
    limit_type: &'static str,
    retry_after_secs: u64,
}

/// A JSON response with `status`.
pub fn json_response(status: StatusCode, body: &(impl Serialize + ?Sized)) -> Response {
    let (status, text) = match serde_json::to_string(body) {
        Ok(text) => (status, text),
        Err(e) => {
            // Only a stored event whose JSON no longer parses could get here; never an empty 200.
            tracing::error!(error = %e, "a response body did not serialize");
            let internal = ErrorBody { error: "internal error" };
            (StatusCode::INTERNAL_SERVER_ERROR, serde_json::to_string(&internal).unwrap_or_default())
        }
    };
    let mut response = Response::new(text.into());
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// The response for a limiter refusal: 429 for a quota, 503 for the handler bound.
pub fn rate_limited(refused: &RateLimited) -> Response {
    let status = if refused.limit_type == LimitType::Unavailable {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let message = refused.to_string();
    let body = RateLimitBody {
        error: &message,
        limit_type: refused.limit_type.as_str(),
        retry_after_secs: refused.retry_secs(),
    };
    let mut response = json_response(status, &body);
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(refused.retry_secs()));
    response
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) | ApiError::AdminUnauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::RateLimited(r) if r.limit_type == LimitType::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response: JSON `{"error": …}` (plus `limit_type` / `retry_after_secs` for limits).
    pub fn into_response(self) -> Response {
        match &self {
            ApiError::RateLimited(refused) => rate_limited(refused),
            ApiError::Unauthorized(_) => {
                let mut response = json_response(self.status(), &ErrorBody { error: &self.to_string() });
                response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Nostr"));
                response
            }
            ApiError::Unavailable(_) => {
                let mut response = json_response(self.status(), &ErrorBody { error: &self.to_string() });
                // A rebuild of the search index takes seconds to minutes: ask again soon.
                response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(UNAVAILABLE_RETRY_SECS));
                response
            }
            _ => json_response(self.status(), &ErrorBody { error: &self.to_string() }),
        }
    }
}

/// The one place rejections become responses: a JSON body with an `error` field that names
/// what was wrong, never the rejection's internals.
pub async fn recover(rejection: Rejection) -> Result<impl Reply, Infallible> {
    let (status, error) = if rejection.is_not_found() || rejection.find::<NotHere>().is_some() {
        (StatusCode::NOT_FOUND, "not found".to_string())
    } else if let Some(e) = rejection.find::<warp::reject::PayloadTooLarge>() {
        (StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
    } else if rejection.find::<BodyTooLarge>().is_some() {
        (StatusCode::PAYLOAD_TOO_LARGE, "The request payload is too large".to_string())
    } else if rejection.find::<BodyUnreadable>().is_some() {
        (StatusCode::BAD_REQUEST, "the request body broke off".to_string())
    } else if let Some(e) = rejection.find::<warp::reject::LengthRequired>() {
        (StatusCode::LENGTH_REQUIRED, e.to_string())
    } else if rejection.find::<warp::reject::MethodNotAllowed>().is_some() {
        (StatusCode::METHOD_NOT_ALLOWED, "method not allowed".to_string())
    } else if let Some(e) = rejection.find::<warp::reject::InvalidHeader>() {
        (StatusCode::BAD_REQUEST, e.to_string())
    } else if let Some(e) = rejection.find::<warp::reject::MissingHeader>() {
        (StatusCode::BAD_REQUEST, e.to_string())
    } else {
        tracing::debug!(?rejection, "request rejected");
        (StatusCode::BAD_REQUEST, "bad request".to_string())
    };
    Ok(json_response(status, &ErrorBody { error: &error }))
}

/// A request body past `limitation.max_message_length` (413).
#[derive(Debug)]
pub struct BodyTooLarge;
impl warp::reject::Reject for BodyTooLarge {}

/// A request body that broke off (400).
#[derive(Debug)]
pub struct BodyUnreadable;
impl warp::reject::Reject for BodyUnreadable {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EventJson;

    #[tokio::test]
    async fn a_body_that_does_not_serialize_is_a_500_not_an_empty_200() {
        let broken = EventJson::written_by_hearth("{\"id\":".into());
        let response = json_response(StatusCode::OK, &broken);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) =
            std::future::poll_fn(|cx| hyper::body::Body::poll_frame(std::pin::Pin::new(&mut body), cx)).await
        {
            if let Ok(data) = frame.unwrap().into_data() {
                bytes.extend_from_slice(&data);
            }
        }
        assert_eq!(bytes, br#"{"error":"internal error"}"#);
    }
}
