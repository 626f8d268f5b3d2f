//! Admission that cannot be escaped: the IP ceiling under every key (WebSocket and REST), AUTH
//! billed to the IP, the ceiling live-tunable and reported, exempt networks, and fair handler
//! permits. Distinct client IPs are 127.0.0.x source addresses.

use std::net::{IpAddr, Ipv4Addr};

use crate::common::*;
use hearth::protocol::{Keys, Timestamp, nip98};
use reqwest::StatusCode;
use serde_json::{Value, json};

const WS_REFUSAL: &str = "rate-limited: quota exceeded (ws_events); retry in 1s";
const TOKEN: &str = "admission-test-token";

/// A key no other test uses: `n` spread over the secret's first bytes.
fn fresh_key(n: u32) -> Keys {
    let mut secret = [0x42u8; 32];
    secret[..4].copy_from_slice(&n.to_be_bytes());
    Keys::from_bytes(secret).unwrap()
}

async fn admin_get(relay: &TestRelay, path: &str) -> Value {
    let resp = web().get(relay.http_url(path)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.unwrap()
}

#[tokio::test]
async fn rotating_keys_on_one_connection_stays_under_the_ip_ceiling() {
    // Defaults: each key 50 frames of burst, the IP ceiling 200.
    let relay = TestRelay::start(|c| c.admin.token = TOKEN.into()).await;
    let mut c = relay.connect().await;
    let (mut accepted, mut refusals, mut auth_refused) = (0, Vec::new(), 0);
    for k in 0..40 {
        let keys = fresh_key(k);
        let ok = c.auth(&keys, &relay.ws_url()).await;
        if ok[2] != true {
            assert_eq!(ok[3], WS_REFUSAL, "an AUTH is billed to the IP: {ok}");
            auth_refused += 1;
        }
        for i in 0..50 {
            let ok = c.publish(&sign(&keys, now(), 1, &[], &format!("{k}/{i}"))).await;
            if ok[2] == true {
                accepted += 1;
            } else {
                refusals.push(ok[3].clone());
            }
        }
    }
    // Four AUTHs and 196 EVENTs fill the ceiling's 200; every later AUTH and EVENT is refused.
    assert_eq!(accepted, 196);
    assert_eq!(auth_refused, 36);
    assert_eq!(refusals.len(), 2000 - 196);
    assert!(refusals.iter().all(|r| r == WS_REFUSAL), "{:?}", refusals.iter().find(|r| *r != WS_REFUSAL));
    let usage = admin_get(&relay, "/admin/v1/usage/ip/127.0.0.1").await;
    let ceiling = &usage["ip_ceiling"];
    assert_eq!(ceiling["principal"], "127.0.0.1/32");
    assert_eq!(ceiling["tier"], "ip");
    assert_eq!(ceiling["limits"]["ws_events"]["used"], 200);
    assert_eq!(ceiling["limits"]["ws_events"]["limit"], 200);
    assert_eq!(ceiling["refusals"]["ws_events"], 2000 - 196 + 36);
    // The ceiling is tuned live like any tier: raised, the same connection is admitted again.
    let patched = web()
        .patch(relay.http_url("/admin/v1/limits"))
        .bearer_auth(TOKEN)
        .json(&json!({"ip": {"ws_events_per_sec": 1000}}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), StatusCode::OK);
    let doc: Value = patched.json().await.unwrap();
    assert_eq!(doc["ip"]["ws_events_per_sec"], json!({"value": 1000, "source": "admin"}));
    let e = sign(&fresh_key(3), now(), 1, &[], "after the raise");
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    assert_eq!(relay.nip11().await["hearth_limits"]["ip"]["ws_events_per_sec"], 1000);
}

#[tokio::test]
async fn rest_calls_signed_by_fresh_keys_stay_under_the_ip_ceiling() {
    // Defaults: each key 60 calls of burst, the IP ceiling 240.
    let relay = TestRelay::start(|_| {}).await;
    let http = web();
    let url = relay.http_url("/api/v1/count");
    let body = json!({"filters": [{}]}).to_string();
    let mut statuses = Vec::new();
    let mut refused = None;
    for n in 0..250 {
        let request = nip98::Request { url: &url, method: "POST", body: body.as_bytes() };
        let auth = nip98::header(&fresh_key(1000 + n), &request, Timestamp(now())).unwrap();
        let resp = http
            .post(&url)
            .header("content-type", "application/json")
            .header("authorization", auth)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(resp.status());
        if resp.status() == StatusCode::TOO_MANY_REQUESTS && refused.is_none() {
            let retry_after = resp.headers()["retry-after"].to_str().unwrap().to_string();
            refused = Some((retry_after, resp.json::<Value>().await.unwrap()));
        }
    }
    assert!(statuses[..240].iter().all(|s| *s == StatusCode::OK), "{statuses:?}");
    assert!(statuses[240..].iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS), "{statuses:?}");
    let (retry_after, body) = refused.unwrap();
    assert_eq!(retry_after, "1");
    assert_eq!(
        body,
        json!({
            "error": "rate-limited: quota exceeded (api_calls); retry in 1s",
            "limit_type": "api_calls",
            "retry_after_secs": 1
        })
    );
}

