//! The REST API through the real server and a real HTTP client, sharing the limiter with
//! WebSocket clients.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::common::*;
use hearth::limiter::Principal;
use hearth::protocol::nip98;
use hearth::protocol::{Keys, Timestamp};
use reqwest::StatusCode;
use serde_json::{Value, json};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

struct Api<'a> {
    relay: &'a TestRelay,
    http: reqwest::Client,
}

impl<'a> Api<'a> {
    fn new(relay: &'a TestRelay) -> Api<'a> {
        Api { relay, http: web() }
    }

    async fn post(&self, path: &str, body: &Value, signer: Option<&Keys>) -> reqwest::Response {
        let body = body.to_string();
        let mut req = self.http.post(self.relay.http_url(path)).header("content-type", "application/json");
        if let Some(keys) = signer {
            let url = self.relay.http_url(path);
            let h = nip98::header(
                keys,
                &nip98::Request { url: &url, method: "POST", body: body.as_bytes() },
                Timestamp(now()),
            )
            .unwrap();
            req = req.header("authorization", h);
        }
        req.body(body).send().await.unwrap()
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.relay.http_url(path)).send().await.unwrap()
    }
}

async fn body(resp: reqwest::Response) -> (StatusCode, Value) {
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn rest_publish_reaches_websocket_subscribers_and_dedups_with_websocket() {
    let relay = TestRelay::start(generous).await;
    let api = Api::new(&relay);
    let mut ws = relay.connect().await;
    ws.req("live", vec![json!({"kinds": [1]})]).await;
    let e = sign(&keys(1), now(), 1, &[], "over http");
    let (status, b) = body(api.post("/api/v1/events", &json!(e), None).await).await;
    assert_eq!(status, 200);
    assert_eq!(b, json!({"accepted": true, "id": e.id.to_hex(), "message": ""}));
    assert_eq!(ws.recv().await, json!(["EVENT", "live", e]));
    assert_eq!(ws.publish(&e).await, json!(["OK", e.id.to_hex(), true, "duplicate: already have this event"]));
    let (status, b) = body(api.post("/api/v1/events", &json!(e), None).await).await;
    assert_eq!(status, 200);
    assert_eq!(b["message"], "duplicate: already have this event");
    // And the reverse: published over WebSocket, a duplicate over REST.
    let w = sign(&keys(1), now(), 1, &[], "over ws");
    let mut other = relay.connect().await;
    assert_eq!(other.publish(&w).await[2], true);
    assert_eq!(ws.recv().await, json!(["EVENT", "live", w]));
    let (_, b) = body(api.post("/api/v1/events", &json!(w), None).await).await;
    assert_eq!(b["message"], "duplicate: already have this event");
    assert_eq!(other.req("all", vec![json!({})]).await.len(), 2);
}

#[tokio::test]
async fn refused_events_get_their_status_and_are_not_stored() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.auth.members = vec![keys(2).public_key()];
    })
    .await;
    let api = Api::new(&relay);
    let mut bad = sign(&keys(2), now(), 1, &[], "x");
    bad.sig.0[0] ^= 1;
    let (status, b) = body(api.post("/api/v1/events", &json!(bad), None).await).await;
    assert_eq!(status, 400);
    assert_eq!(
        b,
        json!({"accepted": false, "id": bad.id.to_hex(), "message": "invalid: signature does not verify", "error": "invalid: signature does not verify"})
    );
    let outsider = sign(&keys(3), now(), 1, &[], "x");
    let (status, b) = body(api.post("/api/v1/events", &json!(outsider), None).await).await;
    assert_eq!(status, 403);
    assert_eq!(b["message"], "restricted: only members of this relay may publish here");
    let (status, b) = body(api.post("/api/v1/events", &json!({"kind": 1}), None).await).await;
    assert_eq!(status, 400);
    assert!(b["error"].as_str().unwrap().starts_with("invalid: malformed event: missing field"), "{b}");
    let (_, b) = body(api.post("/api/v1/query", &json!({"filters": [{"kinds": [1]}]}), None).await).await;
    assert_eq!(b, json!({"events": []}));
}

