//! HTTP on the relay's port: NIP-11, CORS, metrics, unknown routes.

use crate::common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn nip11_document_reflects_the_config_with_cors() {
    let relay = TestRelay::start(|c| {
        c.info.name = "test relay".into();
        c.limitation.max_limit = 321;
        c.limitation.max_subscriptions = 7;
    })
    .await;
    let resp = web().get(relay.http_url("/")).header("Accept", "application/nostr+json").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], "*");
    assert!(resp.headers().contains_key("access-control-allow-headers"));
    assert!(resp.headers().contains_key("access-control-allow-methods"));
    assert_eq!(resp.headers()["content-type"], "application/nostr+json");
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["name"], "test relay");
    assert_eq!(doc["supported_nips"], json!([1, 9, 11, 17, 29, 40, 42, 45, 50, 56, 59, 62, 70, 77]));
    assert_eq!(doc["limitation"]["max_limit"], 321);
    assert_eq!(doc["limitation"]["max_subscriptions"], 7);
    assert_eq!(doc["limitation"]["default_limit"], 100);
    assert_eq!(doc["limitation"]["created_at_upper_limit"], 900);
    assert_eq!(doc["limitation"]["restricted_writes"], false);
    assert_eq!(doc["limitation"]["auth_required"], false);
    assert_eq!(
        doc["hearth_limits"]["human"],
        json!({
            "ws_events_per_sec": 10,
            "ws_burst_window_secs": 5,
            "ws_reqs_per_sec": 10,
            "ws_reqs_burst_window_secs": 10,
            "messages_per_min": 120,
            "api_calls_per_min": 60,
            "upload_bytes_per_day": 1_073_741_824u64
        })
    );
}

#[tokio::test]
async fn a_relay_with_its_limiter_off_advertises_no_quotas() {
    let relay = TestRelay::start(|c| c.limits.enabled = false).await;
    let doc = relay.nip11().await;
    assert_eq!(doc["software"], "hearth");
    assert!(doc.get("hearth_limits").is_none(), "{doc}");
}

#[tokio::test]
async fn plain_get_is_a_human_pointer_and_unknown_routes_are_json_404() {
    let relay = TestRelay::start(generous).await;
    let client = web();
    let home = client.get(relay.http_url("/")).send().await.unwrap();
    assert_eq!(home.status(), 200);
    assert!(home.text().await.unwrap().starts_with("hearth: a Nostr relay"));
    let missing = client.get(relay.http_url("/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().await.unwrap(), json!({"error": "not found"}));
    let preflight = client.request(reqwest::Method::OPTIONS, relay.http_url("/")).send().await.unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");
}

#[tokio::test]
async fn a_browser_style_handshake_gets_the_rfc_6455_accept_key_and_a_working_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let relay = TestRelay::start(generous).await;
    let mut tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    // Firefox sends "keep-alive, Upgrade"; the key is RFC 6455's own example.
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        relay.addr
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(STEP, tcp.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed during the handshake");
        got.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&got).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="), "{head}");
    // The AUTH challenge follows as the first WebSocket frame: an unmasked text frame.
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut frame = got[end..].to_vec();
    while frame.len() < 2 {
        let n = tokio::time::timeout(STEP, tcp.read(&mut buf)).await.unwrap().unwrap();
        frame.extend_from_slice(&buf[..n]);
    }
    assert_eq!(frame[0], 0x81, "a final text frame");
}

#[tokio::test]
async fn an_upgrade_to_something_else_is_not_a_websocket() {
    let relay = TestRelay::start(generous).await;
    let resp =
        web().get(relay.http_url("/")).header("Connection", "Upgrade").header("Upgrade", "h2c").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().starts_with("hearth: a Nostr relay"));
}

#[tokio::test]
async fn a_path_served_under_other_methods_answers_405_with_allow() {
    let relay = TestRelay::start(|c| c.admin.token = "t".into()).await;
    let http = web();
    for (method, path, allow) in [
        (reqwest::Method::DELETE, "/api/v1/events", "POST"),
        (reqwest::Method::GET, "/api/v1/query", "POST"),
        (reqwest::Method::PUT, "/", "GET, OPTIONS, POST"),
        (reqwest::Method::POST, "/admin/v1/store", "GET"),
        (reqwest::Method::GET, "/admin/v1/limits/overrides/human/ws_events_per_sec", "DELETE"),
    ] {
        let resp = http.request(method.clone(), relay.http_url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 405, "{method} {path}");
        assert_eq!(resp.headers()["allow"], allow, "{method} {path}");
        assert_eq!(resp.json::<serde_json::Value>().await.unwrap(), serde_json::json!({"error": "method not allowed"}));
    }
    // A path that is not served at all is still 404, and a served one is served.
    assert_eq!(http.delete(relay.http_url("/api/v1/nope")).send().await.unwrap().status(), 404);
    assert_eq!(http.get(relay.http_url("/api/v1/openapi.json")).send().await.unwrap().status(), 200);
}