#[tokio::test]
async fn an_exempt_network_skips_the_ceiling_and_another_address_has_its_own() {
    let tight = |c: &mut hearth::config::Config| {
        c.limits.ip.ws_events_per_sec = 1;
        c.limits.ip.ws_burst_window_secs = 2;
    };
    let relay = TestRelay::start(tight).await;
    let mut a = relay.connect().await;
    for i in 0..3 {
        let e = sign(&keys(1), now(), 1, &[], &format!("a{i}"));
        let ok = a.publish(&e).await;
        assert_eq!(ok[2], i < 2, "{ok}");
    }
    // 127.0.0.2 is another client with a ceiling of its own.
    let mut b = Client::connect_from(&relay.ws_url(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))).await;
    let e = sign(&keys(1), now(), 1, &[], "b");
    assert_eq!(b.publish(&e).await[2], true);
    let relay = TestRelay::start(|c| {
        tight(c);
        c.limits.ip_ceiling_exempt = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await;
    let mut c = relay.connect().await;
    for i in 0..10 {
        let e = sign(&keys(1), now(), 1, &[], &format!("exempt {i}"));
        assert_eq!(c.publish(&e).await[2], true, "frame {i}");
    }
}

#[tokio::test]
async fn a_bystander_on_another_ip_keeps_its_permits_while_one_ip_floods() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limits.handler_permits = 4;
        c.limits.handler_permits_per_principal = 2;
        c.limits.handler_wait_ms = 50;
        c.server.max_in_flight = 256;
    })
    .await;
    let mut seeder = relay.connect().await;
    let k = keys(7);
    // One at a time: with two permits a principal and a 50 ms wait, a pipelined seed is refused
    // as `relay busy` whenever the suite's load (the crash loop beside it) slows the disk.
    for i in 0..400 {
        let tags: &[&[&str]] = &[&["t", "flood"], &["l", "x"]];
        let e = sign(&k, now() - i, 1, tags, "x".repeat(200).as_str());
        assert_eq!(seeder.publish(&e).await[2], true);
    }
    // Eight connections on 127.0.0.1, each as its own key, each keeping 100 COUNTs in flight
    // until the bystander is done; two tag conditions make every COUNT read all 400 records.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut flood = Vec::new();
    for n in 0..8 {
        let mut c = relay.connect().await;
        assert_eq!(c.auth(&fresh_key(5000 + n), &relay.ws_url()).await[2], true);
        let done = done.clone();
        flood.push(tokio::spawn(async move {
            let count = json!(["COUNT", "q", {"#t": ["flood"], "#l": ["x"]}]);
            for _ in 0..100 {
                c.send(count.clone()).await;
            }
            let mut in_flight = 100;
            while in_flight > 0 {
                c.recv().await;
                in_flight -= 1;
                if !done.load(std::sync::atomic::Ordering::Relaxed) {
                    c.send(count.clone()).await;
                    in_flight += 1;
                }
            }
        }));
    }
    let mut bystander = Client::connect_from(&relay.ws_url(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))).await;
    for i in 0..60 {
        let sub = format!("b{i}");
        bystander.send(json!(["REQ", sub, {"kinds": [1], "limit": 5}])).await;
        loop {
            let f = bystander.recv().await;
            assert_ne!(f[0], "CLOSED", "the bystander was refused: {f}");
            if f[0] == "EOSE" {
                assert_eq!(f[1], sub);
                break;
            }
        }
        bystander.send(json!(["CLOSE", sub])).await;
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in flood {
        task.await.unwrap();
    }
}