#[tokio::test]
async fn messages_quota_is_shared_between_websocket_and_rest() {
    let relay = TestRelay::start(|c| c.limits.human.messages_per_min = 2).await;
    let api = Api::new(&relay);
    let alice = keys(4);
    // WebSocket first, authenticated as alice; then REST signed by alice: one bucket.
    let mut ws = relay.connect().await;
    assert_eq!(ws.auth(&alice, &relay.ws_url()).await[2], true);
    for i in 0..2 {
        assert_eq!(ws.publish(&sign(&alice, now(), 1, &[], &format!("ws {i}"))).await[2], true);
    }
    let e = sign(&alice, now(), 1, &[], "rest");
    let resp = api.post("/api/v1/events", &json!(e), Some(&alice)).await;
    assert_eq!(resp.headers()["retry-after"], "30");
    let (status, b) = body(resp).await;
    assert_eq!(status, 429);
    assert_eq!(
        b,
        json!({"error": "rate-limited: quota exceeded (messages); retry in 30s", "limit_type": "messages", "retry_after_secs": 30})
    );
    // The reverse, by IP: REST twice, then a WebSocket EVENT from the same address.
    let relay = TestRelay::start(|c| c.limits.human.messages_per_min = 2).await;
    let api = Api::new(&relay);
    for i in 0..2 {
        let (status, _) =
            body(api.post("/api/v1/events", &json!(sign(&keys(5), now(), 1, &[], &i.to_string())), None).await).await;
        assert_eq!(status, 200);
    }
    let mut ws = relay.connect().await;
    let e = sign(&keys(5), now(), 1, &[], "ws");
    assert_eq!(
        ws.publish(&e).await,
        json!(["OK", e.id.to_hex(), false, "rate-limited: quota exceeded (messages); retry in 30s"])
    );
    // Ephemeral events skip messages over REST too.
    let eph = sign(&keys(5), now(), 20002, &[], "ephemeral");
    assert_eq!(body(api.post("/api/v1/events", &json!(eph), None).await).await.0, 200);
    let usage = relay.limiter.usage(&Principal::Ip(LOCALHOST)).await;
    assert_eq!(usage.limits["messages"].used, 2);
    assert_eq!(usage.limits["api_calls"].used, 3);
}

#[tokio::test]
async fn api_calls_429_carries_a_truthful_retry_after() {
    let relay = TestRelay::start(|c| c.limits.human.api_calls_per_min = 2).await;
    let api = Api::new(&relay);
    let missing = format!("/api/v1/events/{}", "0".repeat(64));
    assert_eq!(api.get(&missing).await.status(), 404);
    assert_eq!(api.get(&missing).await.status(), 404);
    let resp = api.get(&missing).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "30");
    let (_, b) = body(resp).await;
    assert_eq!(b["error"], "rate-limited: quota exceeded (api_calls); retry in 30s");
    assert_eq!(b["limit_type"], "api_calls");
    relay.clock.advance(Duration::from_secs(29));
    assert_eq!(api.get(&missing).await.status(), 429);
    relay.clock.advance(Duration::from_secs(1));
    assert_eq!(api.get(&missing).await.status(), 404);
}

