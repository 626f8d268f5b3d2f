//! HTTP on the relay's port: NIP-11, CORS, metrics, unknown routes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

mod common;

use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn nip11_document_reflects_the_config_with_cors() {
    let relay = TestRelay::start(|c| {
        c.info.name = "test relay".into();
        c.limitation.max_limit = 321;
        c.limitation.max_subscriptions = 7;
    })
    .await;
    let resp = reqwest::Client::new()
        .get(relay.http_url("/"))
        .header("Accept", "application/nostr+json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], "*");
    assert!(resp.headers().contains_key("access-control-allow-headers"));
    assert!(resp.headers().contains_key("access-control-allow-methods"));
    assert_eq!(resp.headers()["content-type"], "application/nostr+json");
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["name"], "test relay");
    assert_eq!(doc["supported_nips"], json!([1, 9, 11, 40, 42, 45, 70]));
    assert_eq!(doc["limitation"]["max_limit"], 321);
    assert_eq!(doc["limitation"]["max_subscriptions"], 7);
    assert_eq!(doc["limitation"]["default_limit"], 100);
    assert_eq!(doc["limitation"]["created_at_upper_limit"], 900);
    assert_eq!(doc["limitation"]["restricted_writes"], false);
    assert_eq!(doc["limitation"]["auth_required"], false);
    assert_eq!(
        doc["hearth_limits"]["human"],
        json!({"ws_events_per_sec": 10, "ws_burst_window_secs": 5, "messages_per_min": 120, "api_calls_per_min": 60})
    );
}

#[tokio::test]
async fn plain_get_is_a_human_pointer_and_unknown_routes_are_json_404() {
    let relay = TestRelay::start(generous).await;
    let client = reqwest::Client::new();
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
async fn metrics_count_stored_events() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    c.publish(&sign(&keys(1), now(), 1, &[], "counted")).await;
    let text = reqwest::get(relay.http_url("/metrics")).await.unwrap().text().await.unwrap();
    let stored = text
        .lines()
        .find(|l| l.starts_with("hearth_events_stored_total"))
        .unwrap_or_else(|| panic!("no stored counter in:\n{text}"));
    let n: f64 = stored.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 1.0);
}
