//! What both transports read of a relay before a session: its NIP-11 document over HTTP (the
//! pace it advertises), from the `http(s)://` form of its address.

use std::time::Duration;

use serde_json::Value;

/// The `http(s)://` base of a `ws(s)://` relay URL.
pub fn http_base(relay_url: &str) -> String {
    relay_url.replacen("wss://", "https://", 1).replacen("ws://", "http://", 1).trim_end_matches('/').to_string()
}

/// The relay's NIP-11 document: `Ok(None)` when it serves none, `Err` when it cannot be reached.
pub async fn nip11(http: &reqwest::Client, base: &str) -> Result<Option<Value>, String> {
    let response = http
        .get(format!("{base}/"))
        .header("Accept", "application/nostr+json")
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| format!("cannot connect to {base}: {e}"))?;
    Ok(response.json().await.ok())
}