#[tokio::test]
async fn every_answer_names_the_callers_tier_refusals_included() {
    let agent = keys(60);
    let relay = TestRelay::start(|c| {
        c.limits.human.api_calls_per_min = 1;
        c.limits.agent.api_calls_per_min = 1;
        c.limits.agent_pubkeys = vec![agent.public_key()];
    })
    .await;
    let api = Api::new(&relay);
    let filters = json!({"filters": [{"kinds": [1]}]});
    let tier =
        |r: &reqwest::Response| (r.status().as_u16(), r.headers()["x-hearth-tier"].to_str().unwrap().to_string());
    // By IP, and by a key that is not an agent: the human tier; the second call is refused.
    assert_eq!(tier(&api.post("/api/v1/count", &filters, None).await), (200, "human".into()));
    assert_eq!(tier(&api.post("/api/v1/count", &filters, None).await), (429, "human".into()));
    assert_eq!(tier(&api.post("/api/v1/query", &filters, Some(&keys(61))).await), (200, "human".into()));
    // An agent's key: the agent tier, on its answer and on its refusal.
    assert_eq!(tier(&api.post("/api/v1/query", &filters, Some(&agent)).await), (200, "agent".into()));
    assert_eq!(tier(&api.post("/api/v1/count", &filters, Some(&agent)).await), (429, "agent".into()));
    // Bad auth is billed to the address, at its tier.
    relay.clock.advance(Duration::from_secs(60));
    let resp = web()
        .post(relay.http_url("/api/v1/count"))
        .header("content-type", "application/json")
        .header("authorization", "Nostr e30=")
        .body(filters.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(tier(&resp), (401, "human".into()));
}

#[tokio::test]
async fn each_nip98_failure_is_a_401_with_its_reason() {
    let relay = TestRelay::start(generous).await;
    let api = Api::new(&relay);
    let k = keys(6);
    let path = "/api/v1/count";
    let url = relay.http_url(path);
    let body_text = json!({"filters": [{}]}).to_string();
    let good = nip98::Request { url: &url, method: "POST", body: body_text.as_bytes() };
    let other_url = relay.http_url("/api/v1/query");
    let cases = vec![
        (
            nip98::header(&k, &nip98::Request { url: &other_url, ..good }, Timestamp(now())).unwrap(),
            "auth: url mismatch",
        ),
        (
            nip98::header(&k, &nip98::Request { method: "GET", ..good }, Timestamp(now())).unwrap(),
            "auth: method mismatch",
        ),
        (
            nip98::header(&k, &nip98::Request { body: b"{}", ..good }, Timestamp(now())).unwrap(),
            "auth: payload mismatch",
        ),
        (nip98::header(&k, &good, Timestamp(now() - 120)).unwrap(), "auth: expired"),
        ("Nostr not-base64!".to_string(), "auth: malformed header"),
        ("Basic dXNlcjpwYXNz".to_string(), "auth: malformed header"),
    ];
    for (header, reason) in cases {
        let resp = api
            .http
            .post(&url)
            .header("content-type", "application/json")
            .header("authorization", header)
            .body(body_text.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.headers()["www-authenticate"], "Nostr");
        assert_eq!(body(resp).await, (StatusCode::UNAUTHORIZED, json!({"error": reason})));
    }
    // A valid header makes the pubkey the principal; the same header again is a replay.
    let header = nip98::header(&k, &good, Timestamp(now())).unwrap();
    let send = |h: String| {
        api.http
            .post(&url)
            .header("content-type", "application/json")
            .header("authorization", h)
            .body(body_text.clone())
            .send()
    };
    assert_eq!(body(send(header.clone()).await.unwrap()).await, (StatusCode::OK, json!({"count": 0})));
    let usage = relay.limiter.usage(&Principal::Pubkey(k.public_key())).await;
    assert_eq!(usage.limits["api_calls"].used, 1);
    assert_eq!(body(send(header).await.unwrap()).await, (StatusCode::UNAUTHORIZED, json!({"error": "auth: replayed"})));
}

#[tokio::test]
async fn auth_required_applies_to_rest_too() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.auth.required = true;
    })
    .await;
    let api = Api::new(&relay);
    let (status, b) = body(api.post("/api/v1/count", &json!({"filters": [{}]}), None).await).await;
    assert_eq!((status, b), (StatusCode::UNAUTHORIZED, json!({"error": "auth: required"})));
    let (status, b) = body(api.post("/api/v1/count", &json!({"filters": [{}]}), Some(&keys(7))).await).await;
    assert_eq!((status, b), (StatusCode::OK, json!({"count": 0})));
}

