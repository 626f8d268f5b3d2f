//! The WebSocket handshake (RFC 6455) on hyper's upgrade, with hearth's socket configuration.
//!
//! Owns turning `GET /` with `Upgrade: websocket` into a [`Socket`]. warp's own `ws()` filter
//! cannot set tungstenite's read buffer, whose 128 KiB default is zero-filled on every socket
//! read: with hundreds of subscribers that memset dominated the fan-out benchmark. Here the
//! buffer is [`READ_BUFFER`] bytes.

use std::sync::{Arc, Mutex, PoisonError};

use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use warp::Filter;
use warp::http::{HeaderMap, StatusCode, header};
use warp::reply::{Reply, Response};

/// An upgraded WebSocket.
pub type Socket = WebSocketStream<TokioIo<Upgraded>>;

/// Bytes read from the socket at once (tungstenite's default is 128 KiB, zero-filled per read).
/// Every open socket holds this much for its whole life, so it is most of what an idle
/// connection costs; 2 KiB still takes a few typical frames per read, and a larger frame grows
/// the buffer to its size.
const READ_BUFFER: usize = 2 * 1024;

/// The server side's socket configuration, with the largest frame it reads at all.
fn config(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

/// hyper's upgrade handle of a request, put in its extensions by the accept loop.
#[derive(Clone)]
pub struct UpgradeSlot(Arc<Mutex<Option<OnUpgrade>>>);

impl UpgradeSlot {
    /// Wraps the handle of one request.
    pub fn new(on: OnUpgrade) -> UpgradeSlot {
        UpgradeSlot(Arc::new(Mutex::new(Some(on))))
    }

    fn take(&self) -> Option<OnUpgrade> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// A WebSocket handshake request, ready to be answered.
pub struct Ws {
    key: String,
    on: OnUpgrade,
}

#[derive(Debug)]
struct NotWebSocket;
impl warp::reject::Reject for NotWebSocket {}

fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// Matches a WebSocket handshake (`GET`, `Connection: upgrade`, `Upgrade: websocket`, version 13,
/// a key); anything else is rejected so the other routes of the path can answer.
pub fn ws() -> impl Filter<Extract = (Ws,), Error = warp::Rejection> + Clone {
    warp::get().and(warp::header::headers_cloned()).and(warp::ext::optional::<UpgradeSlot>()).and_then(
        |headers: HeaderMap, slot: Option<UpgradeSlot>| async move {
            let version_13 = headers.get(header::SEC_WEBSOCKET_VERSION).is_some_and(|v| v == "13");
            let key = headers.get(header::SEC_WEBSOCKET_KEY).and_then(|v| v.to_str().ok()).map(str::to_string);
            if !(has_token(&headers, header::CONNECTION, "upgrade")
                && has_token(&headers, header::UPGRADE, "websocket")
                && version_13)
            {
                return Err(warp::reject::custom(NotWebSocket));
            }
            match (key, slot.and_then(|s| s.take())) {
                (Some(key), Some(on)) => Ok(Ws { key, on }),
                _ => Err(warp::reject::custom(NotWebSocket)),
            }
        },
    )
}

impl Ws {
    /// Answers `101 Switching Protocols` and runs `serve` on the socket once the client has it.
    /// `max_message` bounds one message and one frame.
    pub fn on_upgrade<F, Fut>(self, max_message: usize, serve: F) -> Response
    where
        F: FnOnce(Box<Socket>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let accept = derive_accept_key(self.key.as_bytes());
        let on = self.on;
        tokio::spawn(async move {
            match on.await {
                Ok(upgraded) => {
                    let config = Some(config(max_message));
                    let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, config).await;
                    // Boxed: every future it passes through on its way to the connection loop
                    // would otherwise keep a copy-sized slot for it while the socket is open.
                    serve(Box::new(socket)).await;
                }
                Err(e) => tracing::debug!(error = %e, "WebSocket upgrade failed"),
            }
        });
        let mut response = warp::reply().into_response();
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, header::HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, header::HeaderValue::from_static("websocket"));
        if let Ok(value) = header::HeaderValue::from_str(&accept) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, value);
        }
        response
    }
}
