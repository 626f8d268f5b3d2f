//! Publishing over the REST API with the same rule as WebSocket: on 429/503 wait `Retry-After`
//! and retry exactly once.

use std::time::Duration;

use serde_json::Value;

use super::core::PublishError;
use crate::protocol::nip98;
use crate::protocol::{Event, Keys, Timestamp};

/// Publishes `event` to the relay at `base` (`http://host:port`); NIP-98 signed when `keys` is
/// given. `Ok(message)` for an accepted event.
pub async fn publish(
    http: &reqwest::Client,
    base: &str,
    event: &Event,
    keys: Option<&Keys>,
) -> Result<String, PublishError> {
    let url = format!("{}/api/v1/events", base.trim_end_matches('/'));
    let body = event.to_json().map_err(|e| PublishError::Refused(format!("invalid: {e}")))?;
    for attempt in 0..2 {
        let mut req = http.post(&url).header("content-type", "application/json").body(body.clone());
        if let Some(keys) = keys {
            let request = nip98::Request { url: &url, method: "POST", body: body.as_bytes() };
            let header = nip98::header(keys, &request, Timestamp::now())
                .map_err(|e| PublishError::Refused(format!("invalid: {e}")))?;
            req = req.header("authorization", header);
        }
        let resp = req.send().await.map_err(|e| PublishError::Disconnected(e.to_string()))?;
        let status = resp.status();
        let retry_after =
            resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        let json: Value = resp.json().await.unwrap_or(Value::Null);
        let message = json["message"].as_str().or(json["error"].as_str()).unwrap_or("").to_string();
        match (status.as_u16(), retry_after) {
            (200, _) => return Ok(message),
            (429 | 503, Some(secs)) if attempt == 0 => tokio::time::sleep(Duration::from_secs(secs.max(1))).await,
            _ => return Err(PublishError::Refused(if message.is_empty() { status.to_string() } else { message })),
        }
    }
    Err(PublishError::Timeout)
}

/// The `http(s)://` base of a `ws(s)://` relay URL.
pub fn http_base(relay_url: &str) -> String {
    relay_url.replacen("wss://", "https://", 1).replacen("ws://", "http://", 1).trim_end_matches('/').to_string()
}