#[tokio::test]
async fn query_count_and_get_follow_req_semantics() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limitation.max_limit = 3;
        c.limitation.default_limit = 3;
    })
    .await;
    let api = Api::new(&relay);
    let k = keys(8);
    let events: Vec<_> = (0..5)
        .map(|i| sign(&k, 1000 + i, 1, &[&["t", if i % 2 == 0 { "even" } else { "odd" }]], &i.to_string()))
        .collect();
    for e in &events {
        assert_eq!(body(api.post("/api/v1/events", &json!(e), None).await).await.0, 200);
    }
    let (_, b) = body(api.post("/api/v1/query", &json!({"filters": [{"kinds": [1], "limit": 100}]}), None).await).await;
    let ids: Vec<_> = b["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, vec![events[4].id.to_hex(), events[3].id.to_hex(), events[2].id.to_hex()]);
    let (_, b) = body(
        api.post("/api/v1/query", &json!({"filters": [{"#t": ["odd"]}, {"ids": [events[0].id.to_hex()]}]}), None).await,
    )
    .await;
    let ids: Vec<_> = b["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, vec![events[3].id.to_hex(), events[1].id.to_hex(), events[0].id.to_hex()]);
    let (_, b) = body(api.post("/api/v1/count", &json!({"filters": [{"#t": ["even"]}]}), None).await).await;
    assert_eq!(b, json!({"count": 3}));
    let (status, b) = body(api.get(&format!("/api/v1/events/{}", events[2].id)).await).await;
    assert_eq!((status, b), (StatusCode::OK, json!(events[2])));
    let (status, b) = body(api.get(&format!("/api/v1/events/{}", "a".repeat(64))).await).await;
    assert_eq!((status, b), (StatusCode::NOT_FOUND, json!({"error": "event not found"})));
    let (status, b) = body(api.get("/api/v1/events/ABC").await).await;
    assert_eq!(
        (status, b),
        (StatusCode::BAD_REQUEST, json!({"error": "event id must be 64 lowercase hex characters"}))
    );
}

#[tokio::test]
async fn bad_input_gets_specific_json_errors_and_stores_nothing() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limitation.max_message_length = 1000;
    })
    .await;
    let api = Api::new(&relay);
    let big = sign(&keys(9), now(), 1, &[], &"x".repeat(2000));
    let (status, b) = body(api.post("/api/v1/events", &json!(big), None).await).await;
    assert_eq!(status, 413);
    assert!(b["error"].is_string(), "{b}");
    let e = sign(&keys(9), now(), 1, &[], "x");
    // The media type exactly, any case, with or without parameters.
    for content_type in ["text/plain", "application/jsonfoo", "application/json-seq", "application/nostr+json"] {
        let resp = api
            .http
            .post(relay.http_url("/api/v1/events"))
            .header("content-type", content_type)
            .body(json!(e).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            body(resp).await,
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, json!({"error": "content type must be application/json"})),
            "{content_type}"
        );
    }

    let resp = api
        .http
        .post(relay.http_url("/api/v1/query"))
        .header("content-type", "application/json")
        .body("{\"filters\": [")
        .send()
        .await
        .unwrap();
    let (status, b) = body(resp).await;
    assert_eq!(status, 400);
    assert!(b["error"].as_str().unwrap().starts_with("malformed JSON body: EOF while parsing"), "{b}");
    let (status, b) = body(api.post("/api/v1/query", &json!({"filters": [{"ids": ["ab"]}]}), None).await).await;
    assert_eq!(status, 400);
    assert!(b["error"].as_str().unwrap().contains("id must be 64 lowercase hex characters"), "{b}");
    let (status, b) = body(api.post("/api/v1/query", &json!({"filter": []}), None).await).await;
    assert_eq!(status, 400);
    assert!(b["error"].as_str().unwrap().contains("unknown field `filter`"), "{b}");
    let (status, b) = body(api.get("/api/v1/nope").await).await;
    assert_eq!((status, b), (StatusCode::NOT_FOUND, json!({"error": "not found"})));
    let mut ws = relay.connect().await;
    assert!(ws.req("all", vec![json!({})]).await.is_empty());
    // The refused event, declared as JSON with parameters and in another case, is taken.
    let resp = api
        .http
        .post(relay.http_url("/api/v1/events"))
        .header("content-type", "Application/JSON; charset=utf-8")
        .body(json!(e).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(body(resp).await.0, StatusCode::OK);
    assert_eq!(relay.connect().await.req_ids("one", vec![json!({})]).await, vec![e.id.to_hex()]);
}

#[tokio::test]
async fn the_openapi_document_describes_exactly_the_routes_served() {
    let relay = TestRelay::start(|c| {
        generous(c);
        // Admin routes answer (401 without credentials) only when the admin API is on.
        c.admin.token = "t".into();
    })
    .await;
    let api = Api::new(&relay);
    let (status, doc) = body(api.get("/api/v1/openapi.json").await).await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| ops.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone())))
        .collect();
    let served: BTreeSet<(String, String)> =
        hearth::ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, served);
    // Every documented route is answered (not 404/405); the wrong method is not.
    let mut admin_routes = 0;
    for (method, path) in &documented {
        let concrete = path
            .replace("{id}", &"0".repeat(64))
            .replace("{pubkey}", &"0".repeat(64))
            .replace("{addr}", "127.0.0.1")
            .replace("{tier}", "human")
            .replace("{key}", "ws_events_per_sec")
            .replace("{file}", "app.js")
            .replace("{sha256}", &"0".repeat(64));
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        // NIP-86 at POST / is selected by its content type.
        let content_type = if concrete == "/" { "application/nostr+json+rpc" } else { "application/json" };
        let resp = api
            .http
            .request(method.clone(), relay.http_url(&concrete))
            .header("content-type", content_type)
            .body("{}")
            .send()
            .await
            .unwrap();
        let status = resp.status();
        assert_ne!(status, 405, "{method} {path}");
        // The admin API (and NIP-86 at POST /): 401 without credentials, with no hint which part
        // was missing, on every route.
        if path.starts_with("/admin/v1/") || (method == reqwest::Method::POST && path == "/") {
            let body = resp.text().await.unwrap();
            assert_eq!(
                (status, body.as_str()),
                (StatusCode::UNAUTHORIZED, r#"{"error":"unauthorized"}"#),
                "{method} {path}"
            );
            admin_routes += 1;
            // Ten failed admin calls a minute per address: the relay's clock moves on so the
            // next one is judged on its credentials, not throttled.
            relay.clock.advance(Duration::from_secs(6));
            continue;
        }
        if concrete.starts_with("/api/v1/events/") {
            // The route answers; the event just is not stored.
            assert_eq!(resp.json::<Value>().await.unwrap(), json!({"error": "event not found"}));
        } else if concrete == format!("/{}", "0".repeat(64)) && method != reqwest::Method::DELETE {
            // The media route answers; the blob just is not held.
            assert_eq!(resp.headers()["x-reason"], "blob not found");
        } else {
            assert_ne!(status, 404, "{method} {path} is documented but not answered");
        }
    }
    let every_admin_route =
        hearth::ROUTES.iter().filter(|(m, p)| p.starts_with("/admin/v1/") || (*m == "POST" && *p == "/")).count();
    assert_eq!(admin_routes, every_admin_route);
    assert!(admin_routes >= 30, "{admin_routes}");
    for (method, path) in
        [("DELETE", "/api/v1/events"), ("GET", "/api/v1/query"), ("PUT", "/metrics"), ("GET", "/api/v2/events")]
    {
        let resp = api
            .http
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), relay.http_url(path))
            .send()
            .await
            .unwrap();
        assert!(resp.status() == 404 || resp.status() == 405, "{method} {path} answers {}", resp.status());
    }
}

/// A raw HTTP/1.1 request with a chunked body (`parts` as its chunks); the status line's code.
async fn post_chunked(relay: &TestRelay, path: &str, parts: &[&str]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for part in parts {
        request.push_str(&format!("{:x}\r\n{part}\r\n", part.len()));
    }
    request.push_str("0\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    let code = response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, response)
}

#[tokio::test]
async fn a_chunked_body_is_taken_up_to_max_message_length() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limitation.max_message_length = 1000;
    })
    .await;
    let e = sign(&keys(12), now(), 1, &[], "sent in chunks");
    let text = json!(e).to_string();
    let (head, tail) = text.split_at(text.len() / 2);
    let (code, response) = post_chunked(&relay, "/api/v1/events", &[head, tail]).await;
    assert_eq!(code, 200, "{response}");
    assert!(response.contains(r#""accepted":true"#), "{response}");
    assert_eq!(relay.connect().await.req_ids("s", vec![json!({})]).await, vec![e.id.to_hex()]);
    // Past the limit, in chunks that each fit: 413, and nothing more is stored.
    let big = sign(&keys(12), now(), 1, &[], &"x".repeat(1500));
    let text = json!(big).to_string();
    let chunks: Vec<&str> = text.as_bytes().chunks(400).map(|c| std::str::from_utf8(c).unwrap()).collect();
    let (code, response) = post_chunked(&relay, "/api/v1/events", &chunks).await;
    assert_eq!(code, 413, "{response}");
    assert!(response.contains(r#"{"error":"The request payload is too large"}"#), "{response}");
    assert_eq!(relay.connect().await.req_ids("s", vec![json!({})]).await, vec![e.id.to_hex()]);
}
